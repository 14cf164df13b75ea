"""The sequence batcher's per-instance workers: each runs the requests queued on its
instance's slots, one execution at a time, in order within each slot (``sequence.py`` owns
the slots and hands the workers their requests).

- ``DirectWorker``: one batch holds the next request of every slot that has one, at the
  slot's own position; empty slots below the last busy one get READY = false fillers.
- ``OldestWorker``: the next request of each candidate sequence (one per sequence at a time)
  joins a dynamic batch, oldest first.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Protocol

from ..backends.base import ModelInstance, send_error
from ..config.sequence import SequenceConfig
from ..errors import cancelled
from ..request import InferenceRequest
from .batch_policy import TIMER_SLACK_NS, BatchConfig, DynamicBatchPolicy, timer_delay
from .common import guarded, limited
from .rate_limiter import Gate
from .sequence_inputs import END_FLAG, START_FLAG, SequenceState, filler
from .sequence_slots import CorrelationId, Slot

_NO_TIMING = (0, 0, 0)


class Owner(Protocol):
    """What a worker needs of its ``SequenceScheduler``."""

    @property
    def config(self) -> SequenceConfig: ...

    @property
    def version(self) -> str: ...

    @property
    def max_batch_size(self) -> int: ...

    def prepare(self, request: InferenceRequest, state: SequenceState) -> None: ...

    def release(self, slot: Slot) -> None: ...

    def forget(self, cid: CorrelationId, slot: Slot) -> None: ...

    def iterated(self, requests: Sequence[InferenceRequest]) -> None: ...


class Release:
    """Queued on a slot by the reaper: the sequence idled out; free the slot when reached."""

    __slots__ = ("cid",)

    def __init__(self, cid: CorrelationId) -> None:
        self.cid = cid


Entry = InferenceRequest | Release


class Worker:
    """One instance's slots: a queue of entries per slot, and the sequence each holds."""

    def __init__(self, owner: Owner, index: int, instance: ModelInstance) -> None:
        slots = owner.config.slots
        self._owner = owner
        self.index = index  # its instance's position among the scheduler's workers
        self.instance = instance
        self._lanes: list[deque[Entry]] = [deque() for _ in range(slots)]
        self._states: list[SequenceState | None] = [None] * slots
        self._busy = False
        self._timer: asyncio.Handle | None = None  # a TimerHandle, or call_soon's Handle
        self._late = 0  # while a timer's pump runs: TIMER_SLACK_NS (batch_policy.py)
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False
        self.gate: Gate | None = None  # the rate limiter's, when it is on
        # Triton's TRITONSERVER_DELAY_SCHEDULER: run nothing until the scheduler lets go
        # (sequence.py:_look_at_hold; the direct strategy only).
        self.held = False

    def queued(self) -> int:
        """Entries waiting on this instance's slots (Triton's DelayScheduler count)."""
        return sum(len(lane) for lane in self._lanes)

    def enqueue(self, slot: int, entry: Entry, pump: bool = True) -> None:
        self._lanes[slot].append(entry)
        if pump:
            self.pump()

    def pump(self) -> None:
        raise NotImplementedError

    def _state_for(self, slot: int, request: InferenceRequest) -> SequenceState:
        """The slot's sequence state: a fresh one at START (or for a sequence new here)."""
        state = self._states[slot]
        if state is None or request.flags & START_FLAG or state.cid != request.correlation_id:
            state = self._states[slot] = SequenceState(request.correlation_id)
        return state

    def _free(self, slot: int) -> None:
        """The slot's sequence is over (END taken, idled out, cancelled)."""
        self._states[slot] = None
        if not self._closed:
            self._owner.release(Slot(slot, self.index))

    def _settle_heads(self, slot: int) -> None:
        """Handle what cannot run at the head of a slot: a reaper release, or a cancelled
        request (Triton then cancels the whole sequence and frees its slot)."""
        lane = self._lanes[slot]
        while lane:
            head = lane[0]
            if isinstance(head, Release):
                lane.popleft()
                state = self._states[slot]
                if state is not None and state.cid == head.cid:  # else a stale release
                    self._free(slot)
                continue
            if not head.cancelled:
                return
            self._cancel_sequence(slot, head.correlation_id)

    def _cancel_sequence(self, slot: int, cid: CorrelationId) -> None:
        """Answer the rest of a cancelled sequence CANCELLED (up to and with its release, if
        the reaper queued one) and free its slot."""
        lane = self._lanes[slot]
        error = cancelled("the request was cancelled")
        self._owner.forget(cid, Slot(slot, self.index))
        while lane:
            entry = lane.popleft()
            if isinstance(entry, Release):
                break
            send_error(entry, self._owner.version, error)
        self._free(slot)

    def _start(self, batch: list[InferenceRequest], real: list[InferenceRequest]) -> None:
        self._busy = True
        task = asyncio.ensure_future(self._run(batch, real))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _begin(
        self, batch: list[InferenceRequest], real: list[InferenceRequest]
    ) -> Awaitable[None]:
        now = time.perf_counter_ns()
        for request in real:
            request.executing(now)
        return self.instance.execute(batch)

    async def _run(self, batch: list[InferenceRequest], real: list[InferenceRequest]) -> None:
        if self.gate is None:
            execution = self._begin(batch, real)
        else:
            execution = limited(self.gate, functools.partial(self._begin, batch, real))
        if await guarded(execution, real, self._owner.version) and real:
            stats = real[0].stats
            if stats is not None:
                stats.executed(len(batch), real[0].timing or _NO_TIMING)
        self._busy = False
        self._executed(real)
        if self._owner.config.iterative:
            self._owner.iterated(real)
        if not self._closed:
            self.pump()

    def _executed(self, real: list[InferenceRequest]) -> None:
        """After an execution (the oldest strategy frees its slots here)."""

    def _arm(self, when_ns: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = timer_delay(when_ns, time.perf_counter_ns())
        if delay is None:  # ends within the loop's timer resolution: next turn, with slack
            self._timer = loop.call_soon(self._fire)
        else:
            self._timer = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._late = TIMER_SLACK_NS
        try:
            self.pump()
        finally:
            self._late = 0

    def close(self, error: Exception) -> list[asyncio.Task[None]]:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for lane in self._lanes:
            while lane:
                entry = lane.popleft()
                if isinstance(entry, InferenceRequest):
                    send_error(entry, self._owner.version, error)
        return list(self._running)


class DirectWorker(Worker):
    def pump(self) -> None:
        if self._busy or self._closed or self.held:
            return
        heads = []
        for slot in range(len(self._lanes)):
            self._settle_heads(slot)
            if self._lanes[slot]:
                heads.append(slot)
        if not heads or self._wait(heads):
            return
        chosen: list[InferenceRequest | None] = []
        shapes: _Shapes | None = None
        for slot in range(heads[-1] + 1):
            lane = self._lanes[slot]
            head = lane[0] if lane else None
            if isinstance(head, InferenceRequest) and _fits(head, shapes, self._owner):
                lane.popleft()
                shapes = shapes or _shapes(head)
                chosen.append(head)
            else:
                chosen.append(None)
        real = [r for r in chosen if r is not None]
        template, base = real[0], len(real[0].inputs)  # its client inputs, before prepare
        for slot, request in enumerate(chosen):
            if request is not None:
                self._owner.prepare(request, self._state_for(slot, request))
                if request.flags & END_FLAG:
                    self._free(slot)
        config, version = self._owner.config, self._owner.version
        batch = [r if r is not None else filler(config, template, base, version) for r in chosen]
        self._start(batch, real)

    def _wait(self, heads: list[int]) -> bool:
        """``max_queue_delay_microseconds`` with ``minimum_slot_utilization``: hold the batch
        while too few slots have a request and the oldest has not waited the delay."""
        config = self._owner.config
        if not config.max_queue_delay_ns or not config.minimum_slot_utilization:
            return False
        if len(heads) / config.slots >= config.minimum_slot_utilization:
            return False
        arrivals = [
            e.arrival_ns for s in heads if isinstance(e := self._lanes[s][0], InferenceRequest)
        ]
        due = min(arrivals, default=0) + config.max_queue_delay_ns
        if time.perf_counter_ns() + self._late >= due:
            return False
        self._arm(due)
        return True


_Shapes = tuple[tuple[str, tuple[int, ...]], ...]


def _shapes(request: InferenceRequest) -> _Shapes:
    return tuple((t.name, t.shape) for t in request.inputs)


def _fits(request: InferenceRequest, shapes: _Shapes | None, owner: Owner) -> bool:
    """A batched model's requests join one batch only with equal input shapes (the others
    wait for the next batch, a filler in their place)."""
    return shapes is None or not owner.config.batched or _shapes(request) == shapes


class OldestWorker(Worker):
    def __init__(self, owner: Owner, index: int, instance: ModelInstance) -> None:
        super().__init__(owner, index, instance)
        config = owner.config
        self._in_flight = [False] * config.slots
        # Slots with an entry to look at and nothing in flight, in the order they became so
        # (a pump visits only these, not every candidate slot).
        self._waiting: dict[int, None] = {}
        self._slot_of: dict[int, int] = {}  # id(request) -> its slot, while in the batcher
        self._policy: DynamicBatchPolicy[InferenceRequest] = DynamicBatchPolicy(
            BatchConfig(
                max_batch_size=owner.max_batch_size,
                preferred=config.preferred,
                max_delay_ns=config.max_queue_delay_ns,
                preserve_ordering=config.preserve_ordering,
            )
        )

    def enqueue(self, slot: int, entry: Entry, pump: bool = True) -> None:
        if not self._in_flight[slot]:
            self._waiting[slot] = None
        super().enqueue(slot, entry, pump)

    def pump(self) -> None:
        if self._closed:
            return
        now = time.perf_counter_ns()
        waiting = self._waiting
        while waiting:
            slot = next(iter(waiting))
            del waiting[slot]
            if self._in_flight[slot]:
                continue
            self._settle_heads(slot)  # may free the slot and queue a backlogged sequence
            lane = self._lanes[slot]
            if not lane:
                continue
            request = lane.popleft()
            assert isinstance(request, InferenceRequest)
            self._owner.prepare(request, self._state_for(slot, request))
            self._in_flight[slot] = True
            self._slot_of[id(request)] = slot
            self._policy.enqueue(request, request.arrival_ns)
        if self._busy:
            return
        batch = self._policy.take(now + self._late)
        if batch is None:
            when = self._policy.wake_at()
            if when is not None:
                self._arm(when)
            return
        self._start(batch, batch)

    def _executed(self, real: list[InferenceRequest]) -> None:
        for request in real:
            slot = self._slot_of.pop(id(request))
            self._in_flight[slot] = False
            if self._lanes[slot]:
                self._waiting[slot] = None
            if request.flags & END_FLAG:
                self._free(slot)

    def close(self, error: Exception) -> list[asyncio.Task[None]]:
        running = super().close(error)
        while batch := self._policy.take(time.perf_counter_ns() + 10**18):
            for request in batch:
                send_error(request, self._owner.version, error)
        return running
