"""The three front-end services of ``tritonfrontend``, each with Triton's ``Options``.

A service is opened on the server's event loop (``Server._wait``) and closed there; the
listeners are tritium's (``frontends/http/listener.py``, ``frontends/grpc/listener.py``),
given the service's options. Options tritium cannot honour (Triton's thread and pool sizes:
tritium serves every connection on the server's event loop) are refused unless left at
Triton's defaults."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields, replace
from types import TracebackType
from typing import Any

from ..frontends.grpc.listener import GrpcListener, ssl_context
from ..frontends.http.app import HttpApp
from ..frontends.http.limits import HttpLimits
from ..frontends.http.listener import HttpListener, listen_http
from ..frontends.http.metrics_app import MetricsApp
from ..frontends.sockets import bound_port
from ..options import ServerOptions
from ..server import InferenceServer
from ..tritonserver import InvalidArgumentError, Server, UnsupportedError

_MAX_PORT = 65535
_THREADS = "tritium serves every connection on the server's event loop: no thread pool"


def _check_port(port: int) -> None:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= _MAX_PORT:
        raise InvalidArgumentError(f"port must be an integer in 0..{_MAX_PORT}, got {port!r}")


def _refuse_changed(options: Any, defaults: Any, names: dict[str, str]) -> None:
    for spec in fields(options):
        if spec.name in names and getattr(options, spec.name) != getattr(defaults, spec.name):
            raise UnsupportedError(
                f"{type(options).__qualname__}.{spec.name}={getattr(options, spec.name)!r} "
                f"is not supported: {names[spec.name]}"
            )


class _Service:
    """What the three services share: start/stop on the server's loop, context manager."""

    def __init__(self, server: Server, options: Any, kind: type) -> None:
        if not isinstance(server, Server):
            raise InvalidArgumentError("server must be a tritium.tritonserver.Server")
        if not isinstance(options, kind):
            raise InvalidArgumentError(
                f"Incorrect type for options. options argument must be of type {kind.__qualname__}"
            )
        self._server = server
        self.options: Any = options
        self.port: int | None = None  # the bound port while started (tritium's: port=0)

    def start(self) -> None:
        if self.port is not None:
            raise InvalidArgumentError(f"{type(self).__name__} already started")
        self.port = self._server._wait(self._open)
        self._server._frontends.append(self)

    def stop(self) -> None:
        if self.port is None:
            return
        try:
            self._server._wait(self._close)
        finally:
            self.port = None
            if self in self._server._frontends:
                self._server._frontends.remove(self)

    def __enter__(self) -> _Service:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    async def _open(self, core: InferenceServer) -> int:
        raise NotImplementedError

    async def _close(self, core: InferenceServer) -> None:
        raise NotImplementedError


@dataclass
class _HttpOptions:
    address: str = "0.0.0.0"
    port: int = 8000
    reuse_port: bool = False
    thread_count: int = 8
    header_forward_pattern: str = ""

    def __post_init__(self) -> None:
        _check_port(self.port)
        if self.thread_count <= 0:
            raise InvalidArgumentError("thread_count must be greater than 0")


class _HttpService(_Service):
    """A service served by tritium's HTTP/1.1 listener (KServe's routes, or /metrics)."""

    def __init__(self, server: Server, options: Any, kind: type) -> None:
        super().__init__(server, options, kind)
        self._listener: HttpListener | None = None

    async def _close(self, core: InferenceServer) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener.close_connections()
            self._listener = None


class KServeHttp(_HttpService):
    """The KServe v2 HTTP/REST endpoint (Triton's extensions included)."""

    Options = _HttpOptions
    _HttpOptions.__qualname__ = "KServeHttp.Options"

    def __init__(self, server: Server, options: _HttpOptions | None = None) -> None:
        options = options if options is not None else _HttpOptions()
        super().__init__(server, options, _HttpOptions)
        _refuse_changed(options, _HttpOptions(), {"thread_count": _THREADS})

    async def _open(self, core: InferenceServer) -> int:
        given: _HttpOptions = self.options
        app = HttpApp(core, None, given.header_forward_pattern)
        limits = HttpLimits.from_options(core.options)
        where = (given.address, given.port)
        self._listener = await listen_http(app, where, limits, None, given.reuse_port)
        return bound_port(self._listener.sockets)


@dataclass
class _MetricsOptions:
    address: str = "0.0.0.0"
    port: int = 8002
    thread_count: int = 1

    def __post_init__(self) -> None:
        _check_port(self.port)
        if self.thread_count <= 0:
            raise InvalidArgumentError("thread_count must be greater than 0")


