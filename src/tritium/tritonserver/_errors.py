"""Triton's exception classes (``tritonserver.TritonError`` and its kinds), and the one
mapping from tritium's error kinds (errors.py) to them."""

from __future__ import annotations

from typing import Final

from ..errors import ErrorKind, ServerError


class TritonError(Exception):
    """The base of every error the in-process API raises (Triton's ``TritonError``)."""


class UnknownError(TritonError):
    pass


class InternalError(TritonError):
    pass


class NotFoundError(TritonError):
    pass


class InvalidArgumentError(TritonError):
    pass


class UnavailableError(TritonError):
    pass


class UnsupportedError(TritonError):
    pass


class AlreadyExistsError(TritonError):
    pass


class CancelledError(UnknownError):
    """A cancelled request's error. Triton's bindings raise ``UnknownError`` for
    TRITONSERVER_ERROR_CANCELLED; this subclass of it lets a caller tell the two apart while
    ``except UnknownError`` still catches it."""


ERROR_CLASSES: Final[dict[ErrorKind, type[TritonError]]] = {
    ErrorKind.UNKNOWN: UnknownError,
    ErrorKind.INTERNAL: InternalError,
    ErrorKind.NOT_FOUND: NotFoundError,
    ErrorKind.INVALID_ARG: InvalidArgumentError,
    ErrorKind.UNAVAILABLE: UnavailableError,
    ErrorKind.UNSUPPORTED: UnsupportedError,
    ErrorKind.ALREADY_EXISTS: AlreadyExistsError,
    ErrorKind.CANCELLED: CancelledError,
}


def triton_error(error: BaseException) -> TritonError:
    """The Triton exception for an error the server raised or answered: a ``ServerError`` by
    its kind, a ``TritonError`` as it is, anything else an ``InternalError``."""
    if isinstance(error, TritonError):
        return error
    if isinstance(error, ServerError):
        return ERROR_CLASSES[error.kind](error.message)
    return InternalError(str(error) or type(error).__name__)
