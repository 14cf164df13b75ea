"""``config/warmup.py``: the model_warmup samples checked against the spec and turned into
tensors (zero, random, file; BYTES; batch sizes; sequence controls), with Triton's rules."""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.spec import ModelSpec, build_spec, normalize
from tritium.config.warmup import WarmupSample, sample_tensors, warmup_samples
from tritium.errors import ErrorKind, ServerError
from tritium.types import DataType

BASE = """\
name: "m"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ -1, 2 ] }},
        {{ name: "S" data_type: TYPE_STRING dims: [ 3 ] }},
        {{ name: "R" data_type: TYPE_INT32 dims: [ 4 ] reshape: {{ shape: [ 2, 2 ] }} }},
        {{ name: "OPT" data_type: TYPE_BOOL dims: [ 1 ] optional: true }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""
SEQUENCE = """
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START
                                              int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ST_IN" output_name: "ST_OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
}
"""
REQUIRED = (
    'inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 3, 2 ] zero_data: true } }\n'
    'inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 3 ] zero_data: true } }\n'
    'inputs { key: "R" value: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } }'
)


def spec_of(warmup: str, mbs: int = 4, extra: str = "") -> ModelSpec:
    text = BASE.format(mbs=mbs) + extra + f"model_warmup [ {warmup} ]\n"
    path = Path("/models/m/config.pbtxt")
    config = parse_config_text(text, path)
    problem = ConfigProblem("m", path, text)
    normalize(config, "m", problem)
    return build_spec(config, problem)


def sample(inputs: str = REQUIRED, batch_size: int = 1, count: int = 0, name: str = "s") -> str:
    return f'{{ name: "{name}" batch_size: {batch_size} count: {count} {inputs} }}'


def samples(warmup: str, model_dir: Path | None = None, **kw: Any) -> tuple[WarmupSample, ...]:
    return warmup_samples(spec_of(warmup, **kw), model_dir)


def tensors(s: WarmupSample, model_dir: Path | None = None, batched: bool = True) -> dict:
    rng = np.random.default_rng(1)
    return {t.name: t for t in sample_tensors(s, model_dir, batched, rng)}


def refused(warmup: str, match: str, model_dir: Path | None = None, **kw: Any) -> None:
    with pytest.raises(ServerError) as info:
        samples(warmup, model_dir, **kw)
    assert info.value.kind is ErrorKind.INVALID_ARG
    assert match in info.value.message, info.value.message


def test_zero_data_with_the_batch_dimension_and_reshape() -> None:
    (s,) = samples(sample(batch_size=3, count=2))
    assert (s.name, s.batch_size, s.count) == ("s", 3, 2)
    got = tensors(s)
    assert [*got] == ["A", "S", "R"]  # the model's input order
    a, strings, r = got["A"], got["S"], got["R"]
    assert a.datatype is DataType.FP32 and a.shape == (1, 3, 2) and not a.data.any()
    assert strings.shape == (1, 3) and strings.data.tolist() == [[b"", b"", b""]]
    assert r.shape == (1, 2, 2) and r.data.dtype == np.int32  # the config's reshape applied
    assert not a.data.flags.writeable


def test_count_zero_runs_once_and_batch_zero_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tritium"):
        found = samples(sample(name="none", batch_size=0) + ", " + sample(name="once"))
    assert [(s.name, s.count) for s in found] == [("once", 1)]
    assert "skipping warmup sample 'none'" in caplog.text


def test_no_batch_dimension_for_a_model_without_batching() -> None:
    (s,) = samples(sample(), mbs=0)
    got = tensors(s, batched=False)
    assert got["A"].shape == (3, 2) and got["R"].shape == (2, 2)


def test_random_data_is_random_bytes_and_random_strings_are_empty() -> None:
    warmup = REQUIRED.replace("zero_data", "random_data")
    (s,) = samples(sample(warmup))
    got = tensors(s)
    assert got["R"].data.dtype == np.int32 and got["R"].data.any()
    assert got["S"].data.tolist() == [[b"", b"", b""]]  # Triton: zero length prefixes


def test_input_data_file(tmp_path: Path) -> None:
    (tmp_path / "warmup" / "d").mkdir(parents=True)
    values = np.arange(6, dtype=np.float32)
    (tmp_path / "warmup" / "a.bin").write_bytes(values.tobytes() + b"extra ignored")
    elements = [b"x", b"", b"long\x00bytes"]
    raw = b"".join(struct.pack("<I", len(e)) + e for e in elements)
    (tmp_path / "warmup" / "d" / "s.bin").write_bytes(raw)
    inputs = REQUIRED.replace(
        "dims: [ 3, 2 ] zero_data: true", 'dims: [ 3, 2 ] input_data_file: "a.bin"'
    ).replace("dims: [ 3 ] zero_data: true", 'dims: [ 3 ] input_data_file: "d/s.bin"')
    (s,) = samples(sample(inputs), tmp_path)
    got = tensors(s, tmp_path)
    np.testing.assert_array_equal(got["A"].data, values.reshape(1, 3, 2))
    assert got["S"].data.tolist() == [elements]


def test_input_data_file_problems(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "short.bin").write_bytes(b"\x00" * 5)
    (tmp_path / "warmup" / "two.bin").write_bytes(struct.pack("<I", 1) + b"a" * 2)
    a_file = 'dims: [ 3, 2 ] input_data_file: "{}"'

    def with_file(name: str) -> str:
        return sample(REQUIRED.replace("dims: [ 3, 2 ] zero_data: true", a_file.format(name)))

    for escape in ("../config.pbtxt", "/etc/passwd", "", "d/../../x"):
        refused(with_file(escape), "must name a file inside", tmp_path)
    (s,) = samples(with_file("short.bin"), tmp_path)
    with pytest.raises(ServerError, match="expects 24 bytes, but the data provided from "):
        tensors(s, tmp_path)
    (s,) = samples(with_file("missing.bin"), tmp_path)
    with pytest.raises(ServerError, match="unable to read"):
        tensors(s, tmp_path)
    strings = REQUIRED.replace(
        "dims: [ 3 ] zero_data: true", 'dims: [ 3 ] input_data_file: "two.bin"'
    )
    (s,) = samples(sample(strings), tmp_path)
    with pytest.raises(ServerError, match="two.bin"):
        tensors(s, tmp_path)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        (REQUIRED.replace("[ 3, 2 ]", "[ -1, 2 ]"), "all variable-size dimensions are specified"),
        (
            REQUIRED.replace("[ 3, 2 ]", "[ 3, 5 ]"),
            "has dims [3, 5], but model 'm' expects [-1, 2]",
        ),
        (REQUIRED.replace("TYPE_FP32", "TYPE_FP64"), "data-type is 'FP64', but model 'm' expects"),
        (
            REQUIRED.replace(' zero_data: true } }\ninputs { key: "S"', ' } }\ninputs { key: "S"'),
            "to have input_data_type set",
        ),
        (REQUIRED.replace('key: "R"', 'key: "NOPE"'), "unexpected input 'NOPE'"),
        (REQUIRED.split("\n", 1)[1], "misses required input(s) 'A'"),
    ],
    ids=["variable", "shape", "dtype", "no-data", "unknown", "missing"],
)
def test_a_sample_that_does_not_fit_the_model(inputs: str, match: str) -> None:
    refused(sample(inputs), match)


def test_batch_size_bounds() -> None:
    refused(sample(batch_size=5), "batch_size 5, but the model's max_batch_size is 4")
    refused(sample(batch_size=2), "does not batch takes batch_size 1", mbs=0)


def test_sequence_controls_and_state_inputs_are_accepted() -> None:
    controls = (
        REQUIRED
        + '\ninputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }'
        + '\ninputs { key: "ST_IN" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } }'
    )
    (s,) = samples(sample(controls), extra=SEQUENCE)
    got = tensors(s)
    assert got["START"].shape == (1, 1) and got["ST_IN"].shape == (1, 2)
    wrong = controls.replace(
        '"START" value: { data_type: TYPE_INT32', '"START" value: { data_type: TYPE_FP32'
    )
    with pytest.raises(ServerError, match="'START' data-type is 'FP32'"):
        samples(sample(wrong), extra=SEQUENCE)


def test_a_linked_warmup_folder_or_file_leading_out_is_refused(tmp_path: Path) -> None:
    """``warmup/`` (or a file in it) that is a link out of the model's directory is refused,
    as a label file is; a link that stays inside it is followed."""
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "a.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    model = tmp_path / "m"
    model.mkdir()
    (model / "warmup").symlink_to(outside)
    inputs = REQUIRED.replace(
        "dims: [ 3, 2 ] zero_data: true", 'dims: [ 3, 2 ] input_data_file: "a.bin"'
    )
    refused(sample(inputs), "must name a file inside", model)
    (model / "warmup").unlink()
    (model / "warmup").mkdir()
    (model / "warmup" / "a.bin").symlink_to(outside / "a.bin")
    refused(sample(inputs), "must name a file inside", model)
    (model / "warmup" / "a.bin").unlink()
    (model / "warmup").rmdir()
    (model / "data").mkdir()
    (model / "data" / "a.bin").write_bytes(np.ones(6, dtype=np.float32).tobytes())
    (model / "warmup").symlink_to(model / "data")  # a link that stays inside: followed
    (s,) = samples(sample(inputs), model)
    assert tensors(s, model)["A"].data.tolist() == [[[1, 1], [1, 1], [1, 1]]]
