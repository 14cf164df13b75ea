"""Model and server lifecycle: load failures, crashes, readiness, graceful shutdown, auto-complete
and duplicate names. Each scenario runs a server of its own (except where the shared one fits)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.models import BAD_CONFIG_LINE, BAD_FIELD_LINE, build_test_repository
from testkit.server_process import ServerProcess, server_command
from tests.support.stub_procs import is_running, stub_pids
from tritonclient.utils import InferenceServerException

PROTOCOLS = ("http", "grpc")
BAD_MODELS = ("bad_config", "bad_field", "bad_init")
GOOD_MODEL = "identity_fp32"
TIMEOUT_S = 20.0


# ----------------------------------------------------------------------------- helpers


def open_client(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return client(
            protocol, server.http_url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S
        )
    return client(protocol, server.grpc_url)


def infer_fp32(c: Any, protocol: str, model: str, data: np.ndarray) -> Any:
    inputs = [make_input(protocol, "INPUT0", data, "FP32")]
    if protocol == "grpc":
        return c.infer(model, inputs, client_timeout=TIMEOUT_S)
    return c.infer(model, inputs)


def assert_identity_serves(server: ServerProcess, model: str = GOOD_MODEL) -> None:
    data = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    for protocol in PROTOCOLS:
        c = open_client(server, protocol)
        try:
            result = infer_fp32(c, protocol, model, data)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        finally:
            c.close()


def index_rows(server: ServerProcess, protocol: str) -> list[dict[str, Any]]:
    c = open_client(server, protocol)
    try:
        if protocol == "http":
            return list(c.get_model_repository_index())
        return list(c.get_model_repository_index(as_json=True).get("models", []))
    finally:
        c.close()


def rows_for(server: ServerProcess, protocol: str, name: str) -> list[dict[str, Any]]:
    return [row for row in index_rows(server, protocol) if row["name"] == name]


def assert_unavailable_in_index(server: ServerProcess, name: str) -> list[str]:
    """Every index row of ``name`` is UNAVAILABLE with a reason (both protocols); the reasons."""
    reasons: list[str] = []
    for protocol in PROTOCOLS:
        rows = rows_for(server, protocol, name)
        assert rows, f"{name} missing from the {protocol} index"
        for row in rows:
            assert row.get("state") == "UNAVAILABLE", (protocol, row)
            assert row.get("reason"), (protocol, row)
            reasons.append(row["reason"])
    return reasons


def model_ready(server: ServerProcess, protocol: str, name: str) -> bool:
    c = open_client(server, protocol)
    try:
        return bool(c.is_model_ready(name))
    finally:
        c.close()


def server_health(server: ServerProcess, protocol: str) -> tuple[bool, bool]:
    c = open_client(server, protocol)
    try:
        return bool(c.is_server_live()), bool(c.is_server_ready())
    finally:
        c.close()


# --------------------------------------------------- (a) load failures, exit-on-error off


@pytest.fixture(scope="module")
def bad_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("bad") / "repo", [*BAD_MODELS, GOOD_MODEL])


@pytest.fixture(scope="module")
def bad_server(bad_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([bad_repo], "--exit-on-error=false")
    yield proc
    proc.stop()


def test_load_failures_good_model_serves(bad_server: ServerProcess) -> None:
    assert_identity_serves(bad_server)
    for protocol in PROTOCOLS:
        rows = rows_for(bad_server, protocol, GOOD_MODEL)
        assert [r.get("state") for r in rows] == ["READY"], rows
        assert model_ready(bad_server, protocol, GOOD_MODEL)


def test_load_failure_bad_config_reason(bad_server: ServerProcess, bad_repo: Path) -> None:
    path = re.escape(str(bad_repo / "bad_config" / "config.pbtxt"))
    for reason in assert_unavailable_in_index(bad_server, "bad_config"):
        assert re.search(rf"{path}:{BAD_CONFIG_LINE}\b", reason), reason


def test_load_failure_bad_field_reason(bad_server: ServerProcess, bad_repo: Path) -> None:
    path = re.escape(str(bad_repo / "bad_field" / "config.pbtxt"))
    for reason in assert_unavailable_in_index(bad_server, "bad_field"):
        assert re.search(rf"{path}:{BAD_FIELD_LINE}\b", reason), reason
        assert "foo_bar" in reason


def test_load_failure_bad_init_reason(bad_server: ServerProcess) -> None:
    for reason in assert_unavailable_in_index(bad_server, "bad_init"):
        assert "init failed on purpose" in reason


@pytest.mark.parametrize("name", BAD_MODELS)
def test_load_failure_model_not_ready(bad_server: ServerProcess, protocol: str, name: str) -> None:
    assert model_ready(bad_server, protocol, name) is False


@pytest.mark.parametrize("name", BAD_MODELS)
def test_load_failure_model_refuses_inference(
    bad_server: ServerProcess, protocol: str, name: str
) -> None:
    c = open_client(bad_server, protocol)
    try:
        with pytest.raises(InferenceServerException) as info:
            infer_fp32(c, protocol, name, np.ones(2, dtype=np.float32))
    finally:
        c.close()
    # Triton core: a model with no READY version is NOT_FOUND ("... has no available
    # versions", or "... is not found" when it never got a version), never served.
    assert info.value.status() == ("404" if protocol == "http" else "StatusCode.NOT_FOUND"), str(
        info.value
    )
    assert f"Request for unknown model: '{name}'" in info.value.message()


def test_load_failures_server_live_not_ready(bad_server: ServerProcess, protocol: str) -> None:
    live, ready = server_health(bad_server, protocol)
    assert live is True
    assert ready is False  # strict readiness (the default): every model must be ready


# --------------------------------------------------- (b) load failures, exit-on-error on


def test_load_failures_exit_on_error(bad_repo: Path) -> None:
    command = server_command([bad_repo])
    done = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert done.returncode != 0, done.stderr
    for name in BAD_MODELS:
        assert name in done.stderr, done.stderr


# ------------------------------------------------------------------ (c) crashing models


CRASH_MODELS = ("crash_exit", "crash_segv")


@pytest.fixture(params=PROTOCOLS)
def crash_server(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[ServerProcess, str]]:
    repo = build_test_repository(tmp_path / "repo", [*CRASH_MODELS, GOOD_MODEL])
    # Triton's behaviour: a crashed stub is not restarted (restarts: test_stub_recovery.py).
    proc = ServerProcess([repo], "--model-instance-max-restarts=0")
    yield proc, request.param
    proc.stop()


def wait_until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_crashing_models_fail_request_and_server_survives(
    crash_server: tuple[ServerProcess, str],
) -> None:
    server, protocol = crash_server
    for name in CRASH_MODELS:
        assert model_ready(server, protocol, name) is True
        c = open_client(server, protocol)
        started = time.monotonic()
        try:
            with pytest.raises(InferenceServerException) as info:
                infer_fp32(c, protocol, name, np.ones(3, dtype=np.float32))
        finally:
            c.close()
        assert time.monotonic() - started < TIMEOUT_S
        message = info.value.message()
        assert re.search(r"(?i)stub|instance", message), message
        assert name in message, message
        assert info.value.status() in ("500", "StatusCode.INTERNAL"), str(info.value)

        # The server stays up and keeps serving a good model over both protocols.
        assert server.proc.poll() is None, server.log_text()
        assert_identity_serves(server)

    for name in CRASH_MODELS:
        for p in PROTOCOLS:
            assert wait_until(lambda p=p, name=name: model_ready(server, p, name) is False), (
                f"{name} still reports ready over {p}"
            )
        assert_unavailable_in_index(server, name)
    # Still alive, still live.
    for p in PROTOCOLS:
        assert server_health(server, p)[0] is True
    assert_identity_serves(server)


# ------------------------------------------------------------------ (d) is_ready() False


def test_model_is_ready_false(server: ServerProcess, protocol: str) -> None:
    assert model_ready(server, protocol, "is_ready_false") is False
    assert model_ready(server, protocol, GOOD_MODEL) is True


# ----------------------------------------------------------------- (e) graceful shutdown


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path / "repo", ["slow"])
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


def test_sigterm_drains_in_flight_request(slow_server: ServerProcess, protocol: str) -> None:
    data = np.arange(5, dtype=np.float32)
    outcome: dict[str, Any] = {}
    connected = threading.Event()

    def run() -> None:
        # tritonclient.http is gevent based: the client lives in the thread that uses it.
        c = open_client(slow_server, protocol)
        try:
            assert c.is_server_live()  # connected before the clock starts
            connected.set()
            outcome["result"] = infer_fp32(c, protocol, "slow", data).as_numpy("OUTPUT0")
        except Exception as exc:  # reported below
            outcome["error"] = exc
        finally:
            connected.set()
            c.close()

    worker = threading.Thread(target=run)
    worker.start()
    assert connected.wait(TIMEOUT_S)
    started = time.monotonic()
    time.sleep(0.25)  # the request is in the 0.5 s model by now
    slow_server.proc.send_signal(signal.SIGTERM)
    worker.join(TIMEOUT_S)
    assert not worker.is_alive()
    assert "error" not in outcome, outcome.get("error")
    np.testing.assert_array_equal(outcome["result"], data)
    assert time.monotonic() - started >= 0.3  # it really waited for the model
    code = slow_server.proc.wait(timeout=30)
    assert code == 0, slow_server.log_text()


# ------------------------------------------------------- (f) --disable-auto-complete-config


@pytest.fixture(scope="module")
def no_autocomplete_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(
        tmp_path_factory.mktemp("noauto") / "repo", ["identity_onnx_nocfg", GOOD_MODEL]
    )
    proc = ServerProcess([repo], "--disable-auto-complete-config", "--exit-on-error=false")
    yield proc
    proc.stop()


def test_disable_auto_complete_config(
    no_autocomplete_server: ServerProcess, server: ServerProcess, protocol: str
) -> None:
    assert model_ready(no_autocomplete_server, protocol, "identity_onnx_nocfg") is False
    assert_unavailable_in_index(no_autocomplete_server, "identity_onnx_nocfg")
    assert model_ready(no_autocomplete_server, protocol, GOOD_MODEL) is True
    # Without the flag (the shared server) the same model auto-completes and loads.
    assert model_ready(server, protocol, "identity_onnx_nocfg") is True
    c = open_client(server, protocol)
    try:
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        result = infer_fp32(c, protocol, "identity_onnx_nocfg", data)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
    finally:
        c.close()


# ------------------------------------------------------------- (g) duplicate model names


@pytest.fixture(scope="module")
def duplicate_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("dup")
    first = build_test_repository(root / "a", [GOOD_MODEL, "identity_int32"])
    second = build_test_repository(root / "b", [GOOD_MODEL, "identity_bool"])
    proc = ServerProcess([first, second], "--exit-on-error=false")
    yield proc
    proc.stop()


def test_duplicate_model_name_unavailable(duplicate_server: ServerProcess, protocol: str) -> None:
    assert model_ready(duplicate_server, protocol, GOOD_MODEL) is False
    assert_unavailable_in_index(duplicate_server, GOOD_MODEL)
    assert model_ready(duplicate_server, protocol, "identity_int32") is True
    assert model_ready(duplicate_server, protocol, "identity_bool") is True
    c = open_client(duplicate_server, protocol)
    try:
        data = np.array([1, 2, 3], dtype=np.int32)
        inputs = [make_input(protocol, "INPUT0", data, "INT32")]
        np.testing.assert_array_equal(c.infer("identity_int32", inputs).as_numpy("OUTPUT0"), data)
        with pytest.raises(InferenceServerException) as info:
            infer_fp32(c, protocol, GOOD_MODEL, np.ones(2, dtype=np.float32))
    finally:
        c.close()
    # Triton never loads a duplicate: requests for it are NOT_FOUND.
    assert info.value.status() == ("404" if protocol == "http" else "StatusCode.NOT_FOUND"), str(
        info.value
    )
    assert f"Request for unknown model: '{GOOD_MODEL}'" in info.value.message()


# ------------------------------------------------- (h) a stuck model: bounded exit and unload

EXIT_TIMEOUT = "2"


def start_stuck_requests(
    server: ServerProcess, protocol: str
) -> list[tuple[threading.Thread, dict]]:
    """Two inferences on ``stuck`` (whose execute never returns), each in a thread with its
    outcome ("error" or "result") in a dict: once the second is pending, the first is in the
    model's execute (one instance)."""
    runs = []
    for _ in range(2):
        outcome: dict[str, Any] = {}
        worker = threading.Thread(target=_infer_stuck, args=(server, protocol, outcome))
        worker.start()
        runs.append((worker, outcome))
    assert wait_until(lambda: pending(server, "stuck") == 1, TIMEOUT_S), server.log_text()
    return runs


