"""The few test models the soak and the stall suites serve (a copy of what they use of
tests/support/models.py): ``identity_fp32`` (Python identity, FP32 [-1]),
``identity_onnx_queued`` (ONNX Identity, FP32 [-1], max_batch_size 8, dynamic batching with
a 2 s queue delay: a lone request waits in the queue) and the hostile Python models of
testkit/hostile_models.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from testkit.hostile_models import HOSTILE_SPECS

ONNX_OPSET = 17
ONNX_IR_VERSION = 8

_IDENTITY_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns INPUT0 unchanged as OUTPUT0 (same array, same dtype)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out_0 = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
'''

_QUEUED = "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }"


def _config(name: str, backend: str, max_batch_size: int = 0, extra: str = "") -> str:
    tensor = '  {{\n    name: "{}"\n    data_type: TYPE_FP32\n    dims: [ -1 ]\n  }}'
    lines = [f'name: "{name}"', f'backend: "{backend}"', f"max_batch_size: {max_batch_size}"]
    if extra:
        lines.append(extra)
    lines.append("input [\n" + tensor.format("INPUT0") + "\n]")
    lines.append("output [\n" + tensor.format("OUTPUT0") + "\n]")
    return "\n".join(lines) + "\n"


def onnx_bytes(graph: Any) -> bytes:
    """An ONNX graph as a checked model file (opset 17, IR 8, as the tests' models)."""
    import onnx
    from onnx import helper

    model = helper.make_model(
        graph,
        producer_name="tritium-tests",
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=ONNX_IR_VERSION,
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _onnx_identity_fp32_batched() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_onnx_queued",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["B", "N"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["B", "N"])],
    )
    return onnx_bytes(graph)


_SPECS: dict[str, Callable[[str], dict[str, Any]]] = {
    "identity_fp32": lambda name: {
        "config.pbtxt": _config(name, "python"),
        "1/model.py": _IDENTITY_PY,
    },
    "identity_onnx_queued": lambda name: {
        "config.pbtxt": _config(name, "onnxruntime", 8, _QUEUED),
        "1/model.onnx": _onnx_identity_fp32_batched,
    },
    **HOSTILE_SPECS,
}


def build_test_repository(root: Path, names: Iterable[str]) -> Path:
    """Write the models ``names`` under ``root`` (created if needed) and return it."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        if name not in _SPECS:
            raise KeyError(f"unknown bench test model {name!r}; known: {', '.join(_SPECS)}")
        for rel, content in _SPECS[name](name).items():
            data = content() if callable(content) else content
            path = root / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                path.write_bytes(data)
            else:
                path.write_text(data, encoding="utf-8")
    return root
