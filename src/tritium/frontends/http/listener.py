"""Listening sockets of the HTTP front-end (and the metrics endpoint): plain or TLS, accepted
by the front-ends' one accept policy (``frontends/accept.py``): out of descriptors, accepting
pauses and the connections idle longest, of every listener, are closed."""

from __future__ import annotations

import socket
import ssl
import weakref
from typing import Any

from ...options import ServerOptions
from ..accept import Acceptor, Connections
from ..sockets import Endpoint, bind
from .limits import HttpLimits
from .protocol import HttpProtocol, render_internal


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
    """Listening sockets (one per address family) and their accept loop. ``connections``:
    the server's live connections of every listener (a new set of its own by default);
    ``service``: what the shutdown calls it (Triton's "HTTP service connections")."""

    def __init__(
        self,
        socks: list[socket.socket],
        app: Any,
        limits: HttpLimits,
        tls: ssl.SSLContext | None,
        connections: Connections | None = None,
        service: str = "HTTP",
    ) -> None:
        self.service = service
        self._made: weakref.WeakSet[HttpProtocol] = weakref.WeakSet()
        self._app = app
        self._render = getattr(app, "render_error", render_internal)
        self._limits = limits
        self.connections = connections if connections is not None else Connections()
        # a TLS handshake is bounded as the request headers are
        self._acceptor = Acceptor(
            socks, self._protocol, self.connections, "HTTP", tls, limits.header_timeout
        )
        self.sockets = socks

    @property
    def accept_failures(self) -> int:
        return self._acceptor.accept_failures

    def start(self) -> None:
        self._acceptor.start()

    def close(self) -> None:
        """Stop accepting; connections already open go on until they end."""
        self._acceptor.close()

    def open_connections(self) -> int:
        """This listener's connections still open (a connection leaves the server's set of
        live connections when it closes)."""
        return sum(1 for p in self._made if p.conn is not None and p.conn.registry is not None)

    def close_idle(self, before: float) -> None:
        """Close the connections waiting for a request since before ``before`` (loop time)."""
        for protocol in list(self._made):
            conn = protocol.conn
            if conn is not None and (since := conn.idle_since()) is not None and since < before:
                conn.shed()

    def close_connections(self, idle_only: bool = False) -> None:
        """Close this listener's connections (``idle_only``: those waiting for a request;
        a busy one is closed once its answer is written)."""
        for protocol in list(self._made):
            conn = protocol.conn
            if conn is not None and (not idle_only or conn.idle_since() is not None):
                conn.shed()

    def _protocol(self) -> HttpProtocol:
        protocol = HttpProtocol(self._app, self._limits, self._render)
        protocol.registry = self.connections
        self._made.add(protocol)
        return protocol


async def listen_http(
    app: Any,
    where: tuple[str, int],
    limits: HttpLimits,
    tls: ssl.SSLContext | None = None,
    reuse_port: bool = False,
    connections: Connections | None = None,
) -> HttpListener:
    """Serve ``app`` (a handler, with an optional ``render_error``) on ``where``: every
    address it resolves to, as ``loop.create_server`` does. ``reuse_port``: SO_REUSEPORT, so
    several servers share the port (--reuse-http-port). Raises OSError (``BindError``)."""
    endpoint = Endpoint("HTTP", "--http-address", "--http-port", *where)
    return serve_http(await bind(endpoint, reuse_port), app, limits, tls, connections)


def serve_http(
    socks: list[socket.socket],
    app: Any,
    limits: HttpLimits,
    tls: ssl.SSLContext | None = None,
    connections: Connections | None = None,
    service: str = "HTTP",
) -> HttpListener:
    """Start accepting on sockets already listening (``frontends/sockets.py:bind``);
    ``connections``: the server's live connections of every listener."""
    listener = HttpListener(socks, app, limits, tls, connections, service)
    listener.start()
    return listener