def _infer_stuck(server: ServerProcess, protocol: str, outcome: dict[str, Any]) -> None:
    c = open_client(server, protocol)  # tritonclient.http: the client lives in its thread
    try:
        outcome["result"] = infer_fp32(c, protocol, "stuck", np.ones(2, dtype=np.float32))
    except Exception as exc:  # checked by the caller
        outcome["error"] = exc
    finally:
        c.close()


def pending(server: ServerProcess, model: str) -> int:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    found = re.search(
        rf'^nv_inference_pending_request_count{{model="{model}",version="1"}} (\d+)$', text, re.M
    )
    return int(found.group(1)) if found else -1


def assert_stuck_requests_failed(runs: list[tuple[threading.Thread, dict]]) -> None:
    """Both got an error: the executing one that its model was unloaded under it."""
    messages = []
    for worker, outcome in runs:
        worker.join(TIMEOUT_S)
        assert not worker.is_alive()
        error = outcome.get("error")
        assert isinstance(error, InferenceServerException), outcome
        messages.append(error.message())
    assert any("unloaded while executing" in m for m in messages), messages


@pytest.fixture
def stuck_repo(tmp_path: Path) -> Path:
    return build_test_repository(tmp_path / "repo", ["stuck", GOOD_MODEL])


def test_sigterm_with_stuck_model_exits_within_exit_timeout(
    stuck_repo: Path, protocol: str
) -> None:
    server = ServerProcess([stuck_repo], f"--exit-timeout-secs={EXIT_TIMEOUT}")
    try:
        runs = start_stuck_requests(server, protocol)
        stubs = stub_pids(server.proc.pid)
        assert len(stubs) == 2, stubs

        server.proc.send_signal(signal.SIGTERM)

        code = server.proc.wait(timeout=TIMEOUT_S)  # it hung forever before
        log = server.log_text()
        assert_stuck_requests_failed(runs)
    finally:
        server.stop()
    assert code == 0, log
    assert wait_until(lambda: not any(is_running(pid) for pid in stubs), 10.0), stubs


