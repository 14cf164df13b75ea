"""Error kinds (Triton's status codes) and the one exception type the core raises.

The core never speaks HTTP or gRPC codes: each front-end maps an ErrorKind to its transport
status in one small table.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


class ServerError(Exception):
    """An error with a Triton error kind; its message is what clients see."""

    __slots__ = ("kind", "message")

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"ServerError({self.kind.name}, {self.message!r})"


def invalid_arg(message: str) -> ServerError:
    return ServerError(ErrorKind.INVALID_ARG, message)


def not_found(message: str) -> ServerError:
    return ServerError(ErrorKind.NOT_FOUND, message)


def unavailable(message: str) -> ServerError:
    return ServerError(ErrorKind.UNAVAILABLE, message)


def unsupported(message: str) -> ServerError:
    return ServerError(ErrorKind.UNSUPPORTED, message)


def internal(message: str) -> ServerError:
    return ServerError(ErrorKind.INTERNAL, message)


def cancelled(message: str) -> ServerError:
    return ServerError(ErrorKind.CANCELLED, message)
