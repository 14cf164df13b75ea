"""What the tests share: the real server in a subprocess (``server_process.py``), clients over
HTTP and gRPC (``clients.py``, ``seq_clients.py``, raw gRPC in ``grpc_raw.py``, grpc-js in
``node_grpc.py``; raw HTTP/2 and its floods are in ``testkit/``, shared with the bench), the
test model repositories built at test time (``models.py`` and the ``*_models.py`` it draws
on), and other fixtures' pieces (TLS certificates, Python environments, an OTLP collector,
Prometheus, stub processes); the fake transport for socket-free tests of the HTTP protocol is
``testkit/http_fakes.py``.

Imported as ``tests.support.<module>`` (``pythonpath = ["."]`` in pyproject.toml); modules
here import each other relatively."""