def test_sigkill_server_takes_its_stubs_along(stuck_repo: Path) -> None:
    server = ServerProcess([stuck_repo])
    try:
        runs = start_stuck_requests(server, "http")  # a stub busy in the model's code
        stubs = stub_pids(server.proc.pid)
        assert len(stubs) == 2, stubs

        server.proc.kill()
        server.proc.wait(timeout=TIMEOUT_S)

        assert wait_until(lambda: not any(is_running(pid) for pid in stubs), 10.0), [
            pid for pid in stubs if is_running(pid)
        ]
        for worker, _ in runs:
            worker.join(TIMEOUT_S)
    finally:
        server.stop()


def test_unload_of_stuck_model_is_bounded(stuck_repo: Path, protocol: str) -> None:
    server = ServerProcess(
        [stuck_repo],
        "--model-control-mode=explicit",
        "--load-model=stuck",
        f"--load-model={GOOD_MODEL}",
        f"--exit-timeout-secs={EXIT_TIMEOUT}",
    )
    try:
        runs = start_stuck_requests(server, protocol)
        stub = next(iter(stub_pids(server.proc.pid, "stuck_0_0")))
        c = open_client(server, protocol)
        try:
            c.unload_model("stuck")  # waited forever before
        finally:
            c.close()
        assert_stuck_requests_failed(runs)
        assert wait_until(lambda: not is_running(stub), 10.0)
        assert model_ready(server, protocol, "stuck") is False
        assert_identity_serves(server)
        assert server.stop() == 0
    finally:
        server.stop()
