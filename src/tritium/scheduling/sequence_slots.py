"""Which sequence holds which slot: the sequence batcher's bookkeeping, pure and
clock-injected (times are integer ns passed in), so it is unit-tested on a fake clock;
``sequence.py`` drives it.

Triton's semantics (SequenceBatchScheduler::Enqueue, ReleaseSequenceSlot, the reaper):
- a sequence (a correlation ID) holds one slot of one instance from its first request until
  its END request has been taken, or until it has been idle ``max_idle_ns``;
- a request that does not START a sequence must belong to one in progress (holding a slot or
  waiting in the backlog), else it is refused;
- a START for an ID still in progress continues in the same place (the old sequence ends
  early, with a warning);
- when no slot is free a new sequence waits in the backlog, FIFO, with all its requests; a
  released slot goes to the oldest backlogged sequence;
- a backlogged sequence whose request gave a ``timeout`` is rejected once it passes.

tritium's bound (Triton's backlog has none, and ``sequence_batching`` has no queue size):
at most ``max_backlog`` sequences wait in the backlog (0: no bound, as Triton); a START that
would open one more is refused at once with UNAVAILABLE, the answer of a full queue, instead
of waiting behind every sequence before it. Requests of sequences already in progress are
never refused by it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ..errors import invalid_arg, unavailable

CorrelationId = int | str


class _Named(Protocol):
    """A request as the slots see it (``request.py:InferenceRequest`` in the server): only
    its model's name, for a message."""

    @property
    def model_name(self) -> str: ...


R = TypeVar("R", bound=_Named)


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    """Slot ``index`` of instance ``instance``. Free slots are handed out lowest index
    first, so sequences spread over the instances before a batch grows."""

    index: int
    instance: int


@dataclass(eq=False, slots=True)
class Backlog(Generic[R]):
    """A sequence waiting for a slot, with every request it sent meanwhile."""

    cid: CorrelationId
    requests: deque[R] = field(default_factory=deque)
    expires_ns: int = 0  # 0: never
    ended: bool = False  # its END request is among ``requests``


