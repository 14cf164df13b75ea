"""Listening sockets of the HTTP front-end (and the metrics endpoint): plain or TLS, with an
accept loop of our own so that running out of file descriptors never stops the service.

When ``accept()`` fails with EMFILE/ENFILE (or ENOBUFS/ENOMEM) the listener stops accepting
for a moment and tries again, as asyncio's own server does; waiting clients stay in the
kernel's backlog. Out of descriptors, it also closes the connections that have been idle
longest (between requests, or never sent one), so that clients holding sockets open cannot
lock everyone else out until their keep-alive timeout. uvloop's server
instead drops them (libuv's reserve-fd trick) and, should that trick fail, closes the
listening socket for good without a word."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from typing import Any

from ...options import ServerOptions
from ..sockets import Endpoint, bind
from .limits import HttpLimits
from .protocol import HttpProtocol, render_internal

log = logging.getLogger("tritium")

RETRY_SECS = 0.1  # how long accepting pauses when the process is out of descriptors
SHED_FRACTION = 8  # out of descriptors: close 1/8 of the idle connections (at least 16)
_SHED_MIN = 16
_BATCH = 64  # connections accepted per wake-up, so one listener cannot starve the loop


def https_context(options: ServerOptions) -> ssl.SSLContext | None:
    """The TLS context of ``--http-ssl-cert``/``--http-ssl-key``; None serves plain HTTP.

    Raises OSError (ssl.SSLError is one) when the files cannot be read or do not match."""
    if not options.http.ssl_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(options.http.ssl_cert, options.http.ssl_key or None)
    return context


class HttpListener:
    """Listening sockets (one per address family) and their accept loop."""

    def __init__(
        self, socks: list[socket.socket], app: Any, limits: HttpLimits, tls: ssl.SSLContext | None
    ) -> None:
        self.sockets = socks
        self._app = app
        self._render = getattr(app, "render_error", render_internal)
        self._limits = limits
        self._tls = tls
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Task[Any]] = set()  # TLS handshakes under way
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self.accept_failures = 0  # times accept() failed (EMFILE and the like)
        self.connections: set[HttpProtocol] = set()  # live ones (each removes itself)
        self.shed = 0  # idle connections closed to free descriptors

    def start(self) -> None:
        self._retry = None
        if not self._closed:
            for sock in self.sockets:
                self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _stop_reading(self) -> None:
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())

    def close(self) -> None:
        """Stop accepting; connections already open go on until they end."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self._stop_reading()
        for sock in self.sockets:
            sock.close()
        for task in self._pending:
            task.cancel()

    def _protocol(self) -> HttpProtocol:
        protocol = HttpProtocol(self._app, self._limits, self._render)
        protocol.registry = self.connections
        return protocol

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of descriptors or memory, or a socket gone bad
                self._pause(exc)
                return
            conn.setblocking(False)
            self._connect(conn)

    def _pause(self, exc: OSError) -> None:
        self.accept_failures += 1
        if self.accept_failures == 1 or self.accept_failures % 100 == 0:
            log.warning(
                "HTTP accept failed (%s); accepting again shortly (%d times so far)",
                exc.strerror,
                self.accept_failures,
            )
        self._stop_reading()
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            self._shed_idle()
        if self._retry is None:
            self._retry = self._loop.call_later(RETRY_SECS, self.start)

    def _shed_idle(self) -> None:
        """Close the connections idle longest, so the clients waiting to connect get their
        descriptors (each closes on the loop's next turn, before accepting resumes)."""
        idle = [(d, p) for p in self.connections if (d := p.idle_deadline()) is not None]
        if not idle:
            return
        idle.sort(key=lambda pair: pair[0])
        count = min(len(idle), max(_SHED_MIN, len(idle) // SHED_FRACTION))
        for _, protocol in idle[:count]:
            protocol.shed()
        self.shed += count
        log.warning("out of file descriptors: closed %d idle HTTP connections", count)

    def _connect(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handshake = self._limits.header_timeout if self._tls is not None else None
        task = self._loop.create_task(
            self._loop.connect_accepted_socket(
                self._protocol, conn, ssl=self._tls, ssl_handshake_timeout=handshake
            )
        )
        self._pending.add(task)
        task.add_done_callback(lambda t: self._settled(t, conn))

    def _settled(self, task: asyncio.Task[Any], conn: socket.socket) -> None:
        self._pending.discard(task)
        if task.cancelled() or task.exception() is not None:
            conn.close()  # a failed TLS handshake, or the listener closed meanwhile


async def listen_http(
    app: Any,
    where: tuple[str, int],
    limits: HttpLimits,
    tls: ssl.SSLContext | None = None,
    reuse_port: bool = False,
) -> HttpListener:
    """Serve ``app`` (a handler, with an optional ``render_error``) on ``where``: every
    address it resolves to, as ``loop.create_server`` does. ``reuse_port``: SO_REUSEPORT, so
    several servers share the port (--reuse-http-port). Raises OSError (``BindError``)."""
    endpoint = Endpoint("HTTP", "--http-address", "--http-port", *where)
    return serve_http(await bind(endpoint, reuse_port), app, limits, tls)


def serve_http(
    socks: list[socket.socket], app: Any, limits: HttpLimits, tls: ssl.SSLContext | None = None
) -> HttpListener:
    """Start accepting on sockets already listening (``frontends/sockets.py:bind``)."""
    listener = HttpListener(socks, app, limits, tls)
    listener.start()
    return listener
