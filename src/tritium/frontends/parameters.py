"""The reserved request parameters (sequence, priority, timeout), parsed by one set of rules for
HTTP, gRPC and generate, so that a value one protocol refuses is refused by the others too."""

from __future__ import annotations

from typing import Any

from ..errors import invalid_arg
from ..types import InferenceRequest

SEQUENCE_START = 1  # Triton's TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
SEQUENCE_END = 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
RESERVED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})
_FLAGS = {"sequence_start": SEQUENCE_START, "sequence_end": SEQUENCE_END}
_U64 = (1 << 64) - 1


def set_reserved(request: InferenceRequest, key: str, value: Any) -> bool:
    """Apply reserved parameter ``key`` to ``request``; False when ``key`` is not reserved.

    ``priority`` and ``timeout`` (microseconds) are unsigned integers, ``sequence_id`` an
    unsigned integer or a string, ``sequence_start``/``sequence_end`` booleans kept in
    ``request.flags``; anything else is refused (INVALID_ARG) rather than guessed at."""
    if key == "priority":
        request.priority = _unsigned(key, value)
    elif key == "timeout":
        request.timeout_us = _unsigned(key, value)
    elif key == "sequence_id":
        request.correlation_id = value if isinstance(value, str) else _unsigned(key, value, True)
    elif key in _FLAGS:
        if not isinstance(value, bool):
            raise _wrong(key, "a boolean", value)
        flag = _FLAGS[key]
        request.flags = request.flags | flag if value else request.flags & ~flag
    else:
        return False
    return True


def _unsigned(key: str, value: Any, or_string: bool = False) -> int:
    expected = "an unsigned integer or a string" if or_string else "an unsigned integer"
    if not isinstance(value, int) or isinstance(value, bool):
        raise _wrong(key, expected, value)
    if not 0 <= value <= _U64:
        raise invalid_arg(
            f"invalid value for '{key}' parameter, expected {expected} (0..{_U64}), got {value}"
        )
    return value


def _wrong(key: str, expected: str, value: Any) -> Exception:
    return invalid_arg(
        f"invalid value type for '{key}' parameter, expected {expected}, "
        f"got {type(value).__name__} {_short(value)}"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
