"""Triton's custom metrics from the in-process API: ``MetricFamily(kind, name, description)``
and ``Metric(family, labels)`` with ``value``, ``increment``, ``set_value`` and ``kind``.

Triton keeps them in its one metrics registry of the process, shown on ``/metrics`` beside
the server's own families and the Python models' (``pb_utils.MetricFamily``). Here that
registry is ``REGISTRY``, a ``metrics/custom.py:CustomMetrics`` every in-process ``Server``
is built with (its models' custom metrics go there too), holding the API's objects under one
owner. A family or metric lives while its object does (dropped when it is collected).

The registry is read on a server's event loop (``/metrics``, ``Server.metrics``) and changed
there by the Python models: while a server runs, a change from another thread is made on its
loop (and waited for), so that nothing changes the registry under a render; with no server
running it is made in place, under a lock.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

from ..metrics.custom import COUNTER, GAUGE, CustomMetrics, MetricError
from ..metrics.render import FAMILY_NAMES
from ._enums import MetricKind
from ._errors import InternalError, InvalidArgumentError, UnsupportedError
from ._loop import ServerLoop

T = TypeVar("T")
REGISTRY = CustomMetrics(reserved=FAMILY_NAMES)
_OWNER = "tritonserver"  # the API's objects, one owner in the registry
_handles = itertools.count(1)
_lock = threading.Lock()
_loops: list[ServerLoop] = []  # the running in-process servers' loops, oldest first


def serving(loop: ServerLoop) -> None:
    """A server started on ``loop``: changes from other threads are made there from now."""
    with _lock:
        _loops.append(loop)


def stopped(loop: ServerLoop) -> None:
    with _lock:
        if loop in _loops:
            _loops.remove(loop)


def _apply(change: Callable[[], T]) -> T:
    """``change()`` where nothing renders the registry meanwhile (see the module doc)."""
    with _lock:
        loop = _loops[0] if _loops else None
        if loop is None or loop.on_loop():
            return change()

    async def run() -> T:
        return change()

    return loop.call(run())


def _kind(kind: object) -> int:
    try:
        value = MetricKind(kind)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"invalid metric kind {kind!r}") from None
    if value not in (MetricKind.COUNTER, MetricKind.GAUGE):
        raise UnsupportedError(
            "histogram metrics need bucket boundaries, which this API does not take"
        )
    return int(value)


class MetricFamily:
    """A family of metrics: its kind (``MetricKind.COUNTER`` or ``GAUGE``), its name and
    description, as Prometheus shows them."""

    def __init__(self, kind: MetricKind, name: str, description: str) -> None:
        self._kind = _kind(kind)
        self._handle = next(_handles)
        self.name, self.description = name, description
        try:
            _apply(lambda: REGISTRY.new_family(_OWNER, self._handle, name, description, self._kind))
        except MetricError as exc:
            raise InvalidArgumentError(str(exc)) from None
        weakref.finalize(self, _forget, REGISTRY.drop_family, self._handle)

    @property
    def kind(self) -> MetricKind:
        return MetricKind(self._kind)


class Metric:
    """One metric of a family, told apart from the family's others by its labels."""

    def __init__(self, family: MetricFamily, labels: dict[str, str] | None = None) -> None:
        if not isinstance(family, MetricFamily):
            raise TypeError("a Metric is made from a MetricFamily")
        self._family = family  # kept alive with the metric, as Triton's bindings keep it
        self._handle = next(_handles)
        given = {} if labels is None else labels
        try:
            _apply(lambda: REGISTRY.new_metric(_OWNER, self._handle, family._handle, given))
        except MetricError as exc:
            raise InvalidArgumentError(str(exc)) from None
        weakref.finalize(self, _forget, REGISTRY.drop_metric, self._handle)

    @property
    def kind(self) -> MetricKind:
        return self._family.kind

    @property
    def value(self) -> float:
        try:
            return _apply(lambda: REGISTRY.value(_OWNER, self._handle))
        except MetricError as exc:
            raise InternalError(str(exc)) from None

    def increment(self, value: float) -> None:
        if self._family._kind == COUNTER and value < 0:
            raise InvalidArgumentError(
                "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
                "non-negative values."
            )
        self._change(None, float(value))

    def set_value(self, value: float) -> None:
        if self._family._kind != GAUGE:
            raise UnsupportedError("TRITONSERVER_METRIC_KIND_COUNTER does not support Set")
        self._change(float(value), 0.0)

    def _change(self, set_to: float | None, delta: float) -> None:
        update = (self._handle, set_to, delta)
        try:
            _apply(lambda: REGISTRY.update(_OWNER, update))
        except MetricError as exc:
            raise InternalError(str(exc)) from None


def _forget(drop: Callable[[str, int], None], handle: int) -> None:
    """A family or metric object was collected: its registry entry goes (on a server's loop
    when one runs; never raising, as it runs from the collector)."""
    try:
        _apply(lambda: drop(_OWNER, handle))
    except Exception:  # a stopping server: the registry is left to the next change
        with _lock:
            drop(_OWNER, handle)
