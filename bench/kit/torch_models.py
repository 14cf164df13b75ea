"""TorchScript model files for the bench's PyTorch models (a copy of what it uses of
tests/support/torch_models.py)."""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import Any


def module_bytes(module: Any) -> bytes:
    """The module scripted and saved as TorchScript, Triton's format for the PyTorch backend
    (torch 2.13 calls TorchScript deprecated, in favour of torch.export, which Triton's
    libtorch backend does not load)."""
    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def write_model(root: Path, name: str, text: str, model: Any) -> None:
    """The model's folder; the file is named as the config's default_model_filename says."""
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(text)
    named = re.search(r'default_model_filename: "([^"]+)"', text)
    if model is not None:
        data = model if isinstance(model, bytes) else module_bytes(model)
        (root / name / "1" / (named[1] if named else "model.pt")).write_bytes(data)
