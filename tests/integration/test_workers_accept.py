"""``--workers 2``: how the workers share the listening sockets and the CPUs.

- ``--worker-sockets shared`` (the default): connections opened one after another spread
  over the workers (each worker publishes how many it holds; one holding more leaves a new
  one to the other, workers/balance.py), over HTTP and gRPC, and each answers right.
- ``--worker-affinity cpu``: each worker and all its threads run on one CPU, the workers on
  the CPUs in turn; ``none``: wherever the kernel puts them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import assert_simple_works, client
from testkit.server_process import ServerProcess

PROTOCOLS = ["http", "grpc"]
_CLIENTS = 8


def _start(repo: Path, *extra: str) -> ServerProcess:
    return ServerProcess(
        [repo], "--workers", "2", "--model-control-mode", "explicit", "--load-model",
        "simple", *extra, start_timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def two(example_repo: Path) -> Iterator[ServerProcess]:
    server = _start(example_repo, "--worker-affinity", "cpu")
    yield server
    server.stop()


def _workers(server: ServerProcess) -> list[int]:
    pid = server.proc.pid
    return sorted(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


def _connect(protocol: str, server: ServerProcess) -> Any:
    """A client on a connection of its own (gRPC channels otherwise share one per target)."""
    if protocol == "grpc":
        args = [("grpc.use_local_subchannel_pool", 1)]
        return client(protocol, server.url(protocol), channel_args=args)
    return client(protocol, server.url(protocol))


def _established(pid: int, port: int) -> int:
    """The TCP connections to ``port`` that process ``pid`` holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connections_spread_over_the_workers(two: ServerProcess, protocol: str) -> None:
    clients = []
    try:
        for _ in range(_CLIENTS):  # one after another, each kept open
            c = _connect(protocol, two)
            clients.append(c)
            assert_simple_works(c, protocol)
        held = [_established(pid, two.ports[protocol]) for pid in _workers(two)]
        assert sum(held) == _CLIENTS, held
        # each worker holds about half (exactly half unless a worker was slow to take
        # one: then the other took it after the balance's delay)
        assert min(held) >= 2, held
        for c in clients:  # every connection still answers, wherever it landed
            assert_simple_works(c, protocol)
    finally:
        for c in clients:
            c.close()


def _cpus_of(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of ``pid``."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(frozenset(os.sched_getaffinity(int(tid))))
        except OSError:  # the thread ended meanwhile
            continue
    return found


def test_worker_affinity_cpu_pins_each_worker_and_its_threads(two: ServerProcess) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    pinned = []
    for pid in _workers(two):
        sets = _cpus_of(pid)
        assert len(sets) == 1, sets  # every thread of the worker on the same CPU
        (cpus,) = sets
        assert len(cpus) == 1
        pinned.append(next(iter(cpus)))
    assert sorted(pinned) == sorted(allowed[i % len(allowed)] for i in range(2))
    for protocol in PROTOCOLS:
        c = _connect(protocol, two)
        try:
            assert_simple_works(c, protocol)
        finally:
            c.close()


def test_worker_affinity_none_leaves_the_workers_anywhere(example_repo: Path) -> None:
    server = _start(example_repo, "--worker-affinity", "none")
    try:
        allowed = frozenset(os.sched_getaffinity(0))
        for pid in _workers(server):
            assert _cpus_of(pid) == {allowed}
        for protocol in PROTOCOLS:
            c = _connect(protocol, server)
            try:
                assert_simple_works(c, protocol)
            finally:
                c.close()
    finally:
        server.stop()
