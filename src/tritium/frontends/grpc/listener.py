"""The gRPC listening socket: one ``GrpcConnection`` per client, TLS when asked, accepted by
the front-ends' one accept policy (``frontends/accept.py``: out of descriptors, accepting
pauses and the connections idle longest, of every listener, are closed), and the graceful
stop (GOAWAY to every connection, in-flight calls complete, then close)."""

from __future__ import annotations

import asyncio
import socket
import ssl

from ...access.policy import AccessControl
from ...options import ServerOptions
from ...server import InferenceServer
from ..accept import Acceptor, Connections
from ..sockets import Endpoint, bind, bound_port
from .bounds import ConnectionLimits
from .connection import GrpcConnection, GrpcProtocol
from .dispatch import Dispatcher
from .guard import RpcGuard
from .service import method_table

DEFAULT_MAX_STREAMS = 1024  # --grpc-max-concurrent-streams 0: tritium's bound per connection


class GrpcListener:
    """``pool``: the server's live connections of every listener (a new one by default)."""

    def __init__(
        self,
        server: InferenceServer,
        access: AccessControl | None,
        pool: Connections | None = None,
    ) -> None:
        options = server.options
        self.options: ServerOptions = options
        self.max_receive = options.http.max_input_size
        self.max_send = options.grpc.max_send_message_size
        self.max_streams = options.grpc.max_concurrent_streams or DEFAULT_MAX_STREAMS
        self.limits = ConnectionLimits.from_options(options)
        self.pool = pool if pool is not None else Connections(options.connection_memory_bytes)
        guard = RpcGuard(access) if access is not None and access.guards_grpc else None
        self.dispatch = Dispatcher(method_table(server), options, guard)
        self.connections: set[GrpcConnection] = set()
        self._acceptor: Acceptor | None = None
        self._idle: asyncio.Event | None = None

    async def listen(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        """Binds and serves; the bound port. Raises OSError (``BindError``)."""
        endpoint = Endpoint("GRPC", "--grpc-address", "--grpc-port", host, port)
        return await self.serve(await bind(endpoint, self.options.grpc.reuse_port), tls)

    async def serve(self, socks: list[socket.socket], tls: ssl.SSLContext | None) -> int:
        """Start accepting on sockets already listening (``frontends/sockets.py:bind``); the
        port. The TLS handshake counts in the preface time."""
        self._acceptor = Acceptor(
            socks,
            lambda: GrpcProtocol(self),
            self.pool,
            "gRPC",
            tls,
            self.limits.preface_timeout,
        )
        self._acceptor.start()
        return bound_port(socks)

    def connection_closed(self) -> None:
        if self._idle is not None and not self.connections:
            self._idle.set()

    def drain(self) -> None:
        """Stop accepting, and GOAWAY to every client: calls in flight go on."""
        if self._acceptor is not None:
            self._acceptor.close()
        for conn in list(self.connections):
            conn.drain(None)

    async def close(self, grace: float) -> None:
        """After ``drain``: wait up to ``grace`` seconds for the calls, then close the rest."""
        self.drain()
        if self.connections:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), grace)
            except TimeoutError:
                pass
        for conn in list(self.connections):
            conn.abort()
