"""Counters every worker of ``--workers N`` sees: a table in shared memory (a ``memfd`` the
supervisor makes and every worker inherits; nothing in the file system, so nothing is left
behind however the server dies).

A row is a 64-bit key and one count per worker (``int64``): each worker writes only its own
column, so a worker that dies is forgotten by zeroing its column (``clear``, the supervisor,
before it starts the worker again) and a count is given back without any lock (one store).
Taking is check-then-add over the whole row (the other workers' counts included), done
under a POSIX record lock (``lockf``) on the rows looked at: exact across processes, and
released by the kernel if the holder dies. The lock is held for a few microseconds of
Python; a worker waiting for it blocks its event loop that long.

A key's row is found by open addressing in a window of ``WINDOW`` rows from ``key % rows``:
the row holding the key, else the first row whose counts are all zero (claimed for the
key); none (every row of the window held by other keys at that moment): the caller decides
(the client bound fails open to the worker's own count, client_limit.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager

WINDOW = 32
_CELL = 8  # bytes of one int64


def key_of(text: str, secret: bytes = b"") -> int:
    """A nonzero signed 64-bit key for a string (the same in every worker). ``secret``: the
    hash's key (the supervisor's, random per server) where the strings are a client's to
    choose: without it, anyone can find offline strings that share a window."""
    data = text.encode("utf-8", "surrogateescape")
    digest = hashlib.blake2b(data, digest_size=8, key=secret).digest()
    return int.from_bytes(digest, "big", signed=True) or 1


def create(name: str, rows: int, workers: int) -> int:
    """The supervisor's side: a zeroed table's descriptor (inheritable: pass it on)."""
    fd = os.memfd_create(f"tritium-{name}", 0)
    os.ftruncate(fd, _size(rows, workers))
    os.set_inheritable(fd, True)
    return fd


def create_lock() -> int:
    """An empty memfd whose bytes the workers lock with ``lockf`` (one per purpose)."""
    fd = os.memfd_create("tritium-locks", 0)
    os.set_inheritable(fd, True)
    return fd


def _size(rows: int, workers: int) -> int:
    return (rows + WINDOW) * (workers + 1) * _CELL


class SharedCounters:
    """One process's view of a table; ``index``: the column this process writes (-1: the
    supervisor, which only clears columns)."""

    def __init__(self, fd: int, rows: int, workers: int, index: int) -> None:
        self._fd = fd
        self._rows = rows
        self._stride = workers + 1
        self._index = index
        self._map = mmap.mmap(fd, _size(rows, workers))
        self._cells = memoryview(self._map).cast("q")

    @property
    def fd(self) -> int:
        return self._fd

    def home(self, key: int) -> int:
        """The first row of ``key``'s window."""
        return key % self._rows

    @contextmanager
    def locked(self, first: int = 0, count: int = 0) -> Iterator[None]:
        """Rows ``first`` .. ``first + count - 1`` (count 0: the whole table) under the
        table's record lock, across every worker."""
        start = first * self._stride * _CELL
        length = count * self._stride * _CELL
        fcntl.lockf(self._fd, fcntl.LOCK_EX, length, start)
        try:
            yield
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, length, start)

    def find(self, key: int, claim: bool = True, reuse: bool = True) -> int:
        """``key``'s row in its window, claimed if it had none (hold the window's lock);
        -1 when every row of the window is held by other keys (or, ``claim`` False, when
        the key has no row). ``reuse`` False: a row is never taken from another key, even
        one whose counts are all zero (its rows stay the key's: a fixed set of keys)."""
        cells, stride = self._cells, self._stride
        free = -1
        for row in range(self.home(key), self.home(key) + WINDOW):
            base = row * stride
            if cells[base] == key:
                return row
            idle = cells[base] == 0 if not reuse else not any(cells[base + 1 : base + stride])
            if free < 0 and idle:
                free = row
        if free >= 0 and claim:
            cells[free * stride] = key
            return free
        return -1

    def total(self, row: int) -> int:
        """Every worker's count in ``row``."""
        base = row * self._stride
        return sum(self._cells[base + 1 : base + self._stride])

    def add(self, row: int, delta: int) -> None:
        """Change this process's own count in ``row`` (a single writer: no lock needed to
        give back; take under ``locked`` after checking ``total``)."""
        self._cells[row * self._stride + 1 + self._index] += delta

    def set(self, row: int, value: int) -> None:
        """This process's own count in ``row``, set."""
        self._cells[row * self._stride + 1 + self._index] = value

    def values(self, row: int) -> list[int]:
        """Every worker's count in ``row``, by worker."""
        base = row * self._stride
        return list(self._cells[base + 1 : base + self._stride])

    @property
    def index(self) -> int:
        return self._index

    def clear(self, worker: int) -> None:
        """Forget every count of ``worker`` (it exited: its requests are gone)."""
        cells, stride = self._cells, self._stride
        for base in range(1 + worker, len(cells), stride):
            if cells[base]:
                cells[base] = 0

    def close(self) -> None:
        self._cells.release()
        self._map.close()
        os.close(self._fd)
