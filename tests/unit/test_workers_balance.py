"""``--worker-sockets shared``'s connection balance (workers/balance.py, with the accept loop
of frontends/accept.py) and ``--worker-affinity``'s CPUs (workers/affinity.py)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator

import pytest

from tritium.frontends.accept import Acceptor, Connections
from tritium.workers import shared
from tritium.workers.affinity import worker_cpus
from tritium.workers.balance import ROWS, AcceptBalance
from tritium.workers.shared import SharedCounters


@pytest.fixture
def tables() -> Iterator[tuple[SharedCounters, SharedCounters, SharedCounters]]:
    """Worker 0's, worker 1's and the supervisor's views of one connection table."""
    fd = shared.create("accepting", ROWS, 2)
    made = [SharedCounters(os.dup(fd), ROWS, 2, index) for index in (0, 1, -1)]
    os.close(fd)
    yield made[0], made[1], made[2]
    for view in made:
        view.close()


def test_a_worker_holding_more_defers_to_one_holding_fewer(
    tables: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one = AcceptBalance(tables[0]), AcceptBalance(tables[1])
    assert not zero.defer(5)  # worker 1 does not accept yet: nobody to leave it to
    one.publish(0)
    zero.publish(1)
    assert zero.defer(1) and not one.defer(0)  # 1 against 0: worker 1 takes it
    one.publish(1)
    assert not zero.defer(1) and not one.defer(1)  # even: whoever wakes first
    one.withdraw()  # draining: counted no more
    assert not zero.defer(3)
    one.publish(0)
    tables[2].clear(1)  # the supervisor reaped worker 1
    assert not zero.defer(3)


def test_a_resumed_worker_takes_it_unless_another_took_some_meanwhile(
    tables: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one = AcceptBalance(tables[0]), AcceptBalance(tables[1])
    zero.publish(4)
    one.publish(1)
    assert zero.defer(4)
    one.publish(2)  # worker 1 accepted one meanwhile: still fewer, leave it again
    assert zero.defer(4, resumed=True)
    assert not zero.defer(4, resumed=True)  # worker 1 took none for a whole delay


class _Balance:
    """A balance whose other worker always holds fewer (and never takes any)."""

    delay = 0.02

    def __init__(self) -> None:
        self.published: list[int] = []
        self.asked: list[bool] = []
        self.withdrawn = False

    def publish(self, count: int) -> None:
        self.published.append(count)

    def withdraw(self) -> None:
        self.withdrawn = True

    def defer(self, count: int, resumed: bool = False) -> bool:
        self.asked.append(resumed)
        return not resumed


def test_the_acceptor_leaves_a_connection_then_takes_it_and_publishes_its_count() -> None:
    async def main() -> None:
        pool = Connections()
        balance = _Balance()
        pool.balance = balance
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        listening.setblocking(False)
        made: list[asyncio.Transport] = []

        class Proto(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                assert isinstance(transport, asyncio.Transport)
                made.append(transport)

        acceptor = Acceptor([listening], Proto, pool, "HTTP")
        acceptor.start()
        with socket.create_connection(listening.getsockname()):
            await asyncio.sleep(balance.delay / 2)
            assert not made and balance.asked == [False]  # left to the other worker
            for _ in range(100):
                if made:
                    break
                await asyncio.sleep(balance.delay)
            assert len(made) == 1 and balance.asked == [False, True]  # then taken here
            assert balance.published[0] == 1  # accepted, still opening: counted
        acceptor.close()
        assert balance.withdrawn and pool.balance is None
        made[0].close()

    asyncio.run(main())


def test_worker_cpus() -> None:
    assert worker_cpus("cpu", 3, {4, 6}) == [4, 6]  # worker i on the i-th, in turn
    assert worker_cpus("auto", 2, {4, 6}) == [4, 6]  # one worker per CPU
    assert worker_cpus("auto", 3, {4, 6}) == []
    assert worker_cpus("auto", 1, {4, 6}) == []
    assert worker_cpus("none", 2, {4, 6}) == []
    assert worker_cpus("auto", len(os.sched_getaffinity(0))) == sorted(os.sched_getaffinity(0))
