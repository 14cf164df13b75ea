"""Ragged batching, pure: each batch_input kind computed as Triton's backend library does
(backend_input_collector.cc), batch_output scattering (backend_output_responder.cc), the load
checks with Triton core's messages (ValidateBatchIO), and the dynamic batcher comparing shapes
only for variable-size inputs not marked ragged."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tritium.backends.ragged import batch_input_array, merge_ragged, scatter_output
from tritium.config.batch_io import BatchInput, BatchOutput, batch_io
from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.errors import ServerError
from tritium.scheduling.batch_policy import BatchConfig, DynamicBatchPolicy
from tritium.types import DataType, Tensor

# Three requests of the docs' example: [1, 3], [1, 4], [2, 5] (the last of batch size 2).
SHAPES = [(1, 3), (1, 4), (2, 5)]


def _bi(kind: str, datatype: DataType = DataType.INT32) -> BatchInput:
    return BatchInput(kind, ("T",), datatype, "INPUT")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("BATCH_ELEMENT_COUNT", [3, 4, 10]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT", [3, 7, 17]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 3, 7, 17]),
    ],
)
def test_element_counts(kind: str, expected: list[int]) -> None:
    for datatype in (DataType.INT32, DataType.FP32):
        array = batch_input_array(_bi(kind, datatype), SHAPES)
        assert array.dtype == datatype.dtype
        assert array.tolist() == expected


def test_max_element_count_as_shape_carries_the_largest_count_in_its_shape() -> None:
    array = batch_input_array(_bi("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"), SHAPES)
    assert array.shape == (10,)


def test_item_shape_has_one_row_per_batch_item() -> None:
    array = batch_input_array(_bi("BATCH_ITEM_SHAPE", DataType.FP32), SHAPES)
    assert array.shape == (4, 1) and array.dtype == np.float32
    assert array.tolist() == [[3.0], [4.0], [5.0], [5.0]]
    images = [(1, 2, 3), (2, 4, 5)]
    assert batch_input_array(_bi("BATCH_ITEM_SHAPE"), images).tolist() == [
        [2, 3],
        [4, 5],
        [4, 5],
    ]


def test_item_shape_flatten_is_the_same_rows_flat() -> None:
    images = [(1, 2, 3), (2, 4, 5)]
    array = batch_input_array(_bi("BATCH_ITEM_SHAPE_FLATTEN"), images)
    assert array.tolist() == [2, 3, 4, 5, 4, 5]


def test_ragged_inputs_concatenate_without_padding() -> None:
    parts = [np.arange(3).reshape(1, 3), np.arange(4).reshape(1, 4) + 10]
    assert merge_ragged(parts).tolist() == [0, 1, 2, 10, 11, 12, 13]
    assert merge_ragged(parts[:1]).shape == (3,)


def test_batch_output_scatters_by_the_source_input_shape() -> None:
    output = BatchOutput(("OUT",), "INPUT", (-1, -1))
    flat = np.arange(17, dtype=np.float32)
    parts = scatter_output(output, flat, SHAPES)
    assert [p.shape for p in parts] == SHAPES
    assert parts[1].tolist() == [[3, 4, 5, 6]]
    assert parts[2].reshape(-1).tolist() == list(range(7, 17))
    with pytest.raises(ServerError, match="fewer than its requests' source input shapes need"):
        scatter_output(output, flat[:10], SHAPES)


# -- load checks ------------------------------------------------------------------------------
PATH = Path("/models/m/config.pbtxt")
BASE = """\
name: "m"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def _load(extra: str) -> tuple[tuple[BatchInput, ...], tuple[BatchOutput, ...]]:
    text = BASE + extra
    return batch_io(parse_config_text(text, PATH), ConfigProblem("m", PATH, text))


def test_batch_io_from_the_config() -> None:
    inputs, outputs = _load(
        'batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" '
        'data_type: TYPE_INT32 source_input: "INPUT" } ]\n'
        'batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "INPUT" } ]'
    )
    assert inputs == (
        BatchInput("BATCH_ACCUMULATED_ELEMENT_COUNT", ("INDEX",), DataType.INT32, "INPUT"),
    )
    assert outputs == (BatchOutput(("OUT",), "INPUT", (-1, -1)),)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 } ]',
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT64 '
            'source_input: "INPUT" } ]',
            "batch input data type must be TYPE_INT32 or TYPE_FP32 for m",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 '
            'source_input: "NOPE" } ]',
            "unknown source input name 'NOPE' for m",
        ),
        (
            'batch_output [ { target_name: "NOPE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
            'source_input: "INPUT" } ]',
            "unknown target output name 'NOPE' for m",
        ),
        (
            'batch_output [ { target_name: [ "OUT", "OUT" ] source_input: "INPUT" } ]',
            "target output name 'OUT' can only be specified once for m",
        ),
    ],
)
def test_bad_batch_io_fails_the_load_with_tritons_text(extra: str, message: str) -> None:
    with pytest.raises(ServerError) as caught:
        _load(extra)
    assert caught.value.message.endswith(message), caught.value.message


# -- the dynamic batcher: ragged decided per input --------------------------------------------
_NO_DATA = np.zeros(0, dtype=np.float32)


def _Tensor(name: str, shape: tuple[int, ...]) -> Tensor:  # noqa: N802
    """A real Tensor (the compiled batch policy checks the type), its data unused."""
    return Tensor(name, DataType.FP32, shape, _NO_DATA)


@dataclass
class _Request:
    tag: str
    shapes: dict[str, tuple[int, ...]]
    batch_size: int = 1
    priority: int = 0
    inputs: list[Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inputs = [_Tensor(n, s) for n, s in self.shapes.items()]


def test_only_variable_inputs_not_marked_ragged_must_match() -> None:
    """TEXT is ragged, MASK is variable and not ragged: requests differing only in TEXT
    share a batch; one differing in MASK starts the next."""
    policy = DynamicBatchPolicy(
        BatchConfig(max_batch_size=8, max_delay_ns=10**9, equal_shape=frozenset({"MASK"}))
    )
    for tag, text, mask in (("a", 3, 2), ("b", 5, 2), ("c", 4, 7)):
        policy.enqueue(_Request(tag, {"TEXT": (1, text), "MASK": (1, mask)}), 0)
    assert [r.tag for r in policy.take(0) or []] == ["a", "b"]
    assert [r.tag for r in policy.take(10**9) or []] == ["c"]


def test_a_python_model_is_told_batch_io_has_no_effect(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    from dataclasses import replace

    from tritium.backends.ragged import warn_batch_io
    from tritium.config.spec import build_spec

    text = BASE.replace("onnxruntime", "python")
    config = parse_config_text(text, PATH)
    spec = build_spec(config, ConfigProblem("m", PATH, text))
    with caplog.at_level(logging.WARNING, logger="tritium"):
        warn_batch_io(spec)  # nothing configured: nothing said
        warn_batch_io(replace(spec, batch_inputs=(_bi("BATCH_ELEMENT_COUNT"),)))
    assert [r.getMessage() for r in caplog.records] == [
        "model 'm': batch_input and batch_output have no effect on a Python model (as in "
        "Triton's Python backend): each request keeps its own inputs and outputs; ragged inputs "
        "only let requests of different shapes share a batch"
    ]
