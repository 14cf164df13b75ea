"""The dynamic batcher's policy: pure, synchronous and clock-injected (times are integer ns
passed in by the caller), so it is unit-tested on a fake clock; ``dynamic.py`` drives it.

Triton's semantics (model_configuration.md, "Dynamic Batcher"):
- requests wait in one queue per priority level (1 is the highest; 0 means the default);
- a batch takes requests in priority order while the batch stays within ``max_batch_size``
  and their non-batch shapes match, compared only for the inputs with a variable dimension
  that do not set ``allow_ragged_batch`` (Triton's enforce_equal_shape_tensors); when the
  model has an optional input, only requests that give the same set of inputs batch together
  (Triton's RequiredEqualInputs);
- it goes out at once when it is full, when the next request cannot join it, or when its
  requests form a preferred batch size; otherwise it waits until the oldest request has
  waited ``max_queue_delay_microseconds``;
- queue policies: ``max_queue_size`` rejects on arrival ("Exceeds maximum queue size"); a
  timeout (``default_timeout_microseconds``, lowered per request when
  ``allow_timeout_override``) rejects with "Request timeout expired" (REJECT) or lets the
  request fall behind the others of its queue (DELAY).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..errors import unavailable
from ..types import Tensor


class Batchable(Protocol):
    """What the policy reads of a request: ``request.py:InferenceRequest`` in the server
    (the unit tests pass lighter ones)."""

    @property
    def inputs(self) -> Sequence[Tensor]: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def priority(self) -> int: ...


R = TypeVar("R", bound=Batchable)


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    timeout_ns: int = 0  # 0: none
    delay_on_timeout: bool = False  # DELAY instead of REJECT
    allow_override: bool = False
    max_size: int = 0  # 0: unbounded


# The event loop's timers wake in whole milliseconds (uvloop rounds a delay to the nearest
# one and runs a timer off a clock read once per loop turn; a delay under 0.5 ms becomes
# "next turn"), so a wait that ends within this much of now counts as ended when a timer
# fires: a batch leaves at most this early, which max_queue_delay_microseconds (a maximum)
# allows. Without it the driver re-armed a zero timer every loop turn until the deadline:
# a c1 request with a 300 us queue delay cost ~560 us of CPU spinning instead of ~150.
TIMER_SLACK_NS = 500_000


def timer_delay(when_ns: int, now_ns: int, slack_ns: int = TIMER_SLACK_NS) -> float | None:
    """Seconds for ``loop.call_later`` to wake at ``when_ns``, or None: the wait ends within
    the slack, so the driver looks again on the next loop turn (with the slack) instead of
    arming a timer the loop would fire at once, over and over."""
    remaining = when_ns - now_ns
    if remaining <= slack_ns:
        return None
    return remaining / 1e9


@dataclass(frozen=True, slots=True)
class BatchConfig:
    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_delay_ns: int = 0
    levels: int = 1
    default_level: int = 1
    policies: tuple[QueuePolicy, ...] = (QueuePolicy(),)  # one per level, index level - 1
    ragged: bool = False  # no input's shape needs to match
    preserve_ordering: bool = False
    # The inputs whose non-batch shapes must match within a batch (None: every input).
    equal_shape: frozenset[str] | None = None
    # The model has an optional input: a batch's requests must give the same inputs.
    optional_inputs: bool = False

    @classmethod
    def from_config(
        cls,
        config: Any,
        ragged: bool,
        equal_shape: frozenset[str] | None = None,
        optional_inputs: bool = False,
    ) -> BatchConfig:
        """From a normalised ModelConfig with ``dynamic_batching``."""
        db = config.dynamic_batching
        levels = max(db.priority_levels, 1)

        def policy(proto: Any) -> QueuePolicy:
            return QueuePolicy(
                timeout_ns=proto.default_timeout_microseconds * 1000,
                delay_on_timeout=proto.timeout_action == 1,
                allow_override=proto.allow_timeout_override,
                max_size=proto.max_queue_size,
            )

        default = policy(db.default_queue_policy)
        policies = tuple(
            policy(db.priority_queue_policy[level])
            if level in db.priority_queue_policy
            else default
            for level in range(1, levels + 1)
        )
        return cls(
            max_batch_size=config.max_batch_size,
            preferred=tuple(sorted(set(db.preferred_batch_size))),
            max_delay_ns=db.max_queue_delay_microseconds * 1000,
            levels=levels,
            default_level=min(max(db.default_priority_level, 1), levels)
            if db.priority_levels
            else 1,
            policies=policies,
            ragged=ragged,
            preserve_ordering=db.preserve_ordering,
            equal_shape=equal_shape,
            optional_inputs=optional_inputs,
        )


_ShapeKey = tuple[tuple[str, tuple[int, ...]], ...]


class _Entry(Generic[R]):
    __slots__ = ("request", "arrived", "deadline", "size", "shape")

    def __init__(self, request: R, arrived: int, deadline: int, size: int, shape: _ShapeKey):
        self.request = request
        self.arrived = arrived
        self.deadline = deadline  # 0: none
        self.size = size
        self.shape = shape


def _shape_key(request: Batchable, names: frozenset[str] | None) -> _ShapeKey:
    """Non-batch shapes of the inputs (of ``names`` only, unless None): requests batch
    together only when these match."""
    return tuple(
        (t.name, tuple(t.shape[1:])) for t in request.inputs if names is None or t.name in names
    )


def _batch_key(request: Batchable, config: BatchConfig) -> _ShapeKey:
    """What must be equal between the requests of a batch: the shapes ``_shape_key``
    compares and, for a model with optional inputs, which inputs the request gives."""
    if not config.optional_inputs:
        return () if config.ragged else _shape_key(request, config.equal_shape)
    names = config.equal_shape

    def compared(name: str) -> bool:
        return not config.ragged and (names is None or name in names)

    return tuple(
        sorted((t.name, tuple(t.shape[1:]) if compared(t.name) else ()) for t in request.inputs)
    )


class DynamicBatchPolicy(Generic[R]):
    """The queues of one dynamic batcher, of requests of type ``R``."""

    def __init__(self, config: BatchConfig) -> None:
        self.config = config
        self._queues: list[deque[_Entry[R]]] = [deque() for _ in range(config.levels)]
        # Whether a request can have a queue deadline at all (else expire has nothing to do).
        self._timed = any(p.timeout_ns or p.allow_override for p in config.policies)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues)

    def level_of(self, priority: int) -> int:
        """Triton: 0, or a priority outside 1..levels, means the default level."""
        config = self.config
        return priority if 1 <= priority <= config.levels else config.default_level

    def enqueue(self, request: R, now: int, timeout_us: int = 0) -> None:
        """Queue a request; raises UNAVAILABLE when its queue is full."""
        level = self.level_of(request.priority)
        policy = self.config.policies[level - 1]
        queue = self._queues[level - 1]
        if policy.max_size and len(queue) >= policy.max_size:
            raise unavailable("Exceeds maximum queue size")
        timeout = policy.timeout_ns
        if timeout_us and policy.allow_override:
            requested = timeout_us * 1000
            timeout = min(timeout, requested) if timeout else requested
        deadline = now + timeout if timeout else 0
        shape = _batch_key(request, self.config)
        queue.append(_Entry(request, now, deadline, request.batch_size, shape))

    def expire(self, now: int) -> list[R]:
        """Requests whose queue timeout passed: REJECT ones are returned (to be answered
        "Request timeout expired"); DELAY ones move behind the rest of their queue."""
        rejected: list[R] = []
        if not self._timed:
            return rejected
        for level, queue in enumerate(self._queues):
            if not any(e.deadline and e.deadline <= now for e in queue):
                continue
            keep: deque[_Entry[R]] = deque()
            late: list[_Entry[R]] = []
            for entry in queue:
                if entry.deadline and entry.deadline <= now:
                    if self.config.policies[level].delay_on_timeout:
                        entry.deadline = 0
                        late.append(entry)
                    else:
                        rejected.append(entry.request)
                else:
                    keep.append(entry)
            keep.extend(late)
            self._queues[level] = keep
        return rejected

    def take(self, now: int) -> list[R] | None:
        """The next batch to run now, or None if it should wait (see ``wake_at``). Triton's
        rule (dynamic_batch_scheduler.cc GetDynamicBatch): before the queue delay has passed,
        the largest preferred size the queue's head forms goes now, as does the head that
        fits the largest preferred size when the next request would pass it; else all the
        candidates go when they reach the largest preferred size, cannot grow (``blocked``),
        the delay has passed or there is no delay; otherwise the batch waits."""
        candidates, blocked = self._candidates()
        if not candidates:
            return None
        config = self.config
        most = max(config.preferred, default=config.max_batch_size)
        running, best = 0, 0
        for index, entry in enumerate(candidates):
            if index and not best and running + entry.size > most:
                best = index  # the head within the largest preferred size
            running += entry.size
            if running in config.preferred:
                best = index + 1
        delay = config.max_delay_ns
        waited = delay > 0 and now - min(e.arrived for e in candidates) >= delay
        if best and not waited:
            return self._pop(candidates[:best])
        if running >= most or blocked or waited or not delay:
            return self._pop(candidates)
        return None

    def wake_at(self) -> int | None:
        """When ``take``/``expire`` may have something new to say, if nothing arrives."""
        times = [e.deadline for q in self._queues for e in q if e.deadline] if self._timed else []
        candidates, _ = self._candidates()
        if candidates:
            times.append(min(e.arrived for e in candidates) + self.config.max_delay_ns)
        return min(times) if times else None

    def _candidates(self) -> tuple[list[_Entry[R]], bool]:
        """Requests that can form the next batch, in priority then arrival order, and
        whether a waiting request could not join it (so waiting would not help)."""
        batch: list[_Entry[R]] = []
        total = 0
        limit = self.config.max_batch_size
        for queue in self._queues:
            for entry in queue:
                if total + entry.size > limit or (batch and entry.shape != batch[0].shape):
                    return batch, True
                batch.append(entry)
                total += entry.size
        return batch, False

    def _pop(self, entries: list[_Entry[R]]) -> list[R]:
        """Take ``entries`` off the queues. ``_candidates`` walks the queues from their fronts
        (every queue it passes whole, then the front of the one it stops in) and a batch is a
        prefix of what it found, so they come off the fronts, in order."""
        count, wanted = 0, len(entries)
        for queue in self._queues:
            while count < wanted and queue and queue[0] is entries[count]:
                queue.popleft()
                count += 1
        assert count == wanted, "a batch is taken from the fronts of the queues"
        return [e.request for e in entries]
