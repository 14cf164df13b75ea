"""Which models may cost what their input values say, decided at load
(backends/data_dependence.py): ONNX graphs read from their bytes, TorchScript graphs, OpenVINO
models, and configured shapes. Real graphs built with onnx's helper, torch.jit.script and
OpenVINO's reader."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support import costly_models
from tritium.backends.data_dependence import (
    onnx_graph_reason,
    onnx_reason,
    torch_graph_reason,
    variable_inputs,
)
from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.spec import ModelSpec, build_spec, normalize

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

INT64, FLOAT = TensorProto.INT64, TensorProto.FLOAT


def _reason(nodes: list[Any], inputs: list[Any], outputs: list[Any], **extra: Any) -> str:
    return onnx_graph_reason(memoryview(costly_models.onnx_bytes(nodes, inputs, outputs, **extra)))


def _io(name: str, elem: int, shape: list[Any]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _one(name: str = "one") -> Any:
    return helper.make_tensor(name, FLOAT, [1], [1.0])


def test_constant_of_shape_fed_by_an_input_is_value_dependent() -> None:
    reason = onnx_graph_reason(memoryview(costly_models.square_onnx()))
    assert "ConstantOfShape" in reason and "input values" in reason


def test_an_elementwise_graph_is_not() -> None:
    nodes = [
        helper.make_node("Add", ["A", "B"], ["S"]),
        helper.make_node("Sub", ["A", "B"], ["D"]),
    ]
    shape = ["batch", 16]
    assert (
        _reason(
            nodes,
            [_io("A", FLOAT, shape), _io("B", FLOAT, shape)],
            [_io("S", FLOAT, shape), _io("D", FLOAT, shape)],
        )
        == ""
    )


def test_a_shape_read_from_the_input_shape_is_not_a_value() -> None:
    # Shape(x) -> ConstantOfShape: the size follows x's (configured) shape, not its values
    nodes = [
        helper.make_node("Shape", ["X"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["ones"], value=_one()),
        helper.make_node("Add", ["X", "ones"], ["Y"]),
    ]
    assert _reason(nodes, [_io("X", FLOAT, [4, 4])], [_io("Y", FLOAT, [4, 4])]) == ""


def test_a_reshape_to_an_initializer_is_not() -> None:
    nodes = [helper.make_node("Reshape", ["X", "to"], ["Y"])]
    init = [helper.make_tensor("to", INT64, [2], [2, 8])]
    assert _reason(nodes, [_io("X", FLOAT, [16])], [_io("Y", FLOAT, [2, 8])], init=init) == ""


def test_a_shape_computed_from_input_values_is() -> None:
    # the values go through arithmetic first: still the client's
    nodes = [
        helper.make_node("Abs", ["N"], ["n"]),
        helper.make_node("Concat", ["n", "n"], ["dims"], axis=0),
        helper.make_node("Expand", ["X", "dims"], ["Y"]),
    ]
    reason = _reason(
        nodes, [_io("X", FLOAT, [1, 1]), _io("N", INT64, [1])], [_io("Y", FLOAT, ["a", "b"])]
    )
    assert "Expand" in reason


def test_an_initializer_that_a_request_may_override_counts_as_an_input() -> None:
    nodes = [helper.make_node("Reshape", ["X", "to"], ["Y"])]
    init = [helper.make_tensor("to", INT64, [2], [2, 8])]
    inputs = [_io("X", FLOAT, [16]), _io("to", INT64, [2])]  # also a graph input: overridable
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, [_io("Y", FLOAT, ["a", "b"])], initializer=init),
        opset_imports=[helper.make_opsetid("", costly_models.ONNX_OPSET)],
        ir_version=costly_models.ONNX_IR_VERSION,
    )
    assert "Reshape" in onnx_graph_reason(memoryview(model.SerializeToString()))


@pytest.mark.parametrize("op", ["Loop", "If", "Scan"])
def test_control_flow_is_value_dependent_whatever_feeds_it(op: str) -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [_io("i", INT64, []), _io("c", TensorProto.BOOL, [])],
        [_io("c_out", TensorProto.BOOL, [])],
    )
    attributes: dict[str, Any] = {
        "Loop": {"body": body},
        "If": {"then_branch": body, "else_branch": body},
        "Scan": {"body": body, "num_scan_inputs": 1},
    }[op]
    node = helper.make_node(op, ["a", "b"], ["y"], **attributes)
    graph = helper.make_graph([node], "g", [_io("a", INT64, [])], [_io("y", INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    reason = onnx_graph_reason(memoryview(model.SerializeToString()))
    assert op in reason and "control flow" in reason


def test_a_local_function_that_sizes_from_its_inputs_counts_when_called_with_values() -> None:
    function = helper.make_function(
        "local",
        "Fill",
        ["shape"],
        ["out"],
        [helper.make_node("ConstantOfShape", ["shape"], ["out"], value=_one())],
        [helper.make_opsetid("", costly_models.ONNX_OPSET)],
    )
    node = helper.make_node("Fill", ["S"], ["Y"], domain="local")
    reason = _reason(
        [node],
        [_io("S", INT64, [2])],
        [_io("Y", FLOAT, ["a", "b"])],
        functions=[function],
        opset_imports=[
            helper.make_opsetid("", costly_models.ONNX_OPSET),
            helper.make_opsetid("local", 1),
        ],
    )
    assert "Fill" in reason and "ConstantOfShape" in reason


def test_a_file_that_is_not_onnx_counts_as_value_dependent(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\xff" * 64)
    assert "could not be read" in onnx_reason(path)
    path.write_bytes(costly_models.square_onnx())
    assert "ConstantOfShape" in onnx_reason(path)


# -- configured shapes ------------------------------------------------------------------------


def _spec(dims: str, extra: str = "", max_batch_size: int = 8) -> ModelSpec:
    text = (
        f'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {dims} ] {extra} }} ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    )
    path = Path("/models/m/config.pbtxt")
    config = parse_config_text(text, path)
    problem = ConfigProblem("m", path, text)
    normalize(config, "m", problem)
    return build_spec(config, problem)


def test_fixed_dims_with_a_batch_dimension_fix_the_work() -> None:
    assert variable_inputs(_spec("16")) == ""


def test_a_variable_dimension_lets_the_client_size_the_work() -> None:
    assert "variable dimension" in variable_inputs(_spec("-1"))
    assert "ragged" in variable_inputs(_spec("1", "allow_ragged_batch: true"))


# -- TorchScript ------------------------------------------------------------------------------

torch = pytest.importorskip("torch")


def _script(module: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(module)


class Static(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(6):  # a fixed trip count
            x = x * 2
        if x.dim() == 2:  # a branch on the shape
            x = x.view(x.size(0), -1) + 1
        return x


class WhileValue(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while bool(x.sum() < 100.0):
            x = x * 2
        return x


class Carried(torch.nn.Module):
    """An input reaches a loop-carried value only on the second iteration."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        carried = torch.zeros(1)
        total = torch.zeros(1)
        for _ in range(3):
            total = total + torch.ones(int(carried[0]))[:1]
            carried = x
        return total


