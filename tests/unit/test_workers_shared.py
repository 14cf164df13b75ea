"""workers/shared.py, client_limit.py and resources.py: the shared-memory counters every
worker sees (two views of one table, as two workers have), the whole server's client bound
and rate limiter resources."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tritium.scheduling.rate_policy import InstanceLimits, Resource, explicit_counts
from tritium.workers import shared
from tritium.workers.client_limit import SharedClientLimiter
from tritium.workers.resources import SharedPolicy, SharedPool
from tritium.workers.shared import WINDOW, SharedCounters, key_of

ROWS = 64


@pytest.fixture
def views() -> Iterator[tuple[SharedCounters, SharedCounters, SharedCounters]]:
    """Worker 0's, worker 1's and the supervisor's views of one table."""
    fd = shared.create("test", ROWS, 2)
    made = [SharedCounters(os.dup(fd), ROWS, 2, index) for index in (0, 1, -1)]
    os.close(fd)
    yield made[0], made[1], made[2]
    for view in made:
        view.close()


def test_counts_are_every_workers_and_a_dead_workers_are_cleared(
    views: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one, supervisor = views
    key = key_of("10.0.0.1")
    with zero.locked(zero.home(key), WINDOW):
        row = zero.find(key)
    assert one.find(key, claim=False) == row  # the same row in the other worker
    zero.add(row, 2)
    one.add(row, 1)
    assert zero.total(row) == one.total(row) == 3
    supervisor.clear(0)  # worker 0 exited
    assert one.total(row) == 1


def test_a_row_is_claimed_once_and_reused_when_idle(
    views: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one, _ = views
    first, second = key_of("a"), key_of("b")
    row = zero.find(first)
    zero.add(row, 1)
    assert one.find(first) == row
    assert zero.find(first, claim=False) == row
    zero.add(row, -1)  # idle: another key may take the row
    colliding = first + ROWS  # the same window
    assert zero.find(colliding) == row
    assert zero.find(first, claim=False) == -1
    assert zero.find(second) >= 0


def test_a_full_window_refuses_a_new_key(
    views: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, _, _ = views
    for n in range(WINDOW):  # WINDOW keys with the same home, each holding its row
        zero.add(zero.find(5 + n * ROWS), 1)
    assert zero.find(5 + WINDOW * ROWS) == -1


def test_the_client_bound_is_the_servers(
    views: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one, supervisor = views
    here, there = SharedClientLimiter(3, zero), SharedClientLimiter(3, one)
    assert here.acquire("10.0.0.1") and there.acquire("10.0.0.1") and here.acquire("10.0.0.1")
    assert not there.acquire("10.0.0.1")  # 3 in flight: 2 here, 1 there
    assert there.acquire("10.0.0.2")  # another client
    assert here.in_flight("10.0.0.1") == there.in_flight("10.0.0.1") == 3
    here.release("10.0.0.1")
    assert there.acquire("10.0.0.1")
    supervisor.clear(1)  # worker 1 died with its two requests for 10.0.0.1
    assert here.in_flight("10.0.0.1") == 1


def _limiter_pair(
    views: tuple[SharedCounters, SharedCounters, SharedCounters], count: int
) -> tuple[SharedPolicy, SharedPolicy]:
    made = []
    for view in views[:2]:
        policy = SharedPolicy(SharedPool(explicit_counts([("R", count, -1)]), view), view)
        made.append(policy)
    return made[0], made[1]


def test_rate_limiter_resources_are_counted_over_the_workers(
    views: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one = _limiter_pair(views, 1)
    needs = InstanceLimits((Resource("R", 1),))
    zero.register("a", needs)
    one.register("b", needs)
    assert zero.stage("a") == ["a"]
    assert one.stage("b") == []  # worker 0 holds R
    assert not zero.try_take("a")  # worker 1 waits first: no jumping the queue
    assert zero.release("a") == []  # worker 1's waiter is first: worker 0 leaves it R
    assert zero.stage("a") == []
    assert one.retry() == ["b"]  # worker 1 looks again and takes it
    assert one.release("b") == []
    assert zero.retry() == ["a"]
    views[2].clear(0)  # worker 0 died holding R
    assert one.stage("b") == ["b"]
