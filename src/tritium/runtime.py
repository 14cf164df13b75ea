"""Runs the server: loads models, binds the front-ends on one event loop, shuts down cleanly."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from .access import AccessControl, build_access
from .cli import install_signal_handlers, write_ports
from .frontends.grpc.service import build_grpc_server
from .frontends.http.app import HttpApp
from .frontends.http.metrics_app import MetricsApp
from .frontends.http.protocol import HttpProtocol
from .options import ServerOptions
from .server import InferenceServer

log = logging.getLogger("tritium")


async def run(options: ServerOptions, ports_file: str = "") -> int:
    try:
        access = build_access(options)
    except (OSError, ValueError) as exc:
        log.error("error: access control: %s", exc)
        return 1
    server = InferenceServer(options)
    stop = asyncio.Event()
    install_signal_handlers(stop)
    try:
        await server.start()
    except RuntimeError as exc:
        log.error("error: creating server: Internal - %s", exc)
        access.close()
        return 1
    try:
        listeners, grpc_server, ports = await _bind(server, options, access)
    except OSError as exc:
        log.error("error: failed to start the front-ends: %s", exc)
        await server.stop()
        access.close()
        return 1
    if ports_file:
        write_ports(ports_file, ports)
    await stop.wait()
    log.info("shutting down: waiting for in-flight requests")
    await server.stop()
    for listener in listeners:
        listener.close()
    if grpc_server is not None:
        await grpc_server.stop(grace=1.0)
    access.close()
    log.info("server stopped")
    return 0


async def _bind(
    server: InferenceServer, options: ServerOptions, access: AccessControl
) -> tuple[list[asyncio.Server], grpc.aio.Server | None, dict[str, int]]:
    """Listen on every enabled front-end; the bound ports by name."""
    ports: dict[str, int] = {}
    listeners: list[asyncio.Server] = []
    if options.allow_http:
        listener = await _listen(
            HttpApp(server, access),
            options.http_address,
            options.http_port,
            options.http_max_input_size,
        )
        listeners.append(listener)
        ports["http"] = listener.sockets[0].getsockname()[1]
        log.info("Started HTTPService at %s:%d", options.http_address, ports["http"])
    if options.allow_metrics:
        address = options.metrics_address or (
            options.http_address if options.allow_http else "0.0.0.0"
        )
        listener = await _listen(MetricsApp(server), address, options.metrics_port, 1 << 16)
        listeners.append(listener)
        ports["metrics"] = listener.sockets[0].getsockname()[1]
        log.info("Started Metrics Service at %s:%d", address, ports["metrics"])
    grpc_server = None
    if options.allow_grpc:
        grpc_server = build_grpc_server(server, access)
        address = f"{_host(options.grpc_address)}:{options.grpc_port}"
        try:
            ports["grpc"] = grpc_server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"failed to bind gRPC to {address}: {exc}") from None
        await grpc_server.start()
        log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, ports["grpc"])
    return listeners, grpc_server, ports


async def _listen(app: Any, address: str, port: int, limit: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(app, limit), address, port, reuse_address=True, backlog=1024
    )


def _host(address: str) -> str:
    if ":" in address and not address.startswith("["):
        return f"[{address}]"
    return address
