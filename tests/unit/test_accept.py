"""The front-ends' one accept policy (frontends/accept.py), socket-free where it can be: out
of descriptors, a listener pauses and retries, and the connections idle longest of every
listener are closed, whatever their protocol; busy ones never."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import pytest

from tritium.frontends.accept import RETRY_SECS, SHED_MIN, Acceptor, Connections


class _Conn:
    def __init__(self, kind: str, since: float | None) -> None:
        self.kind = kind
        self.since = since
        self.closed = False

    def idle_since(self) -> float | None:
        return None if self.closed else self.since

    def shed(self) -> None:
        self.closed = True


def test_the_idle_longest_are_shed_whatever_their_protocol(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = Connections()
    http = [_Conn("HTTP", 100.0 + i) for i in range(100)]
    grpc = [_Conn("gRPC", 50.0 + i) for i in range(60)]
    busy = [_Conn("gRPC", None) for _ in range(40)]
    for conn in http + grpc + busy:
        pool.add(conn)
    with caplog.at_level(logging.WARNING, "tritium"):
        assert pool.shed_idle() == 20  # 1/8 of the 160 idle ones
    assert [c.closed for c in grpc] == [True] * 20 + [False] * 40  # idle since 50..69
    assert not any(c.closed for c in http + busy)
    assert "closed 20 idle gRPC connections" in caplog.text
    assert pool.shed == 20


def test_at_least_a_few_are_shed_and_never_a_busy_one() -> None:
    pool = Connections()
    idle = [_Conn("HTTP", float(i)) for i in range(5)]
    busy = _Conn("HTTP", None)
    for conn in [*idle, busy]:
        pool.add(conn)
    assert pool.shed_idle() == 5 < SHED_MIN
    assert all(c.closed for c in idle) and not busy.closed
    assert pool.shed_idle() == 0
    pool.discard(busy)
    assert len(pool) == 5


class _FullSocket:
    """A listening socket whose accept() fails as a process out of descriptors sees it."""

    def __init__(self, real: socket.socket, code: int) -> None:
        self._real = real
        self.code = code
        self.accepts = 0

    def fileno(self) -> int:
        return self._real.fileno()

    def accept(self) -> tuple[socket.socket, object]:
        self.accepts += 1
        raise OSError(self.code, "Too many open files")

    def close(self) -> None:
        self._real.close()


@pytest.mark.parametrize("code, sheds", [(errno.EMFILE, True), (errno.ENOBUFS, False)])
def test_a_failing_accept_pauses_retries_and_sheds_only_when_out_of_descriptors(
    code: int, sheds: bool
) -> None:
    async def main() -> None:
        pool = Connections()
        idle = _Conn("gRPC", 1.0)
        pool.add(idle)
        real = socket.socket()
        real.bind(("127.0.0.1", 0))
        real.listen()
        sock = _FullSocket(real, code)
        acceptor = Acceptor([sock], asyncio.Protocol, pool, "gRPC")  # type: ignore[list-item]
        acceptor.start()
        acceptor._accept(sock)  # type: ignore[arg-type]  # what the reader callback runs
        assert acceptor.accept_failures == 1 and sock.accepts == 1
        assert idle.closed is sheds
        await asyncio.sleep(RETRY_SECS * 3)  # accepting resumed: a connection is accepted
        with socket.create_connection(real.getsockname()):
            await asyncio.sleep(RETRY_SECS)
        assert sock.accepts > 1
        acceptor.close()

    asyncio.run(main())
