"""The PyTorch examples of ``make models`` (examples/torch_models.py) on the shared server,
over HTTP and gRPC: the TorchScript classifier answers top-N labels, and the same MLP served
by ONNX Runtime and by PyTorch gives the same answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.support.clients import client, module
from testkit.server_process import ServerProcess

pytest.importorskip("torch")

from torch_models import CLASSES  # noqa: E402 - examples/ is on sys.path (tests/conftest.py)


def _infer(server: ServerProcess, protocol: str, model: str, data: np.ndarray, **kw: int) -> Any:
    inp = module(protocol).InferInput("INPUT__0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    out = module(protocol).InferRequestedOutput("OUTPUT__0", **kw)
    c = client(protocol, server.url(protocol))
    try:
        return c.infer(model, [inp], outputs=[out])
    finally:
        c.close()


def test_the_same_network_answers_the_same_under_onnx_and_pytorch(
    server: ServerProcess, protocol: str
) -> None:
    x = np.random.default_rng(7).standard_normal((4, 256), dtype=np.float32)
    onnx_out = _infer(server, protocol, "mlp_small_onnx", x).as_numpy("OUTPUT__0")
    torch_out = _infer(server, protocol, "mlp_small_pytorch", x).as_numpy("OUTPUT__0")
    assert onnx_out.shape == torch_out.shape == (4, 16)
    np.testing.assert_allclose(onnx_out, torch_out, rtol=1e-4, atol=1e-4)


def test_the_classifier_answers_labels(server: ServerProcess, protocol: str) -> None:
    image = np.random.default_rng(3).random((1, 3, 32, 32), dtype=np.float32)
    top = _infer(server, protocol, "pytorch_classifier", image, class_count=3)
    rows = top.as_numpy("OUTPUT__0")
    assert rows.shape == (1, 3)
    labels = [entry.decode().split(":")[2] for entry in rows[0]]
    assert set(labels) <= set(CLASSES) and len(set(labels)) == 3, labels
