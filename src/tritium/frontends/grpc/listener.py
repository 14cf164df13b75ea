"""The gRPC listening socket: one ``GrpcConnection`` per client, TLS when asked, and the
graceful stop (GOAWAY to every connection, in-flight calls complete, then close)."""

from __future__ import annotations

import asyncio
import socket
import ssl

from ...access import AccessControl
from ...options import ServerOptions
from ...server import InferenceServer
from .connection import GrpcConnection
from .dispatch import Dispatcher
from .guard import RpcGuard
from .service import method_table

DEFAULT_MAX_STREAMS = 1024  # --grpc-max-concurrent-streams 0: tritium's bound per connection


class GrpcListener:
    def __init__(self, server: InferenceServer, access: AccessControl | None) -> None:
        options = server.options
        self.options: ServerOptions = options
        self.max_receive = options.http_max_input_size
        self.max_send = options.grpc_max_send_message_size
        self.max_streams = options.grpc_max_concurrent_streams or DEFAULT_MAX_STREAMS
        guard = RpcGuard(access) if access is not None and access.guards_grpc else None
        self.dispatch = Dispatcher(method_table(server), options, guard)
        self.connections: set[GrpcConnection] = set()
        self._server: asyncio.Server | None = None
        self._idle: asyncio.Event | None = None

    async def listen(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        """Binds and serves; the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: GrpcConnection(self),
            host=host or None,
            port=port,
            ssl=tls,
            reuse_address=True,
            reuse_port=self.options.reuse_grpc_port or None,
            backlog=1024,
        )
        for sock in self._server.sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                return int(sock.getsockname()[1])
        raise OSError("the gRPC socket has no address")

    def connection_closed(self) -> None:
        if self._idle is not None and not self.connections:
            self._idle.set()

    def drain(self) -> None:
        """Stop accepting, and GOAWAY to every client: calls in flight go on."""
        if self._server is not None:
            self._server.close()
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
