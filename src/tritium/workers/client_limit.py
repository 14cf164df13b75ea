"""``--max-inflight-per-client`` for the whole server: one count per client host across
every worker (``shared.py``'s table, keyed by the host's hash), so a client whose
connections land on different workers is bounded once.

Per request: taking a slot hashes the host (blake2b, 8 bytes), locks the key's window of the
table (two ``fcntl`` calls) and reads its row (each worker's count); giving it back is one
store in this worker's column, no lock. A few microseconds next to the ~100 µs an inference
costs. Kept exact: a slot is never granted past the bound, whichever worker asks.
"""

from __future__ import annotations

from ..access.policy import ClientLimiter
from .shared import WINDOW, SharedCounters, key_of

ROWS = 8192  # client hosts with requests in flight at once, with room to spare


class SharedClientLimiter(ClientLimiter):
    """``ClientLimiter`` whose counts are the whole server's (the local dict mirrors this
    worker's own column, and remembers each held client's row)."""

    def __init__(self, limit: int, table: SharedCounters) -> None:
        super().__init__(limit)
        self._table = table
        self._rows: dict[str, int] = {}

    def acquire(self, client: str) -> bool:
        table = self._table
        key = key_of(client)
        home = table.home(key)
        with table.locked(home, WINDOW):
            row = self._rows.get(client)
            if row is None:
                row = table.find(key)
                if row < 0:  # every row of the window is another client's right now
                    return False
            if table.total(row) >= self.limit:
                return False
            table.add(row, 1)
        self._rows[client] = row
        self._counts[client] = self._counts.get(client, 0) + 1
        return True

    def release(self, client: str) -> None:
        row = self._rows.get(client)
        if row is None:
            return
        self._table.add(row, -1)
        super().release(client)
        if client not in self._counts:
            del self._rows[client]

    def in_flight(self, client: str) -> int:
        """The whole server's count for ``client``."""
        row = self._rows.get(client)
        if row is None:
            key = key_of(client)
            with self._table.locked(self._table.home(key), WINDOW):
                row = self._table.find(key, claim=False)
            if row < 0:
                return 0
        return self._table.total(row)
