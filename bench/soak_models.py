"""The models of the soak's resource attacks (bench/soak_resource_attacks.py), written into the
soak's repository at its start (bench/soak_cli.py ``soak_repository``):

- ``soak_spin_torch``: TorchScript, OUTPUT__0 = INPUT__0 (INT64 [1]) after a loop of that many
  additions: cheap for 1, seconds for a few hundred thousand (calibrated here, ``SPIN_S``);
- ``soak_spin_onnx``: ONNX, SHAPE (INT64 [2], [n, n]) -> ConstantOfShape(1.0) -> MatMul of the
  n × n matrix by itself -> ReduceMax = n: cheap for n = 1, seconds for n in the thousands;
- ``soak_slow``: Python, sleeps ``SLOW_S`` per execution, dynamic batching up to 64 (many
  slow requests in flight at once, one batch);
- ``soak_cached``: Python with ``response_cache { enable: true }``, OUTPUT0 = INPUT0 × the
  request's ``scale`` parameter (a parameter the cache key must hold);
- ``soak_upload`` (not on disk: uploaded by the ``upload_kill_worker`` kind): its config and
  model.py.

The TorchScript and ONNX models need torch and onnx: ``write_models`` builds them in a child
process (``python -m bench.soak_models DIR``) so that the soak's client never imports torch;
that child also times the loop and writes the calibration to ``DIR/spin.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SPIN_TORCH, SPIN_ONNX = "soak_spin_torch", "soak_spin_onnx"
SLOW, CACHED, UPLOAD = "soak_slow", "soak_cached", "soak_upload"
PYTHON_MODELS = (SLOW, CACHED)
MODELS = (SPIN_TORCH, SPIN_ONNX, *PYTHON_MODELS)
SPIN_S = 2.5  # what the costly request should take (on this machine, measured unloaded)
SLOW_S = 2.0
CALIBRATION = "spin.json"
MAX_ONNX_SIDE = 6000  # two 144 MB matrices
ROOT = Path(__file__).resolve().parent.parent

_SLOW_CONFIG = f"""name: "{SLOW}"
backend: "python"
max_batch_size: 64
dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""
_SLOW_PY = f"""\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLOW_S!r})
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return out
"""
_CACHED_CONFIG = f"""name: "{CACHED}"
backend: "python"
max_batch_size: 0
response_cache {{ enable: true }}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""
_CACHED_PY = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"OUTPUT0 = INPUT0 * the request's "scale" parameter (1 without one).\"\"\"

    def execute(self, requests):
        out = []
        for request in requests:
            scale = float(json.loads(request.parameters() or "{}").get("scale", 1))
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            result = (data * scale).astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", result)]))
        return out
"""
# soak_upload: the JSON config of a load request, and its model.py (an identity); the
# upload kind pads the file with a comment to the size it sends
UPLOAD_CONFIG = {
    "name": UPLOAD,
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}
UPLOAD_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return out
"""
_SPIN_TORCH_CONFIG = f"""name: "{SPIN_TORCH}"
backend: "pytorch"
max_batch_size: 0
input [ {{ name: "INPUT__0" data_type: TYPE_INT64 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_INT64 dims: [ 1 ] }} ]
"""
_SPIN_ONNX_CONFIG = f"""name: "{SPIN_ONNX}"
backend: "onnxruntime"
max_batch_size: 0
input [ {{ name: "SHAPE" data_type: TYPE_INT64 dims: [ 2 ] }} ]
output [ {{ name: "MAX" data_type: TYPE_FP32 dims: [ 1, 1 ] }} ]
"""


def write_python_models(repo: Path) -> None:
    for name, config, source in (
        (SLOW, _SLOW_CONFIG, _SLOW_PY),
        (CACHED, _CACHED_CONFIG, _CACHED_PY),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(source)


def write_models(repo: Path) -> dict[str, int]:
    """Every model above into ``repo``; the calibration (``spin_n``: the loop count of a
    ``SPIN_S`` request of ``soak_spin_torch``; ``onnx_n``: the matrix side of one of
    ``soak_spin_onnx``)."""
    write_python_models(repo)
    subprocess.run(
        [sys.executable, "-m", "bench.soak_models", str(repo)],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": _pythonpath()},
    )
    return json.loads((repo.parent / CALIBRATION).read_text())


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


# ---------------------------------------------------------------------------------------------
# The child process: torch and onnx
# ---------------------------------------------------------------------------------------------
def _spin_module() -> Any:
    import torch

    class Spin(torch.nn.Module):
        """OUTPUT__0 = INPUT__0, counted one addition at a time."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            acc = torch.zeros(1, dtype=torch.int64)
            for _ in range(int(x[0])):
                acc = acc + 1
            return acc

    return Spin()


def _spin_onnx() -> bytes:
    from onnx import TensorProto, helper

    from bench.kit.models import onnx_bytes as _onnx_bytes

    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["SHAPE"], ["X"], value=one),
            helper.make_node("MatMul", ["X", "X"], ["Y"]),
            helper.make_node("ReduceMax", ["Y"], ["MAX"], keepdims=1),
        ],
        SPIN_ONNX,
        [helper.make_tensor_value_info("SHAPE", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("MAX", TensorProto.FLOAT, [1, 1])],
    )
    return _onnx_bytes(graph)


def _time_spin(scripted: Any, n: int) -> float:
    import torch

    start = time.perf_counter()
    scripted(torch.tensor([n], dtype=torch.int64))
    return time.perf_counter() - start


def _time_onnx(model: bytes, n: int) -> float:
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    session.run(None, {"SHAPE": np.array([n, n], np.int64)})
    return time.perf_counter() - start


def build_child(repo: Path) -> None:
    import torch

    from bench.kit.torch_models import module_bytes

    module = _spin_module()
    (repo / SPIN_TORCH / "1").mkdir(parents=True)
    (repo / SPIN_TORCH / "config.pbtxt").write_text(_SPIN_TORCH_CONFIG)
    data = module_bytes(module)
    (repo / SPIN_TORCH / "1" / "model.pt").write_bytes(data)
    onnx_model = _spin_onnx()
    (repo / SPIN_ONNX / "1").mkdir(parents=True)
    (repo / SPIN_ONNX / "config.pbtxt").write_text(_SPIN_ONNX_CONFIG)
    (repo / SPIN_ONNX / "1" / "model.onnx").write_bytes(onnx_model)
    import io

    scripted = torch.jit.load(io.BytesIO(data))
    for _ in range(3):  # the profiling executor optimises after a few runs
        _time_spin(scripted, 1000)
    probe = 100_000
    spin_n = int(probe * SPIN_S / max(_time_spin(scripted, probe), 1e-3))
    side = 1000
    onnx_n = int(side * (SPIN_S / max(_time_onnx(onnx_model, side), 1e-3)) ** (1 / 3))
    calibration = {"spin_n": spin_n, "onnx_n": min(onnx_n, MAX_ONNX_SIDE)}
    (repo.parent / CALIBRATION).write_text(json.dumps(calibration))


if __name__ == "__main__":
    build_child(Path(sys.argv[1]))
