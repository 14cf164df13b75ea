"""Python stubs are forked from the server's stub zygote (issue 43, memory at rest): they share
its imported modules copy-on-write, the zygote keeps their groups (no keeper interpreter per
stub), and a zygote that dies takes its stubs and their model's children with it; the server
restarts them from a new zygote.

Processes are read through /proc (``stub_procs``); requests go through the official clients.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.integration.test_hostile_models import _fork_pids
from tests.integration.test_stub_recovery import infer, ready_everywhere
from tests.support.models import build_test_repository
from tests.support.stub_procs import is_running, stub_pids, wait_until
from testkit.server_process import ServerProcess

MODELS = ["identity_fp32", "hostile_fork", "crash_on_negative"]
ZYGOTE_MODULE = "tritium.backends.python.stub_zygote"


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # from the state on (field 3)


def _ppid(pid: int) -> int:
    return int(_stat(pid)[1])


def _pgid(pid: int) -> int:
    return int(_stat(pid)[2])


def _cmdline(pid: int) -> list[str]:
    return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if a]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _ppid(int(entry.name)) == pid and is_running(int(entry.name)):
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _zygotes(server: ServerProcess) -> list[int]:
    return [p for p in _children(server.proc.pid) if ZYGOTE_MODULE in _cmdline(p)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path / "repo", MODELS)
    proc = ServerProcess([repo], "--model-instance-max-restarts=100")
    yield proc
    proc.stop()


def test_stubs_are_forked_from_one_zygote_without_keeper_interpreters(
    server: ServerProcess,
) -> None:
    """Each stub: a child of the one zygote (itself the server's child), the leader of a
    group of its own, with the command line a spawned stub has; no process of the server's
    tree is a keeper interpreter (``python -I -S -c``) any more."""
    found = stub_pids(server.proc.pid)  # and the children hostile_fork forked (its copies)
    stubs = {pid: name for pid, name in found.items() if _ppid(pid) not in found}
    assert sorted(stubs.values()) == sorted(f"{m}_0_0" for m in MODELS), stubs
    zygotes = _zygotes(server)
    assert len(zygotes) == 1, zygotes
    for pid, instance in stubs.items():
        assert _ppid(pid) == zygotes[0], (pid, instance)
        assert _pgid(pid) == pid, (pid, instance)
        line = _cmdline(pid)
        at = line.index("tritium.backends.python.stub")
        assert line[at - 1].endswith("triton_python_backend_stub.py"), line  # Triton's name
        assert line[at + 2 : at + 4] == [str(server.proc.pid), instance], line
    tree = [server.proc.pid]
    for pid in tree:
        tree.extend(_children(pid))
    keepers = [p for p in tree if _cmdline(p)[1:4] == ["-I", "-S", "-c"]]
    assert not keepers, [_cmdline(p) for p in keepers]


def test_a_killed_zygote_takes_its_stubs_and_their_children_and_they_come_back(
    server: ServerProcess,
) -> None:
    """SIGKILL of the zygote: its stubs and the model's forked children die, the server
    reports the stubs dead and restarts them from a new zygote; every model serves again."""
    child, sleeper, stub = _fork_pids(server, "http")  # hostile_fork's child, sleeper, stub
    old_stubs = set(stub_pids(server.proc.pid))
    (zygote,) = _zygotes(server)
    os.kill(zygote, signal.SIGKILL)
    assert wait_until(lambda: not any(is_running(p) for p in (child, sleeper, *old_stubs)))
    assert wait_until(lambda: len(_zygotes(server)) == 1 and _zygotes(server) != [zygote])
    for model in MODELS:
        assert wait_until(lambda m=model: ready_everywhere(server, m), 60.0), model
    assert not set(stub_pids(server.proc.pid)) & old_stubs
    np.testing.assert_array_equal(infer(server, "http", "identity_fp32", [1.0, 2.0]), [1, 2])
    assert _fork_pids(server, "http")[2] != stub


_DRAWS_MODEL = """\
import json, os, random
import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], "draws-" + args["model_instance_name"])
        with open(path, "w") as f:
            json.dump([random.random(), *np.random.rand(2).tolist()], f)

    def execute(self, requests):
        return []
"""
_DRAWS_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 3, kind: KIND_CPU } ]
"""


def test_forked_stubs_draw_their_own_random_numbers(tmp_path: Path) -> None:
    """Three stubs forked from one zygote: ``random`` and numpy's global generator give each
    its own numbers, as three spawned interpreters would."""
    model = tmp_path / "repo" / "draws"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(_DRAWS_MODEL)
    (model / "config.pbtxt").write_text(_DRAWS_CONFIG)
    server = ServerProcess([tmp_path / "repo"])
    try:
        draws = [json.loads(p.read_text()) for p in sorted(model.glob("1/draws-*"))]
        draws += [json.loads(p.read_text()) for p in sorted(model.glob("draws-*"))]
    finally:
        server.stop()
    assert len(draws) == 3, draws
    for position in range(3):
        assert len({d[position] for d in draws}) == 3, draws
