"""The OpenVINO example of ``make models`` (examples/openvino_models.py) over HTTP and gRPC, on
a server of the two MLP copies only (the shared one loads every example, slow on a loaded
machine): the same MLP served by ONNX Runtime and by OpenVINO (IR converted from the
ONNX file, float32) gives the same answers, at a batch that the dynamic batcher may merge."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.clients import client, module
from testkit.server_process import ServerProcess

pytest.importorskip("openvino")

from openvino_models import NET_OPENVINO  # noqa: E402 - examples/ is on sys.path
from torch_models import NET_ONNX  # noqa: E402


@pytest.fixture(scope="module")
def twins(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("mlp_twins")
    for name in (NET_ONNX, NET_OPENVINO):
        shutil.copytree(example_repo / name, repo / name)
    proc = ServerProcess([repo], start_timeout=120)
    yield proc
    proc.stop()


def _infer(server: ServerProcess, protocol: str, model: str, data: np.ndarray) -> Any:
    inp = module(protocol).InferInput("INPUT__0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    c = client(protocol, server.url(protocol))
    try:
        return c.infer(model, [inp]).as_numpy("OUTPUT__0")
    finally:
        c.close()


@pytest.mark.parametrize("batch", [1, 8])
def test_the_same_network_answers_the_same_under_onnx_and_openvino(
    twins: ServerProcess, protocol: str, batch: int
) -> None:
    x = np.random.default_rng(batch).standard_normal((batch, 256), dtype=np.float32)
    onnx_out = _infer(twins, protocol, NET_ONNX, x)
    ov_out = _infer(twins, protocol, NET_OPENVINO, x)
    assert onnx_out.shape == ov_out.shape == (batch, 16)
    np.testing.assert_allclose(onnx_out, ov_out, rtol=1e-4, atol=1e-4)
