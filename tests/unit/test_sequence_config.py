"""sequence_batching → SequenceConfig: Triton's defaults, control values, implicit state and
the load errors, with Triton's messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.sequence import sequence_config
from tritium.errors import ServerError
from tritium.types import DataType

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [5, 7] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [false, true] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
"""


def load(body: str, mbs: int = 4, model_dir: Path | None = None):
    text = f'name: "m"\nbackend: "python"\nmax_batch_size: {mbs}\nsequence_batching {{ {body} }}'
    config = parse_config_text(text, Path("config.pbtxt"))
    return sequence_config(config, ConfigProblem("m", Path("config.pbtxt"), text), model_dir)


def test_defaults_are_tritons():
    config = load("")
    assert config is not None
    assert not config.oldest and config.slots == 4 and config.batched
    assert config.max_idle_ns == 1_000_000_000
    assert config.start is None and config.corrid is None and config.states == ()
    assert load("", mbs=0).slots == 1


def test_controls_carry_their_datatypes_and_values():
    config = load(CONTROLS)
    assert config.start.datatype is DataType.FP32 and config.start.true.tolist() == [1.0]
    assert config.end.datatype is DataType.INT32
    assert (config.end.false.tolist(), config.end.true.tolist()) == ([5], [7])
    assert config.ready.datatype is DataType.BOOL and config.ready.value(False).tolist() == [False]
    assert config.corrid == ("CORRID", DataType.BYTES)


def test_iterative_sequence_and_the_inputs_the_batcher_adds():
    assert not load("").iterative
    config = load("iterative_sequence: true " + CONTROLS)
    assert config.iterative
    assert config.added_inputs == {"START", "END", "READY", "CORRID"}


def test_oldest_takes_its_candidates_and_preferred_sizes():
    config = load(
        "oldest { max_candidate_sequences: 6 preferred_batch_size: [4, 2] "
        "max_queue_delay_microseconds: 300 }"
    )
    assert config.oldest and config.slots == 6
    assert config.preferred == (2, 4) and config.max_queue_delay_ns == 300_000


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] } ]',
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            "'bool_false_true' for CONTROL_SEQUENCE_START for m",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [0, 1] fp32_false_true: [0, 1] } ] } ]",
            "sequence batching specifies more than one from",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [0] } ] } ]",
            "sequence batching control 'int32_false_true' must have exactly 2 entries for "
            "CONTROL_SEQUENCE_START for m",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            'int32_false_true: [0, 1] } ] }, { name: "S" control [ { kind: '
            "CONTROL_SEQUENCE_END int32_false_true: [0, 1] } ] } ]",
            "sequence batching control tensor 'S' is specified for multiple control kinds for m",
        ),
        (
            'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            "data_type: TYPE_FP32 } ] } ]",
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for m",
        ),
        ("oldest { preferred_batch_size: [8] }", "preferred batch size must be <= max batch"),
        (
            "direct { minimum_slot_utilization: 1.5 }",
            "minimum slot utilization must be in range (0.0, 1.0] for m",
        ),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [2] '
            'initial_state { data_type: TYPE_FP32 dims: [2] zero_data: true name: "z" } } ]',
            "The data type used for 'initial_state' field of state 'I' does not match",
        ),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [2] '
            'initial_state { data_type: TYPE_INT32 dims: [3] zero_data: true name: "z" } } ]',
            "'initial_state' dim for input name 'I' doesn't match 'state' dim description. 3 != 2",
        ),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [2] '
            "initial_state { data_type: TYPE_INT32 dims: [2] zero_data: true } } ]",
            "Field 'name' must be set when using initial_state for state input 'I'.",
        ),
    ],
)
def test_bad_configs_fail_with_tritons_message(body: str, message: str):
    with pytest.raises(ServerError) as info:
        load(body)
    assert message in info.value.message
    assert "config.pbtxt" in info.value.message


def test_state_starts_as_zeros_with_variable_dims_as_one():
    config = load(
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [-1, 3] } ]'
    )
    (state,) = config.states
    assert state.initial.shape == (1, 1, 3) and not state.initial.any()
    assert config.state_outputs == ("O",)


def test_initial_state_from_a_data_file(tmp_path: Path):
    (tmp_path / "initial_state").mkdir()
    np.arange(4, dtype=np.int32).tofile(tmp_path / "initial_state" / "start.bin")
    body = (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [4] '
        'initial_state { data_type: TYPE_INT32 dims: [4] data_file: "%s" name: "f" } } ]'
    )
    config = load(body % "start.bin", model_dir=tmp_path)
    assert config.states[0].initial.tolist() == [[0, 1, 2, 3]]
    with pytest.raises(ServerError, match="must name a file directly inside"):
        load(body % "../config.pbtxt", model_dir=tmp_path)
    (tmp_path / "initial_state" / "short.bin").write_bytes(b"\0" * 8)
    with pytest.raises(ServerError, match="expects 16 bytes"):
        load(body % "short.bin", model_dir=tmp_path)


def test_a_linked_initial_state_folder_leading_out_is_refused(tmp_path: Path):
    outside = tmp_path / "etc"
    outside.mkdir()
    np.arange(4, dtype=np.int32).tofile(outside / "start.bin")
    model = tmp_path / "m"
    model.mkdir()
    (model / "initial_state").symlink_to(outside)
    body = (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [4] '
        'initial_state { data_type: TYPE_INT32 dims: [4] data_file: "start.bin" name: "f" } } ]'
    )
    with pytest.raises(ServerError, match="must name a file directly inside"):
        load(body, model_dir=model)
