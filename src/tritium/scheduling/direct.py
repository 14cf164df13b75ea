"""Triton's default scheduler: no batching, one request at a time per instance.

Requests go straight to an idle instance; when every instance is busy they wait in a FIFO and
the next instance to finish takes the oldest ones. Requests are never merged: each gets its
own execution, but those that queued up reach the backend in one hand-off (one message to a
Python stub instead of one per request).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Final, cast

from ..backends.base import (
    InlineInstance,
    ModelInstance,
    StartedInstance,
    is_inline,
    is_started,
    send_error,
)
from ..errors import internal
from ..request import NOT_EXECUTED, InferenceRequest
from .common import guarded, leaving, limited, rest, runnable
from .rate_limiter import Gate


MAX_GROUP: Final = 8
_NO_TIMING: Final = (0, 0, 0)


class DirectScheduler:
    def __init__(
        self,
        instances: Sequence[ModelInstance],
        version: str,
        gates: Sequence[Gate] | None = None,  # the rate limiter's, one per instance
    ) -> None:
        self._idle: list[ModelInstance] = list(instances)
        self._instances = max(len(instances), 1)
        self._waiting: deque[InferenceRequest] = deque()
        self._version = version
        self._running: set[asyncio.Task[None]] = set()
        # Instances that can answer a cheap request right here (decided once, at load).
        # (Not ``_inline``: mypyc names the C field ``__inline``, a C compiler keyword.)
        self._all_inline = bool(instances) and all(is_inline(i) for i in instances)
        self._gates = {id(i): g for i, g in zip(instances, gates or (), strict=False)}
        # Instances that start executions without a task (not under the rate limiter, whose
        # gates are awaited), the executions started so, and what ``close`` waits on for them.
        self._all_started = (
            bool(instances) and not self._gates and all(is_started(i) for i in instances)
        )
        self._in_flight = 0
        self._drained: asyncio.Future[None] | None = None
        # Instances an instance-group update removes, by id: each takes no more work, and
        # its future resolves once its execution is done (``update``).
        self._leaving: dict[int, asyncio.Future[None]] = {}

    async def update(
        self,
        added: Sequence[ModelInstance],
        gates: Sequence[Gate] | None,
        removed: Sequence[ModelInstance],
    ) -> None:
        """A reload changed only the instance groups (Triton's UpdateInstanceGroup): the
        ``added`` instances (with their ``gates``) start taking requests now; the ``removed``
        ones take no more, and this returns once they finished what they run."""
        for instance, gate in zip(added, gates or (), strict=False):
            self._gates[id(instance)] = gate
        self._instances = max(self._instances + len(added) - len(removed), 1)
        waits = [leaving(self._idle, self._leaving, i) for i in removed]
        for instance in added:
            self._next(instance)  # takes what waits, or goes idle
        await asyncio.gather(*(w for w in waits if w is not None))
        for instance in removed:
            self._gates.pop(id(instance), None)

    def submit(self, request: InferenceRequest) -> None:
        if self._idle:
            instance = self._idle[-1]
            if self._all_inline and self._run_inline(instance, request):
                return  # answered synchronously; the instance stays idle
            self._dispatch(self._idle.pop(), [request])
        else:
            self._waiting.append(request)

    def _dispatch(self, instance: ModelInstance, group: list[InferenceRequest]) -> None:
        """Run ``group`` on ``instance``: started without a task when the instance can, else
        in a task that goes on with the queue."""
        if not (self._all_started and self._launch(instance, group)):
            self._start(instance, group)

    def _launch(self, instance: ModelInstance, group: list[InferenceRequest]) -> bool:
        """Start ``group`` without a task (``StartedInstance``); False if it has to wait."""
        now = time.perf_counter_ns()
        for member in group:
            member.executing(now)
        started = cast(StartedInstance, instance)  # checked once, in __init__
        try:
            if not started.start(group, functools.partial(self._landed, instance, group)):
                return False
        except Exception as exc:  # nothing was sent: a backend bug, answered as ``guarded`` does
            for request in group:
                send_error(request, self._version, internal(f"{type(exc).__name__}: {exc}"))
            self._next(instance)
            return True
        self._in_flight += 1
        return True

    def _landed(self, instance: ModelInstance, group: list[InferenceRequest]) -> None:
        """An execution started by ``_launch`` is answered: the instance takes what waits."""
        self._in_flight -= 1
        self._executed(group)
        self._next(instance)
        drained = self._drained
        if not self._in_flight and drained is not None and not drained.done():
            drained.set_result(None)

    def _next(self, instance: ModelInstance) -> None:
        group: list[InferenceRequest] = []
        while self._waiting and not group and not self._removing(instance):
            group = self._take()  # (all cancelled: take the next ones)
        if group:
            self._dispatch(instance, group)
        else:
            rest(self._idle, self._leaving, instance)

    def _removing(self, instance: ModelInstance) -> bool:
        """An instance-group update removes ``instance``: it takes no more work."""
        return bool(self._leaving) and id(instance) in self._leaving

    def _run_inline(self, instance: ModelInstance, request: InferenceRequest) -> bool:
        """Run ``request`` on the loop when the instance says that is cheaper than a task
        and a thread hand-off, and the rate limiter (if on) grants its resources without
        waiting; the statistics are recorded here, as for any execution."""
        inline = cast(InlineInstance, instance)  # checked once, in __init__
        if not inline.cheap([request]):
            return False
        gate = self._gates.get(id(instance)) if self._gates else None
        if gate is not None and not gate.try_acquire():
            return False  # it waits for its resources in a task
        try:
            request.executing(time.perf_counter_ns())
            inline.run_now(request)
        finally:
            if gate is not None:
                gate.release()
        assert request.stats is not None  # set when it was queued
        request.stats.executed(request.batch_size, request.timing or _NO_TIMING)
        return True

    @staticmethod
    def _executed(group: list[InferenceRequest]) -> None:
        """Statistics: each request of a group was one execution of its own."""
        for request in group:
            assert request.stats is not None  # set when it was queued
            timing = request.timing
            if timing != NOT_EXECUTED:  # (the backend skipped it: cancelled while queued)
                request.stats.executed(request.batch_size, timing or _NO_TIMING)

    def _start(self, instance: ModelInstance, group: list[InferenceRequest]) -> None:
        task = asyncio.ensure_future(self._run(instance, group))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    @staticmethod
    def _begin(instance: ModelInstance, group: list[InferenceRequest]) -> Awaitable[None]:
        now = time.perf_counter_ns()
        for member in group:
            member.executing(now)
        return instance.execute(group) if len(group) == 1 else instance.execute_each(group)

    async def _run(self, instance: ModelInstance, group: list[InferenceRequest]) -> None:
        gate = self._gates.get(id(instance)) if self._gates else None
        while True:
            if gate is None:
                execution = self._begin(instance, group)
            else:
                execution = limited(gate, functools.partial(self._begin, instance, group))
            if await guarded(execution, group, self._version):
                self._executed(group)
            group = []
            while self._waiting and not group and not self._removing(instance):
                group = self._take()  # (all cancelled: take the next ones)
            if not group:
                rest(self._idle, self._leaving, instance)
                return

    def _take(self) -> list[InferenceRequest]:
        """The next requests for a freed instance: its fair share of the queue (every other
        instance is busy, or the queue would be empty), at most MAX_GROUP. Each still gets
        its own execution; the group only shares one hand-off to the backend. Requests whose
        client went away are answered CANCELLED instead of being run."""
        waiting = self._waiting
        count = min(MAX_GROUP, max(1, len(waiting) // self._instances))
        taken = [waiting.popleft() for _ in range(min(count, len(waiting)))]
        return runnable(taken, self._version)

    async def close(self) -> None:
        """Fail what still waits, then let running executions finish."""
        while self._waiting:
            send_error(self._waiting.popleft(), self._version, internal("model is being unloaded"))
        if self._in_flight:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
