"""``pb_utils.MetricFamily`` and its ``Metric``: Triton's custom metrics API for Python models.

The objects here only check arguments (with Triton's error texts) and hold handles; the values
live in a ``tritium.metrics.custom.CustomMetrics`` registry reached through a *backend*:

* in a stub process, ``stub_observe.RemoteMetrics`` (installed with ``_set_backend``): creating a
  family or a metric and reading ``value()`` are round trips to the server (errors come back
  synchronously, as in Triton); ``increment``/``set``/``observe`` are coalesced in the stub and
  sent with its next frame, so they cost a dictionary update, never a system call; the server's
  registry is what ``/metrics`` shows and what ``value()`` reads (so instances sharing a metric
  see its total, as in Triton).
* anywhere else (unit tests, a model imported outside tritium), ``LocalMetrics``: an in-process
  registry with the same semantics.

Deleting a ``MetricFamily`` (or letting it be garbage collected) deletes the metrics made
through it, which then refuse every operation, as in Triton; a ``Metric`` object that is
collected drops its reference to the metric. Both are one-way messages in a stub.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from ...metrics.custom import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    KIND_NAMES,
    CustomMetrics,
    MetricError,
    bucket_index,
)
from .pb_errors import TritonModelException


class MetricsBackend(Protocol):
    """Where the values live (see the module docstring). Errors raise ``MetricError``."""

    def new_family(self, handle: int, name: str, description: str, kind: int) -> None: ...

    def new_metric(
        self, handle: int, family: int, labels: dict[str, str], buckets: list[float] | None
    ) -> list[float] | None:
        """Returns the metric's bucket bounds (an existing histogram keeps its own)."""

    def add(self, handle: int, kind: int, value: float) -> None: ...

    def set(self, handle: int, value: float) -> None: ...

    def observe(self, handle: int, bounds: Sequence[float], value: float) -> None: ...

    def value(self, handle: int) -> float: ...

    def drop(self, handle: int, is_family: bool) -> None: ...


class LocalMetrics:
    """The in-process backend: a registry of one owner."""

    def __init__(self) -> None:
        self.registry = CustomMetrics()

    def new_family(self, handle: int, name: str, description: str, kind: int) -> None:
        self.registry.new_family(None, handle, name, description, kind)

    def new_metric(
        self, handle: int, family: int, labels: dict[str, str], buckets: list[float] | None
    ) -> list[float] | None:
        self.registry.new_metric(None, handle, family, labels, buckets)
        return self.registry.bounds(None, handle)

    def add(self, handle: int, kind: int, value: float) -> None:
        self.registry.update(None, (handle, None, value))

    def set(self, handle: int, value: float) -> None:
        self.registry.update(None, (handle, value, 0.0))

    def observe(self, handle: int, bounds: Sequence[float], value: float) -> None:
        counts = [0] * (len(bounds) + 1)
        counts[bucket_index(bounds, value)] = 1
        self.registry.update(None, (handle, counts, value, 1))

    def value(self, handle: int) -> float:
        return self.registry.value(None, handle)

    def drop(self, handle: int, is_family: bool) -> None:
        if is_family:
            self.registry.drop_family(None, handle)
        else:
            self.registry.drop_metric(None, handle)


_backend: MetricsBackend = LocalMetrics()
_handles = itertools.count(1)


def _handles_after_fork(pid: int) -> None:
    """A forked child's new families and metrics get handles of their own (``pid`` high),
    never those of its parent or siblings, whose calls reach the server as the stub's."""
    global _handles
    _handles = itertools.count((pid << 32) + 1)


def _set_backend(backend: MetricsBackend | None) -> None:
    """Stub hook: where metric values go; None restores a fresh in-process registry."""
    global _backend
    _backend = backend if backend is not None else LocalMetrics()


def _local_registry() -> CustomMetrics | None:
    """The in-process registry (None when a stub installed its own backend)."""
    return _backend.registry if isinstance(_backend, LocalMetrics) else None


def _error(message: str) -> Exception:
    return TritonModelException(message)


def _number(value: object) -> float:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError(f"a number is required, not {type(value).__name__}")
    return float(value)


