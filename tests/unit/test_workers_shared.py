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


def _sharing_a_home(count: int, secret: bytes = b"") -> list[str]:
    """``count`` hosts whose keys (hashed with ``secret``) have one home row."""
    by_home: dict[int, list[str]] = {}
    for n in range(1, 1 << 20):
        host = f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
        hosts = by_home.setdefault(key_of(host, secret) % ROWS, [])
        hosts.append(host)
        if len(hosts) == count:
            return hosts
    raise AssertionError("not found")


def test_a_keyed_hash_spreads_hosts_found_for_another_key() -> None:
    """Hosts found to share a window without the server's secret (or with another) land
    in different rows with it."""
    crafted = _sharing_a_home(WINDOW + 2)
    assert len({key_of(h) % ROWS for h in crafted}) == 1
    for secret in (b"\x01" * 16, b"\x02" * 16):
        homes = {key_of(h, secret) % ROWS for h in crafted}
        assert len(homes) > WINDOW // 2, homes
    assert key_of("10.0.0.1", b"\x01" * 16) != key_of("10.0.0.1", b"\x02" * 16)
    assert key_of("10.0.0.1", b"\x01" * 16) == key_of("10.0.0.1", b"\x01" * 16)


def test_a_full_window_fails_open_to_the_workers_own_count(
    views: tuple[SharedCounters, SharedCounters, SharedCounters],
) -> None:
    zero, one, _ = views
    secret = b"\x07" * 16
    victim = "10.9.9.9"
    home = key_of(victim, secret) % ROWS
    for n in range(WINDOW):  # other clients, through worker 1, hold every row of its window
        row = one.find(home + (n + 1) * ROWS)
        one.add(row, 1)
    assert zero.find(key_of(victim, secret), claim=False) == -1
    limiter = SharedClientLimiter(2, zero, secret)
    assert limiter.acquire(victim) and limiter.acquire(victim)  # not refused for the others
    assert not limiter.acquire(victim)  # still bounded, by this worker's own count
    assert limiter.in_flight(victim) == 2
    limiter.release(victim)
    assert limiter.in_flight(victim) == 1
    limiter.release(victim)
    assert limiter.in_flight(victim) == 0
    one.add(home, -1)  # a row of the window is free again: the client is counted there
    assert limiter.acquire(victim)
    row = zero.find(key_of(victim, secret), claim=False)
    assert row == home and zero.total(row) == 1
    limiter.release(victim)
    assert limiter.in_flight(victim) == zero.total(row) == 0


def test_the_client_table_is_sized_from_the_descriptor_limit() -> None:
    import resource

    from tritium.workers.client_limit import MAX_ROWS
    from tritium.workers.client_limit import ROWS as FEWEST
    from tritium.workers.client_limit import rows

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    for workers in (2, 4):
        expected = MAX_ROWS if soft < 0 else max(FEWEST, min(MAX_ROWS, soft * workers))
        assert rows(workers) == expected
        assert rows(workers) >= min(MAX_ROWS, soft if soft > 0 else MAX_ROWS)
