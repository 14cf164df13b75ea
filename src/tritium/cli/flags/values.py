"""Value parsers of the flags (``Arg.parse``): text → value, or ``argparse.ArgumentTypeError``
with the message argparse prints. ``TRITON_SYNTAX`` reads the flags tritium accepts without
acting on them, with Triton's value syntax (``parser.py:add_table_flags``)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

from ...frontends.http.cors import parse_origin
from ...logs.settings import LOG_FORMATS


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def non_negative_int(text: str) -> int:
    """An integer >= 0 (counts, sizes, timeouts)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got '{text}'")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got '{text}'")
    return value


def positive(kind: type) -> Callable[[str], Any]:
    """A number > 0 of ``kind`` (int or float)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
        return value

    return parse


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got '{text}'")
    return value


def positive_ms(text: str) -> int:
    """Triton documents --metrics-interval-ms as a float and keeps its integer part."""
    try:
        return _positive_int(str(int(float(text))))
    except ValueError:
        return _positive_int(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got '{text}'")
    return value


def rate_limit_mode(text: str) -> str:
    mode = text.lower()
    if mode not in ("execution_count", "off"):
        raise argparse.ArgumentTypeError("invalid argument for --rate-limit")
    return mode


def rate_limit_resource(text: str) -> tuple[str, int, int]:
    """Triton's ParseRateLimiterResourceOption: ``name:count`` or ``name:count:device``."""
    parts = text.split(":")
    try:
        if len(parts) in (2, 3) and parts[0]:
            count, device = int(parts[1]), int(parts[2]) if len(parts) == 3 else -1
            if count >= 0 and device >= -1:
                return parts[0], count, device
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {text}"
    )


def config_name(text: str) -> str:
    """Triton refuses an empty name; tritium also refuses one that is not a plain file name
    (it becomes part of a path: <model>/configs/<name>.pbtxt)."""
    if not text:
        raise argparse.ArgumentTypeError("empty argument for --model-config-name")
    if text in (".", "..") or "/" in text or "\\" in text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a configuration name (no spaces, no '/')"
        )
    return text


def log_format(text: str) -> str:
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError("invalid argument for --log-format")
    return text


def origin(text: str) -> str:
    try:
        return parse_origin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None


def _pattern(syntax: str, regex: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def parse(text: str) -> str:
        if compiled.fullmatch(text) is None:
            raise argparse.ArgumentTypeError(f"expected {syntax}, got '{text}'")
        return text

    return parse


_INTEGER = r"-?[0-9]+"
TRITON_SYNTAX: dict[str, Callable[[str], Any]] = {
    "boolean": parse_bool,
    "integer": _int,
    "float": _float,
    "string": str,
    "<integer>:<integer>": _pattern("<integer>:<integer>", f"{_INTEGER}:{_INTEGER}"),
    "<integer>-<integer>": _pattern("<integer>-<integer>", f"{_INTEGER}-{_INTEGER}"),
    "<device_id>:<fraction>": _pattern(
        "<device_id>:<fraction>", rf"{_INTEGER}:[0-9]*\.?[0-9]+(e-?[0-9]+)?"
    ),
    "<string>,<string>=<string>": _pattern("<name>,<setting>=<value>", r"[^,=]+,[^=]+=.+"),
    "<string>=<string>": _pattern("<setting>=<value>", r"[^,=]+=.+"),
    "<string>:<integer>:<integer>": _pattern(
        "<name>:<count>[:<device>]", rf"[^:]+:{_INTEGER}(:{_INTEGER})?"
    ),
}

# What an implemented flag's value is parsed with when its Arg names no parser.
PLAIN: dict[str, Callable[[str], Any]] = {"integer": int, "float": float, "boolean": parse_bool}


def worker_count(text: str) -> int:
    """``--workers``: a count >= 1, or ``auto``: the CPUs this process may run on."""
    if text == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a number of workers >= 1 or 'auto', got '{text}'"
        )
    return value
