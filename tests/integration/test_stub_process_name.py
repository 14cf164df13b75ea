"""The Python stub's command line names Triton's stub, ``triton_python_backend_stub``, with its
arguments (the instance among them), so what looks for Triton's stubs finds tritium's: Triton's
qa/L0_backend_python/model_readiness finds the stub with ``pgrep -f triton_python_backend_stub``
and kills it. The stub started so serves as before (the model answers; the model readiness
goes down when the stub is killed)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.clients import add_sub_inputs, client
from testkit.server_process import ServerProcess

MODEL = "add_sub_python"


@pytest.fixture
def server(tmp_path: Path, example_repo: Path) -> Iterator[ServerProcess]:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(example_repo / MODEL, repo / MODEL)
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


def _pgrep(server: ServerProcess) -> list[int]:
    """What the QA suite runs, limited to this server's stubs (other servers run here): a
    stub's arguments name the server's pid after the descriptor it serves."""
    pattern = rf"triton_python_backend_stub\S* \S+ [0-9]+ {server.proc.pid} "
    found = subprocess.run(
        ["pgrep", "-f", pattern],
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(pid) for pid in found.stdout.split()]


def test_pgrep_finds_the_stub_by_tritons_name(server: ServerProcess) -> None:
    [pid] = _pgrep(server)
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert any(arg.endswith("triton_python_backend_stub.py") for arg in args), args
    assert f"{MODEL}_0_0" in " ".join(args), args  # the instance, as Triton's args name it
    c = client("http", server.url("http"))
    try:
        inputs, a, b = add_sub_inputs("http")
        result = c.infer(MODEL, inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        # the suite's next step: kill what pgrep found; the model is no longer ready
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while c.is_model_ready(MODEL) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not c.is_model_ready(MODEL)
    finally:
        c.close()
