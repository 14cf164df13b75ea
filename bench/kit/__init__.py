"""What the suites need of the tests' tooling, copied here because the bench imports nothing
from ``tests`` (and the tests nothing from ``bench``): the raw HTTP/2 client (h2client), raw
gRPC messages and the ``big_output`` model (grpc_raw), the HTTP/2 floods (h2_floods), the
HTTP/1.1 protocol on a fake transport (http_fakes), the costly models (costly_models), and
the test models the soak and the stall suites serve (models, hostile_models). Each is a copy
of its ``tests/support`` namesake as of issue 38; fix a bug in both."""
