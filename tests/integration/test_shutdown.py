"""SIGINT as Triton handles it (``main.cc``: ``HTTPServer::Stop``, ``grpc::Server::
GracefulStop``, ``InferenceServer::Stop``; ``qa/L0_lifecycle`` test_shutdown_with_live_connection
and test_shutdown_while_loading): within one ``--exit-timeout-secs`` the HTTP endpoint stops
accepting connections and keeps serving the open ones, new requests on them included; gRPC is
served until then; the in-flight requests finish; a load in progress finishes and the model is
then unloaded; the log has Triton's lines. Each test runs a server of its own."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess, server_command

DRAIN_IDLE_DEFAULT = "--http-drain-idle-secs=5"  # the server's default, named

EXIT_TIMEOUT = 15
TIMEOUT_S = 30.0
SLOW_S = 2.0  # drain_slow's execute()
LOAD_S = 3.0  # slow_load's initialize()

_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""

_SLOW_PY = f"""
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLOW_S!r})
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""

_SLOW_LOAD_PY = f"""
import json
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.marker = params["MARKER"]["string_value"]
        time.sleep({LOAD_S!r})

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]

    def finalize(self):
        with open(self.marker, "w") as f:
            f.write("finalized")
"""


def _write(root: Path, name: str, source: str, extra: str = "") -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(_CONFIG.format(name=name, extra=extra))
    (root / name / "1" / "model.py").write_text(source)


def _body(values: list[float]) -> bytes:
    tensor = {"name": "INPUT0", "shape": [len(values)], "datatype": "FP32", "data": values}
    return json.dumps({"inputs": [tensor]}).encode()


def _infer(conn: http.client.HTTPConnection, model: str, values: list[float]) -> tuple[int, Any]:
    """One inference on ``conn`` (kept alive): the status and the decoded body."""
    conn.request("POST", f"/v2/models/{model}/infer", _body(values))
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def _connect(proc: ServerProcess) -> http.client.HTTPConnection:
    host, port = proc.http_url.split(":")
    return http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)


def _exited(proc: ServerProcess) -> tuple[int, float]:
    """The exit code, and how long after the call the server took to exit (printed)."""
    started = time.monotonic()
    code = proc.proc.wait(timeout=EXIT_TIMEOUT + 10)
    return code, time.monotonic() - started


@pytest.fixture
def drain_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    _write(root, "drain_slow", _SLOW_PY)
    _write(root, "drain_echo", _SLOW_PY.replace(f"time.sleep({SLOW_S!r})", "pass"))
    return root


@pytest.mark.parametrize("workers", [1, 2])
def test_sigint_keeps_serving_open_connections(drain_repo: Path, workers: int) -> None:
    """A keep-alive connection open at the signal is still served (a new request on it too)
    while the slow request in flight finishes; a new connection is refused; gRPC serves until
    the HTTP connections are gone; the log has Triton's lines; exit 0 within the timeout."""
    # the default drain of idle connections (test servers close them at once otherwise)
    args = [f"--exit-timeout-secs={EXIT_TIMEOUT}", f"--workers={workers}", DRAIN_IDLE_DEFAULT]
    proc = ServerProcess([drain_repo], *args)
    try:
        keep = _connect(proc)
        assert _infer(keep, "drain_echo", [1.0])[0] == 200
        grpc = client("grpc", proc.grpc_url)
        assert grpc.is_server_live()
        worker, slow = _start_slow(proc)
        time.sleep(0.5)  # the slow request is executing
        signalled = time.monotonic()
        proc.proc.send_signal(signal.SIGINT)
        time.sleep(0.5)

        status, answer = _infer(keep, "drain_echo", [2.0, 3.0])  # Triton: served
        assert status == 200, answer
        assert answer["outputs"][0]["data"] == [2.0, 3.0]
        with pytest.raises(OSError):  # Triton: no new connection
            fresh = _connect(proc)
            try:
                _infer(fresh, "drain_echo", [1.0])
            finally:
                fresh.close()
        if workers == 1:  # gRPC is stopped after HTTP (with workers, by each worker)
            data = np.array([4.0], dtype=np.float32)
            result = grpc.infer("drain_echo", [make_input("grpc", "INPUT0", data, "FP32")])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)

        worker.join(TIMEOUT_S)
        assert "error" not in slow, slow.get("error")
        assert slow["answer"][0] == 200, slow
        assert slow["answer"][1]["outputs"][0]["data"] == [7.0, 8.0]
        keep.close()
        grpc.close()
        code, took = _exited(proc)
        print(
            f"exited {time.monotonic() - signalled:.2f} s after SIGINT ({took:.2f} s after "
            f"the last connection closed), workers={workers}"
        )
        log = proc.log_text()
    finally:
        proc.stop()
    assert code == 0, log
    assert re.search(r"Timeout \d+: Found [12] HTTP service connections", log), log
    _assert_core_lines(log)
    assert f"Timeout {EXIT_TIMEOUT + 1}:" not in log  # one countdown from the signal on


def _start_slow(proc: ServerProcess) -> tuple[threading.Thread, dict[str, Any]]:
    """drain_slow's request, on a connection of its own, in a thread."""
    slow: dict[str, Any] = {}

    def run_slow() -> None:
        conn = _connect(proc)
        try:
            slow["answer"] = _infer(conn, "drain_slow", [7.0, 8.0])
        except Exception as exc:  # reported by the test
            slow["error"] = exc
        finally:
            conn.close()

    worker = threading.Thread(target=run_slow)
    worker.start()
    return worker, slow


