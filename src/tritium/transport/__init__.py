"""tritium's own transports, below every other package: sans-IO protocol cores that turn
received bytes into calls on a small handler interface and calls into bytes to send.
``http2`` is the server side of HTTP/2 the gRPC front-end runs on. This package imports
nothing else of tritium."""
