"""Models whose cost depends on the values of a few input bytes (tests of
backends/execution_policy.py and bench/costly_inline.py):

pt_spin          pytorch; INPUT__0 INT64 [1] (8 bytes) -> OUTPUT__0 FP32 [1]: a TorchScript
                 loop of INPUT__0[0] steps (prim::Loop), the answer is the step count.
onnx_square      onnxruntime; SHAPE INT64 [2] (16 bytes) -> TOTAL FP32 [1]: ConstantOfShape
                 makes an n x m matrix of ones, MatMul squares it (A @ A^T, n x n), ReduceSum:
                 n * n * m.
pt_wrong_dims    pytorch; INPUT__0 FP32 [4] -> OUTPUT__0 FP32 [4] configured, forward()
                 returns INPUT__0[0] elements (a model whose output does not match its dims).

The ONNX graphs are built with the ``onnx`` helper; ``onnx_graph`` helps unit tests build
more of them. The TorchScript ones need torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ONNX_OPSET = 17
ONNX_IR_VERSION = 8

SPIN = "pt_spin"
SQUARE = "onnx_square"
WRONG_DIMS = "pt_wrong_dims"


def onnx_bytes(nodes: list[Any], inputs: list[Any], outputs: list[Any], **extra: Any) -> bytes:
    """A checked ONNX model of ``nodes`` (value infos made with ``helper``), serialized."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=extra.pop("init", []))
    extra.setdefault("opset_imports", [helper.make_opsetid("", ONNX_OPSET)])
    model = helper.make_model(
        graph, producer_name="tritium-tests", ir_version=ONNX_IR_VERSION, **extra
    )
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def square_onnx() -> bytes:
    from onnx import TensorProto, helper

    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("ConstantOfShape", ["SHAPE"], ["ones"], value=one),
        helper.make_node("Transpose", ["ones"], ["ones_t"]),
        helper.make_node("MatMul", ["ones", "ones_t"], ["square"]),
        helper.make_node("ReduceSum", ["square"], ["sum"], keepdims=1),  # [1, 1]
        helper.make_node("Reshape", ["sum", "shape1"], ["TOTAL"]),
    ]
    return onnx_bytes(
        nodes,
        [helper.make_tensor_value_info("SHAPE", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("TOTAL", TensorProto.FLOAT, [1])],
        init=[helper.make_tensor("shape1", TensorProto.INT64, [1], [1])],
    )


def _config(name: str, backend: str, inputs: str, outputs: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 0\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n{extra}\n"
    )


def write_onnx(root: Path, name: str = SQUARE, extra: str = "") -> None:
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "1" / "model.onnx").write_bytes(square_onnx())
    (root / name / "config.pbtxt").write_text(
        _config(
            name,
            "onnxruntime",
            '{ name: "SHAPE" data_type: TYPE_INT64 dims: [ 2 ] }',
            '{ name: "TOTAL" data_type: TYPE_FP32 dims: [ 1 ] }',
            extra,
        )
    )


def torch_modules() -> dict[str, Any]:
    import torch

    class Spin(torch.nn.Module):
        def forward(self, steps: torch.Tensor) -> torch.Tensor:
            total = torch.zeros(1)
            for _ in range(int(steps[0])):
                total = total + 1.0
            return total

    class WrongDims(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(int(x[0]))

    return {SPIN: Spin(), WRONG_DIMS: WrongDims()}


def write_torch(root: Path, extra: str = "") -> None:
    """pt_spin and pt_wrong_dims (``extra`` goes into both configs)."""
    from bench.kit import torch_models

    modules = torch_modules()
    torch_models.write_model(
        root,
        SPIN,
        _config(
            SPIN,
            "pytorch",
            '{ name: "INPUT__0" data_type: TYPE_INT64 dims: [ 1 ] }',
            '{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] }',
            extra,
        ),
        modules[SPIN],
    )
    torch_models.write_model(
        root,
        WRONG_DIMS,
        _config(
            WRONG_DIMS,
            "pytorch",
            '{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }',
            extra,
        ),
        modules[WRONG_DIMS],
    )
