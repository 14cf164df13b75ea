"""One accept policy for every listening socket of the front-ends (HTTP, metrics, gRPC), so
that running out of file descriptors never stops the service.

- Each listener accepts in a loop of its own (``Acceptor``), at most ``BATCH`` connections a
  wake-up so that one listener cannot starve the event loop. When ``accept()`` fails
  (EMFILE/ENFILE, ENOBUFS/ENOMEM, a socket gone bad) the listener stops accepting for
  ``RETRY_SECS`` and tries again, as asyncio's own server does: waiting clients stay in the
  kernel's backlog. uvloop's server instead drops them (libuv's reserve-fd trick) and, should
  that trick fail, closes the listening socket for good without a word.
- Out of descriptors (EMFILE/ENFILE) the listener also closes the connections idle longest
  among those of **every** listener (``Connections``, one for the whole server): HTTP
  connections between requests, gRPC connections with no open stream or that never sent
  their preface, TLS handshakes under way. Clients holding sockets open on one port can lock
  nobody out of either port until their timeouts.
- A TLS handshake is bounded in time (``handshake_timeout``).

- With ``--workers N`` sharing a listening socket, a ``Balance`` (``workers/balance.py``)
  spreads the connections: a worker woken for a connection while another holds fewer leaves
  it to that one for ``Balance.delay``, then takes it if it is still waiting.

A connection takes part by being added to the ``Connections`` and answering ``idle_since``
(the loop time it became idle; None while it is busy) and ``shed`` (close now). The
sockets themselves are bound by ``frontends/sockets.py``, before the models load.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from .memory import DEFAULT_BUDGET, MemoryBudget

log = logging.getLogger("tritium")

RETRY_SECS = 0.1  # how long accepting pauses when the process is out of descriptors
SHED_FRACTION = 8  # out of descriptors: close 1/8 of the idle connections (at least 16)
SHED_MIN = 16
BATCH = 64  # connections accepted per wake-up
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class Idle(Protocol):
    """A connection the listeners may close when the process runs out of descriptors."""

    kind: str  # what the log calls it: "HTTP", "gRPC", ...

    def idle_since(self) -> float | None:
        """The loop time this connection became idle; None while it is busy."""
        ...

    def shed(self) -> None:
        """Close now, to give the descriptor to a new client."""
        ...


class Balance(Protocol):
    """How the workers sharing a listening socket spread its connections
    (``workers/balance.py:AcceptBalance``)."""

    delay: float  # seconds a worker leaves a connection to another that holds fewer

    def publish(self, count: int) -> None:
        """This process accepts and holds ``count`` connections."""
        ...

    def withdraw(self) -> None:
        """This process accepts no more."""
        ...

    def defer(self, count: int, resumed: bool = False) -> bool:
        """Whether another process holding fewer than ``count`` should take the next one;
        ``resumed``: this process deferred the last time, ``delay`` ago."""
        ...


class Connections:
    """The live connections of every listener of the server, and the bytes they may hold
    for their clients, all together (``memory``: ``--connection-memory-bytes``)."""

    def __init__(self, memory_bytes: int = DEFAULT_BUDGET) -> None:
        self._live: set[Idle] = set()
        self.memory = MemoryBudget(memory_bytes)
        self.shed = 0  # idle connections closed to free descriptors
        # connections a listener accepts per wake-up; 1 when several processes share the
        # listening sockets (--workers): each takes one, so a burst spreads over them
        self.accept_batch = BATCH
        self.balance: Balance | None = None  # several processes share the sockets
        self._opening = 0  # accepted, not yet added (connection_made still to come)

    def add(self, conn: Idle) -> None:
        self._live.add(conn)
        if self.balance is not None:
            self.balance.publish(self.held())

    def discard(self, conn: Idle) -> None:
        self._live.discard(conn)
        if self.balance is not None:
            self.balance.publish(self.held())

    def held(self) -> int:
        """The connections this process holds, those accepted and still opening included."""
        return len(self._live) + self._opening

    def opening(self, delta: int) -> None:
        self._opening += delta
        if self.balance is not None:
            self.balance.publish(self.held())

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Any:
        return iter(list(self._live))

    def shed_idle(self) -> int:
        """Close the connections idle longest (1/8 of the idle ones, at least 16), so that
        the clients waiting to connect get their descriptors (each closes on the loop's next
        turn, before accepting resumes). The number closed."""
        idle = [(since, c) for c in self._live if (since := c.idle_since()) is not None]
        if not idle:
            return 0
        idle.sort(key=lambda pair: pair[0])
        count = min(len(idle), max(SHED_MIN, len(idle) // SHED_FRACTION))
        kinds: Counter[str] = Counter()
        for _, conn in idle[:count]:
            kinds[conn.kind] += 1
            conn.shed()
        self.shed += count
        closed = ", ".join(f"{n} idle {kind} connections" for kind, n in sorted(kinds.items()))
        log.warning("out of file descriptors: closed %s", closed)
        return count


class _Handshake:
    """A TLS handshake under way: idle from the server's side until it completes."""

    __slots__ = ("task", "since", "kind")

    def __init__(self, task: asyncio.Task[Any], since: float, label: str) -> None:
        self.task = task
        self.since = since
        self.kind = f"{label} TLS handshake"

    def idle_since(self) -> float | None:
        return self.since

    def shed(self) -> None:
        self.task.cancel()


