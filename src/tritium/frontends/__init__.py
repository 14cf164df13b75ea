"""Front-ends: HTTP/REST and gRPC. They import only types, errors, server, options, metrics."""
