"""Trace settings (Triton's ``TraceManager::TraceSetting``): what the trace extension reads
and changes, and the rules of a change.

There is one global setting and, optionally, one per model. A model's setting names the
fields it *specifies*; every other field mirrors the global setting, and follows it when the
global one changes. Clearing a field (``null`` over HTTP, an empty value list over gRPC)
makes it mirror the global one again; a model setting with no specified field is dropped.
A change builds a new ``TraceSetting`` rather than editing the old one, so traces already
sampled keep the setting they were sampled under (Triton replaces the object too).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import invalid_arg, unsupported

INT32_MAX = (1 << 31) - 1
UINT32_MAX = (1 << 32) - 1
MIN_TRACE_COUNT = -1  # Triton's TraceManager::MIN_TRACE_COUNT_VALUE

FILE_NOT_UPDATABLE = "trace file location can not be updated through network protocol"
ONLY_OFF = "Expect only one trace level 'OFF' is specified"


class TraceLevel(enum.IntFlag):
    """TRITONSERVER_InferenceTraceLevel: OFF, or any of TIMESTAMPS and TENSORS."""

    OFF = 0
    TIMESTAMPS = 4
    TENSORS = 8


class TraceMode(enum.Enum):
    TRITON = "triton"
    OPENTELEMETRY = "opentelemetry"


def level_names(level: TraceLevel) -> list[str]:
    """The level as the trace extension lists it."""
    if not level:
        return ["OFF"]
    names = []
    if level & TraceLevel.TIMESTAMPS:
        names.append("TIMESTAMPS")
    if level & TraceLevel.TENSORS:
        names.append("TENSORS")
    return names


@dataclass(frozen=True, slots=True)
class TraceValues:
    """The values of one setting."""

    level: TraceLevel = TraceLevel.OFF
    rate: int = 1000
    count: int = -1  # traces still to sample; -1: no limit
    log_frequency: int = 0  # traces per indexed file; 0: one file, written at exit
    file: str = ""
    mode: TraceMode = TraceMode.TRITON

    def invalid_reason(self) -> str:
        """Why no trace can be sampled under these values ('' when one can)."""
        if not self.level:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if self.mode is TraceMode.TRITON and not self.file:
            return "trace file name is not given"
        return ""


# The fields a trace-extension update may name, as Triton's front-ends read them.
FIELDS = ("level", "rate", "count", "log_frequency")


@dataclass(frozen=True, slots=True)
class TraceUpdate:
    """What one trace-extension request asks: new values, and fields to clear."""

    values: dict[str, Any] = field(default_factory=dict)  # field -> new value
    clear: frozenset[str] = frozenset()


class TraceSetting:
    """One live setting: its values, which of them it specifies, and its sampling counters
    (Triton's TraceSetting::SampleTrace). ``count`` goes down as traces are sampled."""

    __slots__ = ("values", "specified", "count", "sampled", "created")

    def __init__(self, values: TraceValues, specified: frozenset[str] = frozenset()) -> None:
        self.values = values
        self.specified = specified
        self.count = values.count
        self.sampled = 0  # requests seen
        self.created = 0  # traces sampled

    @property
    def valid(self) -> bool:
        return not self.values.invalid_reason() and self.count != 0

    def current(self) -> TraceValues:
        return replace(self.values, count=self.count)

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced: every ``rate``-th request while ``count`` lasts,
        and every request whose client propagated a trace context (``force``). Rate 0 samples
        only those (Triton's way to trace propagated contexts alone)."""
        hit = False
        rate = self.values.rate
        if rate != 0:
            if not self.valid and not force:
                return False
            self.sampled += 1
            hit = self.sampled % rate == 0
            if hit and self.count > 0:
                self.count -= 1
            elif hit and self.count == 0:
                hit = False
        if hit or force:
            self.created += 1
            return True
        return False


def merged(
    current: TraceSetting | None, fallback: TraceValues, update: TraceUpdate
) -> tuple[TraceValues, frozenset[str]]:
    """The values and specified fields after ``update`` (Triton's
    UpdateTraceSettingInternal): a field cleared or never specified takes the fallback's
    value; one the update names takes the new value; one specified before keeps its own."""
    before = current.specified if current is not None else frozenset()
    own = current.current() if current is not None else fallback
    specified = set()
    chosen: dict[str, Any] = {}
    for name in FIELDS:
        if name in update.clear:
            continue
        if name in update.values:
            chosen[name] = update.values[name]
        elif name in before:
            chosen[name] = getattr(own, name)
        else:
            continue
        specified.add(name)
    return replace(fallback, **chosen), frozenset(specified)


def check_setting(values: TraceValues, count: int) -> None:
    """The one invalid setting allowed is one that turns tracing off."""
    reason = values.invalid_reason()
    if values.level and (reason or count == 0):
        raise invalid_arg("Attempting to set invalid trace setting :" + reason)


# -- reading a trace-extension request -----------------------------------------------------
def parse_update(settings: dict[str, list[str] | None]) -> TraceUpdate:
    """A request's settings (name -> its values, None to clear) as a ``TraceUpdate``, with
    Triton's errors. Unknown names are ignored, as Triton does."""
    if "trace_file" in settings:
        raise unsupported(FILE_NOT_UPDATABLE)
    values: dict[str, Any] = {}
    clear: set[str] = set()
    level = settings.get("trace_level", [])
    if "trace_level" in settings:
        if level is None or not level:
            clear.add("level")
        else:
            parsed = _level(level)
            if parsed is not None:
                values["level"] = parsed
    numbers = (
        ("trace_rate", "rate", 0, UINT32_MAX),
        ("trace_count", "count", MIN_TRACE_COUNT, INT32_MAX),
        ("log_frequency", "log_frequency", 0, UINT32_MAX),
    )
    for key, name, low, high in numbers:
        if key not in settings:
            continue
        given = settings[key]
        if given is None or not given:
            clear.add(name)
        elif len(given) != 1:
            raise invalid_arg(f"expect only 1 value for '{key}'")
        else:
            values[name] = _number(key, given[0], low, high)
    return TraceUpdate(values, frozenset(clear))


def _level(names: list[str]) -> TraceLevel | None:
    """The level a list names; None when it names none Triton knows (no change)."""
    level: TraceLevel | None = None
    for name in names:
        if name == "OFF":
            if len(names) != 1:
                raise invalid_arg(ONLY_OFF)
            level = TraceLevel.OFF
        elif name in ("TIMESTAMPS", "TENSORS"):
            level = (level or TraceLevel.OFF) | TraceLevel[name]
    return level


def _number(key: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise invalid_arg(f"Unable to parse '{key}', got: {text}") from None
    if key == "trace_count" and value < low:
        raise invalid_arg(f"Unable to parse '{key}'. Expecting value >= {low}, got: {text}")
    if not low <= value <= min(high, INT32_MAX):
        raise invalid_arg(
            f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return value