class Acceptor:
    """Listening sockets (one per address family) and their accept loop: each accepted
    socket becomes a ``factory()`` protocol, over TLS when ``tls`` is set."""

    def __init__(
        self,
        socks: list[socket.socket],
        factory: Callable[[], asyncio.BaseProtocol],
        connections: Connections,
        label: str,
        tls: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.sockets = socks
        self.connections = connections
        self.label = label
        self._factory = factory
        self._tls = tls
        self._handshake_timeout = handshake_timeout if tls is not None else None
        self._loop = asyncio.get_running_loop()
        self._pending: dict[asyncio.Task[Any], _Handshake | None] = {}
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._deferred = False  # left a connection to a worker holding fewer: take it next
        self.accept_failures = 0  # times accept() failed (EMFILE and the like)

    def start(self) -> None:
        self._retry = None
        if not self._closed:
            for sock in self.sockets:
                self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _resume(self) -> None:
        """After a deferral: look again (``Balance.defer``, resumed)."""
        self._deferred = True
        self.start()

    def _stop_reading(self) -> None:
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())

    def close(self) -> None:
        """Stop accepting; connections already open go on until they end."""
        if self._closed:
            return
        self._closed = True
        if self.connections.balance is not None:  # the other workers take the new ones
            self.connections.balance.withdraw()
            self.connections.balance = None
        if self._retry is not None:
            self._retry.cancel()
        self._stop_reading()
        for sock in self.sockets:
            sock.close()
        for task in list(self._pending):
            task.cancel()

    def _accept(self, sock: socket.socket) -> None:
        balance = self.connections.balance
        if balance is not None:
            resumed, self._deferred = self._deferred, False
            if balance.defer(self.connections.held(), resumed):
                self._stop_reading()  # another worker holding fewer takes it meanwhile
                self._retry = self._loop.call_later(balance.delay, self._resume)
                return
        for _ in range(self.connections.accept_batch):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of descriptors or memory, or a socket gone bad
                self._pause(exc)
                return
            conn.setblocking(False)
            self._open(conn)

    def _pause(self, exc: OSError) -> None:
        self.accept_failures += 1
        if self.accept_failures == 1 or self.accept_failures % 100 == 0:
            log.warning(
                "%s accept failed (%s); accepting again shortly (%d times so far)",
                self.label,
                exc.strerror,
                self.accept_failures,
            )
        self._stop_reading()
        if exc.errno in _OUT_OF_DESCRIPTORS:
            self.connections.shed_idle()
        if self._retry is None:
            self._retry = self._loop.call_later(RETRY_SECS, self.start)

    def _open(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = self._loop.create_task(
            self._loop.connect_accepted_socket(
                self._factory,
                conn,
                ssl=self._tls,
                ssl_handshake_timeout=self._handshake_timeout,
            )
        )
        entry = None
        if self._tls is not None:
            entry = _Handshake(task, self._loop.time(), self.label)
            self.connections.add(entry)
        self._pending[task] = entry
        self.connections.opening(1)
        task.add_done_callback(lambda t: self._settled(t, conn))

    def _settled(self, task: asyncio.Task[Any], conn: socket.socket) -> None:
        entry = self._pending.pop(task, None)
        self.connections.opening(-1)
        if entry is not None:
            self.connections.discard(entry)
        if task.cancelled() or task.exception() is not None:
            conn.close()  # a failed or shed TLS handshake, or the listener closed meanwhile