class NonZero(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x)


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (costly_models.torch_modules()[costly_models.SPIN], "aten::Int"),
        (WhileValue(), "aten::Bool"),
        (Carried(), "aten::Int"),
        (NonZero(), "aten::nonzero"),
    ],
)
def test_torchscript_whose_work_follows_input_values(module: Any, expected: str) -> None:
    assert expected in torch_graph_reason(_script(module).inlined_graph)


def test_torchscript_with_fixed_loops_and_shape_branches_is_not() -> None:
    assert torch_graph_reason(_script(Static()).inlined_graph) == ""


def test_a_traced_view_by_size_is_not() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(Static(), torch.ones(2, 3))
    assert torch_graph_reason(traced.inlined_graph) == ""


# -- OpenVINO ---------------------------------------------------------------------------------


def test_openvino_finds_a_size_taken_from_values(tmp_path: Path) -> None:
    ov = pytest.importorskip("openvino")
    from tritium.backends.data_dependence import openvino_reason

    path = tmp_path / "square.onnx"
    path.write_bytes(costly_models.square_onnx())
    square = ov.Core().read_model(str(path))
    spec = _spec("2", max_batch_size=0)
    assert "input values" in openvino_reason(square, spec, ov.PartialShape)
    static = _static_model(ov)
    assert openvino_reason(static, _spec("16"), ov.PartialShape) == ""


def _static_model(ov: Any) -> Any:
    import numpy as np
    from openvino import opset13 as ops

    x = ops.parameter([-1, 16], np.float32, name="X")
    x.output(0).get_tensor().set_names({"X"})
    y = ops.multiply(x, ops.constant(np.float32(2)))
    return ov.Model([y], [x])
