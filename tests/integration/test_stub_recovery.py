"""Beyond Triton: a Python model's stub process that dies (SIGKILL, segfault, OOM killer) or
hangs past its execution timeout is replaced, and the model serves again.

Stubs are found and killed through /proc (``stub_procs``); each scenario runs over HTTP and
gRPC with the official tritonclient.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.models import CRASH_X2_INSTANCES, HANG_TIMEOUT_SECS, build_test_repository
from testkit.server_process import ServerProcess
from tests.support.stub_procs import stub_pids, wait_until
from tritonclient.utils import InferenceServerException

PROTOCOLS = ("http", "grpc")
MODELS = ["crash_on_negative", "crash_on_negative_x2", "hang_on_negative", "identity_fp32"]
TIMEOUT_S = 30.0
RESTARTS = "tritium_model_instance_restarts_total"
PENDING = "nv_inference_pending_request_count"


# ----------------------------------------------------------------------------- helpers


def open_client(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return client(
            protocol, server.http_url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S
        )
    return client(protocol, server.grpc_url)


def infer(server: ServerProcess, protocol: str, model: str, values: list[float]) -> np.ndarray:
    data = np.array(values, dtype=np.float32)
    c = open_client(server, protocol)
    try:
        inputs = [make_input(protocol, "INPUT0", data, "FP32")]
        kwargs = {"client_timeout": TIMEOUT_S} if protocol == "grpc" else {}
        return c.infer(model, inputs, **kwargs).as_numpy("OUTPUT0")
    finally:
        c.close()


def infer_error(
    server: ServerProcess, protocol: str, model: str, values: list[float]
) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        infer(server, protocol, model, values)
    return info.value


def model_ready(server: ServerProcess, protocol: str, model: str) -> bool:
    c = open_client(server, protocol)
    try:
        return bool(c.is_model_ready(model))
    finally:
        c.close()


def ready_everywhere(server: ServerProcess, model: str) -> bool:
    return all(model_ready(server, p, model) for p in PROTOCOLS)


def index_rows(server: ServerProcess, protocol: str, model: str) -> list[dict[str, Any]]:
    c = open_client(server, protocol)
    try:
        if protocol == "http":
            rows = list(c.get_model_repository_index())
        else:
            rows = list(c.get_model_repository_index(as_json=True).get("models", []))
    finally:
        c.close()
    return [r for r in rows if r["name"] == model]


def metric(server: ServerProcess, name: str, model: str, instance: str = "") -> int:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    prefix = f'instance="{instance}",' if instance else ""  # labels sorted by name
    labels = prefix + f'model="{model}",version="1"'
    match = re.search(rf"^{name}{{{labels}}} (\d+)$", text, re.MULTILINE)
    assert match, f"no {name}{{{labels}}} in:\n{text}"
    return int(match.group(1))


def restarts(server: ServerProcess, model: str, instance: str) -> int:
    return metric(server, RESTARTS, model, instance)


def only_stub(server: ServerProcess, instance: str) -> int:
    pids = stub_pids(server.proc.pid, instance)
    assert len(pids) == 1, pids
    return next(iter(pids))


def replaced(server: ServerProcess, instance: str, old_pid: int) -> bool:
    pids = stub_pids(server.proc.pid, instance)
    return len(pids) == 1 and old_pid not in pids


def assert_not_healthy(error: InferenceServerException, instance: str) -> None:
    """Triton's message for requests that were on a stub when it died."""
    assert error.status() in ("500", "StatusCode.INTERNAL"), str(error)
    assert f"Stub process '{instance}' is not healthy." in error.message(), error.message()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("recovery") / "repo", MODELS)


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([repo], "--model-instance-max-restarts=100")
    yield proc
    proc.stop()


# ------------------------------------------------------------------ a killed stub restarts


def test_sigkilled_stub_is_restarted(server: ServerProcess, protocol: str) -> None:
    model, instance = "crash_on_negative", "crash_on_negative_0_0"
    np.testing.assert_array_equal(infer(server, protocol, model, [1.0, 2.0]), [1.0, 2.0])
    before = restarts(server, model, instance)
    old = only_stub(server, instance)

    os.kill(old, signal.SIGKILL)

    assert wait_until(lambda: replaced(server, instance, old)), stub_pids(server.proc.pid)
    assert wait_until(lambda: ready_everywhere(server, model)), server.log_text()
    np.testing.assert_array_equal(infer(server, protocol, model, [3.0]), [3.0])
    assert restarts(server, model, instance) == before + 1
    for p in PROTOCOLS:  # serving again: READY, no reason left behind
        assert [(r.get("state"), r.get("reason", "")) for r in index_rows(server, p, model)] == [
            ("READY", "")
        ]


