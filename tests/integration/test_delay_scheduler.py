"""TRITONSERVER_DELAY_SCHEDULER=N (Triton's testing hook, which its qa/L0_batcher sets): a
dynamic batcher starts nothing until its queue first holds N requests, so the N requests sent
together are one batch; afterwards it batches as usual. Over HTTP and gRPC (one model each:
the wait is once per batcher), with the official clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio

from testkit.server_process import ServerProcess

HELD = 3
# COUNT: how many requests the execution that answered this one had.
MODEL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        count = np.array([[len(requests)]], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]) for _ in requests]
"""
CONFIG = """\
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] } ]
dynamic_batching { }
"""
PROTOCOLS = ("http", "grpc")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("delay_scheduler")
    for protocol in PROTOCOLS:
        (repo / f"count_{protocol}" / "1").mkdir(parents=True)
        (repo / f"count_{protocol}" / "1" / "model.py").write_text(MODEL_PY)
        (repo / f"count_{protocol}" / "config.pbtxt").write_text(CONFIG)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITONSERVER_DELAY_SCHEDULER", str(HELD))
        proc = ServerProcess([repo])
    yield proc
    proc.stop()


async def _counts(protocol: str, url: str, n: int) -> list[int]:
    """Send ``n`` requests at once; the COUNT each answer carries."""
    aio = httpaio if protocol == "http" else grpcaio
    client = aio.InferenceServerClient(url)
    try:

        async def one(value: int) -> int:
            inp = aio.InferInput("INPUT0", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            result = await client.infer(f"count_{protocol}", [inp])
            return int(result.as_numpy("COUNT")[0][0])

        return list(await asyncio.gather(*(one(i) for i in range(n))))
    finally:
        await client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_first_batch_waits_for_the_held_count_then_batching_is_as_usual(
    server: ServerProcess, protocol: str
) -> None:
    url = server.url(protocol)
    # the batcher waits for all three (with nothing to wait for, the first would run alone)
    assert asyncio.run(_counts(protocol, url, HELD)) == [HELD] * HELD
    # once only: a lone request now runs at once, alone
    assert asyncio.run(_counts(protocol, url, 1)) == [1]
