"""``--rate-limit=execution_count`` for the whole server: the rate limiter's resources are
counted over every worker's instances, as Triton counts them over all the instances of its
one process (per device; a CPU instance's device is 0, and every worker's instances are CPU
instances of the same machine).

Each worker keeps its own policy (``scheduling/rate_policy.py``: its instances, what each
needs, their order), with two things shared in ``shared.py``'s table (a memfd, every worker's
column):

- what is taken: a row per (device, resource) whose columns are each worker's holdings;
  an instance fits when the row's total plus its need stays within the count;
- who waits first: each worker publishes its first waiting instance's order (executions ×
  priority, then its arrival time on the machine's monotonic clock); a worker allocates its
  own first waiter only if no other worker's waits before it, so the order is the whole
  server's (and a first waiter that does not fit blocks the others everywhere, as in Triton).

Every policy step runs under the table's lock. A worker learns that another worker gave
resources back by looking again every ``RETRY_S`` while it has waiters (no wake-up crosses
processes): a waiter whose resources were freed in another worker starts up to that much
later; one freed in its own worker starts at once. Per execution: two lock round trips
(take, give back), a row read per resource; with waiters, a look every ``RETRY_S``.
A worker that exits is forgotten by the supervisor clearing its column (its executions
ended with it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Iterable

from ..errors import unavailable
from ..scheduling.rate_limiter import RateLimiter
from ..scheduling.rate_policy import (
    Counts,
    InstanceLimits,
    RateLimitPolicy,
    ResourcePool,
    explicit_counts,
)
from .shared import SharedCounters, key_of

ROWS = 1024  # distinct (device, resource) pairs, and the two rows of the waiters' order
RETRY_S = 0.001
_SCORE, _ARRIVAL = "waiting/score", "waiting/arrival"


class SharedPool(ResourcePool):
    """``ResourcePool`` whose taken counts are the whole server's."""

    def __init__(self, explicit: Counts, table: SharedCounters) -> None:
        super().__init__(explicit)
        self._table = table
        self._rows: dict[str, int] = {}

    def row(self, name: str) -> int:
        """The table's row for a resource (or an order row); a row never changes key."""
        row = self._rows.get(name)
        if row is None:
            row = self._table.find(key_of(name), reuse=False)
            if row < 0:
                raise unavailable(f"rate limiter: no room for resource '{name}' in the table")
            self._rows[name] = row
        return row

    def fits(self, key: Hashable) -> bool:
        table = self._table
        for device, needs in self._needs.get(key, {}).items():
            limits = self._limits.get(device, {})
            for name, count in needs.items():
                if table.total(self.row(f"{device}/{name}")) + count > limits.get(name, 0):
                    return False
        return True

    def take(self, key: Hashable, sign: int = 1) -> None:
        super().take(key, sign)
        for device, needs in self._needs.get(key, {}).items():
            for name, count in needs.items():
                self._table.add(self.row(f"{device}/{name}"), sign * count)


class SharedPolicy(RateLimitPolicy):
    """``RateLimitPolicy`` over a ``SharedPool``, in the whole server's order; every step
    under the table's lock."""

    def __init__(self, pool: SharedPool, table: SharedCounters) -> None:
        super().__init__(pool)
        self._shared = pool
        self._table = table

    def register(self, key: Hashable, limits: InstanceLimits) -> None:
        with self._table.locked():
            super().register(key, limits)

    def unregister(self, key: Hashable) -> list[Hashable]:
        with self._table.locked():
            return super().unregister(key)

    def try_take(self, key: Hashable) -> bool:
        with self._table.locked():
            if self._first_elsewhere() is not None:  # another worker's waiter goes first
                return False
            return super().try_take(key)

    def stage(self, key: Hashable) -> list[Hashable]:
        with self._table.locked():
            self._staged[key] = time.monotonic_ns()  # comparable across the workers
            return self._allocate()

    def withdraw(self, key: Hashable) -> bool:
        with self._table.locked():
            found = super().withdraw(key)
            self._publish()
            return found

    def release(self, key: Hashable) -> list[Hashable]:
        with self._table.locked():
            return super().release(key)

    def retry(self) -> list[Hashable]:
        """Look again (another worker may have given resources back)."""
        with self._table.locked():
            return self._allocate()

    def _allocate(self) -> list[Hashable]:
        allocated = []
        while self._staged:
            key = min(self._staged, key=self._order)
            first = self._first_elsewhere()
            if first is not None and first < self._order(key):
                break
            if not self._pool.fits(key):
                break
            del self._staged[key]
            self._pool.take(key)
            allocated.append(key)
        self._publish()
        return allocated

    def _publish(self) -> None:
        """This worker's first waiter's order (arrival 0: none waits)."""
        score = arrival = 0
        if self._staged:
            score, arrival = self._order(min(self._staged, key=self._order))
        self._table.set(self._shared.row(_SCORE), score)
        self._table.set(self._shared.row(_ARRIVAL), arrival)

    def _first_elsewhere(self) -> tuple[int, int] | None:
        """The first of the other workers' first waiters, if any waits."""
        scores = self._table.values(self._shared.row(_SCORE))
        arrivals = self._table.values(self._shared.row(_ARRIVAL))
        me = self._table.index
        waiting = [
            (s, a) for i, (s, a) in enumerate(zip(scores, arrivals, strict=True)) if a and i != me
        ]
        return min(waiting, default=None)


class SharedRateLimiter(RateLimiter):
    """The driver: as ``RateLimiter``, and while this worker has waiters it looks again
    every ``RETRY_S`` for resources another worker gave back."""

    def __init__(self, resources: Iterable[tuple[str, int, int]], table: SharedCounters) -> None:
        super().__init__(())
        pool = SharedPool(explicit_counts(resources), table)
        self.policy = SharedPolicy(pool, table)
        self._retrying: asyncio.TimerHandle | None = None

    def grant(self, keys: Iterable[Hashable]) -> None:
        super().grant(keys)
        if self._retrying is None and self.policy.waiting():
            loop = asyncio.get_running_loop()
            self._retrying = loop.call_later(RETRY_S, self._retry)

    def _retry(self) -> None:
        self._retrying = None
        assert isinstance(self.policy, SharedPolicy)
        self.grant(self.policy.retry())
