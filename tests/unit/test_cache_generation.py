"""The response cache's model generation (``repository/generation.py``) and what a cached
entry must look like to be served (``extensions/cache_check.py``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from tritium.extensions.cache_check import Expected, RateLimitedWarning, mismatch
from tritium.repository.generation import files_digest, model_generation
from tritium.types import DataType, Tensor


def _model(root: Path) -> Path:
    model = root / "m"
    (model / "1").mkdir(parents=True)
    (model / "2").mkdir()
    (model / "config.pbtxt").write_text('backend: "python"\n')
    (model / "1" / "model.py").write_text("FACTOR = 2\n")
    (model / "2" / "model.py").write_text("FACTOR = 5\n")
    return model


def test_the_digest_follows_contents_not_times(tmp_path: Path) -> None:
    model = _model(tmp_path)
    first = files_digest(model, model / "1")
    os.utime(model / "1" / "model.py", (1, 1))  # touched: a replica's own copy
    (model / "1" / "__pycache__").mkdir()
    (model / "1" / "__pycache__" / "model.cpython.pyc").write_bytes(b"\0" * 9)
    (model / "2" / "model.py").write_text("FACTOR = 7\n")  # another version's files
    assert files_digest(model, model / "1") == first
    (model / "1" / "model.py").write_text("FACTOR = 3\n")  # new code, same version
    assert files_digest(model, model / "1") != first
    (model / "1" / "model.py").write_text("FACTOR = 2\n")
    assert files_digest(model, model / "1") == first
    (model / "labels.txt").write_text("a\n")  # a file of the model's own directory
    assert files_digest(model, model / "1") != first


def test_a_copy_elsewhere_has_the_same_digest(tmp_path: Path) -> None:
    """Replicas load their own copies of the repository: the same bytes agree."""
    here, there = _model(tmp_path / "a"), _model(tmp_path / "b")
    assert files_digest(here, here / "1") == files_digest(there, there / "1")
    assert files_digest(here, None) == files_digest(there, None)  # every version
    assert files_digest(here, None) != files_digest(here, here / "1")


def test_a_loop_of_links_is_walked_once(tmp_path: Path) -> None:
    model = _model(tmp_path)
    (model / "1" / "loop").symlink_to(model / "1")
    assert len(files_digest(model, model / "1")) == 16


def test_the_generation_covers_the_completed_config() -> None:
    files = [b"\1" * 16]
    assert model_generation(b"config a", files) != model_generation(b"config b", files)
    assert model_generation(b"config a", files) == model_generation(b"config a", files)
    assert model_generation(b"config a", files) != model_generation(b"config a", [b"\2" * 16])


def _tensor(name: str, datatype: DataType, shape: tuple[int, ...]) -> Tensor:
    data = np.zeros(shape, dtype=datatype.dtype)
    return Tensor(name, datatype, shape, data)


_EXPECT = Expected({"OUT": (DataType.FP32, (-1, 4)), "ANY": None}, 1000)


@pytest.mark.parametrize(
    ("outputs", "reason"),
    [
        ([_tensor("OUT", DataType.FP32, (2, 4)), _tensor("ANY", DataType.INT8, (9,))], ""),
        ([_tensor("EVIL", DataType.FP32, (2, 4)), _tensor("ANY", DataType.INT8, (9,))], "EVIL"),
        ([_tensor("OUT", DataType.FP32, (2, 4))], "1 outputs where 2"),
        ([_tensor("OUT", DataType.FP32, (2, 4)), _tensor("OUT", DataType.FP32, (2, 4))], "OUT"),
        ([_tensor("OUT", DataType.FP64, (2, 4)), _tensor("ANY", DataType.INT8, (9,))], "FP64"),
        ([_tensor("OUT", DataType.FP32, (2, 5)), _tensor("ANY", DataType.INT8, (9,))], "[2, 5]"),
        ([_tensor("OUT", DataType.FP32, (8,)), _tensor("ANY", DataType.INT8, (9,))], "[8]"),
    ],
)
def test_outputs_are_checked_against_what_the_request_asks(
    outputs: list[Tensor], reason: str
) -> None:
    found = mismatch(outputs, _EXPECT)
    assert (found == "") if not reason else (reason in found)


def test_a_warning_is_logged_at_most_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    warning = RateLimitedWarning(logging.getLogger("tritium.test"), 60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="tritium.test"):
        for _ in range(5):
            warning.warn("bad entry %s", "k")
        now[0] = 61
        warning.warn("bad entry %s", "k")
    assert [r.getMessage() for r in caplog.records] == [
        "bad entry k",
        "bad entry k (4 more like it not logged)",
    ]
