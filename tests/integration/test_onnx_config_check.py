"""A config.pbtxt that disagrees with its ONNX model fails the load (UNAVAILABLE) with the
message Triton's ORT backend gives, naming the tensor, the model's shape and the config's,
instead of loading READY and failing every request inside ONNX Runtime; the repository index
says so over HTTP and gRPC. A config that agrees, and none at all (auto-complete fills it from
the model), load and serve."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.support.clients import client, index_rows, make_input
from testkit.server_process import ServerProcess

# INPUT0 FP32 [batch, 4] -> OUTPUT0 FP32 [batch, 4] = INPUT0 * 2
BATCHED = "batched"
# INPUT0 FP32 [2, 4] -> OUTPUT0 FP32 [2, 4] (no batch dimension)
FIXED = "fixed"


def _onnx(kind: str) -> bytes:
    import onnx
    from onnx import TensorProto, helper

    shape: list[Any] = ["batch", 4] if kind == BATCHED else [2, 4]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT0"])],
        kind,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
        initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _config(inputs: str, outputs: str, max_batch_size: int = 8) -> str:
    return textwrap.dedent(f"""\
        platform: "onnxruntime_onnx"
        max_batch_size: {max_batch_size}
        input [ {inputs} ]
        output [ {outputs} ]
        """)


def _io(name: str, dims: str, dtype: str = "TYPE_FP32") -> str:
    return f'{{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}'


GOOD_IN, GOOD_OUT = _io("INPUT0", "4"), _io("OUTPUT0", "4")
# name -> (model kind, config, the reason's text)
BAD = {
    "onnx_bad_input_name": (
        BATCHED,
        _config(_io("WRONG", "4"), GOOD_OUT),
        "unexpected inference input 'WRONG', allowed inputs are: INPUT0",
    ),
    "onnx_bad_input_count": (
        BATCHED,
        _config(GOOD_IN + ", " + _io("INPUT1", "4"), GOOD_OUT),
        "unable to load model 'onnx_bad_input_count', configuration expects 2 inputs, model "
        "provides 1",
    ),
    "onnx_bad_input_type": (
        BATCHED,
        _config(_io("INPUT0", "4", "TYPE_INT32"), GOOD_OUT),
        "unable to load model 'onnx_bad_input_type', configuration expects datatype TYPE_INT32 "
        "for input 'INPUT0', model provides TYPE_FP32",
    ),
    "onnx_bad_input_rank": (
        BATCHED,
        _config(_io("INPUT0", "4, 1"), GOOD_OUT),
        "model 'onnx_bad_input_rank', tensor 'INPUT0': the model expects 2 dimensions (shape "
        "[-1,4]) but the model configuration specifies 3 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,4,1])",
    ),
    "onnx_bad_input_dim": (
        BATCHED,
        _config(_io("INPUT0", "5"), GOOD_OUT),
        "model 'onnx_bad_input_dim', tensor 'INPUT0': the model expects 2 dimensions (shape "
        "[-1,4]) but the model configuration specifies 2 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,5])",
    ),
    "onnx_bad_output_name": (
        BATCHED,
        _config(GOOD_IN, _io("OUT", "4")),
        "unexpected inference output 'OUT', allowed outputs are: OUTPUT0",
    ),
    "onnx_bad_output_type": (
        BATCHED,
        _config(GOOD_IN, _io("OUTPUT0", "4", "TYPE_FP64")),
        "unable to load model 'onnx_bad_output_type', configuration expects datatype TYPE_FP64 "
        "for output 'OUTPUT0', model provides TYPE_FP32",
    ),
    "onnx_bad_output_dims": (
        FIXED,
        _config(_io("INPUT0", "2, 4"), _io("OUTPUT0", "2, -1"), max_batch_size=0),
        "model 'onnx_bad_output_dims', tensor 'OUTPUT0': the model expects 2 dimensions (shape "
        "[2,4]) but the model configuration specifies 2 dimensions (shape [2,-1])",
    ),
    "onnx_bad_batching": (
        FIXED,
        _config(GOOD_IN, GOOD_OUT),
        "model 'onnx_bad_batching', tensor 'INPUT0': for the model to support batching the "
        "shape should have at least 1 dimension and the first dimension must be -1; but shape "
        "expected by the model is [2,4]",
    ),
}
GOOD = {
    "onnx_good": (BATCHED, _config(GOOD_IN, GOOD_OUT)),
    # no batch dimension: the configured dims are the model's own
    "onnx_good_fixed": (FIXED, _config(_io("INPUT0", "2, 4"), _io("OUTPUT0", "2, 4"), 0)),
    "onnx_no_config": (BATCHED, None),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("onnx_check")
    models = {name: (kind, text) for name, (kind, text, _) in BAD.items()} | GOOD
    for name, (kind, text) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(_onnx(kind))
        if text is not None:
            (root / name / "config.pbtxt").write_text(text)
    proc = ServerProcess([root], "--exit-on-error=false")
    yield proc
    proc.stop()


def _rows(proc: ServerProcess, protocol: str) -> dict[str, Any]:
    return index_rows(proc.url(protocol), protocol)


def test_a_config_that_disagrees_with_the_model_fails_its_load(
    served: ServerProcess, protocol: str
) -> None:
    rows = _rows(served, protocol)
    for name, (_, _, reason) in BAD.items():
        assert rows[name]["state"] == "UNAVAILABLE", rows[name]
        assert rows[name]["reason"] == reason, rows[name]


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_config_that_agrees_loads_and_serves(
    served: ServerProcess, protocol: str, name: str
) -> None:
    assert _rows(served, protocol)[name]["state"] == "READY"
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    c = client(protocol, served.url(protocol))
    try:
        result = c.infer(name, [make_input(protocol, "INPUT0", data, "FP32")])
    finally:
        c.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
