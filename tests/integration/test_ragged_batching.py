"""Ragged batching over the real server (HTTP and gRPC): requests of different lengths to an
ONNX model with a ragged input share one dynamic batch (the statistics show it), the model
gets their values as one 1-D tensor plus the BATCH_ACCUMULATED_ELEMENT_COUNT batch input, and
each request gets its own sum and its own part of the batch output, shaped as its input."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio

from tests.support.models import RAGGED_MODEL, RAGGED_PREFERRED_BATCH, build_test_repository
from testkit.server_process import ServerProcess


@pytest.fixture(scope="module")
def ragged_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("ragged") / "repo", [RAGGED_MODEL])
    proc = ServerProcess([Path(repo)])
    yield proc
    proc.stop()


def _module(protocol: str) -> Any:
    return httpaio if protocol == "http" else grpcaio


async def _sum(protocol: str, client: Any, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    module = _module(protocol)
    data = values.reshape(1, -1)
    inp = module.InferInput("INPUT", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    outputs = [module.InferRequestedOutput("SUM"), module.InferRequestedOutput("DOUBLED")]
    result = await client.infer(RAGGED_MODEL, [inp], outputs=outputs)
    return result.as_numpy("SUM"), result.as_numpy("DOUBLED")


async def _batch_sizes(protocol: str, client: Any) -> dict[int, int]:
    """Executions per batch size, from the statistics extension."""
    if protocol == "http":
        stats = await client.get_inference_statistics(RAGGED_MODEL)
        rows = stats["model_stats"][0].get("batch_stats", [])
        return {int(r["batch_size"]): int(r["compute_infer"]["count"]) for r in rows}
    stats = await client.get_inference_statistics(RAGGED_MODEL)
    return {b.batch_size: b.compute_infer.count for b in stats.model_stats[0].batch_stats}


def test_requests_of_different_lengths_share_a_batch(
    ragged_server: ServerProcess, protocol: str
) -> None:
    requests = [
        np.arange(1, length + 1, dtype=np.float32) * (index + 1)
        for index, length in enumerate((1, 4, 2, 7))
    ]
    assert len(requests) == RAGGED_PREFERRED_BATCH

    async def main() -> tuple[list[tuple[np.ndarray, np.ndarray]], dict[int, int]]:
        client = _module(protocol).InferenceServerClient(ragged_server.url(protocol))
        try:
            before = await _batch_sizes(protocol, client)
            answers = await asyncio.wait_for(
                asyncio.gather(*(_sum(protocol, client, values) for values in requests)), 60
            )
            after = await _batch_sizes(protocol, client)
        finally:
            await client.close()
        grown = {size: after[size] - before.get(size, 0) for size in after}
        return answers, grown

    answers, executions = asyncio.run(main())
    for values, (total, doubled) in zip(requests, answers, strict=True):
        np.testing.assert_allclose(total, [[values.sum()]])
        assert doubled.shape == (1, values.size)  # shaped as this request's INPUT
        np.testing.assert_allclose(doubled, values.reshape(1, -1) * 2)
    # The four requests (lengths 1, 4, 2 and 7) ran as one execution of batch size 4.
    assert executions == {RAGGED_PREFERRED_BATCH: 1}, executions
