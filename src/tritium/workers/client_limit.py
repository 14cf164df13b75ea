"""``--max-inflight-per-client`` for the whole server: one count per client host across
every worker (``shared.py``'s table, keyed by the host's hash), so a client whose
connections land on different workers is bounded once.

Per request: taking a slot hashes the host (blake2b, 8 bytes, keyed with the supervisor's
random secret: which hosts share a window cannot be worked out from outside), locks the key's
window of the table (two ``fcntl`` calls) and reads its row (each worker's count); giving it
back is one store in this worker's column, no lock. A few microseconds next to the ~100 µs an
inference costs. Exact while the client has a row: a slot is never granted past the bound,
whichever worker asks. The table has a row per connection the workers can hold (``rows``,
from the descriptor limit), so a full window is rare; when it happens the client is not
refused for it (another client's load is no reason) but bounded by this worker's own count.
"""

from __future__ import annotations

import resource

from ..access.policy import ClientLimiter
from .shared import WINDOW, SharedCounters, key_of

ROWS = 8192  # the fewest rows: client hosts with requests in flight at once, with room
MAX_ROWS = 1 << 18  # the most (a worker that exits is cleared row by row, by the supervisor)


def rows(workers: int) -> int:
    """The table's rows: one per descriptor the workers may hold (each connection is one,
    so each client host with a request in flight holds at least one), within the bounds."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_ROWS
    return max(ROWS, min(MAX_ROWS, soft * workers))


class SharedClientLimiter(ClientLimiter):
    """``ClientLimiter`` whose counts are the whole server's (the local dict mirrors this
    worker's own column, and remembers each held client's row); ``secret``: the table's
    hash key, the same in every worker."""

    def __init__(self, limit: int, table: SharedCounters, secret: bytes = b"") -> None:
        super().__init__(limit)
        self._table = table
        self._secret = secret
        self._rows: dict[str, int] = {}
        # requests taken while the client's window was full: counted here only
        self._loose: dict[str, int] = {}

    def acquire(self, client: str) -> bool:
        table = self._table
        key = key_of(client, self._secret)
        with table.locked(table.home(key), WINDOW):
            row = self._rows.get(client)
            if row is None:
                row = table.find(key)
            if row >= 0:
                if table.total(row) >= self.limit:
                    return False
                table.add(row, 1)
        if row >= 0:
            self._rows[client] = row
        elif self._counts.get(client, 0) < self.limit:  # fail open to this worker's count
            self._loose[client] = self._loose.get(client, 0) + 1
        else:
            return False
        self._counts[client] = self._counts.get(client, 0) + 1
        return True

    def release(self, client: str) -> None:
        loose = self._loose.get(client, 0)
        if loose:
            if loose > 1:
                self._loose[client] = loose - 1
            else:
                del self._loose[client]
            super().release(client)
            return
        row = self._rows.get(client)
        if row is None:
            return
        self._table.add(row, -1)
        super().release(client)
        if self._counts.get(client, 0) <= self._loose.get(client, 0):  # none in the row
            del self._rows[client]

    def in_flight(self, client: str) -> int:
        """The whole server's count for ``client`` (with this worker's loose ones)."""
        loose = self._loose.get(client, 0)
        row = self._rows.get(client)
        if row is None:
            key = key_of(client, self._secret)
            with self._table.locked(self._table.home(key), WINDOW):
                row = self._table.find(key, claim=False)
            if row < 0:
                return loose
        return self._table.total(row) + loose