def test_in_flight_fails_and_queued_waits_for_the_restart(
    server: ServerProcess, protocol: str
) -> None:
    model, instance = "crash_on_negative", "crash_on_negative_0_0"
    assert wait_until(lambda: ready_everywhere(server, model))
    outcome: dict[str, Any] = {}

    def run(key: str, values: list[float]) -> None:
        try:
            outcome[key] = infer(server, protocol, model, values)
        except Exception as exc:  # checked below
            outcome[key] = exc

    # The first request kills its stub after 3 s; the second queues behind it meanwhile
    # (one instance) and must be served by the restarted stub.
    crashing = threading.Thread(target=run, args=("crash", [-1.0, 3.0]))
    crashing.start()
    time.sleep(0.5)  # let it reach the model (checked below: the next one has to queue)
    queued = threading.Thread(target=run, args=("queued", [7.0, 8.0]))
    queued.start()
    assert wait_until(lambda: metric(server, PENDING, model) == 1), "the request did not queue"
    crashing.join(TIMEOUT_S * 2)
    queued.join(TIMEOUT_S * 2)
    assert not crashing.is_alive() and not queued.is_alive()

    assert isinstance(outcome["crash"], InferenceServerException), outcome["crash"]
    assert_not_healthy(outcome["crash"], instance)
    assert not isinstance(outcome["queued"], Exception), outcome["queued"]
    np.testing.assert_array_equal(outcome["queued"], [7.0, 8.0])


def test_one_of_two_instances_restarts(server: ServerProcess, protocol: str) -> None:
    model = "crash_on_negative_x2"
    victim, other = f"{model}_0_1", f"{model}_0_0"
    assert len(stub_pids(server.proc.pid)) >= CRASH_X2_INSTANCES
    before = {i: restarts(server, model, i) for i in (victim, other)}
    old = only_stub(server, victim)
    untouched = only_stub(server, other)

    os.kill(old, signal.SIGKILL)

    assert wait_until(lambda: replaced(server, victim, old))
    assert wait_until(lambda: ready_everywhere(server, model)), server.log_text()
    for i in range(4):  # both instances serve
        np.testing.assert_array_equal(infer(server, protocol, model, [float(i)]), [float(i)])
    assert restarts(server, model, victim) == before[victim] + 1
    assert restarts(server, model, other) == before[other]
    assert only_stub(server, other) == untouched


# ----------------------------------------------------------------- the execution timeout


def test_execution_timeout_answers_and_replaces_the_stub(
    server: ServerProcess, protocol: str
) -> None:
    model, instance = "hang_on_negative", "hang_on_negative_0_0"
    assert wait_until(lambda: ready_everywhere(server, model))
    before = restarts(server, model, instance)
    old = only_stub(server, instance)

    error = infer_error(server, protocol, model, [-1.0])

    assert error.status() in ("503", "StatusCode.UNAVAILABLE"), str(error)
    message = error.message()
    assert "EXECUTION_TIMEOUT_SECS" in message and f"{HANG_TIMEOUT_SECS} s" in message, message
    assert instance in message, message
    assert wait_until(lambda: replaced(server, instance, old)), stub_pids(server.proc.pid)
    assert wait_until(lambda: ready_everywhere(server, model)), server.log_text()
    np.testing.assert_array_equal(infer(server, protocol, model, [4.0, 5.0]), [4.0, 5.0])
    assert restarts(server, model, instance) == before + 1
    assert server.proc.poll() is None


# ------------------------------------------------------------ too many crashes: it stays down


@pytest.fixture
def limited_server(repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([repo], "--model-instance-max-restarts=2")
    yield proc
    proc.stop()


def test_too_many_crashes_leave_the_version_unavailable(
    limited_server: ServerProcess, protocol: str
) -> None:
    server, model, instance = limited_server, "crash_on_negative", "crash_on_negative_0_0"
    for _ in range(2):  # two crashes: restarted each time
        assert_not_healthy(infer_error(server, protocol, model, [-1.0]), instance)
        assert wait_until(lambda: ready_everywhere(server, model)), server.log_text()
    assert restarts(server, model, instance) == 2

    assert_not_healthy(infer_error(server, protocol, model, [-1.0]), instance)  # the third

    assert wait_until(lambda: not any(model_ready(server, p, model) for p in PROTOCOLS))
    for p in PROTOCOLS:
        rows = index_rows(server, p, model)
        assert [r.get("state") for r in rows] == ["UNAVAILABLE"], rows
        reason = rows[0].get("reason", "")
        assert "killed by signal SIGKILL" in reason and "not restarted" in reason, reason
        assert "--model-instance-max-restarts=2" in reason, reason
    assert not stub_pids(server.proc.pid, instance)
    error = infer_error(server, protocol, model, [1.0])
    assert f"Request for unknown model: '{model}'" in error.message(), error.message()
    np.testing.assert_array_equal(infer(server, protocol, "identity_fp32", [1.0]), [1.0])
