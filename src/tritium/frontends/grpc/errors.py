"""ErrorKind → gRPC status code (Triton's table), and the bound on a status message."""

from ...errors import ErrorKind
from .status import StatusCode

CODE = {
    ErrorKind.INTERNAL: StatusCode.INTERNAL,
    ErrorKind.NOT_FOUND: StatusCode.NOT_FOUND,
    ErrorKind.UNAVAILABLE: StatusCode.UNAVAILABLE,
    ErrorKind.UNSUPPORTED: StatusCode.UNIMPLEMENTED,
    ErrorKind.INVALID_ARG: StatusCode.INVALID_ARGUMENT,
    ErrorKind.ALREADY_EXISTS: StatusCode.ALREADY_EXISTS,
    ErrorKind.CANCELLED: StatusCode.CANCELLED,
    ErrorKind.UNKNOWN: StatusCode.UNKNOWN,
}

_KIND_OF = {code: kind for kind, code in CODE.items()}


def triton_status(code: StatusCode) -> str:
    """A call's status code as the access log's Triton status: SUCCESS, the error kind it
    maps from, or (a transport refusal) the gRPC code's name."""
    if code is StatusCode.OK:
        return "SUCCESS"
    kind = _KIND_OF.get(code)
    return kind.value if kind is not None else code.name


# A status message longer than this is cut: clients refuse trailers past about 16 KiB.
MAX_MESSAGE_CHARS = 4096


def status_message(message: str) -> str:
    """``message`` as a gRPC status carries it (names echoed from a request stay bounded)."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 25] + f"... ({len(message)} characters)"
