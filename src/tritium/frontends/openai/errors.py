"""OpenAI's error document, ``{"error": {"message", "type", "param", "code"}}``, and the
mapping of the server's error kinds onto it (one table, as frontends/http/errors.py)."""

from __future__ import annotations

from typing import Final

import orjson

from ...errors import ErrorKind, ServerError
from ...logs.budget import UNEXPECTED_ERRORS
from ..http.messages import HttpResponse

INVALID: Final = "invalid_request_error"
SERVER: Final = "server_error"

# ErrorKind -> (HTTP status, OpenAI error type)
_KINDS: Final = {
    ErrorKind.INTERNAL: (500, SERVER),
    ErrorKind.NOT_FOUND: (404, INVALID),
    ErrorKind.UNAVAILABLE: (503, SERVER),
    ErrorKind.UNSUPPORTED: (400, INVALID),
    ErrorKind.INVALID_ARG: (400, INVALID),
    ErrorKind.ALREADY_EXISTS: (400, INVALID),
    ErrorKind.CANCELLED: (400, INVALID),
    ErrorKind.UNKNOWN: (500, SERVER),
}


class OpenAIError(Exception):
    """A refusal in OpenAI's terms: the HTTP status, and the error document's fields."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        kind: str = INVALID,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status
        self.kind = kind

    def document(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def unsupported_parameter(param: str, why: str) -> OpenAIError:
    return OpenAIError(why, param, "unsupported_parameter")


def invalid_value(param: str, why: str) -> OpenAIError:
    return OpenAIError(why, param, "invalid_value")


def model_not_found(name: str) -> OpenAIError:
    return OpenAIError(
        f"The model '{name}' does not exist or is not ready", "model", "model_not_found", 404
    )


def as_openai(exc: BaseException) -> OpenAIError:
    """Any error as OpenAI's: a ``ServerError`` by its kind; anything else is a bug in a
    handler, logged once a minute per kind (``UNEXPECTED_ERRORS``) and answered 500."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, ServerError):
        status, kind = _KINDS.get(exc.kind, (500, SERVER))
        return OpenAIError(exc.message, None, None, status, kind)
    UNEXPECTED_ERRORS.report("unhandled error in OpenAI handler", exc)
    return OpenAIError(f"{type(exc).__name__}: {exc}", None, None, 500, SERVER)


def error_response(exc: BaseException) -> HttpResponse:
    error = as_openai(exc)
    return HttpResponse(error.status, [orjson.dumps(error.document())])


def error_event(exc: BaseException) -> bytes:
    """An error after the stream's 200 went out: one server-sent event (the official client
    raises ``APIError`` on an event whose object has ``error``)."""
    return b"data: " + orjson.dumps(as_openai(exc).document()) + b"\n\n"
