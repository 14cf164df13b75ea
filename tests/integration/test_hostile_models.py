"""A hostile (or broken) Python model may only hurt itself, never the server (issue 22).

Each scenario drives the real server with the official tritonclient over HTTP and gRPC and
checks that the server is still there and serves other models, and that the hostile model's
own requests fail with a clear error (its stub restarted) or are answered. Models:
testkit/hostile_models.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from testkit.hostile_models import HOSTILE_PUSH_BYTES
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tests.support.stub_procs import is_running, stub_pids, wait_until
from tritonclient.utils import InferenceServerException

MODELS = [
    "hostile_truncate",
    "hostile_frames",
    "hostile_self_call",
    "hostile_fork",
    "identity_onnx_queued",
    "identity_py_queued",
    "identity_onnx_fp32",
    "identity_fp32",
]
TIMEOUT_S = 20.0
_DEV_SHM = Path("/dev/shm")
_BIG = 1 << 20  # float32 values: 4 MiB, so BLS tensors go through /dev/shm segments
needs_shm = pytest.mark.skipif(not _DEV_SHM.is_dir(), reason="no /dev/shm: tensors go inline")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("hostile") / "repo", MODELS)
    proc = ServerProcess(
        [repo], "--model-instance-max-restarts=100", "--http-max-input-size", str(64 << 20)
    )
    yield proc
    proc.stop()


def _client(server: ServerProcess, protocol: str, timeout: float = TIMEOUT_S) -> Any:
    if protocol == "http":
        return client(
            protocol, server.http_url, connection_timeout=timeout, network_timeout=timeout
        )
    return client(protocol, server.grpc_url)


def _infer(
    server: ServerProcess,
    protocol: str,
    model: str,
    data: np.ndarray,
    timeout: float = TIMEOUT_S,
    **kwargs: Any,
) -> Any:
    c = _client(server, protocol, timeout)
    try:
        extra = {"client_timeout": timeout} if protocol == "grpc" else {}
        return c.infer(model, [make_input(protocol, "INPUT0", data, "FP32")], **extra, **kwargs)
    finally:
        c.close()


def _error(server: ServerProcess, protocol: str, model: str, data: np.ndarray) -> str:
    with pytest.raises(InferenceServerException) as info:
        _infer(server, protocol, model, data)
    return str(info.value.message())


def _serves_others(server: ServerProcess, protocol: str) -> None:
    assert server.proc.poll() is None, server.log_text()[-4000:]
    data = np.arange(8, dtype=np.float32)
    for model in ("identity_fp32", "identity_onnx_fp32"):
        out = _infer(server, protocol, model, data).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, data)


def _serves_again(server: ServerProcess, protocol: str, model: str) -> None:
    """The model answers again (its stub restarted): a plain request gets its input back."""
    data = np.zeros(4, dtype=np.float32)

    def answered() -> bool:
        try:
            out = _infer(server, protocol, model, data).as_numpy("OUTPUT0")
        except InferenceServerException:
            return False
        return bool(np.array_equal(out, data))

    assert wait_until(answered, timeout=TIMEOUT_S), server.log_text()[-4000:]


def _ready(server: ServerProcess, protocol: str, model: str) -> None:
    def ready() -> bool:
        c = _client(server, protocol)
        try:
            return bool(c.is_model_ready(model))
        finally:
            c.close()

    assert wait_until(ready, timeout=TIMEOUT_S), server.log_text()[-4000:]


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# -- finding 5: a model truncates its own shared-memory segments --------------------------------


@needs_shm
@pytest.mark.parametrize("target", ["identity_onnx_queued", "identity_py_queued"])
def test_truncating_a_queued_childs_input_hurts_nobody(
    server: ServerProcess, protocol: str, target: str
) -> None:
    """The model truncates the segments of its pair (its BLS input's among them) while the
    child waits in its model's queue: the server took the tensor into its own memory when it
    received it, and writes the answer with pwrite, so the child runs on the values sent, the
    server lives and an innocent Python child's stub is not torn down."""
    instance = f"{target}_0_0"
    before = stub_pids(server.proc.pid, instance)
    data = np.random.default_rng(5).random(_BIG, dtype=np.float32)
    params = {"mode": "queued", "target": target}
    result = _infer(server, protocol, "hostile_truncate", data, parameters=params)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    _serves_others(server, protocol)
    assert stub_pids(server.proc.pid, instance) == before


@needs_shm
def test_truncating_segments_again_and_again_hurts_only_the_model(
    server: ServerProcess, protocol: str
) -> None:
    """A stress check (not a replay of a known failure): a thread of the model truncates every
    segment of its pair while large tensors go back and forth to a Python child; its own
    request may fail with a clear error, or its own stub die of it, but the server and the
    other models go on."""
    data = np.ones(_BIG, dtype=np.float32)
    params = {"mode": "hammer", "target": "identity_fp32", "repeat": 20}
    _ready(server, protocol, "hostile_truncate")  # a stub the last case killed is back
    try:
        result = _infer(server, protocol, "hostile_truncate", data, parameters=params)
    except InferenceServerException as exc:
        message = str(exc.message())
        assert "shared-memory segment" in message or "is not healthy" in message, message
    else:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    _serves_others(server, protocol)
    _serves_again(server, protocol, "identity_fp32")


# -- finding 6: frames the server cannot trust ----------------------------------------------


def test_a_garbage_frame_fails_the_request_and_restarts_the_stub(
    server: ServerProcess, protocol: str
) -> None:
    message = _error(server, protocol, "hostile_frames", np.array([1.0], dtype=np.float32))
    assert "Stub process 'hostile_frames_0_0' is not healthy." in message, message
    assert "malformed frame" in message, message
    _serves_again(server, protocol, "hostile_frames")
    _serves_others(server, protocol)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_frame_declaring_a_huge_buffer_is_refused_before_it_is_buffered(
    server: ServerProcess, protocol: str
) -> None:
    """A frame head declares a 2 GiB buffer and the model pushes 128 MiB after it: the
    server refuses the head (it never buffers what a stub could not legitimately send)."""
    before = _rss(server.proc.pid)
    message = _error(server, protocol, "hostile_frames", np.array([2.0], dtype=np.float32))
    grown = _rss(server.proc.pid) - before
    assert "malformed frame" in message, message
    assert grown < HOSTILE_PUSH_BYTES // 2, f"the server grew by {grown} bytes"
    _serves_again(server, protocol, "hostile_frames")
    _serves_others(server, protocol)


# -- finding 7: forks, zombies, self-calls, leftovers -------------------------------------------


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _fork_pids(server: ServerProcess, protocol: str) -> list[int]:
    result = _infer(server, protocol, "hostile_fork", np.zeros(2, dtype=np.float32))
    return [int(p) for p in result.as_numpy("OUTPUT1")]


def test_a_forked_models_dead_stub_is_noticed_reaped_and_its_children_killed(
    server: ServerProcess, protocol: str
) -> None:
    """The model's forked child keeps the stub's socket open: the server still notices the
    stub's death (its pid, not only the socket), kills the model's children with it (the
    stub's process group), reaps it (no zombie) and restarts it."""
    child, sleeper, stub = pids = _fork_pids(server, protocol)
    try:
        os.kill(stub, signal.SIGKILL)
        assert wait_until(lambda: not is_running(child) and not is_running(sleeper))
        _serves_again(server, protocol, "hostile_fork")
        assert _fork_pids(server, protocol)[2] != stub
        assert wait_until(lambda: not Path(f"/proc/{stub}").exists()), "a zombie stub"
    finally:
        _kill_all(pids)
    _serves_others(server, protocol)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_models_children_die_with_the_server(tmp_path: Path, how: str) -> None:
    """Killed (the group's watcher kills them) or stopped (the server kills the group)."""
    repo = build_test_repository(tmp_path / "repo", ["hostile_fork"])
    server = ServerProcess([repo])
    pids: list[int] = []
    try:
        pids = _fork_pids(server, "http")
        server.proc.send_signal(getattr(signal, how))
        server.proc.wait(TIMEOUT_S)
        assert wait_until(lambda: not any(is_running(p) for p in pids)), [
            p for p in pids if is_running(p)
        ]
    finally:
        server.stop()
        _kill_all(pids)


def test_cancelling_a_self_call_frees_the_instance(server: ServerProcess, protocol: str) -> None:
    """The model BLS-calls itself: the child waits for the one instance its parent holds.
    The client gives up (HTTP: its connection closes; gRPC: the deadline passes); the
    cancellation reaches the queued child, which leaves the queue with an error, the parent's
    exec() returns, and the instance serves the next request."""
    data = np.arange(4, dtype=np.float32)
    with pytest.raises((InferenceServerException, TimeoutError)) as info:  # HTTP: the socket's
        _infer(server, protocol, "hostile_self_call", data, timeout=1.0, parameters={"again": 1})
    if protocol == "grpc":
        assert isinstance(info.value, InferenceServerException)
        assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED", str(info.value)
    out = _infer(server, protocol, "hostile_self_call", data).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, data)


@needs_shm
def test_segments_of_dead_servers_are_swept_at_start(tmp_path: Path) -> None:
    """Leftovers of a server that died (its pid is gone) are removed when a server starts;
    those of a live server and other names are left alone."""
    dead = _a_dead_pid()
    names = {
        "dead": f"tritium-bls-{dead}-{dead}-0-deadbeef",
        "live": f"tritium-bls-{os.getpid()}-{dead}-0-cafef00d",
        "other": f"tritium-bls-{dead}-x-tests",
    }
    for name in names.values():
        (_DEV_SHM / name).write_bytes(b"leftover")
    repo = build_test_repository(tmp_path / "repo", ["identity_fp32"])
    server = ServerProcess([repo])
    try:
        _serves_again(server, "http", "identity_fp32")
        assert not (_DEV_SHM / names["dead"]).exists()
        assert (_DEV_SHM / names["live"]).exists()
        assert (_DEV_SHM / names["other"]).exists()
    finally:
        server.stop()
        for name in names.values():
            (_DEV_SHM / name).unlink(missing_ok=True)


def _a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
