"""What a new user meets at start (issue 21): a start that cannot serve fails at once, with a
message naming the flag and the value, before any model loads.

Triton's behaviour, from its sources: ``ModelRepositoryManager::Create`` checks every
repository path before loading anything, in every model control mode ("failed to stat file
<path>" for a missing one, "repository path is not a valid directory" for a file), and
``main.cc`` exits with "error: creating server: ...".

The listening ports are bound before the models load (Triton binds them after, and reports a
port in use as "failed to start HTTP service: Unavailable - Socket '0.0.0.0:8000' already in
use"): tritium says the same, with the flag to change, before loading anything.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import numpy as np

from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess, server_command
from tritonclient.utils import InferenceServerException

START_TIMEOUT_S = 120.0
MODEL = "identity_fp32"


def run_to_exit(repositories: list[Path | str], *args: str) -> subprocess.CompletedProcess[str]:
    """Start the server and wait for it to exit on its own (a start that must fail). A
    repository given as text goes on the command line as written (``Path`` folds '//')."""
    command = server_command([], *args)
    for repo in reversed(repositories):
        command[4:4] = ["--model-repository", str(repo)]  # after "python -m tritium serve"
    return subprocess.run(
        command, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def good_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("start") / "repo", [MODEL])


# ------------------------------------------------------------- 1. the model repositories


@pytest.mark.parametrize("mode", ["none", "explicit", "poll"])
def test_a_missing_repository_stops_the_start(tmp_path: Path, mode: str) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    done = run_to_exit([missing], f"--model-control-mode={mode}")
    assert done.returncode != 0
    assert f"--model-repository {missing}: failed to stat file {missing}" in done.stderr
    assert "Started HTTPService" not in done.stdout + done.stderr


def test_every_repository_must_exist(good_repo: Path, tmp_path: Path) -> None:
    """Several repositories: one missing stops the start, even in explicit mode with nothing
    to load from it (Triton checks each path)."""
    missing = tmp_path / "gone"
    done = run_to_exit([good_repo, missing], "--model-control-mode=explicit", "--load-model", MODEL)
    assert done.returncode != 0
    assert f"--model-repository {missing}: failed to stat file" in done.stderr
    assert "successfully loaded" not in done.stdout + done.stderr


def test_a_file_is_not_a_repository(tmp_path: Path) -> None:
    a_file = tmp_path / "models.txt"
    a_file.write_text("not a directory")
    done = run_to_exit([a_file])
    assert done.returncode != 0
    assert f"--model-repository {a_file}: repository path is not a valid directory" in (done.stderr)


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://bucket/models", "as://acct/c/m"])
def test_cloud_repositories_are_refused(url: str) -> None:
    done = run_to_exit([url])
    assert done.returncode != 0
    assert f"--model-repository {url}: cloud model repositories" in done.stderr
    assert "not supported by tritium" in done.stderr
    assert "local directories only" in done.stderr


# The four runs of Triton's qa/L0_lifecycle/test.sh for LifeCycleTest.test_parse_error_noexit:
# a repository path that does not exist (alone, before or after one that does), each with and
# without --strict-readiness, and --exit-on-error=false.
NOEXIT_RUNS = [
    pytest.param(False, False, "true", id="missing-strict"),
    pytest.param(False, False, "false", id="missing"),
    pytest.param(True, False, "true", id="missing-then-empty-strict"),
    pytest.param(True, True, "false", id="empty-then-missing"),
]


@pytest.mark.parametrize(("with_empty", "empty_first", "strict"), NOEXIT_RUNS)
def test_without_exit_on_error_a_missing_repository_leaves_a_server_failed_to_initialize(
    tmp_path: Path, with_empty: bool, empty_first: bool, strict: str
) -> None:
    """Triton (core server.cc Init, tritonserver.cc ServerNew): the model repository manager
    cannot be created, the error is logged, and the server runs in SERVER_FAILED_TO_INITIALIZE:
    not live, not ready, its server metadata answered, its model APIs "Server not ready"."""
    missing = tmp_path / "xyzx"
    empty = tmp_path / "models"
    empty.mkdir()
    repos = [missing]
    if with_empty:
        repos = [empty, missing] if empty_first else [missing, empty]
    server = ServerProcess(
        repos, f"--strict-readiness={strict}", "--exit-on-error=false", wait_ready=False
    )
    try:
        for protocol in ("http", "grpc"):
            c = client(protocol, server.url(protocol))
            try:
                assert c.is_server_live() is False
                assert c.is_server_ready() is False
                md = c.get_server_metadata()
                md = md if protocol == "http" else {"name": md.name, "version": md.version}
                assert md["name"] == "triton" and md["version"], md
                with pytest.raises(InferenceServerException, match="Server not ready"):
                    c.get_model_repository_index()
                with pytest.raises(InferenceServerException, match="Server not ready"):
                    c.load_model(MODEL)
            finally:
                c.close()
        assert server.proc.poll() is None  # still running
        assert f"failed to stat file {missing}" in server.log_text()
    finally:
        assert server.stop() == 0


# -------------------------------------------------- 2. the ports, before any model loads

SERVICES = {"http": "HTTP", "grpc": "GRPC", "metrics": "Metrics"}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_port_in_use_stops_the_start_before_any_model_loads(
    good_repo: Path, service: str
) -> None:
    with socket.socket() as taken:  # another program holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_to_exit([good_repo], f"--{service}-port", str(port))
    assert done.returncode != 0
    assert (
        f"failed to start {SERVICES[service]} service: --{service}-port {port}: "
        f"address 127.0.0.1:{port} already in use"
    ) in done.stderr
    output = done.stdout + done.stderr
    assert "successfully loaded" not in output, output
    assert "Started " not in output, output


def test_two_services_on_one_port_stop_the_start(good_repo: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    done = run_to_exit([good_repo], "--http-port", str(port), "--grpc-port", str(port))
    assert done.returncode != 0
    assert (
        "--http-port and --grpc-port: the server cannot listen to HTTP requests and GRPC "
        f"requests at the same address and port 127.0.0.1:{port}"
    ) in done.stderr
    assert "successfully loaded" not in done.stdout + done.stderr


def test_an_address_the_machine_lacks_names_the_address_flag(good_repo: Path) -> None:
    done = run_to_exit([good_repo], "--grpc-address", "192.0.2.1")  # TEST-NET-1
    assert done.returncode != 0
    assert "failed to start GRPC service: --grpc-address 192.0.2.1: address" in done.stderr
    assert "successfully loaded" not in done.stdout + done.stderr


# ------------------------------------- 3. --backend-directory, --repoagent-directory


@pytest.fixture(scope="module")
def qa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Started as Triton's QA scripts start tritonserver, over a repository that also holds a
    model of a backend tritium does not have."""
    repo = build_test_repository(tmp_path_factory.mktemp("qa") / "repo", [MODEL])
    tf_model = repo / "tf_model"
    (tf_model / "1" / "model.savedmodel").mkdir(parents=True)
    (tf_model / "config.pbtxt").write_text('backend: "tensorflow"\nmax_batch_size: 0\n')
    proc = ServerProcess(
        [repo],
        "--backend-directory=/opt/tritonserver/backends",
        "--repoagent-directory=/opt/tritonserver/repoagents",
        "--exit-on-error=false",
    )
    yield proc
    proc.stop()


