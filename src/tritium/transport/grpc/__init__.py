"""gRPC over tritium's HTTP/2 core (``transport/http2``): the transport under the gRPC
front-end, which imports nothing of tritium above ``transport`` and is given plain settings
records (``settings.py``, ``tls.py:TlsSettings``) and the seams of ``transport/host.py``.

- ``connection``: one client connection (``GrpcConnection``, behind ``GrpcProtocol``), its
  reading in turns (``inbound``), writing (``outbound``) and bounds (``bounds``,
  ``budgets``);
- ``call``: one call (one stream) as a handler sees it (``ServerCall``);
- ``dispatch``: the method table, request headers, deadlines, running the handlers;
- ``endpoint``: what a listener's connections share (settings, dispatcher, pool, drain);
- ``frames``, ``metadata``, ``status``: response headers, metadata and compression rules,
  status codes; ``tls``: the TLS context."""
