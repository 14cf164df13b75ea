"""gRPC status codes, the error a handler raises to end its call with one, and the bound on
a status message.

The codes are gRPC's own numbers (``grpc-status``), so the transport writes them as they are
and no gRPC library is needed to name them."""

from __future__ import annotations

from enum import IntEnum


class StatusCode(IntEnum):
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class RpcError(Exception):
    """Ends the call with ``code`` and ``message`` (the handler's answer, not a bug)."""

    def __init__(self, code: StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# A status message longer than this is cut: clients refuse trailers past about 16 KiB.
MAX_MESSAGE_CHARS = 4096


def status_message(message: str) -> str:
    """``message`` as a gRPC status carries it (names echoed from a request stay bounded)."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 25] + f"... ({len(message)} characters)"
