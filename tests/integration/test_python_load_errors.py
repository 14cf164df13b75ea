"""A Python model whose ``model.py`` fails to import (ImportError, SyntaxError, an exception at
module level) or whose ``initialize`` raises: the repository index (HTTP and gRPC, official
clients) says UNAVAILABLE with the exception text and the model's file and line in Triton's
shape (``<Type>: <message>\\n\\nAt:\\n  <file>(<line>): <function>``), and the server log has
the traceback, recorded at the model's ``model.py:<line>``, then the load failure."""

from __future__ import annotations

import os
import re
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.clients import client
from testkit.server_process import ServerProcess
from tests.support.stub_procs import stub_pids, wait_until

PROTOCOLS = ("http", "grpc")

SOURCES = {
    # name: (model.py, the line that fails, the innermost function, the exception's text)
    "import_missing": (
        "import numpy as np\nimport no_such_module_for_tritium\n",
        2,
        "<module>",
        "ModuleNotFoundError: No module named 'no_such_module_for_tritium'",
    ),
    "syntax_broken": (
        "import numpy as np\n\n\nclass TritonPythonModel:\n    def execute(self, requests)\n"
        "        return []\n",
        5,
        "<module>",
        "SyntaxError: expected ':' (model.py, line 5)",
    ),
    "module_raises": (
        "def _setup():\n    raise ValueError('no weights at module level')\n\n\n_setup()\n",
        2,
        "_setup",
        "ValueError: no weights at module level",
    ),
    "initialize_raises": (
        "class TritonPythonModel:\n    def initialize(self, args):\n"
        "        raise RuntimeError('initialize broke')\n",
        3,
        "initialize",
        "RuntimeError: initialize broke",
    ),
}


def _config(name: str) -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 0
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    """)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("load_errors")
    for name, (source, *_rest) in SOURCES.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_config(name))
        (root / name / "1" / "model.py").write_text(source)
    return root


@pytest.fixture(scope="module")
def served(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    log_file = tmp_path_factory.mktemp("load_errors_log") / "server.log"
    proc = ServerProcess([repo], "--exit-on-error=false", f"--log-file={log_file}")
    yield proc, log_file
    proc.stop()


def _reason(proc: ServerProcess, protocol: str, name: str) -> str:
    c = client(protocol, proc.url(protocol))
    try:
        if protocol == "http":
            rows = list(c.get_model_repository_index())
        else:
            rows = list(c.get_model_repository_index(as_json=True).get("models", []))
    finally:
        c.close()
    mine = [row for row in rows if row["name"] == name]
    assert [row.get("state") for row in mine] == ["UNAVAILABLE"], mine
    return str(mine[0]["reason"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_index_reason_has_the_exception_and_the_model_line(
    served: tuple[Any, Path], repo: Path, protocol: str, name: str
) -> None:
    proc, _ = served
    _, line, function, text = SOURCES[name]
    path = repo / name / "1" / "model.py"
    reason = _reason(proc, protocol, name)
    head, _, frames = reason.partition("\n\nAt:\n")
    assert head == text
    assert frames.splitlines()[0] == f"  {path}({line}): {function}", reason
    assert "stub.py" not in reason and "frozen importlib" not in reason


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_log_has_the_traceback_at_the_models_line_then_the_failure(
    served: tuple[Any, Path], repo: Path, name: str
) -> None:
    _, log_file = served
    _, line, _, text = SOURCES[name]
    path = repo / name / "1" / "model.py"
    log = log_file.read_text()
    record = re.search(
        rf"^E\d{{4}} [\d:.]+ \d+ model\.py:{line}\] Failed to initialize Python stub "
        rf"'{name}_0_0'( for auto-complete)?: (?P<body>(.*\n)+?){re.escape(text.split(' (')[0])}$",
        log,
        re.MULTILINE,
    )
    assert record, log[-4000:]
    assert f'File "{path}", line {line}' in record["body"]
    failed = re.search(
        # logged by the version's lifecycle (repository/lifecycle.py; Triton's
        # model_lifecycle.cc logs the same line)
        rf"^E\d{{4}} [\d:.]+ \d+ lifecycle\.py:\d+\] failed to load '{name}' version 1: "
        rf"{re.escape(text)}\n\nAt:\n  {re.escape(str(path))}\({line}\)",
        log,
        re.MULTILINE,
    )
    assert failed, log[-4000:]
    assert record.start() < failed.start()  # the traceback comes first


# -- Triton's log lines for a stub that is not healthy, and a model file that is not there ----
# (qa/L0_backend_python/test.sh "init_exit" and "non_existent_model", model_readiness/test.sh)

_KILLED_IN_INIT = """\
import os
import signal