class Metric:
    """One metric of a family (``MetricFamily.Metric(labels=..., buckets=...)``)."""

    def __init__(self, family: MetricFamily, handle: int, bounds: list[float] | None) -> None:
        self._kind, self._handle = family._kind, handle
        self._bounds = tuple(bounds or ())
        self._backend = _backend
        self._cleared = False
        self._finalizer = weakref.finalize(self, _drop, self._backend, handle, False)

    def _check(self, action: str, verb: str, allowed: tuple[int, ...]) -> None:
        if self._cleared:
            raise _error(
                f"Failed to {action} metric value: Invalid metric operation as the "
                "corresponding 'MetricFamily' has been deleted. The 'MetricFamily' object "
                "should be deleted AFTER its corresponding 'Metric' objects have been deleted."
            )
        if self._kind not in allowed:
            raise _error(
                f"Failed to {action} metric value: TRITONSERVER_METRIC_KIND_"
                f"{KIND_NAMES[self._kind]} does not support {verb}"
            )

    def increment(self, value: float) -> None:
        value = _number(value)
        self._check("increment", "Increment", (COUNTER, GAUGE))
        if self._kind == COUNTER and value < 0:
            raise _error(
                "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only "
                "be incremented monotonically by non-negative values."
            )
        self._backend.add(self._handle, self._kind, value)

    def set(self, value: float) -> None:
        value = _number(value)
        self._check("set", "Set", (GAUGE,))
        self._backend.set(self._handle, value)

    def observe(self, value: float) -> None:
        value = _number(value)
        self._check("observe", "Observe", (HISTOGRAM,))
        self._backend.observe(self._handle, self._bounds, value)

    def value(self) -> float:
        self._check("get", "Value", (COUNTER, GAUGE))
        try:
            return self._backend.value(self._handle)
        except MetricError as exc:
            raise _error(f"Failed to get metric value: {exc}") from None

    def _clear(self) -> None:
        """Its family was deleted (the server dropped the metric along with it)."""
        self._cleared = True
        self._finalizer.detach()


class MetricFamily:
    """``MetricFamily(name, description, kind)``: a family of the server's metrics registry,
    shared by name with every other family of that name (a different kind is an error)."""

    COUNTER, GAUGE, HISTOGRAM = COUNTER, GAUGE, HISTOGRAM

    def __init__(self, name: str, description: str, kind: int) -> None:
        if not isinstance(name, str) or not isinstance(description, str):
            raise TypeError("name and description must be str")
        if isinstance(kind, bool) or kind not in (COUNTER, GAUGE, HISTOGRAM):
            raise _error("Error when creating MetricFamily: Unknown metric kind")
        self._kind, self._handle = int(kind), next(_handles)
        self._backend = _backend
        try:
            self._backend.new_family(self._handle, name, description, self._kind)
        except MetricError as exc:
            raise _error(f"Error when creating MetricFamily: {exc}") from None
        self._created: weakref.WeakSet[Metric] = weakref.WeakSet()
        weakref.finalize(self, _drop_family, self._backend, self._handle, self._created)

    def Metric(  # noqa: N802 - Triton's name
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        """The metric with these labels (the same labels give the same metric); a histogram
        needs its ``buckets`` (bucket upper bounds, increasing)."""
        if labels is not None and not isinstance(labels, dict):
            raise _error("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise _error("Failed to create metric. Buckets must be a list.")
            if self._kind != HISTOGRAM:
                raise _error("Failed to create metric. Unexpected buckets found.")
            buckets = [_number(b) for b in buckets]
        elif self._kind == HISTOGRAM:
            raise _error("Failed to create metric. Missing required buckets.")
        handle = next(_handles)
        try:
            bounds = self._backend.new_metric(handle, self._handle, dict(labels or {}), buckets)
        except MetricError as exc:
            raise _error(f"Error when creating Metric: {exc}") from None
        metric = Metric(self, handle, bounds)
        self._created.add(metric)
        return metric


def _drop(backend: MetricsBackend, handle: int, is_family: bool) -> None:
    try:
        backend.drop(handle, is_family)
    except Exception:  # noqa: S110 - at garbage collection, nobody to tell
        pass


def _drop_family(backend: MetricsBackend, handle: int, created: weakref.WeakSet[Any]) -> None:
    for metric in list(created):
        metric._clear()
    _drop(backend, handle, True)