def _assert_core_lines(log: str) -> None:
    """Triton's InferenceServer::Stop lines, down to nothing left."""
    for line in (
        "Waiting for in-flight requests to complete.",
        "All models are stopped, unloading models",
    ):
        assert line in log, log
    assert re.search(r"Timeout \d+: Found 0 model versions that have in-flight inferences", log)
    assert re.search(
        r"Timeout \d+: Found 0 live models and 0 in-flight non-inference requests", log
    ), log


@pytest.fixture
def load_repo(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    root = tmp_path / "repo"
    marker = tmp_path / "finalized"
    extra = f'parameters {{ key: "MARKER" value {{ string_value: "{marker}" }} }}'
    _write(root, "slow_load", _SLOW_LOAD_PY, extra)
    yield root, marker


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sigint_during_a_load_finishes_it_then_unloads(
    load_repo: tuple[Path, Path], protocol: str, workers: int
) -> None:
    """Triton's test_shutdown_while_loading: the load in progress finishes (its client is
    answered), then the model is unloaded (finalize runs) and the server exits 0."""
    root, marker = load_repo
    proc = ServerProcess(
        [root],
        "--model-control-mode=explicit",
        f"--exit-timeout-secs={EXIT_TIMEOUT}",
        f"--workers={workers}",
    )
    outcome: dict[str, Any] = {}
    try:

        def load() -> None:
            c = client(protocol, proc.url(protocol))
            try:
                c.load_model("slow_load")
                outcome["loaded"] = True
            except Exception as exc:  # reported below
                outcome["error"] = exc
            finally:
                c.close()

        worker = threading.Thread(target=load)
        worker.start()
        time.sleep(1.0)  # initialize() is sleeping
        proc.proc.send_signal(signal.SIGINT)
        worker.join(TIMEOUT_S)
        code, took = _exited(proc)
        print(f"exited {took:.2f} s after the load was answered ({protocol})")
        log = proc.log_text()
    finally:
        proc.stop()
    assert outcome == {"loaded": True}, outcome
    assert code == 0, log
    assert marker.read_text() == "finalized", log
    _assert_core_lines(log)


def test_an_idle_keep_alive_connection_does_not_hold_the_shutdown(drain_repo: Path) -> None:
    """tritium's bound on Triton's HTTP phase: a keep-alive connection left idle is closed
    after --http-drain-idle-secs (5 s), so the server exits before the exit timeout runs out
    (Triton waits for it to the end), with the timeout's budget left for the core."""
    proc = ServerProcess([drain_repo], f"--exit-timeout-secs={EXIT_TIMEOUT}", DRAIN_IDLE_DEFAULT)
    try:
        keep = _connect(proc)
        assert _infer(keep, "drain_echo", [1.0])[0] == 200
        proc.proc.send_signal(signal.SIGINT)
        assert keep.sock is not None
        assert keep.sock.recv(1) == b""  # the server closed it
        code, took = _exited(proc)
        print(f"exited {took:.2f} s after the idle connection was closed")
        log = proc.log_text()
        keep.close()
    finally:
        proc.stop()
    assert code == 0, log
    assert "Found 1 HTTP service connections" in log, log
    _assert_core_lines(log)
    assert "Timeout 0:" not in log, log  # the budget did not run out


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


@pytest.mark.parametrize("hang", [False, True])
def test_sigint_during_the_startup_load(tmp_path: Path, hang: bool) -> None:
    """A signal while the models load at start: the load finishes (bounded by the exit
    timeout: one that hangs is cancelled), the front-ends never start, the model is unloaded
    (finalize runs) and the server exits 0."""
    root, marker = tmp_path / "repo", tmp_path / "finalized"
    source = _SLOW_LOAD_PY.replace(
        "time.sleep(", "time.sleep(600 + 0 * " if hang else "time.sleep("
    )
    extra = f'parameters {{ key: "MARKER" value {{ string_value: "{marker}" }} }}'
    _write(root, "slow_load", source, extra)
    command = server_command([root], "--exit-timeout-secs=3", "--http-port=0", "--grpc-port=0")
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not _children(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # the model's stub process started: its load is under way
            stubs = _children(proc.pid)
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=TIMEOUT_S)  # a hanging load held it for 600 s before
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = log_path.read_text()
    assert code == 0, log
    assert stubs, log
    assert "Waiting for the models loading to complete." in log, log
    assert "Started HTTPService" not in log, log
    if hang:
        assert not marker.exists(), log
    else:
        assert marker.read_text() == "finalized", log
        _assert_core_lines(log)


def test_ports_refuse_connections_until_the_startup_models_are_loaded(tmp_path: Path) -> None:
    """As Triton's: the ports are bound before the models load (a port in use stops the start
    at once) but accept connections only once the startup models are loaded, so a client
    polling for readiness is refused during the load instead of hanging in a backlog."""
    root, marker = tmp_path / "repo", tmp_path / "finalized"
    extra = f'parameters {{ key: "MARKER" value {{ string_value: "{marker}" }} }}'
    _write(root, "slow_load", _SLOW_LOAD_PY, extra)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = server_command([root], f"--http-port={port}")
    with open(tmp_path / "server.log", "wb") as log_file:
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not _children(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)  # the model's stub process started: its load is under way
            assert _children(proc.pid), (tmp_path / "server.log").read_text()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S).close()
            status = None
            while status != 200 and time.monotonic() < deadline:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
                    status, _ = _infer(conn, "slow_load", [1.0, 2.0])
                    conn.close()
                except ConnectionRefusedError:
                    time.sleep(0.1)  # still loading
            assert status == 200, (tmp_path / "server.log").read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=TIMEOUT_S)
