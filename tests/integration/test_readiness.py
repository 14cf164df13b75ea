"""Strict server readiness around unloads and failed loads, over HTTP (/v2/health/ready) and
gRPC (ServerReady), as Triton's core decides it.

From triton-inference-server/core: ``InferenceServer::IsReady`` (src/server.cc) with
--strict-readiness looks at every model the life cycle knows: a model with no version is not
ready, and a version that is not READY makes the server not ready unless its reason is
"unloaded" (set by the deleter when a model is unloaded on purpose: the model-control API, or
poll mode when the model left the repository). ``ModelLifeCycle::AsyncUnload`` releases only
the versions that have a model, so a version that failed to load keeps its failure through an
unload and keeps the server not ready.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import client
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

PROTOCOLS = ("http", "grpc")
GOOD = "identity_fp32"
BAD = "bad_init"  # initialize() raises
EXPLICIT = "--model-control-mode=explicit"
WAIT_S = 30.0


@pytest.fixture
def start() -> Iterator[Callable[..., ServerProcess]]:
    servers: list[ServerProcess] = []

    def _start(repo: Path, *args: str) -> ServerProcess:
        servers.append(ServerProcess([repo], *args))
        return servers[-1]

    yield _start
    for server in servers:
        server.stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return build_test_repository(tmp_path / "repo", [GOOD, "identity_int32", BAD])


def ready_on_both(server: ServerProcess) -> tuple[bool, bool]:
    """(HTTP's answer, gRPC's answer) to "is the server ready?"."""
    answers = []
    for protocol in PROTOCOLS:
        c = client(protocol, server.url(protocol))
        try:
            answers.append(bool(c.is_server_ready()))
        finally:
            c.close()
    return answers[0], answers[1]


def control(server: ServerProcess, protocol: str) -> Any:
    return client(protocol, server.url(protocol))


def model_ready(server: ServerProcess, name: str) -> bool:
    c = client("http", server.http_url)
    try:
        return bool(c.is_model_ready(name))
    finally:
        c.close()


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_server_stays_ready_after_an_explicit_unload(
    start: Callable[..., ServerProcess], repo: Path, protocol: str
) -> None:
    server = start(repo, EXPLICIT, "--load-model", GOOD, "--load-model", "identity_int32")
    assert ready_on_both(server) == (True, True)
    c = control(server, protocol)
    try:
        c.unload_model(GOOD)
    finally:
        c.close()
    wait_until(lambda: not model_ready(server, GOOD), f"{GOOD} to be unloaded")
    assert ready_on_both(server) == (True, True)
    assert model_ready(server, "identity_int32")
    # Unloading the last model too leaves a ready server serving nothing.
    c = control(server, protocol)
    try:
        c.unload_model("identity_int32")
    finally:
        c.close()
    wait_until(lambda: not model_ready(server, "identity_int32"), "identity_int32 to go")
    assert ready_on_both(server) == (True, True)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failed_load_keeps_the_server_not_ready_even_once_unloaded(
    start: Callable[..., ServerProcess], repo: Path, protocol: str
) -> None:
    server = start(
        repo, EXPLICIT, "--load-model", GOOD, "--load-model", BAD, "--exit-on-error=false"
    )
    assert ready_on_both(server) == (False, False)
    c = control(server, protocol)
    try:
        c.unload_model(BAD)
        rows = c.get_model_repository_index()
        if protocol == "grpc":
            rows = [{"name": m.name, "state": m.state, "reason": m.reason} for m in rows.models]
    finally:
        c.close()
    # Triton's AsyncUnload leaves a version that never loaded as it was: failed.
    bad_rows = [row for row in rows if row["name"] == BAD]
    assert bad_rows and all(row["state"] == "UNAVAILABLE" for row in bad_rows), bad_rows
    assert all("init failed on purpose" in row["reason"] for row in bad_rows), bad_rows
    assert ready_on_both(server) == (False, False)
    assert model_ready(server, GOOD)


def test_without_strict_readiness_a_failed_load_leaves_the_server_ready(
    start: Callable[..., ServerProcess], repo: Path
) -> None:
    server = start(repo, "--exit-on-error=false", "--strict-readiness=false")
    assert not model_ready(server, BAD)
    assert ready_on_both(server) == (True, True)


def test_poll_mode_stays_ready_when_a_model_leaves_the_repository(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    repo = build_test_repository(tmp_path / "poll", [GOOD, "identity_int32"])
    server = start(repo, "--model-control-mode=poll", "--repository-poll-secs=0.2")
    assert ready_on_both(server) == (True, True)
    shutil.rmtree(repo / "identity_int32")
    wait_until(lambda: not model_ready(server, "identity_int32"), "the poll to unload it")
    assert ready_on_both(server) == (True, True)
    assert model_ready(server, GOOD)