def index_rows(server: ServerProcess, protocol: str) -> list[dict[str, Any]]:
    c = client(protocol, server.url(protocol))
    try:
        if protocol == "http":
            return list(c.get_model_repository_index())
        return list(c.get_model_repository_index(as_json=True).get("models", []))
    finally:
        c.close()


def test_directory_flags_start_with_one_warning_each(qa_server: ServerProcess) -> None:
    log = qa_server.log_text()
    backends = [line for line in log.splitlines() if "--backend-directory=" in line]
    agents = [line for line in log.splitlines() if "--repoagent-directory=" in line]
    assert len(backends) == 1 and len(agents) == 1, log
    assert backends[0].startswith("W"), backends  # a warning record
    assert "built in" in backends[0] and "not read" in backends[0], backends
    assert "not read" in agents[0], agents
    assert f"successfully loaded '{MODEL}'" in log  # the other models serve


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_backend_not_built_in_is_unavailable_naming_it(
    qa_server: ServerProcess, protocol: str
) -> None:
    rows = {row["name"]: row for row in index_rows(qa_server, protocol)}
    tf_row = rows["tf_model"]
    assert tf_row["state"] == "UNAVAILABLE", tf_row
    reason = tf_row["reason"]
    assert "unable to find backend 'tensorflow' for model 'tf_model'" in reason, reason
    assert "built in (ensemble, onnxruntime, openvino, python, pytorch)" in reason, reason
    assert rows[MODEL]["state"] == "READY", rows


# -------------------------------------------------------- 5. Triton's ipv6:[::1] syntax


def has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def wait_ready_at(url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not ready at {url}")


@pytest.mark.skipif(not has_ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_triton_ipv6_address_syntax_serves_on_the_ipv6_loopback(good_repo: Path) -> None:
    server = ServerProcess(
        [good_repo],
        *("--http-address", "ipv6:[::1]", "--grpc-address", "ipv6:[::1]"),
        *("--metrics-address", "ipv6:[::1]"),
        wait_ready=False,
    )
    try:
        urls = {name: f"[::1]:{port}" for name, port in server.ports.items()}
        wait_ready_at(urls["http"])
        data = np.array([1.5, -2.0], dtype=np.float32)
        for protocol in ("http", "grpc"):
            c = client(protocol, urls[protocol])
            try:
                assert c.is_server_ready()
                result = c.infer(MODEL, [make_input(protocol, "INPUT0", data, "FP32")])
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            finally:
                c.close()
        with urllib.request.urlopen(f"http://{urls['metrics']}/metrics", timeout=10) as answer:
            assert b"nv_inference_request_success" in answer.read()
        for port in server.ports.values():  # the address written, not every address
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
        log = server.log_text()
        assert f"Started HTTPService at ipv6:[::1]:{server.ports['http']}" in log
        assert f"Started GRPCInferenceService at ipv6:[::1]:{server.ports['grpc']}" in log
    finally:
        server.stop()
