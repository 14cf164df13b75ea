"""frontends/sockets.py: the messages of a front-end that cannot listen (each names the flag
to change), Triton's port collision rule, and binding itself on the loopback."""

from __future__ import annotations

import asyncio
import errno
import re
import socket

import pytest

from tritium.frontends.sockets import (
    BindError,
    Endpoint,
    bind,
    bind_problem,
    listen_host,
    port_collision,
    shown_address,
)

HTTP = Endpoint("HTTP", "--http-address", "--http-port", "0.0.0.0", 8000)
GRPC = Endpoint("GRPC", "--grpc-address", "--grpc-port", "0.0.0.0", 8001)


def _error(code: int) -> OSError:
    return OSError(code, "strerror text")


def test_a_port_in_use_names_the_port_flag_and_the_address() -> None:
    message = bind_problem(HTTP, ("0.0.0.0", 8000), _error(errno.EADDRINUSE))
    assert message == "--http-port 8000: address 0.0.0.0:8000 already in use"


def test_a_privileged_port_names_the_port_flag() -> None:
    message = bind_problem(HTTP, ("0.0.0.0", 80), _error(errno.EACCES))
    assert message == "--http-port 8000: permission denied to listen on 0.0.0.0:80"


def test_an_absent_address_names_the_address_flag() -> None:
    endpoint = Endpoint("GRPC", "--grpc-address", "--grpc-port", "10.1.2.3", 8001)
    message = bind_problem(endpoint, ("10.1.2.3", 8001), _error(errno.EADDRNOTAVAIL))
    assert message == "--grpc-address 10.1.2.3: address 10.1.2.3:8001 is not available"


def test_any_other_error_names_both_flags() -> None:
    message = bind_problem(GRPC, ("0.0.0.0", 8001), _error(errno.EINVAL))
    assert message == "--grpc-address 0.0.0.0, --grpc-port 8001: 0.0.0.0:8001: strerror text"


def test_ipv6_addresses_are_shown_in_brackets() -> None:
    assert shown_address(("::1", 8000, 0, 0)) == "[::1]:8000"
    assert shown_address(("127.0.0.1", 8000)) == "127.0.0.1:8000"


def test_two_services_on_one_address_and_port_collide() -> None:
    same = Endpoint("GRPC", "--grpc-address", "--grpc-port", "0.0.0.0", 8000)
    assert port_collision([HTTP, same]) == (
        "--http-port and --grpc-port: the server cannot listen to HTTP requests and GRPC "
        "requests at the same address and port 0.0.0.0:8000"
    )


def test_other_ports_other_addresses_and_port_zero_do_not_collide() -> None:
    elsewhere = Endpoint("GRPC", "--grpc-address", "--grpc-port", "127.0.0.1", 8000)
    assert port_collision([HTTP, GRPC, elsewhere]) == ""
    anywhere = [
        Endpoint("HTTP", "--http-address", "--http-port", "127.0.0.1", 0),
        Endpoint("GRPC", "--grpc-address", "--grpc-port", "127.0.0.1", 0),
    ]
    assert port_collision(anywhere) == ""


def test_bind_listens_and_a_second_bind_is_refused() -> None:
    async def main() -> None:
        endpoint = Endpoint("HTTP", "--http-address", "--http-port", "127.0.0.1", 0)
        first = await bind(endpoint)
        try:
            port = first[0].getsockname()[1]
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # listening already: the connection waits in the backlog
            again = Endpoint("HTTP", "--http-address", "--http-port", "127.0.0.1", port)
            with pytest.raises(BindError, match=f"--http-port {port}: address 127.0.0.1:"):
                await bind(again)
        finally:
            for sock in first:
                sock.close()

    asyncio.run(main())


def test_an_unresolvable_address_names_the_address_flag() -> None:
    async def main() -> None:
        endpoint = Endpoint("HTTP", "--http-address", "--http-port", "no such host.invalid", 0)
        with pytest.raises(BindError, match="--http-address no such host.invalid: cannot resolve"):
            await bind(endpoint)

    asyncio.run(main())


# ------------------------------------------------------- Triton's address syntax


@pytest.mark.parametrize(
    ("given", "host"),
    [
        ("ipv6:[::1]", "::1"),  # Triton's documented form (--http-address)
        ("ipv6:::1", "::1"),
        ("IPv6:[::]", "::"),
        ("ipv6:", "::"),
        ("[::1]", "::1"),  # gRPC's form
        ("ipv6:[fe80::1%lo]", "fe80::1%lo"),
        ("ipv4:127.0.0.1", "127.0.0.1"),
        ("::1", "::1"),
        ("0.0.0.0", "0.0.0.0"),
        ("localhost", "localhost"),
        ("", ""),
    ],
)
def test_address_syntax(given: str, host: str) -> None:
    assert listen_host(given) == host


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("ipv6:127.0.0.1", "'127.0.0.1' is not an IPv6 address (e.g. ipv6:[::1])"),
        ("ipv6:[localhost]", "'[localhost]' is not an IPv6 address"),
        ("ipv4:::1", "'::1' is not an IPv4 address (e.g. ipv4:127.0.0.1)"),
        ("[127.0.0.1]", "'[127.0.0.1]' is not an IPv6 address"),
        ("unix:/tmp/s", "unix domain sockets are not supported by tritium"),
    ],
)
def test_address_syntax_errors(given: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        listen_host(given)


def test_the_same_host_in_two_spellings_collides() -> None:
    first = Endpoint("HTTP", "--http-address", "--http-port", "ipv6:[::1]", 8000)
    second = Endpoint("GRPC", "--grpc-address", "--grpc-port", "[::1]", 8000)
    assert "at the same address and port ipv6:[::1]:8000" in port_collision([first, second])
