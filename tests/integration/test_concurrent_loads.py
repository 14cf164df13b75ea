"""Concurrent loads and unloads of one model (issue 10, item 8), over both protocols: HTTP from
threads, gRPC from asyncio. Two loads at once used to race in the manager (InvalidStateError, a
500 for the loser) and leave the loser's Python stub running after the model was unloaded.

Loads and unloads of one name now run one at a time, in arrival order (Triton blocks a load
that conflicts with one in progress and retries it: core model_repository_manager.cc
``LoadUnloadModel``). Stub processes are counted through /proc: children of the server whose
command line runs ``tritium.backends.python.stub`` for this server (the stubs are the
server's stub zygote's children, not the server's: tests/support/stub_procs.py).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpc_aio
from tests.support import stub_procs
from tests.support.clients import add_sub_inputs, client
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 60.0  # loads queue behind each other on a busy two-core machine
MODEL = "add_sub_python"
CONCURRENT = 6


@pytest.fixture
def server(tmp_path: Path, example_repo: Path) -> Iterator[ServerProcess]:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(example_repo / MODEL, repo / MODEL)
    proc = ServerProcess([repo], "--model-control-mode=explicit")
    yield proc
    proc.stop()


def stub_pids(server: ServerProcess) -> set[int]:
    """The server's Python stub processes, read from /proc."""
    return set(stub_procs.stub_pids(server.proc.pid))


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT_S}s waiting for {what}")
        time.sleep(0.1)


def fire(server: ServerProcess, protocol: str, actions: list[str]) -> list[str | None]:
    """Send every action ('load' / 'unload' of MODEL) at once; each one's error, or None."""
    if protocol == "http":
        return _fire_threads(server, actions)
    return asyncio.run(_fire_asyncio(server, actions))


def _fire_threads(server: ServerProcess, actions: list[str]) -> list[str | None]:
    results: list[str | None] = [None] * len(actions)
    barrier = threading.Barrier(len(actions))

    def run(i: int, action: str) -> None:
        c = client("http", server.http_url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S)
        try:
            barrier.wait()
            getattr(c, f"{action}_model")(MODEL)
        except Exception as exc:  # collected, asserted by the test
            results[i] = str(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(actions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    return results


async def _fire_asyncio(server: ServerProcess, actions: list[str]) -> list[str | None]:
    c = grpc_aio.InferenceServerClient(server.grpc_url)
    try:
        calls = [
            getattr(c, f"{action}_model")(MODEL, client_timeout=TIMEOUT_S) for action in actions
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        await c.close()
    return [str(r) if isinstance(r, BaseException) else None for r in results]


def instances(server: ServerProcess, protocol: str) -> int:
    c = client(protocol, server.url(protocol))
    try:
        config = c.get_model_config(MODEL, **({"as_json": True} if protocol == "grpc" else {}))
    finally:
        c.close()
    config = config.get("config", config)
    return sum(int(group.get("count", 1)) for group in config.get("instance_group", [])) or 1


def serves(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.url(protocol))
    try:
        inputs, a, b = add_sub_inputs(protocol)
        result: Any = c.infer(MODEL, inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        c.close()


def unload_and_check_no_stub_left(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.url(protocol))
    try:
        c.unload_model(MODEL)
        assert not c.is_model_ready(MODEL)
    finally:
        c.close()
    wait_until(lambda: not stub_pids(server), "every stub to exit after the unload")


def test_concurrent_loads_of_one_model(server: ServerProcess, protocol: str) -> None:
    assert stub_pids(server) == set()

    errors = fire(server, protocol, ["load"] * CONCURRENT)

    assert errors == [None] * CONCURRENT, errors
    serves(server, protocol)
    count = instances(server, protocol)  # replaced versions drain, then their stubs exit
    wait_until(lambda: len(stub_pids(server)) == count, f"{count} stub(s), one per instance")
    unload_and_check_no_stub_left(server, protocol)


def test_concurrent_loads_and_unloads_of_one_model(server: ServerProcess, protocol: str) -> None:
    errors = fire(server, protocol, ["load", "unload"] * (CONCURRENT // 2))

    assert errors == [None] * len(errors), errors  # each answered in turn, none a 500
    assert fire(server, protocol, ["load"]) == [None]  # whichever came last, it loads again
    serves(server, protocol)
    unload_and_check_no_stub_left(server, protocol)


def test_load_finishes_when_the_client_gives_up(server: ServerProcess) -> None:
    """A gRPC load whose deadline passes is not cut off half-way (which could leave instances
    nobody closes): it finishes, as Triton's does, and the model can be unloaded cleanly."""
    c = client("grpc", server.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as info:
            c.load_model(MODEL, client_timeout=0.05)
        assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED", info.value
        wait_until(lambda: c.is_model_ready(MODEL), "the abandoned load to finish")
    finally:
        c.close()
    serves(server, "grpc")
    unload_and_check_no_stub_left(server, "grpc")
