"""ErrorKind → gRPC status code (Triton's table)."""

import grpc

from ...errors import ErrorKind

CODE = {
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorKind.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorKind.UNKNOWN: grpc.StatusCode.UNKNOWN,
}
