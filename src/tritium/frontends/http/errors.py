"""Errors of the HTTP front-end, mapped once: ErrorKind → HTTP status (Triton's table), applied
by ``render_error``, the one place a handler's exception becomes a response."""

from __future__ import annotations

from ...errors import ErrorKind, ServerError
from ...logs.budget import UNEXPECTED_ERRORS
from .messages import HttpResponse, error_response

STATUS = {
    ErrorKind.INTERNAL: 500,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNSUPPORTED: 501,
    ErrorKind.INVALID_ARG: 400,
    ErrorKind.ALREADY_EXISTS: 400,
    ErrorKind.CANCELLED: 400,
    ErrorKind.UNKNOWN: 400,
}


def triton_status(exc: BaseException) -> str:
    """An exception as the access log's status: its error kind (anything else: INTERNAL)."""
    return exc.kind.value if isinstance(exc, ServerError) else ErrorKind.INTERNAL.value


def render_error(exc: BaseException) -> HttpResponse:
    """A ``ServerError`` answers its kind's status with Triton's ``{"error": ...}``; anything
    else is a bug in a handler: logged (``UNEXPECTED_ERRORS``: one traceback per kind a
    minute), answered 500, and the server goes on."""
    if isinstance(exc, ServerError):
        return error_response(STATUS[exc.kind], exc.message)
    UNEXPECTED_ERRORS.report("unhandled error in HTTP handler", exc)
    return error_response(500, f"{type(exc).__name__}: {exc}")
