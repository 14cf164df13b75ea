"""A worker of ``--workers 2`` (explicit model control) started again after a kill -9
replays what was loaded since the start, ``file:`` overrides included, and comes back
serving; the supervisor does not hold the uploads (it keeps them on disk, in its uploads
directory); a worker that makes no progress in its replay is killed and started again; and
the overrides directory a killed worker leaves is swept by the next start.

One server for the module, its TMPDIR a directory of the test's own (the scratch
directories are looked at there), with the Python ``stall`` model in its repository (its
``initialize`` waits while a marker file exists).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_workers import _connect, _identity, _wait_workers
from tests.support.identity_model import IDENTITY_FP32_CONFIG, IDENTITY_FP32_PY
from testkit.server_process import ServerProcess

UPLOADS = 5
UPLOAD_BYTES = 8 << 20
TIMEOUT_S = 150.0

STALL_PY = b"""\
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = json.loads(args["model_config"])["parameters"]["marker"]["string_value"]
        deadline = time.monotonic() + 300
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replay")


@pytest.fixture(scope="module")
def server(base: Path) -> Iterator[ServerProcess]:
    repo, tmp = base / "repo", base / "tmp"
    (repo / "stall" / "1").mkdir(parents=True)
    tmp.mkdir()
    (repo / "stall" / "1" / "model.py").write_bytes(STALL_PY)
    (repo / "stall" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        f'parameters {{ key: "marker" value: {{ string_value: "{base / "stall-marker"}" }} }}\n'
    )
    proc = ServerProcess(
        [repo], "--workers", "2", "--model-control-mode", "explicit",
        "--worker-heartbeat-secs", "5", "--exit-timeout-secs", "20",
        start_timeout=120, env={"TMPDIR": str(tmp)},
    )  # fmt: skip
    yield proc
    (base / "stall-marker").unlink(missing_ok=True)
    proc.stop()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _infer_everywhere(server: ServerProcess, name: str, times: int = 6) -> None:
    """``name`` answers on fresh connections (both workers get some)."""
    for protocol in ("http", "grpc") * (times // 2):
        c = _connect(protocol, server)
        try:
            result = c.infer(name, _identity(protocol))
        finally:
            c.close()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4, dtype=np.float32))


def _overrides(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("tritium-overrides-*"))


def test_a_killed_worker_comes_back_after_large_uploads(server: ServerProcess, base: Path) -> None:
    supervisor = server.proc.pid
    pids = _wait_workers(server, 2)
    before = _rss_mib(supervisor)
    c = _connect("http", server)
    try:
        for n in range(UPLOADS):
            files = {
                "file:1/model.py": IDENTITY_FP32_PY,
                "file:1/blob.bin": os.urandom(UPLOAD_BYTES),
            }
            c.load_model(f"big{n}", config=json.dumps(IDENTITY_FP32_CONFIG), files=files)
    finally:
        c.close()
    loaded = _rss_mib(supervisor)
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    started = time.monotonic()
    _wait_workers(server, 2, without={victim})
    back = time.monotonic() - started
    after = _rss_mib(supervisor)
    uploaded = UPLOADS * UPLOAD_BYTES / (1 << 20)
    print(
        f"{UPLOADS} uploads of {UPLOAD_BYTES >> 20} MiB: worker back serving in {back:.1f} s; "
        f"supervisor RSS {before:.0f} -> {loaded:.0f} (loaded) -> {after:.0f} MiB (replayed)"
    )
    assert after - before < uploaded / 2, (before, loaded, after)
    for n in range(UPLOADS):
        _infer_everywhere(server, f"big{n}")


def test_a_killed_workers_overrides_directory_is_swept(server: ServerProcess, base: Path) -> None:
    tmp = base / "tmp"
    pids = _wait_workers(server, 2)
    c = _connect("http", server)
    try:  # every worker has an overrides directory (the first test's loads made them too)
        c.load_model("small", config=json.dumps(IDENTITY_FP32_CONFIG),
                     files={"file:1/model.py": IDENTITY_FP32_PY})  # fmt: skip
    finally:
        c.close()
    assert len(_overrides(tmp)) == 2, _overrides(tmp)
    victim = max(pids)
    os.kill(victim, signal.SIGKILL)
    _wait_workers(server, 2, without={victim})
    left = _overrides(tmp)
    assert len(left) == 2, left  # the new worker's and the other's: the killed one's is gone
    assert not [p for p in left if p.name.startswith(f"tritium-overrides-{victim}-")]
    _infer_everywhere(server, "small")


def test_a_worker_that_never_syncs_is_replaced(server: ServerProcess, base: Path) -> None:
    marker = base / "stall-marker"
    c = _connect("http", server)
    try:
        c.load_model("stall")
    finally:
        c.close()
    pids = _wait_workers(server, 2)
    marker.touch()  # a replayed load of ``stall`` waits from now on
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + TIMEOUT_S
    started = time.monotonic()
    while "made no progress replaying" not in server.log_text():
        assert time.monotonic() < deadline, server.log_text()[-3000:]
        time.sleep(0.2)
    print(f"the stalled worker was killed {time.monotonic() - started:.1f} s after the kill -9")
    marker.unlink()
    _wait_workers(server, 2, without={victim})
    _infer_everywhere(server, "stall")