class TritonPythonModel:
    def initialize(self, args):
        os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, requests):
        return None
"""

_IDENTITY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return out
"""


@pytest.fixture(scope="module")
def unhealthy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    root = tmp_path_factory.mktemp("unhealthy")
    sources = {"init_killed": _KILLED_IN_INIT, "file_missing": None, "killed_later": _IDENTITY}
    for name, source in sources.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(
            _config(name) + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        )
        if source is not None:
            (root / name / "1" / "model.py").write_text(source)
    # a killed stub stays down (no restart racing the readiness checks)
    proc = ServerProcess(
        [root], "--exit-on-error=false", "--log-verbose=1", "--model-instance-max-restarts=0"
    )
    yield proc, root
    proc.stop()


def test_a_stub_killed_while_loading_is_logged_not_healthy(
    unhealthy: tuple[ServerProcess, Path],
) -> None:
    proc, _ = unhealthy
    failed = re.search(
        r"^E.* failed to load 'init_killed' version 1: Stub process 'init_killed_0_0' is not "
        r"healthy\. It exited: killed by signal SIGKILL",
        proc.log_text(),
        re.MULTILINE,
    )
    assert failed, proc.log_text()[-4000:]


def test_a_missing_model_file_is_logged_as_tritons_stub_does(
    unhealthy: tuple[ServerProcess, Path],
) -> None:
    proc, root = unhealthy
    log = proc.log_text()
    path = root / "file_missing" / "1" / "model.py"
    said = re.search(
        rf"^I.*\] Failed to preinitialize Python stub: Python model file not found in "
        rf"'{re.escape(str(path))}'$",
        log,
        re.MULTILINE,
    )
    failed = re.search(r"^E.* failed to load 'file_missing' version 1: ", log, re.MULTILINE)
    assert said and failed, log[-4000:]
    assert said.start() < failed.start()


def test_readiness_of_a_dead_stub_is_logged_not_healthy(
    unhealthy: tuple[ServerProcess, Path],
) -> None:
    proc, _ = unhealthy
    pids = stub_pids(proc.proc.pid, "killed_later_0_0")
    assert len(pids) == 1, pids
    os.kill(next(iter(pids)), signal.SIGKILL)
    assert wait_until(lambda: not stub_pids(proc.proc.pid, "killed_later_0_0"))
    line = (
        "Model 'killed_later' version 1 is not ready: Stub process 'killed_later_0_0' is not "
        "healthy."
    )
    # the server learns of the death from the stub's socket, a moment after the process is
    # gone: the model's own status in the index says when it has (no readiness check logged)
    index = client("http", proc.http_url)
    assert wait_until(
        lambda: any(
            r["name"] == "killed_later" and r.get("state") != "READY"
            for r in index.get_model_repository_index()
        )
    )
    index.close()
    before = proc.log_text().count(line)
    for protocol in PROTOCOLS:
        c = client(protocol, proc.url(protocol))
        assert not c.is_model_ready("killed_later")
        c.close()
    assert wait_until(lambda: proc.log_text().count(line) == before + 2), proc.log_text()[-4000:]
