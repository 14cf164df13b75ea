"""Runs the server: loads models, binds the front-ends on one event loop, shuts down cleanly."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import ssl
from dataclasses import replace
from typing import Protocol

from . import __version__, describe_build
from .access.policy import AccessControl, ClientLimiter, build_access
from .frontends.accept import Balance, Connections
from .frontends.grpc.listener import GrpcListener, ssl_context
from .frontends.http.app import HttpApp
from .frontends.http.metrics_app import MetricsApp
from .frontends.http.limits import HttpLimits
from .frontends.http.listener import HttpListener, https_context, serve_http
from .frontends.sockets import BACKLOG, BindError, Endpoint, bind, bound_port, port_collision
from .options import ServerOptions
from .countdown import ExitCountdown
from .server import InferenceServer

log = logging.getLogger("tritium")


class WorkerLink(Protocol):
    """One worker of ``--workers N`` (workers/member.py): the sockets the supervisor bound,
    and the control plane, attached to the server before its models load."""

    def sockets(self) -> dict[str, list[socket.socket]]: ...

    def accept_balance(self) -> Balance | None: ...

    def client_limiter(self, limit: int) -> ClientLimiter | None: ...

    async def attach(self, server: InferenceServer, stop: asyncio.Event) -> None: ...

    async def synced(self) -> None: ...

    def serving(self) -> None: ...

    def detach(self) -> None: ...


async def run(options: ServerOptions, link: WorkerLink | None = None) -> int:
    """Serve until SIGTERM/SIGINT. ``link``: this process is one worker of several (the
    supervisor bound the sockets and writes the ports file)."""
    log.info("tritium %s: %s", __version__, describe_build())
    contexts = _tls_contexts(options)
    if contexts is None:
        return 1
    try:
        limit = options.access.max_inflight_per_client
        access = build_access(options.access, link.client_limiter(limit) if link else None)
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
    try:  # before the models load: a port in use stops the start at once
        bound = link.sockets() if link is not None else await bind_all(options)
    except OSError as exc:
        log.error("error: %s", exc)
        await server.stop()  # nothing loaded yet: removes its scratch directory
        access.close()
        return 1
    stop = asyncio.Event()
    install_signal_handlers(stop)
    if link is not None:
        await link.attach(server, stop)
    try:
        early = await _start(server, link, stop)
    except RuntimeError as exc:
        log.error("error: creating server: Internal - %s", exc)
        _close(bound)
        access.close()
        return 1
    if early is not None:  # a signal during the startup loads: they finished; unload them
        _close(bound)
        await server.stop(early)
        access.close()
        if link is not None:
            link.detach()
        log.info("server stopped")
        return 0
    listeners, grpc_server, ports = await _serve(server, options, contexts, access, bound, link)
    if link is not None:
        link.serving()
    elif options.ports_file:
        write_ports(options.ports_file, ports)
    await stop.wait()
    await _shutdown(server, listeners, grpc_server, access)
    if link is not None:
        link.detach()
    log.info("server stopped")
    return 0


async def _start(
    server: InferenceServer, link: WorkerLink | None, stop: asyncio.Event
) -> ExitCountdown | None:
    """Load the models. A signal meanwhile lets the loads finish within the exit timeout
    (then they are cancelled): the countdown started at the signal, or None without one."""
    start = asyncio.ensure_future(_load(server, link))
    signalled = asyncio.ensure_future(stop.wait())
    await asyncio.wait({start, signalled}, return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    if not stop.is_set():
        await start  # its errors raise
        return None
    countdown = ExitCountdown(server.options.exit_timeout_secs)
    if not start.done():
        log.info("Waiting for the models loading to complete.")
        await asyncio.wait({start}, timeout=countdown.remaining())
        start.cancel()
    await asyncio.gather(start, return_exceptions=True)
    return countdown


async def _load(server: InferenceServer, link: WorkerLink | None) -> None:
    await server.start()
    if link is not None:
        await link.synced()  # the model control actions the other workers applied


async def _shutdown(
    server: InferenceServer,
    listeners: list[HttpListener],
    grpc_server: GrpcListener | None,
    access: AccessControl,
) -> None:
    """Triton's order, within one ``--exit-timeout-secs``: the HTTP endpoint stops accepting
    connections and serves those open (their new requests too) until they close; then gRPC
    sends GOAWAY and lets its calls finish; then the in-flight inferences finish and the
    models unload (a load in progress first finishes). The metrics endpoint serves to the
    end, as Triton's stops after the core."""
    countdown = ExitCountdown(server.options.exit_timeout_secs)
    server.begin_shutdown()
    http = [listener for listener in listeners if listener.service == "HTTP"]
    for listener in http:
        listener.close()
    loop = asyncio.get_running_loop()
    signalled = loop.time()
    idle_s = server.options.http.drain_idle_secs

    def open_http() -> int:
        # tritium's bound (Triton has none): a connection idle for --http-drain-idle-secs
        # since the signal or its last answer is closed, so a client's unused pooled
        # connection does not hold the shutdown for the whole timeout
        # (docs/triton-differences.md)
        cutoff = loop.time() - idle_s
        if cutoff >= signalled:
            for listener in http:
                listener.close_idle(cutoff)
        return sum(listener.open_connections() for listener in http)

    await countdown.wait(
        open_http, lambda left, n: f"Timeout {left}: Found {n} HTTP service connections"
    )
    for listener in http:  # a request still running is answered when the core stops
        listener.close_connections(idle_only=True)
    if grpc_server is not None:
        grpc_server.drain()  # GOAWAY: no new calls, calls in flight complete
        await countdown.wait(
            lambda: len(grpc_server.connections),
            lambda left, n: (
                f"Timeout {left}: Found {n} GRPC service connections and inference handlers"
            ),
        )
    await server.stop(countdown)
    for listener in listeners:
        listener.close()
        listener.close_connections()
    if grpc_server is not None:
        await grpc_server.close(grace=0.0)
    access.close()


