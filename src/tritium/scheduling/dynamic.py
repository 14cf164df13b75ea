"""The dynamic batcher's async driver: a thin loop around ``DynamicBatchPolicy``.

Requests are queued by the policy; whenever an instance is idle, the policy is asked for a
batch (now, or a time to look again, kept as one timer). A batch is one execution: tensor
backends merge it along the batch dimension, Python models get the list of requests.

``TRITONSERVER_DELAY_SCHEDULER=N`` (Triton's testing hook, dynamic_batch_scheduler.cc): each
batcher starts nothing until its queue first holds N requests, so that a test knows which
requests one batch can take.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Awaitable, Sequence
from typing import Final, cast

from ..backends.base import BatchStartedInstance, ModelInstance, send_error, starts_batches
from ..errors import ServerError, internal, unavailable
from ..options import delay_count
from ..request import InferenceRequest
from .batch_policy import TIMER_SLACK_NS, BatchConfig, DynamicBatchPolicy, timer_delay
from .common import guarded, leaving, limited, rest, runnable
from .rate_limiter import Gate

_NO_TIMING: Final = (0, 0, 0)
DELAY_VARIABLE = "TRITONSERVER_DELAY_SCHEDULER"
log = logging.getLogger(__name__)


class DynamicBatcher:
    def __init__(
        self,
        instances: Sequence[ModelInstance],
        version: str,
        config: BatchConfig,
        gates: Sequence[Gate] | None = None,  # the rate limiter's, one per instance
    ):
        self._idle: list[ModelInstance] = list(instances)
        self._gates = {id(i): g for i, g in zip(instances, gates or (), strict=False)}
        self._version = version
        self._policy: DynamicBatchPolicy[InferenceRequest] = DynamicBatchPolicy(config)
        self._timer: asyncio.Handle | None = None  # a TimerHandle, or call_soon's Handle
        self._timer_at = 0
        self._running: set[asyncio.Task[None]] = set()
        self._batches_in_flight = 0
        # Instances that start a batch without a task (not under the rate limiter, whose
        # gates are awaited): the batches started so, and what ``close`` waits on for them.
        self._all_started = (
            bool(instances) and not self._gates and all(starts_batches(i) for i in instances)
        )
        self._launched = 0
        self._drained: asyncio.Future[None] | None = None
        # Instances an instance-group update removes, by id: each takes no more batches,
        # and its future resolves once its batch is done (``update``).
        self._leaving: dict[int, asyncio.Future[None]] = {}
        # preserve_ordering: one batch at a time, so responses leave in request order even
        # with several instances (simple and exact; it gives up parallel instances).
        self._one_at_a_time = config.preserve_ordering
        self._hold = delay_count(os.environ.get(DELAY_VARIABLE))
        if self._hold:
            log.debug(
                "Delaying batcher for version %s until %d queued requests", version, self._hold
            )

    async def update(
        self,
        added: Sequence[ModelInstance],
        gates: Sequence[Gate] | None,
        removed: Sequence[ModelInstance],
    ) -> None:
        """A reload changed only the instance groups (Triton's UpdateInstanceGroup): the
        ``added`` instances (with their ``gates``) start taking batches now; the ``removed``
        ones take no more, and this returns once they finished what they run."""
        for instance, gate in zip(added, gates or (), strict=False):
            self._gates[id(instance)] = gate
        waits = [leaving(self._idle, self._leaving, i) for i in removed]
        self._idle.extend(added)
        if added:
            self._pump()
        await asyncio.gather(*(w for w in waits if w is not None))
        for instance in removed:
            self._gates.pop(id(instance), None)

    def submit(self, request: InferenceRequest) -> None:
        try:
            self._policy.enqueue(request, time.perf_counter_ns(), request.timeout_us)
        except ServerError as exc:  # queue full: answered like any failed request
            send_error(request, self._version, exc)
            return
        self._pump()

    def _pump(self, slack_ns: int = 0) -> None:
        """Answer timed-out requests and start every batch that is ready on idle instances;
        ``slack_ns``: a timer fired, and a wait ending that soon counts as ended
        (batch_policy.py:TIMER_SLACK_NS)."""
        if self._hold:  # TRITONSERVER_DELAY_SCHEDULER: every submit looks again
            if len(self._policy) < self._hold:
                return
            self._hold = 0
        now = time.perf_counter_ns()
        for request in self._policy.expire(now + slack_ns):
            send_error(request, self._version, unavailable("Request timeout expired"))
        while self._idle and not (self._one_at_a_time and self._batches_in_flight):
            batch = self._policy.take(now + slack_ns)
            if batch is None:
                break
            batch = runnable(batch, self._version)
            if batch:
                self._start(self._idle.pop(), batch, now)
        if self._idle:  # a busy batcher looks again when an instance is free
            self._arm(self._policy.wake_at())

    def _arm(self, when_ns: int | None) -> None:
        """One timer, at the earliest time the policy may have something to do."""
        if when_ns is None:
            return
        if self._timer is not None:
            if self._timer_at <= when_ns:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = timer_delay(when_ns, time.perf_counter_ns())
        self._timer_at = when_ns
        if delay is None:  # ends within the loop's timer resolution: next turn, with slack
            self._timer = loop.call_soon(self._fire)
        else:
            self._timer = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._pump(TIMER_SLACK_NS)

    def _start(self, instance: ModelInstance, batch: list[InferenceRequest], now: int) -> None:
        gate = self._gates.get(id(instance)) if self._gates else None
        if gate is None:
            for request in batch:
                request.executing(now)
        self._batches_in_flight += 1
        if gate is None and self._all_started and self._launch(instance, batch):
            return
        task = asyncio.ensure_future(self._run(instance, batch, gate))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _launch(self, instance: ModelInstance, batch: list[InferenceRequest]) -> bool:
        """Start ``batch`` without a task (``BatchStartedInstance``): no task, future
        or coroutine per batch; False, with nothing sent, if it has to wait (the stub is
        down: a task then waits for its restart)."""
        started = cast(BatchStartedInstance, instance)  # checked once, in __init__
        try:
            if not started.start_batch(batch, functools.partial(self._landed, instance, batch)):
                return False
        except Exception as exc:  # nothing was sent: a backend bug, answered as ``guarded`` does
            for request in batch:
                send_error(request, self._version, internal(f"{type(exc).__name__}: {exc}"))
            self._batches_in_flight -= 1
            # ``_pump``, which called this, goes on with it
            rest(self._idle, self._leaving, instance)
            return True
        self._launched += 1
        return True

    def _landed(self, instance: ModelInstance, batch: list[InferenceRequest]) -> None:
        """A batch started by ``_launch`` is answered: statistics, then the next batch."""
        self._launched -= 1
        self._done(instance, batch)
        drained = self._drained
        if not self._launched and drained is not None and not drained.done():
            drained.set_result(None)

    def _done(self, instance: ModelInstance, batch: list[InferenceRequest]) -> None:
        """A batch ran (whatever its requests' outcome): one execution in the statistics,
        and the instance takes the next batch."""
        size = sum(r.batch_size for r in batch)
        assert batch[0].stats is not None  # set when it was queued
        batch[0].stats.executed(size, batch[0].timing or _NO_TIMING)
        self._batches_in_flight -= 1
        rest(self._idle, self._leaving, instance)
        self._pump()

    @staticmethod
    def _begin(instance: ModelInstance, batch: list[InferenceRequest]) -> Awaitable[None]:
        """Once the rate limiter granted the resources: the queue time ends now."""
        now = time.perf_counter_ns()
        for request in batch:
            request.executing(now)
        return instance.execute(batch)

    async def _run(
        self, instance: ModelInstance, batch: list[InferenceRequest], gate: Gate | None
    ) -> None:
        if gate is None:
            execution = instance.execute(batch)
        else:
            execution = limited(gate, functools.partial(self._begin, instance, batch))
        if await guarded(execution, batch, self._version):
            self._done(instance, batch)
            return
        self._batches_in_flight -= 1
        rest(self._idle, self._leaving, instance)
        self._pump()

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        while True:
            batch = self._policy.take(time.perf_counter_ns() + 10**18)
            if not batch:
                break
            for request in batch:
                send_error(request, self._version, internal("model is being unloaded"))
        if self._launched:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
