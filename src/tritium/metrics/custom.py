"""The custom metrics Python models create (``pb_utils.MetricFamily``), one registry per server.

Triton keeps these in its Prometheus registry: families are identified by name, per server, so
every instance (stub process) of a model, and every model, that creates a family with the same
name and kind shares it; a metric is a family's child identified by its labels, shared the
same way, and lives while some ``Metric`` object refers to it. Here an *owner* (one stub
process) holds *handles*: a family handle per ``MetricFamily`` object and a metric handle per
``Metric`` object it made. Children are reference-counted over handles; a family with no
children is not rendered, and one no handle refers to is forgotten (Triton keeps the empty
family registered; rendering nothing is what both show). ``release(owner)`` drops all of an
owner's handles: a stub that exits (its model unloaded) or crashes takes its metrics along.

Pure and synchronous: called on the event loop by the Python backend, rendered by
``metrics.render`` when ``/metrics`` is scraped.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2  # pb_utils.MetricFamily kinds
KIND_NAMES = ("COUNTER", "GAUGE", "HISTOGRAM")
TYPE_NAMES = ("counter", "gauge", "histogram")  # the Prometheus TYPE line

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs
# One update from a stub, coalesced there: counter/gauge (handle, set value or None, delta);
# histogram (handle, per-bucket counts with the +Inf bucket last, sum, count).
Update = tuple[Any, ...]


class MetricError(ValueError):
    """A refused operation; the message is Triton's (prometheus-cpp's) text."""


def check_family(name: object, description: object, kind: object) -> None:
    if not isinstance(name, str) or not isinstance(description, str):
        raise MetricError("name and description must be strings")
    if kind not in (COUNTER, GAUGE, HISTOGRAM):
        raise MetricError("Unsupported kind passed to MetricFamily constructor.")
    if not _METRIC_NAME.match(name):
        raise MetricError("Invalid metric name")


def check_labels(labels: object, kind: int) -> Labels:
    """The labels as sorted pairs; prometheus-cpp's rules for label names (``le`` is a
    histogram's own, names starting with ``__`` are reserved)."""
    if not isinstance(labels, dict):
        raise MetricError("Labels must be a dictionary.")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise MetricError("labels must map str to str")
        if not _LABEL_NAME.match(key) or key.startswith("__"):
            raise MetricError("Invalid label name")
        if kind == HISTOGRAM and key == "le":
            raise MetricError("Invalid label name")
    return tuple(sorted(labels.items()))


def check_buckets(buckets: Sequence[float]) -> tuple[float, ...]:
    bounds = tuple(float(b) for b in buckets)
    if any(math.isnan(b) for b in bounds) or any(
        b >= a for b, a in zip(bounds, bounds[1:], strict=False)
    ):
        raise MetricError("Bucket Boundaries must be strictly sorted")
    return bounds


def bucket_index(bounds: Sequence[float], value: float) -> int:
    """The bucket an observation falls in (``value <= le``); NaN goes to +Inf, as in
    prometheus-cpp."""
    return len(bounds) if math.isnan(value) else bisect.bisect_left(bounds, value)


@dataclass(slots=True)
class Child:
    """One metric: a family's child with its labels."""

    labels: Labels
    value: float = 0.0
    bounds: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)  # per bucket, +Inf last (not cumulative)
    sum: float = 0.0
    count: int = 0
    refs: int = 0


@dataclass(slots=True)
class Family:
    name: str
    description: str
    kind: int
    children: dict[Labels, Child] = field(default_factory=dict)
    refs: int = 0


@dataclass(slots=True)
class _Owner:
    families: dict[int, Family] = field(default_factory=dict)
    metrics: dict[int, tuple[Family, Child]] = field(default_factory=dict)
    made_by: dict[int, int] = field(default_factory=dict)  # metric handle → family handle


