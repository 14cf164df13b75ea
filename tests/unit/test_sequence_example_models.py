"""The example sequence models' ``model.py`` run in-process (no server): the answers of
Triton's contracts, READY = 0 fillers, the string model's accumulator and its errors.

The server-side behaviour (control tensors, slots, batching) is tested in
tests/integration/test_sequence_examples.py; here each model gets hand-made requests exactly
as the design says the sequence batcher builds them ([1, 1] control tensors).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tritium.backends.python import pb_utils as pb
from tritium.config.model_config import config_to_json, parse_config_text

REPO = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
VALUES = [11, 7, 5, 3, 2, 0, 1]  # the official client examples' values
NOT_AN_INTEGER = "dyna sequence backend expects correlation ID to be decodable into an integer"


def _load(name: str) -> Any:
    """``name``'s TritonPythonModel, initialized with its own config.pbtxt (as JSON)."""

    sys.modules["triton_python_backend_utils"] = pb
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / name / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = ModuleType(spec.name)
    spec.loader.exec_module(module)
    path = REPO / name / "config.pbtxt"
    as_json = json.dumps(config_to_json(parse_config_text(path.read_text(), path)))
    model = module.TritonPythonModel()
    model.initialize({"model_config": as_json})
    return model


def _request(value: int, *, corrid: int | str = 0, **controls: Any) -> pb.InferenceRequest:
    """A batch-1 request: INPUT [[value]] and each control as a [1, 1] tensor."""
    tensors = [pb.Tensor("INPUT", np.array([[value]], dtype=np.int32))]
    for name, control in controls.items():
        tensors.append(pb.Tensor(name, np.array([[control]], dtype=np.int32)))
    if corrid != 0 or isinstance(corrid, str):
        dtype = np.object_ if isinstance(corrid, str) else np.uint64
        raw = corrid.encode() if isinstance(corrid, str) else corrid
        tensors.append(pb.Tensor("CORRID", np.array([[raw]], dtype=dtype)))
    return pb.InferenceRequest(
        inputs=tensors, requested_output_names=["OUTPUT"], model_name="m", correlation_id=corrid
    )


def _outputs(model: Any, requests: list[pb.InferenceRequest]) -> list[Any]:
    """OUTPUT[0][0] of each response, or its error message."""
    answers = []
    for response in model.execute(requests):
        if response.has_error():
            answers.append(response.error().message())
        else:
            output = pb.get_output_tensor_by_name(response, "OUTPUT").as_numpy()
            assert output.dtype == np.int32 and output.shape == (1, 1)
            answers.append(int(output[0, 0]))
    return answers


def test_simple_sequence_is_tritons_graph() -> None:
    """READY * (INPUT + START): the client examples' 1, 11, 7, ... and 101, -11, ..."""
    model = _load("simple_sequence")
    sequence = [0, *VALUES]
    got = [
        _outputs(model, [_request(v, START=int(i == 0), READY=1)])[0]
        for i, v in enumerate(sequence)
    ]
    assert got == [1, *VALUES]
    # Three slots in one batch, the middle one a filler (READY = 0, inputs zeroed).
    batch = [
        _request(100, START=1, READY=1),
        _request(0, START=0, READY=0),
        _request(-7, START=0, READY=1),
    ]
    assert _outputs(model, batch) == [101, 0, -7]
    assert _outputs(model, [_request(2**31 - 1, START=1, READY=1)]) == [-(2**31)]  # INT32


def test_simple_dyna_sequence_adds_the_id_at_end() -> None:
    model = _load("simple_dyna_sequence")
    sequence = [0, *VALUES]
    got = []
    for i, v in enumerate(sequence):
        controls = {"START": int(i == 0), "END": int(i == len(sequence) - 1), "READY": 1}
        got.append(_outputs(model, [_request(v, corrid=1000, **controls)])[0])
    assert got == [1, *VALUES[:-1], 1 + 1000]
    # The ID truncated to 32 bits, as the graph's Cast UINT64 -> INT32.
    end = _request(5, corrid=2**32 + 7, START=0, END=1, READY=1)
    assert _outputs(model, [end]) == [12]
    assert _outputs(model, [_request(5, corrid=3, START=1, END=1, READY=0)]) == [0]


def test_simple_string_dyna_sequence_accumulates_per_id() -> None:
    """Two interleaved sequences, as the client examples with ``-d`` expect for one."""
    model = _load("simple_string_dyna_sequence")
    first = [20, *(-v for v in VALUES)]
    second = [5, 1, 1]
    want_first, total = [], 0
    for i, v in enumerate(first):
        total = v if i == 0 else total + v
        want_first.append(total + (1002 if i == len(first) - 1 else 0))
    got_first, got_second = [], []
    for i, v in enumerate(first):
        batch = [
            _request(v, corrid="1002", START=int(i == 0), END=int(i == len(first) - 1), READY=1)
        ]
        if i < len(second):
            end = int(i == len(second) - 1)
            batch.append(_request(second[i], corrid=" +7", START=int(i == 0), END=end, READY=1))
        answers = _outputs(model, batch)
        got_first.append(answers[0])
        got_second += answers[1:]
    assert want_first[:2] == [20, 9]
    assert got_first == want_first
    assert got_second == [5, 6, 7 + 7]
    assert model.accumulators == {}  # both ended: nothing kept


def test_simple_string_dyna_sequence_errors() -> None:
    model = _load("simple_string_dyna_sequence")
    bad = _request(1, corrid="SEQ-3", START=1, END=0, READY=1)
    twice = [_request(1, corrid="9", START=1, END=0, READY=1) for _ in range(2)]
    too_big = _request(1, corrid=str(2**31), START=1, END=0, READY=1)
    answers = _outputs(model, [bad, *twice, too_big])
    assert answers[0] == answers[3] == NOT_AN_INTEGER
    assert answers[1] == 1
    assert answers[2].startswith("Execute() called with batch containing multiple inferences")
    # A READY = 0 request leaves the accumulator alone.
    assert _outputs(model, [_request(50, corrid="9", START=0, END=0, READY=0)]) == [0]
    assert _outputs(model, [_request(2, corrid="9", START=0, END=0, READY=1)]) == [3]
