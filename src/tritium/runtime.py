"""Runs the server: loads models, binds the front-ends on one event loop, shuts down cleanly."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import ssl
from dataclasses import replace

from .access import AccessControl, build_access
from .frontends.grpc.listener import GrpcListener
from .frontends.grpc.tls import server_ssl_context
from .frontends.http.app import HttpApp
from .frontends.http.metrics_app import MetricsApp
from .frontends.http.limits import HttpLimits
from .frontends.http.listener import HttpListener, https_context, listen_http
from .options import ServerOptions
from .server import InferenceServer

log = logging.getLogger("tritium")


async def run(options: ServerOptions, ports_file: str = "") -> int:
    try:
        tls = https_context(options)  # before loading models: a bad certificate fails fast
    except OSError as exc:
        log.error("error: failed to start the front-ends: HTTPS: %s", exc)
        return 1
    try:
        grpc_tls = server_ssl_context(options)
    except OSError as exc:
        log.error("error: failed to start the front-ends: gRPC TLS: %s", exc)
        return 1
    try:
        access = build_access(options)
    except (OSError, ValueError) as exc:
        log.error("error: access control: %s", exc)
        return 1
    try:
        server = InferenceServer(options)
    except RuntimeError as exc:  # a repository path that is not a directory; tracing's
        # opentelemetry mode without its SDK
        log.error("error: creating server: %s", exc)
        access.close()
        return 1
    stop = asyncio.Event()
    install_signal_handlers(stop)
    try:
        await server.start()
    except RuntimeError as exc:
        log.error("error: creating server: Internal - %s", exc)
        access.close()
        return 1
    try:
        listeners, grpc_server, ports = await _bind(server, options, (tls, grpc_tls), access)
    except OSError as exc:
        log.error("error: failed to start the front-ends: %s", exc)
        await server.stop()
        access.close()
        return 1
    if ports_file:
        write_ports(ports_file, ports)
    await stop.wait()
    log.info("shutting down: waiting for in-flight requests")
    if grpc_server is not None:
        grpc_server.drain()  # GOAWAY: clients stop sending, calls in flight complete
    await server.stop()
    for listener in listeners:
        listener.close()
    if grpc_server is not None:
        await grpc_server.close(grace=1.0)
    access.close()
    log.info("server stopped")
    return 0


async def _bind(
    server: InferenceServer,
    options: ServerOptions,
    tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None],
    access: AccessControl,
) -> tuple[list[HttpListener], GrpcListener | None, dict[str, int]]:
    """Listen on every enabled front-end (``tls``: HTTP's and gRPC's); the bound ports."""
    http_tls, grpc_tls = tls
    ports: dict[str, int] = {}
    listeners: list[HttpListener] = []
    if options.allow_http:
        listener = await listen_http(
            HttpApp(server, access),
            (options.http_address, options.http_port),
            HttpLimits.from_options(options),
            http_tls,
            options.reuse_http_port,
        )
        listeners.append(listener)
        ports["http"] = listener.sockets[0].getsockname()[1]
        scheme = "HTTPS" if http_tls is not None else "HTTP"
        log.info("Started %sService at %s:%d", scheme, options.http_address, ports["http"])
    if options.allow_metrics:
        address = options.metrics_address or (
            options.http_address if options.allow_http else "0.0.0.0"
        )
        limits = replace(HttpLimits.from_options(options), max_body=1 << 16)
        listener = await listen_http(MetricsApp(server), (address, options.metrics_port), limits)
        listeners.append(listener)
        ports["metrics"] = listener.sockets[0].getsockname()[1]
        log.info("Started Metrics Service at %s:%d", address, ports["metrics"])
    grpc_server: GrpcListener | None = None
    if options.allow_grpc:
        grpc_server, ports["grpc"] = await _bind_grpc(server, options, access, grpc_tls)
        log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, ports["grpc"])
    return listeners, grpc_server, ports


async def _bind_grpc(
    server: InferenceServer,
    options: ServerOptions,
    access: AccessControl,
    tls: ssl.SSLContext | None,
) -> tuple[GrpcListener, int]:
    """tritium's own HTTP/2 + gRPC server on this event loop; the listener and its port."""
    listener = GrpcListener(server, access)
    return listener, await listener.listen(options.grpc_address, options.grpc_port, tls)


def write_ports(path: str, ports: dict[str, int]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(ports, handle)
    os.replace(tmp, path)


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
