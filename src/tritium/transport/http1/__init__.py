"""The server side of HTTP/1.1 below the HTTP front-end: ``reader.RequestReader`` (httptools
under the request's size bounds: bytes in, whole requests or refusals out to its
``ReaderEvents``), ``inflate`` (bodies inflated under the size bound as they arrive) and
``flow.FlowControl`` (reading paused while requests are held, writing while the client does
not read). The front-end (``frontends/http/protocol.py``) keeps the timers, pipelining and
the answers."""