class Metrics(_HttpService):
    """The Prometheus endpoint (``GET /metrics``)."""

    Options = _MetricsOptions
    _MetricsOptions.__qualname__ = "Metrics.Options"

    def __init__(self, server: Server, options: _MetricsOptions | None = None) -> None:
        options = options if options is not None else _MetricsOptions()
        super().__init__(server, options, _MetricsOptions)
        _refuse_changed(options, _MetricsOptions(), {"thread_count": _THREADS})

    async def _open(self, core: InferenceServer) -> int:
        given: _MetricsOptions = self.options
        limits = replace(HttpLimits.from_options(core.options), max_body=1 << 16)
        where = (given.address, given.port)
        self._listener = await listen_http(MetricsApp(core), where, limits)
        return bound_port(self._listener.sockets)


class Grpc_compression_level(enum.IntEnum):  # noqa: N801 - Triton's name
    NONE = 0
    LOW = 1
    MED = 2
    HIGH = 3
    COUNT = 4


_COMPRESSION = {0: "none", 1: "low", 2: "medium", 3: "high"}


@dataclass
class _GrpcOptions:
    address: str = "0.0.0.0"
    port: int = 8001
    reuse_port: bool = False
    use_ssl: bool = False
    server_cert: str = ""
    server_key: str = ""
    root_cert: str = ""
    use_mutual_auth: bool = False
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int = 0
    max_connection_age_grace_ms: int = 0
    infer_compression_level: int | Grpc_compression_level = Grpc_compression_level.NONE
    infer_thread_count: int = 2
    infer_allocation_pool_size: int = 8
    max_response_pool_size: int = 2_147_483_647
    forward_header_pattern: str = ""

    def __post_init__(self) -> None:
        _check_port(self.port)
        self.infer_compression_level = int(self.infer_compression_level)
        if self.infer_compression_level not in _COMPRESSION:
            raise InvalidArgumentError(
                f"infer_compression_level must be 0..3, got {self.infer_compression_level}"
            )
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise InvalidArgumentError(f"{spec.name} must be >= 0, got {value}")

    def server_options(self, base: ServerOptions) -> ServerOptions:
        """``base`` with its gRPC settings replaced by these."""
        grpc = replace(
            base.grpc,
            address=self.address,
            port=self.port,
            reuse_port=self.reuse_port,
            use_ssl=self.use_ssl or self.use_mutual_auth,
            use_ssl_mutual=self.use_mutual_auth,
            server_cert=self.server_cert,
            server_key=self.server_key,
            root_cert=self.root_cert,
            keepalive_time_ms=self.keepalive_time_ms,
            keepalive_timeout_ms=self.keepalive_timeout_ms,
            keepalive_permit_without_calls=self.keepalive_permit_without_calls,
            http2_max_pings_without_data=self.http2_max_pings_without_data,
            http2_min_recv_ping_interval_without_data_ms=(
                self.http2_min_recv_ping_interval_without_data_ms
            ),
            http2_max_ping_strikes=self.http2_max_ping_strikes,
            max_connection_age_ms=self.max_connection_age_ms,
            max_connection_age_grace_ms=self.max_connection_age_grace_ms,
            infer_response_compression_level=_COMPRESSION[int(self.infer_compression_level)],
            header_forward_pattern=self.forward_header_pattern,
        )
        return replace(base, grpc=grpc)


class KServeGrpc(_Service):
    """The KServe v2 gRPC endpoint (``inference.GRPCInferenceService`` and health)."""

    Options = _GrpcOptions
    _GrpcOptions.__qualname__ = "KServeGrpc.Options"
    Grpc_compression_level = Grpc_compression_level

    def __init__(self, server: Server, options: _GrpcOptions | None = None) -> None:
        options = options if options is not None else _GrpcOptions()
        super().__init__(server, options, _GrpcOptions)
        _refuse_changed(
            options,
            _GrpcOptions(),
            {
                "infer_thread_count": _THREADS,
                "infer_allocation_pool_size": "tritium keeps no pool of response objects",
                "max_response_pool_size": "tritium keeps no pool of response objects",
            },
        )
        self._listener: GrpcListener | None = None

    async def _open(self, core: InferenceServer) -> int:
        given: _GrpcOptions = self.options
        options = given.server_options(core.options)
        try:
            tls = ssl_context(options)
        except OSError as exc:
            raise InvalidArgumentError(f"gRPC TLS: {exc}") from None
        listener = GrpcListener(core, None, None, options)
        port = await listener.listen(given.address, given.port, tls)
        self._listener = listener
        return port

    async def _close(self, core: InferenceServer) -> None:
        if self._listener is not None:
            self._listener.drain()
            await self._listener.close(grace=1.0)
            self._listener = None
