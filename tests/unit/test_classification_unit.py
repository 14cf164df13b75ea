"""The classification extension's pure parts: top-N strings, shapes, label files (read as
Triton's LabelProvider reads them) and the load errors of a bad ``label_filename``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritium.extensions.classification import Classifier, classifier_for, classify, read_labels
from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.spec import build_spec, normalize
from tritium.errors import ErrorKind, ServerError
from tritium.types import DataType, InferenceResponse, RequestedOutput, Tensor


def _tensor(values: list[list[float]] | list[float], datatype: DataType) -> Tensor:
    data = np.array(values, dtype=datatype.dtype)
    return Tensor("OUT", datatype, data.shape, data)


def test_batched_rows_ties_and_labels() -> None:
    tensor = _tensor([[1, 5, 5, 0], [9, 8, 7, 6]], DataType.FP32)
    out = classify(tensor, 2, (b"a", b"", b"c"), batched=True)
    assert (out.datatype, out.shape) == (DataType.BYTES, (2, 2))
    assert out.data.tolist() == [b"5.000000:1", b"5.000000:2:c", b"9.000000:0:a", b"8.000000:1"]


def test_not_batched_flattens_every_dim() -> None:
    """Without batching the whole tensor is one element (Triton's batch1_element_count)."""
    out = classify(_tensor([[1, 2], [4, 3]], DataType.INT16), 3, (), batched=False)
    assert out.shape == (3,)
    assert out.data.tolist() == [b"4:2", b"3:3", b"2:1"]


def test_count_is_clamped_and_floats_print_as_std_to_string() -> None:
    out = classify(_tensor([0.1234567, -1e9, 2.5e-7], DataType.FP64), 9, (), batched=False)
    assert out.data.tolist() == [b"0.123457:0", b"0.000000:2", b"-1000000000.000000:1"]


@pytest.mark.parametrize("datatype", [DataType.FP16, DataType.BOOL, DataType.BF16])
def test_unsupported_types(datatype: DataType) -> None:
    tensor = Tensor("OUT", datatype, (2,), np.zeros(2, dtype=np.float32))
    with pytest.raises(ServerError, match=f"unsupported type '{datatype.wire}'"):
        classify(tensor, 1, (), batched=False)


def test_classifier_replaces_only_the_classified_output() -> None:
    raw = _tensor([3.0, 1.0], DataType.FP32)
    kept = Tensor("OTHER", DataType.FP32, (2,), np.zeros(2, dtype=np.float32))
    response = InferenceResponse("m", "1", "", [raw, kept])
    Classifier({"OUT": 1}, {"OUT": (b"x",)}, batched=False).apply(response)
    assert response.outputs[0].data.tolist() == [b"3.000000:0:x"]
    assert response.outputs[1] is kept


def test_classifier_for_counts() -> None:
    assert classifier_for([RequestedOutput("A")], {}, True) is None
    assert classifier_for([RequestedOutput("A", {"classification": 0})], {}, True) is None
    found = classifier_for([RequestedOutput("A", {"classification": 2})], {}, True)
    assert found is not None and dict(found.counts) == {"A": 2}
    for bad in (-1, "2", True, 1.5):
        with pytest.raises(ServerError) as caught:
            classifier_for([RequestedOutput("A", {"classification": bad})], {}, True)
        assert caught.value.kind is ErrorKind.INVALID_ARG


def test_read_labels(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_bytes(b"a\r\n\nc\xff\nd")
    assert read_labels(path) == (b"a\r", b"", b"c\xff", b"d")
    path.write_bytes(b"a\nb\n")
    assert read_labels(path) == (b"a", b"b")


# ------------------------------------------------------------------------ label_filename at load

CONFIG = """\
name: "m"
backend: "python"
max_batch_size: 0
input [ { name: "I" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "O" data_type: TYPE_FP32 dims: [ 2 ] label_filename: "%s" } ]
"""


def _spec(model_dir: Path, label_filename: str):
    text = CONFIG % label_filename
    path = model_dir / "config.pbtxt"
    config = parse_config_text(text, path)
    problem = ConfigProblem("m", path, text)
    normalize(config, "m", problem)
    return build_spec(config, problem, model_dir)


def test_labels_are_read_at_load(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("x\ny\n")
    assert _spec(tmp_path, "labels.txt").labels == {"O": (b"x", b"y")}


def test_missing_label_file_fails_the_load(tmp_path: Path) -> None:
    with pytest.raises(ServerError) as caught:
        _spec(tmp_path, "nothere.txt")
    message = str(caught.value)
    assert "field 'output.label_filename'" in message
    assert f"failed to open text file for read {tmp_path / 'nothere.txt'}" in message


def test_label_file_outside_the_model_directory(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (tmp_path / "secret.txt").write_text("s\n")
    with pytest.raises(ServerError, match="is outside model directory"):
        _spec(model_dir, "../secret.txt")


def test_a_label_file_linked_out_of_the_model_directory_is_refused(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (tmp_path / "secret.txt").write_text("s\n")
    (model_dir / "labels.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ServerError, match="is outside model directory"):
        _spec(model_dir, "labels.txt")
