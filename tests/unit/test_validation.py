"""validation.py: a request's tensors checked against one model version's tables (built at
load from its config), with Triton's error texts (InferenceRequest::Normalize)."""

from __future__ import annotations

import numpy as np
import pytest

from tritium.errors import ServerError
from tritium.types import DataType, RequestedOutput, Tensor
from tritium.validation import InputCheck, Validator


def _validator(max_batch: int = 0, reshape: tuple[int, ...] | None = None) -> Validator:
    full = (-1, 4) if max_batch else (4,)
    inputs = {
        "A": InputCheck(DataType.FP32, full, reshape, False),
        "B": InputCheck(DataType.FP32, full, None, False),
        "OPT": InputCheck(DataType.INT32, full, None, True),
    }
    return Validator("m", inputs, ("OUT",), max_batch)


def _tensor(name: str, shape: tuple[int, ...], dtype: type = np.float32) -> Tensor:
    datatype = DataType.FP32 if dtype is np.float32 else DataType.INT32
    return Tensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def _error(validator: Validator, tensors: list[Tensor], outputs: tuple[str, ...] = ()) -> str:
    with pytest.raises(ServerError) as caught:
        validator.validate(tensors, tuple(RequestedOutput(n) for n in outputs))
    return caught.value.message


def test_a_valid_request_gives_its_batch_size() -> None:
    assert _validator().validate([_tensor("A", (4,)), _tensor("B", (4,))], ()) == 1
    batched = [_tensor("A", (3, 4)), _tensor("B", (3, 4)), _tensor("OPT", (3, 4), np.int32)]
    assert _validator(max_batch=8).validate(batched, (RequestedOutput("OUT"),)) == 3


def test_reshape_replaces_the_tensor_in_the_request_list_only() -> None:
    a = _tensor("A", (2, 4))
    tensors = [a, _tensor("B", (2, 4))]
    assert _validator(max_batch=8, reshape=(2, 2)).validate(tensors, ()) == 2
    assert tensors[0].shape == (2, 2, 2) and a.shape == (2, 4)  # the client's stays as sent


def test_wrong_inputs_get_tritons_texts() -> None:
    validator = _validator()
    assert _error(validator, [_tensor("A", (4,)), _tensor("X", (4,))]) == (
        "unexpected inference input 'X' for model 'm'"
    )
    assert _error(validator, [_tensor("A", (4,)), _tensor("B", (4,), np.int32)]) == (
        "inference input 'B' data-type is 'INT32', but model 'm' expects 'FP32'"
    )
    assert _error(validator, [_tensor("A", (4,)), _tensor("B", (5,))]) == (
        "unexpected shape for input 'B' for model 'm'. Expected [4], got [5]"
    )
    assert _error(validator, [_tensor("A", (4,))]) == (
        "expected number of inputs between 2 and 3 but got 1 inputs for model 'm'. Got "
        "input(s) ['A'], but missing required input(s) ['B']. Please provide all required "
        "input(s)."
    )
    assert _error(validator, [_tensor("A", (4,))] * 4) == (
        "input 'A' is specified more than once for model 'm'"
    )


def test_batching_errors() -> None:
    validator = _validator(max_batch=2)
    message = _error(validator, [_tensor("A", (1, 5)), _tensor("B", (1, 4))])
    assert message.startswith("unexpected shape for input 'A' for model 'm'. Expected [-1,4]")
    assert "NOTE: Setting a non-zero max_batch_size" in message
    assert _error(validator, [_tensor("A", (1, 4)), _tensor("B", (2, 4))]) == (
        "input 'B' batch size does not match other inputs for 'm'"
    )
    assert _error(validator, [_tensor("A", (3, 4)), _tensor("B", (3, 4))]) == (
        "inference request batch-size must be <= 2 for 'm'"
    )


def test_wrong_outputs_get_tritons_texts() -> None:
    validator, tensors = _validator(), [_tensor("A", (4,)), _tensor("B", (4,))]
    assert _error(validator, tensors, ("NOPE",)) == (
        "unexpected inference output 'NOPE' for model 'm'"
    )
    assert _error(validator, tensors, ("OUT", "OUT")) == "output 'OUT' already requested"
