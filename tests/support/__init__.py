"""What the tests share: the real server in a subprocess (``server_process.py``), clients over
HTTP and gRPC (``clients.py``, ``seq_clients.py``, raw HTTP/2 in ``h2client.py`` and
``grpc_raw.py``, hostile HTTP/2 floods in ``h2_floods.py``, grpc-js in ``node_grpc.py``), the
test model repositories built at test time (``models.py`` and the ``*_models.py`` it draws
on), and other fixtures' pieces (TLS certificates, Python environments, an OTLP collector,
Prometheus, stub processes), and a fake transport for socket-free tests of the HTTP protocol
(``http_fakes.py``).

Imported as ``tests.support.<module>`` (``pythonpath = ["."]`` in pyproject.toml); modules
here import each other relatively."""
