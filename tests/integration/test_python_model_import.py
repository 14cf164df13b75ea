"""How the Python backend imports a ``model.py`` and when it finalizes one, as Triton's stub
does: the file is the module ``<version>.model`` with the version directory a package (a model
of several files uses relative imports), and ``finalize()`` runs only for a model whose
``initialize()`` returned (a model that cleans up in ``finalize`` can retry its load)."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess

_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""

# Answers INPUT0 * factor, the factor from a sibling module imported three ways.
_RELATIVE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

from . import helper
from .helper import FACTOR
import helper as plain_helper

NAME = __name__


class TritonPythonModel:
    def execute(self, requests):
        assert helper.FACTOR == FACTOR == plain_helper.FACTOR
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            scaled = (x * helper.scale()).astype(np.float32)
            named = np.array([float(len(NAME))], dtype=np.float32)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", np.concatenate([scaled, named]))
            ]))
        return out
"""

_HELPER = """
FACTOR = 3.0


def scale():
    return FACTOR
"""

# initialize() fails while the marker file "fail" exists; finalize() writes "finalized".
_RETRY_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(HERE, "fail")):
            raise RuntimeError("told to fail")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]

    def finalize(self):
        with open(os.path.join(HERE, "finalized"), "a") as f:
            f.write("x")
"""


def _model(repo: Path, name: str, files: dict[str, str]) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(_CONFIG.format(name=name))
    for file, text in files.items():
        (folder / "1" / file).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("import") / "repo"
    _model(root, "relative_imports", {"model.py": _RELATIVE_MODEL, "helper.py": _HELPER})
    retry = _model(root, "retry_load", {"model.py": _RETRY_MODEL})
    (retry / "fail").write_text("")
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        [repo],
        "--model-control-mode=explicit",
        "--load-model=relative_imports",
    )
    yield proc
    proc.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_relative_imports_in_a_model_of_several_files(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.url(protocol))
    x = np.array([1.0, 2.0], dtype=np.float32)
    result = c.infer("relative_imports", [make_input(protocol, "INPUT0", x, "FP32")])
    out = result.as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out[:2], x * 3.0)
    assert out[2] == len("1.model")  # the module's __name__, as in Triton's stub


def test_finalize_only_after_initialize_and_load_retry(server: ServerProcess, repo: Path) -> None:
    c = client("http", server.http_url)
    folder = repo / "retry_load"
    with pytest.raises(InferenceServerException, match="told to fail"):
        c.load_model("retry_load")
    assert not (folder / "finalized").exists(), "finalize() ran after initialize() failed"
    (folder / "fail").unlink()
    c.load_model("retry_load")
    x = np.array([5.0], dtype=np.float32)
    result = c.infer("retry_load", [make_input("http", "INPUT0", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    c.unload_model("retry_load", unload_dependents=False)
    deadline = time.monotonic() + 30.0  # the unload finishes in the background
    while not (folder / "finalized").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (folder / "finalized").read_text() == "x"
