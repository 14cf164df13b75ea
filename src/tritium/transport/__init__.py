"""tritium's own transports, below every other package: sans-IO protocol cores that turn
received bytes into calls on a small handler interface and calls into bytes to send.
``http1`` reads HTTP/1.1, ``http2`` is the server side of HTTP/2, ``grpc`` gRPC over it
(connections, calls, their bounds); ``host`` declares what they use of the server above.
This package imports nothing else of tritium."""