class SequenceSlots(Generic[R]):
    """The slots and the backlog of one sequence batcher, of requests of type ``R``."""

    def __init__(
        self, instances: int, slots_per_instance: int, max_idle_ns: int, max_backlog: int = 0
    ) -> None:
        self._max_backlog = max_backlog  # backlogged sequences at most; 0: no bound
        self._per_instance = slots_per_instance
        self._free = [Slot(i, n) for n in range(instances) for i in range(slots_per_instance)]
        heapq.heapify(self._free)
        self._active: dict[CorrelationId, Slot] = {}
        self._backlogged: dict[CorrelationId, Backlog[R]] = {}
        self._backlog: deque[Backlog[R]] = deque()
        self._seen: OrderedDict[CorrelationId, int] = OrderedDict()  # oldest first
        self._max_idle_ns = max_idle_ns
        self._next_expiry = 0  # the earliest backlog expiry (0: none), so most calls scan nothing

    @property
    def active(self) -> int:
        return len(self._active)

    @property
    def backlogged(self) -> int:
        return len(self._backlog)

    def backlogged_requests(self) -> int:
        """Requests waiting in the backlog, all sequences together."""
        return sum(len(backlog.requests) for backlog in self._backlog)

    @property
    def tracked(self) -> int:
        """Correlation IDs the reaper still watches (a bound on what is kept per ID)."""
        return len(self._seen)

    def route(
        self, cid: CorrelationId, start: bool, end: bool, request: R, now: int, timeout_ns: int
    ) -> tuple[Slot | None, bool]:
        """Where ``request`` goes: (its slot, or None when it was put in the backlog;
        whether it STARTs over a sequence still in progress). Raises INVALID_ARG for a
        request that does not start a sequence and belongs to none, UNAVAILABLE for a new
        sequence that would overfill the backlog."""
        slot = self._active.get(cid)
        backlog = self._backlogged.get(cid)
        if not start and slot is None and backlog is None:
            raise invalid_arg(
                f"inference request for sequence {cid} to model '{request.model_name}' must "
                "specify the START flag on the first request of the sequence"
            )
        if slot is None and backlog is None and not self._free and self._backlog_full():
            raise unavailable(
                f"Exceeds maximum queue size: {len(self._backlog)} sequences of model "
                f"'{request.model_name}' already wait for a sequence slot "
                "(--sequence-backlog-limit)"
            )
        self._seen[cid] = now
        self._seen.move_to_end(cid)
        conflict = start and (slot is not None or backlog is not None)
        if slot is not None:
            if end:
                del self._active[cid]
            return slot, conflict
        if backlog is None and self._free:
            slot = heapq.heappop(self._free)
            if not end:
                self._active[cid] = slot
            return slot, conflict
        if backlog is None:
            backlog = Backlog(cid)
            self._backlog.append(backlog)
            self._backlogged[cid] = backlog
        backlog.requests.append(request)
        if timeout_ns:
            expires = now + timeout_ns
            backlog.expires_ns = min(backlog.expires_ns, expires) if backlog.expires_ns else expires
            if not self._next_expiry or expires < self._next_expiry:
                self._next_expiry = expires
        if end:
            backlog.ended = True
            del self._backlogged[cid]  # a later START with this ID is a new sequence
        return None, conflict

    def _backlog_full(self) -> bool:
        return 0 < self._max_backlog <= len(self._backlog)

    def release(self, slot: Slot) -> Backlog[R] | None:
        """``slot``'s sequence is over: it goes to the oldest backlogged sequence (returned,
        its requests to be run there, in order), or back to the free slots."""
        while self._backlog:
            backlog = self._backlog.popleft()
            if not backlog.requests:
                continue
            if not backlog.ended:
                self._backlogged.pop(backlog.cid, None)
                self._active[backlog.cid] = slot
            return backlog
        heapq.heappush(self._free, slot)
        return None

    def added(self, instance: int) -> list[Slot]:
        """An instance-group update added instance ``instance``: its slots, to be released
        (each then goes to a backlogged sequence or to the free slots)."""
        return [Slot(i, instance) for i in range(self._per_instance)]

    def retire(self, instance: int) -> int:
        """An instance-group update removes instance ``instance``: its free slots go (no new
        sequence gets one); returns how many it still holds, each to be released once its
        sequence is over (then not handed out again)."""
        kept = [slot for slot in self._free if slot.instance != instance]
        held = self._per_instance - (len(self._free) - len(kept))
        self._free = kept
        heapq.heapify(self._free)
        return held

    def holds(self, cid: CorrelationId) -> bool:
        """``cid`` is in progress: holding a slot or waiting in the backlog."""
        return cid in self._active or cid in self._backlogged

    def end(self, cid: CorrelationId) -> Slot | None:
        """``cid``'s sequence is over (an iterative sequence's request was released): the
        slot it held, to be released after the requests already queued there; None when it
        holds none (its END was taken, or it idled out)."""
        self._seen.pop(cid, None)
        return self._active.pop(cid, None)

    def forget(self, cid: CorrelationId, slot: Slot) -> None:
        """Drop ``cid``'s hold on ``slot`` (its requests were cancelled); the caller then
        releases the slot."""
        if self._active.get(cid) == slot:
            del self._active[cid]
        self._seen.pop(cid, None)

    def idle(self, now: int) -> list[tuple[CorrelationId, Slot]]:
        """Sequences idle for ``max_idle_ns``: each loses its slot (returned, to be released
        after the requests already queued there). A backlogged one is looked at again a
        period later (it has no slot to give back yet); an ID that ended is forgotten."""
        idle: list[tuple[CorrelationId, Slot]] = []
        limit = now - self._max_idle_ns
        seen = self._seen
        revisit = []
        while seen:
            cid, last = next(iter(seen.items()))
            if last > limit:
                break
            del seen[cid]
            slot = self._active.pop(cid, None)
            if slot is not None:
                idle.append((cid, slot))
            elif cid in self._backlogged:
                revisit.append(cid)
        for cid in revisit:
            seen[cid] = now
        return idle

    def expired(self, now: int) -> list[Backlog[R]]:
        """Backlogged sequences whose request timeout passed: removed, to be rejected."""
        if not self._next_expiry or self._next_expiry > now:
            return []
        gone = [b for b in self._backlog if b.expires_ns and b.expires_ns <= now]
        self._backlog = deque(
            b for b in self._backlog if not (b.expires_ns and b.expires_ns <= now)
        )
        self._next_expiry = min((b.expires_ns for b in self._backlog if b.expires_ns), default=0)
        for backlog in gone:
            if self._backlogged.get(backlog.cid) is backlog:
                del self._backlogged[backlog.cid]
                self._seen.pop(backlog.cid, None)
        return gone

    def wake_at(self) -> int | None:
        """When ``idle``/``expired`` may next have something to say."""
        times = [self._next_expiry] if self._next_expiry else []
        if self._seen:
            times.append(next(iter(self._seen.values())) + self._max_idle_ns)
        return min(times) if times else None

    def drain(self) -> list[R]:
        """Unloading: every backlogged request, removed."""
        requests = [r for b in self._backlog for r in b.requests]
        self._backlog.clear()
        self._backlogged.clear()
        return requests