class CustomMetrics:
    """Every custom metric family of the server. ``reserved``: the names the server's own
    families use (a model cannot take them)."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._families: dict[str, Family] = {}
        self._owners: dict[Hashable, _Owner] = {}
        self._reserved = frozenset(reserved)

    # -- families -----------------------------------------------------------------------------
    def new_family(
        self, owner: Hashable, handle: int, name: str, description: str, kind: int
    ) -> None:
        """Triton's MetricFamilyNew: the family ``name``, created or shared (the first
        description stays, as prometheus-cpp merges them)."""
        check_family(name, description, kind)
        if name in self._reserved:
            raise MetricError("Family name already exists with different type")
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Family(name, description, kind)
        elif family.kind != kind:
            raise MetricError("Family name already exists with different type")
        family.refs += 1
        self._owners.setdefault(owner, _Owner()).families[handle] = family

    def drop_family(self, owner: Hashable, handle: int) -> None:
        """The ``MetricFamily`` object is gone: so are the metrics made through it."""
        held = self._owners.get(owner)
        family = None if held is None else held.families.pop(handle, None)
        if held is None or family is None:
            return
        for metric_handle, by in list(held.made_by.items()):
            if by == handle:
                self.drop_metric(owner, metric_handle)
        family.refs -= 1
        if family.refs <= 0 and not family.children:
            self._families.pop(family.name, None)

    # -- metrics ------------------------------------------------------------------------------
    def new_metric(
        self,
        owner: Hashable,
        handle: int,
        family_handle: int,
        labels: dict[str, str],
        buckets: Sequence[float] | None = None,
    ) -> None:
        """Triton's MetricNew: the child with these labels, created or shared (an existing
        histogram keeps its buckets)."""
        held = self._owners.get(owner)
        family = None if held is None else held.families.get(family_handle)
        if held is None or family is None:
            raise MetricError("the metric's family is not registered")
        key = check_labels(labels, family.kind)
        child = family.children.get(key)
        if child is None:
            child = Child(key)
            if family.kind == HISTOGRAM:
                child.bounds = check_buckets(buckets or ())
                child.counts = [0] * (len(child.bounds) + 1)
            family.children[key] = child
        child.refs += 1
        held.metrics[handle] = (family, child)
        held.made_by[handle] = family_handle

    def drop_metric(self, owner: Hashable, handle: int) -> None:
        held = self._owners.get(owner)
        entry = None if held is None else held.metrics.pop(handle, None)
        if held is None or entry is None:
            return
        held.made_by.pop(handle, None)
        family, child = entry
        child.refs -= 1
        if child.refs <= 0:
            family.children.pop(child.labels, None)
            if family.refs <= 0 and not family.children:
                self._families.pop(family.name, None)

    def update(self, owner: Hashable, update: Update) -> None:
        """Apply one coalesced update (see ``Update``); a malformed one raises MetricError."""
        held = self._owners.get(owner)
        entry = None if held is None else held.metrics.get(update[0])
        if entry is None:
            raise MetricError(f"unknown metric handle {update[0]!r}")
        family, child = entry
        if family.kind == HISTOGRAM:
            _observe(child, update)
        else:
            _change(child, family.kind, update)

    def bounds(self, owner: Hashable, handle: int) -> list[float] | None:
        """A histogram metric's bucket bounds (None for a counter or gauge)."""
        family, child = self._owners[owner].metrics[handle]
        return list(child.bounds) if family.kind == HISTOGRAM else None

    def value(self, owner: Hashable, handle: int) -> float:
        held = self._owners.get(owner)
        entry = None if held is None else held.metrics.get(handle)
        if entry is None:
            raise MetricError("Could not get metric value. Metric has been invalidated.")
        family, child = entry
        if family.kind == HISTOGRAM:
            raise MetricError("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value")
        return child.value

    def release(self, owner: Hashable) -> None:
        """Everything ``owner`` held (its stub process is gone)."""
        held = self._owners.get(owner)
        if held is None:
            return
        for handle in list(held.metrics):
            self.drop_metric(owner, handle)
        for handle in list(held.families):
            self.drop_family(owner, handle)
        self._owners.pop(owner, None)

    def families(self) -> Iterator[Family]:
        """The families with at least one metric, in creation order (for rendering)."""
        return (f for f in self._families.values() if f.children)


def _change(child: Child, kind: int, update: Update) -> None:
    if len(update) != 3:
        raise MetricError("malformed counter or gauge update")
    _, set_to, delta = update
    if not isinstance(delta, (int, float)) or (set_to is not None and kind != GAUGE):
        raise MetricError("malformed counter or gauge update")
    if kind == COUNTER and delta < 0:
        raise MetricError(
            "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
            "non-negative values."
        )
    if set_to is not None:
        child.value = float(set_to)
    child.value += float(delta)


def _observe(child: Child, update: Update) -> None:
    if len(update) != 4:
        raise MetricError("malformed histogram update")
    _, counts, total, count = update
    if (
        not isinstance(counts, list)
        or len(counts) != len(child.counts)
        or not all(isinstance(c, int) and c >= 0 for c in counts)
        or not isinstance(count, int)
        or not isinstance(total, (int, float))
    ):
        raise MetricError("malformed histogram update")
    for i, n in enumerate(counts):
        child.counts[i] += n
    child.sum += float(total)
    child.count += count