def _tls_contexts(
    options: ServerOptions,
) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None] | None:
    """HTTPS's and gRPC's TLS contexts, read before loading models: a bad certificate fails
    fast (None: one failed, and was logged)."""
    try:
        tls = https_context(options)
    except OSError as exc:
        log.error("error: failed to start the front-ends: HTTPS: %s", exc)
        return None
    try:
        return tls, ssl_context(options)
    except OSError as exc:
        log.error("error: failed to start the front-ends: gRPC TLS: %s", exc)
        return None


def endpoints(options: ServerOptions) -> dict[str, Endpoint]:
    """The enabled front-ends and where each listens (the metrics endpoint defaults to the
    HTTP address, or every address when HTTP is off)."""
    found: dict[str, Endpoint] = {}
    if options.http.enabled:
        found["http"] = Endpoint(
            "HTTP", "--http-address", "--http-port", options.http.address, options.http.port
        )
    if options.metrics.enabled:
        flag = "--metrics-address" if options.metrics.address else "--http-address"
        address = options.metrics.address or (
            options.http.address if options.http.enabled else "0.0.0.0"
        )
        found["metrics"] = Endpoint(
            "Metrics", flag, "--metrics-port", address, options.metrics.port
        )
    if options.http.openai and options.http.openai_port >= 0:  # --openai-port
        found["openai"] = Endpoint(
            "OpenAI", "--http-address", "--openai-port", options.http.address,
            options.http.openai_port,
        )  # fmt: skip
    if options.grpc.enabled:
        found["grpc"] = Endpoint(
            "GRPC", "--grpc-address", "--grpc-port", options.grpc.address, options.grpc.port
        )
    return found


async def bind_all(
    options: ServerOptions, reuse_group: bool = False
) -> dict[str, list[socket.socket]]:
    """Bind every enabled front-end's address, before any model loads (a port in use stops
    the start at once); raises OSError (``BindError``: the message names the flag and the
    address). The sockets do not listen yet: a connection is refused until the server serves
    (``_serve``), as Triton's ports open once its startup models are loaded. ``reuse_group``:
    bind every socket with SO_REUSEPORT (``--worker-sockets reuseport``: the workers listen on
    the ports, each with a socket of its own)."""
    wanted = endpoints(options)
    collision = port_collision(list(wanted.values()))
    if collision:
        raise BindError(collision)
    reuse = {"http": options.http.reuse_port, "grpc": options.grpc.reuse_port}
    bound: dict[str, list[socket.socket]] = {}
    try:
        for name, endpoint in wanted.items():
            reuse_port = True if reuse_group else reuse.get(name, False)
            bound[name] = await bind(endpoint, reuse_port, listen=False)
    except BaseException:
        _close(bound)
        raise
    return bound


def _close(bound: dict[str, list[socket.socket]]) -> None:
    for socks in bound.values():
        for sock in socks:
            sock.close()


async def _serve(
    server: InferenceServer,
    options: ServerOptions,
    tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None],
    access: AccessControl,
    bound: dict[str, list[socket.socket]],
    link: WorkerLink | None = None,
) -> tuple[list[HttpListener], GrpcListener | None, dict[str, int]]:
    """Start accepting on every bound front-end (``tls``: HTTP's and gRPC's); the ports. The
    listeners share one set of live connections: out of descriptors, any of them closes the
    connections idle longest of all (frontends/accept.py). ``link``: this process is one
    worker of several, which accept on the same sockets (or, reuseport, on the same ports)."""
    http_tls, grpc_tls = tls
    pool = Connections(options.connection_memory_bytes)
    if link is not None:
        pool.accept_batch = 1
    balance = link.accept_balance() if link is not None else None
    if balance is not None:
        pool.balance = balance
        balance.publish(0)  # accepting from now on
    where = endpoints(options)
    ports = {name: bound_port(socks) for name, socks in bound.items()}
    for socks in bound.values():  # bound before the models loaded; connections from now on
        for sock in socks:
            sock.listen(BACKLOG)
    listeners: list[HttpListener] = []
    if "http" in bound:
        limits = HttpLimits.from_options(options)
        app = HttpApp(server, access)
        listeners.append(serve_http(bound["http"], app, limits, http_tls, pool))
        scheme = "HTTPS" if http_tls is not None else "HTTP"
        log.info("Started %sService at %s:%d", scheme, where["http"].address, ports["http"])
    if "openai" in bound:  # --openai-port: the OpenAI routes alone
        openai = HttpApp(server, access, openai_only=True)
        limits = HttpLimits.from_options(options)
        listeners.append(serve_http(bound["openai"], openai, limits, http_tls, pool, "OpenAI"))
        log.info("Started OpenAI Service at %s:%d", where["openai"].address, ports["openai"])
    if "metrics" in bound:
        limits = replace(HttpLimits.from_options(options), max_body=1 << 16)
        metrics = MetricsApp(server)
        listeners.append(serve_http(bound["metrics"], metrics, limits, None, pool, "Metrics"))
        log.info("Started Metrics Service at %s:%d", where["metrics"].address, ports["metrics"])
    grpc_server: GrpcListener | None = None
    if "grpc" in bound:
        grpc_server = GrpcListener(server, access, pool)
        await grpc_server.serve(bound["grpc"], grpc_tls)
        log.info("Started GRPCInferenceService at %s:%d", where["grpc"].address, ports["grpc"])
    return listeners, grpc_server, ports


def write_ports(path: str, ports: dict[str, int]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(ports, handle)
    os.replace(tmp, path)


def install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
