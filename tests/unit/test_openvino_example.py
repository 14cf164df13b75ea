"""make models without openvino: the OpenVINO example is skipped with a message that names
the extra, and nothing of it is written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def test_the_example_is_skipped_without_openvino(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import build_models  # examples/ is on sys.path (tests/conftest.py)

    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` raises ImportError
    assert build_models.openvino_example(tmp_path) == []
    err = capsys.readouterr().err
    assert "skipped the OpenVINO example (mlp_small_openvino)" in err
    assert "pip install 'tritium[openvino]'" in err
    assert not (tmp_path / "mlp_small_openvino").exists()
