"""The listening sockets of every front-end, bound and listening before any model loads.

A port that is taken, or an address the machine does not have, stops the start at once with
the flag to change (Triton binds its endpoints only after loading every model, and says
"failed to start HTTP service: Unavailable - Socket '0.0.0.0:8000' already in use "). The
sockets listen from then on, so nothing can take the port meanwhile; connections wait in the
backlog until the front-ends start accepting, once the models are loaded.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass

BACKLOG = 1024


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where one front-end listens, and the flags that say so."""

    service: str  # Triton's name for it in start-up messages: "HTTP", "GRPC", "Metrics"
    address_flag: str  # e.g. "--http-address" (the metrics endpoint's default is HTTP's)
    port_flag: str  # e.g. "--http-port"
    address: str  # as given
    port: int


class BindError(OSError):
    """A front-end cannot listen: the message names the service, the flag and the address."""


def listen_host(address: str) -> str:
    """The host to bind for an address flag's value, in Triton's syntax: ``ipv6:<address>``
    (documented for --http-address, as libevhtp reads it: ``ipv6:[::1]``), ``ipv4:<address>``,
    an IPv6 address in brackets (gRPC's own syntax, ``[::1]``), or a host name or address as
    is. Raises ValueError for a prefix not followed by an address of its family, and for
    ``unix:`` (tritium listens on TCP only).

    Triton's libevhtp parses ``ipv6:[::1]`` with inet_pton, which fails on the brackets and
    leaves the socket bound to every IPv6 address (``::``); tritium binds the address written."""
    lowered = address.lower()
    if lowered.startswith("unix:"):
        raise ValueError("unix domain sockets are not supported by tritium: give a TCP address")
    if lowered.startswith("ipv6:"):
        return _literal(address[5:] or "::", 6, "ipv6:[::1]")
    if lowered.startswith("ipv4:"):
        return _literal(address[5:] or "0.0.0.0", 4, "ipv4:127.0.0.1")
    if address.startswith("["):
        return _literal(address, 6, "[::1]")
    return address


def _literal(text: str, version: int, example: str) -> str:
    host = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        parsed = None
    if parsed is None or parsed.version != version:
        raise ValueError(f"'{text}' is not an IPv{version} address (e.g. {example})")
    return host


def _host_of(address: str) -> str:
    try:
        return listen_host(address)
    except ValueError:
        return address


def port_collision(endpoints: Sequence[Endpoint]) -> str:
    """Triton's CheckPortCollision: two services on the same address and port ('' if none).
    Port 0 (any free port) never collides."""
    for index, first in enumerate(endpoints):
        for second in endpoints[index + 1 :]:
            same_host = _host_of(first.address) == _host_of(second.address)
            if first.port and same_host and first.port == second.port:
                return (
                    f"{first.port_flag} and {second.port_flag}: the server cannot listen to "
                    f"{first.service} requests and {second.service} requests at the same "
                    f"address and port {first.address}:{first.port}"
                )
    return ""


async def bind(
    endpoint: Endpoint, reuse_port: bool = False, listen: bool = True
) -> list[socket.socket]:
    """Listening, non-blocking sockets for every address ``endpoint.address`` resolves to
    (one per address family, as ``loop.create_server`` makes). ``reuse_port``: SO_REUSEPORT,
    so several servers share the port. ``listen=False``: bound only (the port is held; with
    ``reuse_port`` other sockets listen on it). Raises BindError."""
    loop = asyncio.get_running_loop()
    try:
        host = listen_host(endpoint.address) or None
    except ValueError as exc:
        raise BindError(
            f"failed to start {endpoint.service} service: {endpoint.address_flag} "
            f"{endpoint.address}: {exc}"
        ) from None
    try:
        infos = await loop.getaddrinfo(
            host, endpoint.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise BindError(
            f"failed to start {endpoint.service} service: {endpoint.address_flag} "
            f"{endpoint.address}: cannot resolve the address: {exc.strerror}"
        ) from None
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if socks and not endpoint.port:  # port 0: every family on the first one's port
                address = (address[0], bound_port(socks), *address[2:])
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            _listen(sock, address, endpoint, reuse_port, listen)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _listen(
    sock: socket.socket,
    address: tuple[object, ...],
    endpoint: Endpoint,
    reuse: bool,
    listen: bool = True,
) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind(address)
        if listen:
            sock.listen(BACKLOG)
    except OSError as exc:
        raise BindError(
            f"failed to start {endpoint.service} service: {bind_problem(endpoint, address, exc)}"
        ) from None
    sock.setblocking(False)


def bind_problem(endpoint: Endpoint, address: tuple[object, ...], exc: OSError) -> str:
    """Why ``address`` (a resolved socket address of ``endpoint``) cannot be listened on,
    naming the flag to change."""
    where = shown_address(address)
    port = f"{endpoint.port_flag} {endpoint.port}"
    if exc.errno == errno.EADDRINUSE:
        return f"{port}: address {where} already in use"
    if exc.errno == errno.EACCES:
        return f"{port}: permission denied to listen on {where}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{endpoint.address_flag} {endpoint.address}: address {where} is not available"
    return f"{endpoint.address_flag} {endpoint.address}, {port}: {where}: {exc.strerror}"


def shown_address(address: tuple[object, ...]) -> str:
    """``host:port``, an IPv6 host in brackets."""
    host, port = str(address[0]), address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bound_port(socks: Sequence[socket.socket]) -> int:
    """The port the sockets listen on (the same for every family)."""
    return int(socks[0].getsockname()[1])


def listen_again(bound: socket.socket) -> socket.socket:
    """A new listening socket on the address of ``bound`` (a socket bound with SO_REUSEPORT):
    one more member of the port's SO_REUSEPORT group, with an accept queue of its own."""
    sock = socket.socket(bound.family, bound.type, bound.proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(bound.getsockname())
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
