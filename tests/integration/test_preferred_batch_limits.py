"""Triton's dynamic-batching rules around the largest preferred batch size
(dynamic_batch_scheduler.cc GetDynamicBatch; Triton's qa/L0_batcher *_gt_max_preferred), over
HTTP and gRPC with the official clients, on a model whose queue delay (an hour) never passes
during the test: a request above the largest preferred size runs at once, alone; when the next
request would take the batch past it, the head runs at once and the rest waits for a batch
that fits (here 4 + 2 = 6, preferred)."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio

from testkit.server_process import ServerProcess
from tests.support.stub_procs import wait_until

# SIZE: the total batch size of the execution that answered the request.
MODEL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        rows = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().shape[0]
                for r in requests]
        out = []
        for n in rows:
            size = np.full((n, 1), sum(rows), dtype=np.int32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SIZE", size)]))
        return out
"""
CONFIG = """\
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "SIZE", data_type: TYPE_INT32, dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 3600000000 }
"""
PROTOCOLS = ("http", "grpc")
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("preferred")
    for protocol in PROTOCOLS:
        for use in ("above", "head"):
            model = repo / f"{use}_{protocol}"
            (model / "1").mkdir(parents=True)
            (model / "1" / "model.py").write_text(MODEL_PY)
            (model / "config.pbtxt").write_text(CONFIG)
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


def _pending(server: ServerProcess, model: str) -> int:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    prefix = f'nv_inference_pending_request_count{{model="{model}",version="1"}} '
    found = [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]
    return int(float(found[0])) if found else 0


def _aio(protocol: str) -> Any:
    return httpaio if protocol == "http" else grpcaio


async def _infer(client: Any, protocol: str, model: str, rows: int) -> list[int]:
    inp = _aio(protocol).InferInput("INPUT0", [rows, 1], "INT32")
    inp.set_data_from_numpy(np.zeros((rows, 1), dtype=np.int32))
    result = await client.infer(model, [inp])
    return [int(v) for v in result.as_numpy("SIZE")[:, 0]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_above_the_largest_preferred_size_runs_at_once(
    server: ServerProcess, protocol: str
) -> None:
    async def run() -> list[int]:
        client = _aio(protocol).InferenceServerClient(server.url(protocol))
        try:
            return await asyncio.wait_for(
                _infer(client, protocol, f"above_{protocol}", 7), TIMEOUT_S
            )
        finally:
            await client.close()

    assert asyncio.run(run()) == [7] * 7


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_head_within_the_largest_preferred_size_runs_and_the_rest_waits(
    server: ServerProcess, protocol: str
) -> None:
    model = f"head_{protocol}"

    async def run() -> tuple[list[int], list[int], list[int]]:
        client = _aio(protocol).InferenceServerClient(server.url(protocol))
        try:
            three = asyncio.ensure_future(_infer(client, protocol, model, 3))
            queued = await asyncio.to_thread(
                wait_until, lambda: _pending(server, model) == 1, TIMEOUT_S
            )
            assert queued and not three.done()  # 3 alone waits: not preferred
            four = asyncio.ensure_future(_infer(client, protocol, model, 4))  # 3 + 4 > 6
            first = await asyncio.wait_for(three, TIMEOUT_S)
            assert not four.done()  # 4 alone waits too
            two = await asyncio.wait_for(_infer(client, protocol, model, 2), TIMEOUT_S)
            return first, await asyncio.wait_for(four, TIMEOUT_S), two
        finally:
            await client.close()

    first, four, two = asyncio.run(run())
    assert first == [3] * 3
    assert four == [6] * 4 and two == [6] * 2  # 4 + 2: the preferred 6
