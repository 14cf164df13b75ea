"""``--worker-sockets shared``: the workers spread the connections of one accept queue by
their counts (``frontends/accept.py:Balance``).

Every worker sleeps in ``epoll`` on the same listening socket, and the kernel wakes them
all for a new connection: the first to run takes it. A burst of connections (a client
opening its pool) then mostly lands on whichever worker was running at that moment (on 2
cores, with the client on the other, 13 or all 16 of h2load's 16 on one worker), and
long-lived connections stay where they landed. Here each worker publishes how many
connections it holds in a shared table (one row, a column per worker, written only by its
worker: one store per connection opened or closed, no lock), and a worker woken for a
connection while another accepting worker holds fewer leaves it to that one: it stops
watching the socket for ``DEFER_S``, then looks again: if no other worker's count moved
meanwhile (busy, stuck or gone), it takes the connection itself; if one did (it is taking a
burst), it leaves it again while the counts are uneven. So the spread holds through a
burst, a connection waits at most ``DEFER_S`` longer for a worker that takes none, and
nothing depends on another worker being alive.

A column holds the count + 1 while its worker accepts, 0 otherwise (starting, draining,
exited: the supervisor zeroes an exited worker's column), so only accepting workers count.
"""

from __future__ import annotations

from .shared import SharedCounters

ROWS = 1
DEFER_S = 0.025  # how long a worker with more connections leaves a new one to the others


class AcceptBalance:
    """This worker's view of the connection counts (``frontends/accept.py:Balance``)."""

    delay = DEFER_S

    def __init__(self, table: SharedCounters) -> None:
        self._table = table
        self._index = table.index
        self._seen: list[int] = []  # the others' counts when this worker last deferred

    def publish(self, count: int) -> None:
        """This worker accepts and holds ``count`` connections."""
        self._table.set(0, count + 1)

    def withdraw(self) -> None:
        """This worker accepts no more (draining)."""
        self._table.set(0, 0)

    def defer(self, count: int, resumed: bool = False) -> bool:
        """Whether to leave the next connection to another accepting worker, which holds
        fewer than ``count``. ``resumed``: this worker deferred last time, ``delay`` ago; it
        defers again only if another worker's count moved since (it is accepting)."""
        values = self._table.values(0)
        others = values[: self._index] + values[self._index + 1 :]
        if not any(0 < value <= count for value in others):
            return False
        if resumed and others == self._seen:
            return False  # none took anything meanwhile: this worker takes it
        self._seen = others
        return True
