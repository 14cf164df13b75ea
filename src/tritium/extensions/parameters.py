"""A request's parameters, parsed once in the core with one set of rules for HTTP, gRPC and
generate: the reserved ones (sequence, priority, timeout) become ``RequestOptions``, the
``triton_`` prefix is refused, and the rest reach the model as they are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import invalid_arg
from ..types import RequestFlag, RequestOptions

RESERVED = frozenset({"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"})
_FLAGS = {"sequence_start": RequestFlag.SEQUENCE_START, "sequence_end": RequestFlag.SEQUENCE_END}
_U64 = (1 << 64) - 1
NO_OPTIONS = RequestOptions()


def parse_parameters(parameters: Mapping[str, Any]) -> tuple[RequestOptions, dict[str, Any]]:
    """(the options the reserved parameters set, the model's own parameters).

    ``priority`` and ``timeout`` (microseconds) are unsigned integers, ``sequence_id`` an
    unsigned integer or a string, ``sequence_start``/``sequence_end`` booleans kept as
    Triton's request flags; anything else is refused (INVALID_ARG) rather than guessed at."""
    if not parameters:
        return NO_OPTIONS, {}
    priority = timeout = flags = 0
    correlation: int | str = 0
    custom: dict[str, Any] = {}
    for key, value in parameters.items():
        if key == "priority":
            priority = _unsigned(key, value)
        elif key == "timeout":
            timeout = _unsigned(key, value)
        elif key == "sequence_id":
            correlation = value if isinstance(value, str) else _unsigned(key, value, True)
        elif key in _FLAGS:
            if not isinstance(value, bool):
                raise _wrong(key, "a boolean", value)
            flags = flags | _FLAGS[key] if value else flags & ~_FLAGS[key]
        elif key.startswith("triton_"):
            raise invalid_arg(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                f"should not be specified: '{key}'"
            )
        else:
            custom[key] = value
    if not (priority or timeout or flags or correlation):
        return NO_OPTIONS, custom
    return RequestOptions(priority, timeout, correlation, int(flags)), custom


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
