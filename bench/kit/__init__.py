"""What the suites need of the tests' tooling that testkit/ (shared by tests/ and bench/) does
not hold: raw gRPC messages and the ``big_output`` model (grpc_raw), the costly models
(costly_models), and the few test models the soak and the stall suites serve (models). Each is
a trimmed copy of its ``tests/support`` namesake (the bench imports nothing from ``tests``);
the raw HTTP/2 client, the floods, the hostile models and the fake HTTP transport are in
``testkit/``, imported by both."""
