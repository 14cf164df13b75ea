"""The gRPC listening socket and the glue to its transport (``transport/grpc``): the
transport's settings records built from tritium's flags, the method table and access guard
handed to its dispatcher, one ``GrpcConnection`` per client, TLS when asked, accepted by the
front-ends' one accept policy (``frontends/accept.py``: out of descriptors, accepting pauses
and the connections idle longest, of every listener, are closed), and the graceful stop
(GOAWAY to every connection, in-flight calls complete, then close)."""

from __future__ import annotations

import socket
import ssl

from ... import loop_spin
from ...access.policy import AccessControl
from ...logs.budget import UNEXPECTED_ERRORS, LineBudget, left_out_text
from ...options import ServerOptions
from ...server import InferenceServer
from ...transport.grpc.bounds import BOUND_LINE, PREFACE_LINE, STALL_LINE
from ...transport.grpc.connection import GrpcConnection, GrpcProtocol
from ...transport.grpc.dispatch import Dispatcher
from ...transport.grpc.endpoint import GrpcEndpoint
from ...transport.grpc.settings import Settings
from ...transport.grpc.tls import TlsSettings, server_ssl_context
from ..accept import Acceptor, Connections
from ..sockets import Endpoint, bind, bound_port
from .errors import status_of
from .guard import RpcGuard
from .service import method_table

DEFAULT_MAX_STREAMS = 1024  # --grpc-max-concurrent-streams 0: tritium's bound per connection


def grpc_settings(options: ServerOptions) -> Settings:
    """The transport's settings from the gRPC flags."""
    grpc = options.grpc
    return Settings(
        max_receive=options.http.max_input_size,
        max_send=grpc.max_send_message_size,
        max_streams=grpc.max_concurrent_streams or DEFAULT_MAX_STREAMS,
        preface_timeout=grpc.preface_timeout_secs,
        idle_timeout=grpc.idle_timeout_secs,
        stall_timeout=grpc.stall_timeout_secs,
        input_bytes=grpc.connection_input_bytes,
        output_bytes=grpc.connection_output_bytes,
        ping_interval=grpc.http2_min_recv_ping_interval_without_data_ms / 1000,
        ping_permit_idle=grpc.keepalive_permit_without_calls,
        ping_max_strikes=grpc.http2_max_ping_strikes,
        ping_max_unanswered=grpc.http2_max_pings_without_data,
        keepalive_time=grpc.keepalive_time_ms / 1000,
        keepalive_timeout=grpc.keepalive_timeout_ms / 1000,
        max_age=grpc.max_connection_age_ms / 1000,
        max_age_grace=grpc.max_connection_age_grace_ms / 1000,
        compression=grpc.infer_response_compression_level,
    )


def ssl_context(options: ServerOptions) -> ssl.SSLContext | None:
    """The gRPC listener's TLS context from ``--grpc-use-ssl`` and its neighbours (None:
    plaintext); OSError naming the flag and file that cannot be used."""
    grpc = options.grpc
    tls = TlsSettings(
        grpc.use_ssl, grpc.use_ssl_mutual, grpc.server_cert, grpc.server_key, grpc.root_cert
    )
    return server_ssl_context(tls)


class GrpcNotices:
    """The transport's log lines on tritium's budgets of lines (``logs/budget.py``): each
    kind is an event an unauthenticated client can repeat at will, a few lines a minute."""

    _LINES = {kind: LineBudget() for kind in (PREFACE_LINE, BOUND_LINE, STALL_LINE)}

    def admit(self, kind: str, now: float) -> str | None:
        left_out = self._LINES[kind].admit(now)
        return None if left_out is None else left_out_text(left_out)

    def unexpected(self, what: str, exc: BaseException) -> None:
        UNEXPECTED_ERRORS.report(what, exc)


class GrpcListener:
    """``pool``: the server's live connections of every listener (a new one by default).
    ``options``: the front-end's settings when they are not the server's (an in-process
    server's ``tritonfrontend.KServeGrpc`` brings its own)."""

    def __init__(
        self,
        server: InferenceServer,
        access: AccessControl | None,
        pool: Connections | None = None,
        options: ServerOptions | None = None,
    ) -> None:
        options = options if options is not None else server.options
        self.options: ServerOptions = options
        self.pool = pool if pool is not None else Connections(options.connection_memory_bytes)
        guard = RpcGuard(access) if access is not None and access.guards_grpc else None
        settings = grpc_settings(options)
        methods = method_table(server, options.grpc.header_forward_pattern)
        dispatch = Dispatcher(methods, settings.compression, guard, status_of)
        pool = self.pool
        # the transport's side: what its connections share, and the seams of transport/host.py
        self.endpoint = GrpcEndpoint(
            settings, dispatch, pool, pool.memory, GrpcNotices(), loop_spin.ClientPace
        )
        self._acceptor: Acceptor | None = None

    @property
    def connections(self) -> set[GrpcConnection]:
        return self.endpoint.connections

    async def listen(self, host: str, port: int, tls: ssl.SSLContext | None) -> int:
        """Binds and serves; the bound port. Raises OSError (``BindError``)."""
        endpoint = Endpoint("GRPC", "--grpc-address", "--grpc-port", host, port)
        return await self.serve(await bind(endpoint, self.options.grpc.reuse_port), tls)

    async def serve(self, socks: list[socket.socket], tls: ssl.SSLContext | None) -> int:
        """Start accepting on sockets already listening (``frontends/sockets.py:bind``); the
        port. The TLS handshake counts in the preface time."""
        endpoint = self.endpoint
        self._acceptor = Acceptor(
            socks,
            lambda: GrpcProtocol(endpoint),
            self.pool,
            "gRPC",
            tls,
            endpoint.settings.preface_timeout,
        )
        self._acceptor.start()
        return bound_port(socks)

    def drain(self) -> None:
        """Stop accepting, and GOAWAY to every client: calls in flight go on."""
        if self._acceptor is not None:
            self._acceptor.close()
        self.endpoint.drain()

    async def close(self, grace: float) -> None:
        """After ``drain``: wait up to ``grace`` seconds for the calls, then close the rest."""
        if self._acceptor is not None:
            self._acceptor.close()
        await self.endpoint.close(grace)
