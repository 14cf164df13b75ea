"""The configuration against a model's tensors (backends/model_io_check.py) and the TorchScript
binding (backends/pytorch_io.py), pure: Triton's messages for each disagreement, and where
each tensor reaches forward()."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from tritium.backends.model_io_check import (
    ModelTensor,
    check_model_io,
    compare_dims,
    expected_input_count,
)
from tritium.backends.pytorch_io import bind
from tritium.config.model_config import ConfigProblem, ModelConfig
from tritium.config.spec import ModelSpec, build_spec, normalize
from tritium.errors import ErrorKind, ServerError
from tritium.types import DataType


def _spec(text: str) -> ModelSpec:
    config = ModelConfig()
    text_format.Parse(text, config)
    problem = ConfigProblem("m", Path("/r/m/config.pbtxt"), text)
    normalize(config, "m", problem)
    return build_spec(config, problem)


ALL = frozenset(DataType)
BATCHED = """
backend: "onnxruntime" max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def _check(text: str, inputs: list[ModelTensor], outputs: list[ModelTensor]) -> ServerError:
    with pytest.raises(ServerError) as caught:
        check_model_io(_spec(text), inputs, outputs, ALL)
    return caught.value


X = ModelTensor("X", "TYPE_FP32", (-1, 3))
Y = ModelTensor("Y", "TYPE_FP32", (-1, 3))


def test_a_matching_model_passes() -> None:
    check_model_io(_spec(BATCHED), [X], [Y], ALL)


def test_unknown_name_lists_the_models_tensors() -> None:
    error = _check(BATCHED, [ModelTensor("Z", "TYPE_FP32", (-1, 3))], [Y])
    assert error.kind is ErrorKind.INVALID_ARG
    assert str(error) == "unexpected inference input 'X', allowed inputs are: Z"


def test_a_datatype_the_framework_lacks_is_internal() -> None:
    with pytest.raises(ServerError) as caught:
        check_model_io(_spec(BATCHED), [X], [Y], {DataType.INT32})
    assert caught.value.kind is ErrorKind.INTERNAL
    assert str(caught.value) == "unsupported datatype TYPE_FP32 for input 'X' for model 'm'"


def test_a_scalar_model_tensor_takes_only_ones() -> None:
    text = BATCHED.replace("max_batch_size: 8", "max_batch_size: 0")
    error = _check(text, [ModelTensor("X", "TYPE_FP32", ())], [ModelTensor("Y", "TYPE_FP32", (3,))])
    assert "scalar tensor 'X', should only provide 1" in str(error)
    assert "Model configuration provided: [3]." in str(error)


def test_a_shape_the_model_does_not_say_is_not_compared() -> None:
    check_model_io(_spec(BATCHED), [ModelTensor("X", "TYPE_FP32", None)], [Y], ALL)


def test_inputs_take_any_size_where_the_model_has_minus_one_outputs_do_not() -> None:
    compare_dims("m", "X", (-1, -1), (5,), 8, exact=False)
    with pytest.raises(ServerError, match=r"making complete shape \[-1,5\]\)"):
        compare_dims("m", "Y", (-1, -1), (5,), 8, exact=True)


def test_the_count_has_sequence_controls_and_batch_inputs() -> None:
    text = (
        BATCHED
        + """
    sequence_batching { control_input [ { name: "START" control [ {
        kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ] }
    """
    )
    assert expected_input_count(_spec(text)) == 2
    error = _check(text, [X], [Y])
    assert (
        str(error) == "unable to load model 'm', configuration expects 2 inputs, model provides 1"
    )


TORCH = """
backend: "pytorch" max_batch_size: 0
input [ { name: "%s" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "%s" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "%s" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "%s" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
ARGS = [("a", "TensorType"), ("b", "TensorType")]


def test_inputs_bind_by_forward_argument_name() -> None:
    binding = bind(_spec(TORCH % ("b", "a", "O0", "O1")), ARGS)
    assert binding.inputs == {"b": 1, "a": 0}
    assert binding.outputs == {"O0": 0, "O1": 1}  # no __<index>: config order


def test_inputs_and_outputs_bind_by_index() -> None:
    binding = bind(_spec(TORCH % ("INPUT__1", "INPUT__0", "OUTPUT__1", "OUTPUT__0")), ARGS)
    assert binding.inputs == {"INPUT__1": 1, "INPUT__0": 0}
    assert binding.outputs == {"OUTPUT__1": 1, "OUTPUT__0": 0}


def test_other_names_bind_in_config_order() -> None:
    binding = bind(_spec(TORCH % ("second", "first", "OUTPUT__0", "OUT__x")), ARGS)
    assert binding.inputs == {"second": 0, "first": 1}
    assert binding.outputs == {"OUTPUT__0": 0, "OUT__x": 1}


def test_a_dictionary_argument_takes_every_input() -> None:
    binding = bind(_spec(TORCH % ("A", "B", "O0", "O1")), [("inputs", "DictType")])
    assert binding.dict_input
    assert set(binding.inputs) == {"A", "B"}


@pytest.mark.parametrize(
    ("names", "arguments", "message"),
    [
        (("INPUT__0", "INPUT__0x", "O", "P"), ARGS[:1], "configuration expects 2 inputs"),
        (("INPUT__0", "INPUT__2", "O", "P"), ARGS, "input 'INPUT__2' is forward() argument 2"),
        (("X__0", "Y__0", "O", "P"), ARGS, "are both forward() argument 0"),
        (("a", "b", "O", "P"), [("a", "TensorType"), ("n", "IntType")], "'IntType'"),
        (("a", "b", "O", "P"), [("a", "DictType"), ("b", "DictType")], "Multiple inputs"),
    ],
)
def test_bindings_triton_refuses(
    names: tuple[str, ...], arguments: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(ServerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bind(_spec(TORCH % names), arguments)


def test_strings_are_one_dimensional_lists() -> None:
    text = (TORCH % ("a", "b", "O", "P")).replace("max_batch_size: 0", "max_batch_size: 4")
    text = text.replace('name: "a" data_type: TYPE_FP32', 'name: "a" data_type: TYPE_STRING')
    with pytest.raises(ServerError, match="only supports 1 dimensional List of String as input"):
        bind(_spec(text), ARGS)
