"""The two error types of Triton's ``triton_python_backend_utils``: ``TritonModelException``
(raised) and ``TritonError`` (carried by a response). ``pb_utils`` re-exports both; they live
here so that ``pb_metrics`` can raise Triton's exception without importing ``pb_utils``, which
imports ``pb_metrics``. No imports at all."""

from __future__ import annotations


class TritonModelException(Exception):
    """Raised wherever Triton's python backend raises ``TritonModelException``."""

    def message(self) -> str:
        return str(self)


class TritonError:
    """An error carried by an ``InferenceResponse`` (not an exception)."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG = 0, 1, 2, 3
    UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = 4, 5, 6, 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError("TritonError message must be a str")
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 7:
            raise TypeError("TritonError code must be one of the TritonError codes")
        self._message, self._code = message, int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


# Their public home is pb_utils (models use them as pb_utils.X): a traceback or a load error's
# text names them there, as before they moved here.
TritonModelException.__module__ = TritonError.__module__ = f"{__package__}.pb_utils"
