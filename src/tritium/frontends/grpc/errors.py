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

# A status message longer than this is cut: clients refuse trailers past about 16 KiB.
MAX_MESSAGE_CHARS = 4096


def status_message(message: str) -> str:
    """``message`` as a gRPC status carries it (names echoed from a request stay bounded)."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 25] + f"... ({len(message)} characters)"
