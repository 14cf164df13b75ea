"""The trace flags as Triton reads them: ``--trace-config [<mode>,]<setting>=<value>``
(repeatable) over the deprecated ``--trace-file/-level/-rate/-count/-log-frequency``
(Triton's ``PostProcessTraceArgs``). Every setting is checked: an unknown one is refused
rather than ignored. Pure, apart from a warning per deprecated or ineffective flag."""

from __future__ import annotations

import logging
from typing import Any

from .manager import TraceConfig
from .otel import otel_settings
from .settings import TraceLevel, TraceMode, TraceValues

log = logging.getLogger("tritium")


def trace_config(configs: list[str], deprecated: dict[str, Any]) -> TraceConfig:
    """``--trace-config`` values, over the deprecated ``--trace-*`` flags, as Triton's
    PostProcessTraceArgs reads them. Raises ValueError."""
    for flag, value in deprecated.items():
        if value not in (None, []):
            name = "--trace-" + flag
            log.warning("'%s' has been deprecated; use '--trace-config' instead", name)
    by_mode: dict[str, list[tuple[str, str]]] = {"": [], "triton": [], "opentelemetry": []}
    for text in configs:
        mode, setting, value = _trace_config_option(text)
        by_mode[mode].append((setting, value))
    levels = [_trace_level(v) for v in deprecated["level"]]
    fields: dict[str, Any] = {"mode": TraceMode.TRITON}
    for key in ("rate", "count", "log-frequency", "file"):
        if deprecated[key] is not None:
            fields[key] = deprecated[key]
    _global_settings(by_mode[""], fields, levels)
    for setting, value in by_mode["triton"]:
        if setting == "file":
            fields["file"] = value
        elif setting == "log-frequency":
            fields["log-frequency"] = _trace_int(setting, value)
        else:
            raise ValueError(f"--trace-config triton: unknown setting '{setting}'")
    otel = tuple(by_mode["opentelemetry"])
    otel_settings(otel)  # checked whatever the mode
    return _trace_values(fields, levels, otel)


def _global_settings(
    pairs: list[tuple[str, str]], fields: dict[str, Any], levels: list[TraceLevel]
) -> None:
    for setting, value in pairs:
        if setting == "level":
            levels.append(_trace_level(value))
        elif setting == "mode":
            fields["mode"] = _trace_mode(value)
        elif setting in ("rate", "count"):
            fields[setting] = _trace_int(setting, value)
        else:
            raise ValueError(
                f"--trace-config: unknown setting '{setting}' (known: level, rate, count, "
                "mode; file and log-frequency take 'triton,')"
            )


def _trace_values(
    fields: dict[str, Any], levels: list[TraceLevel], otel: tuple[tuple[str, str], ...]
) -> TraceConfig:
    mode = fields["mode"]
    level = TraceLevel.OFF
    for parsed in levels:
        level |= parsed
    if any(not parsed for parsed in levels):  # an explicit OFF wins, as in Triton
        level = TraceLevel.OFF
    if mode is TraceMode.OPENTELEMETRY:
        if "file" in fields or "log-frequency" in fields:
            log.warning("trace file and log-frequency have no effect in opentelemetry mode")
        if level & TraceLevel.TENSORS:
            log.warning("opentelemetry trace mode does not support level TENSORS")
        fields.pop("file", None)
        fields.pop("log-frequency", None)
    elif otel:
        log.warning("'--trace-config opentelemetry,...' has no effect in triton trace mode")
    rate, count = fields.get("rate", 1000), fields.get("count", -1)
    frequency = fields.get("log-frequency", 0)
    if rate < 0 or count < -1 or frequency < 0:
        raise ValueError("trace rate and log-frequency must be >= 0, count >= -1")
    values = TraceValues(level, rate, count, frequency, fields.get("file", ""), mode)
    return TraceConfig(values, otel)


def _trace_config_option(text: str) -> tuple[str, str, str]:
    """(mode or '', setting, value) of one --trace-config value."""
    mode = ""
    comma = text.find(",")
    if comma == 0:
        raise ValueError(
            "No trace mode specified. --trace-config option format is "
            f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {text}"
        )
    if comma > 0:
        mode = _trace_mode(text[:comma]).value
    setting, equals, value = text[comma + 1 :].partition("=")
    if not equals or not setting or not value:
        raise ValueError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {text}"
        )
    return mode, setting, value


def _trace_mode(text: str) -> TraceMode:
    try:
        return TraceMode(text.lower())
    except ValueError:
        raise ValueError(
            f"invalid value for trace mode option: {text}. "
            'Available options are "triton" and "opentelemetry"'
        ) from None


def _trace_level(text: str) -> TraceLevel:
    value = text.lower()
    if value in ("false", "off"):
        return TraceLevel.OFF
    if value in ("true", "on", "min", "max", "timestamps"):
        return TraceLevel.TIMESTAMPS
    if value == "tensors":
        return TraceLevel.TENSORS
    raise ValueError(f"invalid value for trace level option: {text}")


def _trace_int(setting: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"Bad option: \"--trace-config {setting}\": expected an integer, got '{text}'"
        ) from None
