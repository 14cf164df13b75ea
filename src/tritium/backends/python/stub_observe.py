"""The stub's side of Python-model observability: ``pb_utils.Logger`` output and custom metrics.

Nothing the model logs or counts waits for the server. ``Outbox`` gathers it: log records (at
most ``MAX_LOGS`` records / ``MAX_LOG_BYTES`` bytes waiting; past that they are dropped and
counted, and the server logs how many), metric updates coalesced per metric (a counter's
increments add up, a gauge keeps its last ``set`` plus what was added since, a histogram its
bucket counts, sum and count), and metric/family deletions. The stub sends it as one OBSERVE
frame ahead of any other frame it sends (so a response never overtakes the logs and counts of
the ``execute`` that made it), and a flusher thread sends it a few milliseconds after something
arrived when nothing else goes out (logs from a long ``execute`` or from the model's threads).

Creating a family or a metric and ``Metric.value()`` need the server's answer: ``ServerCalls``
sends a CALL frame and waits for its CALL_REPLY through ``bls_client.FrameMux``, the stub's one
reader of the socket (a caller inside ``execute`` reads the socket itself and leaves the
frames it does not want for the serve loop).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ...metrics.custom import MetricError, bucket_index
from . import ipc
from .bls_client import FrameMux

MAX_LOGS = 10_000
MAX_LOG_BYTES = 4 << 20
FLUSH_DELAY_S = 0.005
_LEVELS = {"INFO": 0, "WARNING": 1, "ERROR": 2, "VERBOSE": 3}  # pb_utils.LogLevel

Frame = tuple[int, Any, ipc.Buffers]


class Outbox:
    """What the model logged and counted since the last OBSERVE frame (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: list[tuple[int, str, str]] = []  # (level, "file.py:line", message)
        self._log_bytes = 0
        self._dropped = 0
        self._updates: dict[int, list[Any]] = {}
        self._drops: deque[tuple[int, bool]] = deque()  # appended by finalizers: no lock
        self.wake = threading.Event()
        self.enabled = [True, True, True, True]  # per LogLevel; the server's flags at INIT

    def after_fork(self) -> None:
        """In a forked child: new locks (a thread of the parent may have held them), and
        nothing of what the parent had waiting (the parent sends it)."""
        self._lock = threading.Lock()
        self._logs, self._log_bytes, self._dropped, self._updates = [], 0, 0, {}
        self._drops = deque()
        self.wake = threading.Event()

    def log(self, level_name: str, message: str, where: str) -> None:
        level = _LEVELS[level_name]
        if not self.enabled[level]:
            return
        with self._lock:
            if len(self._logs) >= MAX_LOGS or self._log_bytes + len(message) > MAX_LOG_BYTES:
                self._dropped += 1
            else:
                self._logs.append((level, where, message))
                self._log_bytes += len(message)
        self._nudge()

    def add(self, handle: int, kind: int, value: float) -> None:
        with self._lock:
            pending = self._updates.get(handle)
            if pending is None:
                self._updates[handle] = [None, value]
            else:
                pending[1] += value
        self._nudge()

    def set(self, handle: int, value: float) -> None:
        with self._lock:
            self._updates[handle] = [value, 0.0]
        self._nudge()

    def observe(self, handle: int, bounds: Sequence[float], value: float) -> None:
        index = bucket_index(bounds, value)
        with self._lock:
            pending = self._updates.get(handle)
            if pending is None:
                pending = self._updates[handle] = [[0] * (len(bounds) + 1), 0.0, 0]
            pending[0][index] += 1
            pending[1] += value
            pending[2] += 1
        self._nudge()

    def drop(self, handle: int, is_family: bool) -> None:
        self._drops.append((handle, is_family))  # may run inside a finalizer: no lock here
        self.wake.set()

    def _nudge(self) -> None:
        if not self.wake.is_set():
            self.wake.set()

    def take(self) -> Any:
        """The OBSERVE body (logs, dropped count, updates, drops), or None when empty."""
        drops = []
        while self._drops:
            drops.append(self._drops.popleft())
        with self._lock:
            logs, dropped, updates = self._logs, self._dropped, self._updates
            if not (logs or dropped or updates or drops):
                return None
            self._logs, self._log_bytes, self._dropped, self._updates = [], 0, 0, {}
        return (logs, dropped, [(h, *p) for h, p in updates.items()], drops)

    def start_flusher(self, flush: Callable[[], None]) -> None:
        def run() -> None:
            while True:
                self.wake.wait()
                time.sleep(FLUSH_DELAY_S)  # let what comes with it join the frame
                self.wake.clear()
                flush()

        threading.Thread(target=run, name="tritium-observe-flush", daemon=True).start()


class ServerCalls:
    """Calls from model code to the server: CALL (id, operation, arguments) → CALL_REPLY,
    read through the stub's ``bls_client.FrameMux`` like a BLS call's answers (negative ids:
    BLS calls count up from 1)."""

    def __init__(self, send: Callable[[int, Any], None], mux: FrameMux) -> None:
        self._send, self._mux = send, mux
        self._ids = itertools.count(-1, -1)

    def __call__(self, operation: str, args: Any) -> Any:
        call_id = next(self._ids)
        call = self._mux.register(call_id)
        self._send(ipc.CALL, (call_id, operation, args))
        _, ok, value = self._mux.next_answer(call_id, call)[1]
        if not ok:
            raise MetricError(value)
        return value


class RemoteMetrics:
    """The stub's ``pb_metrics`` backend: the values live in the server's registry."""

    def __init__(self, outbox: Outbox, call: ServerCalls) -> None:
        self._outbox, self._call = outbox, call
        self.add, self.set, self.observe = outbox.add, outbox.set, outbox.observe
        self.drop = outbox.drop

    def new_family(self, handle: int, name: str, description: str, kind: int) -> None:
        self._call("family", (handle, name, description, kind))

    def new_metric(
        self, handle: int, family: int, labels: dict[str, str], buckets: list[float] | None
    ) -> list[float] | None:
        bounds: list[float] | None = self._call("metric", (handle, family, labels, buckets))
        return bounds

    def value(self, handle: int) -> float:
        return float(self._call("value", handle))
