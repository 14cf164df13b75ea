"""Opening and closing many ModelStreamInfer streams leaves nothing behind in the server's
event loop: the real InferenceServer and stream code run in this process, driven the way
grpc.aio drives them (a request iterator in, a response iterator out, the handler cancelled
when the client goes away), so the loop's task count can be read directly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tritium.frontends.grpc.stream import model_stream_infer
from tritium.options import ServerOptions
from tritium.server import InferenceServer


class _Context:
    def invocation_metadata(self) -> tuple:
        return ()

    async def abort(self, code: Any, message: str) -> None:
        raise AssertionError(f"unexpected abort: {code} {message}")


def _request(i: int) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="simple", id=str(i))
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    data = np.full(16, i, dtype=np.int32).tobytes()
    message.raw_input_contents.extend([data, data])
    return message


async def _requests(count: int, hold: asyncio.Event | None) -> AsyncIterator[Any]:
    for i in range(count):
        yield _request(i)
    if hold is not None:
        await hold.wait()  # a client that keeps its stream open


async def _one_stream(server: InferenceServer, i: int) -> None:
    if i % 2:  # read every answer, then half-close
        responses = model_stream_infer(server, _requests(3, None), _Context(), 8)
        got = [r async for r in responses]
        assert [r.infer_response.id for r in got] == ["0", "1", "2"]
        return
    # drop the stream mid-request, as a client that disconnects
    hold = asyncio.Event()
    responses = model_stream_infer(server, _requests(3, hold), _Context(), 8)
    task = asyncio.ensure_future(responses.__anext__())
    await task
    await responses.aclose()


@pytest.mark.timeout(300)
def test_streams_leave_no_tasks_behind(example_repo: Path) -> None:
    async def main() -> tuple[int, int]:
        server = InferenceServer(ServerOptions(model_repositories=(example_repo,)))
        await server.start()
        try:
            for i in range(20):  # warm up: lazily created loop machinery
                await _one_stream(server, i)
            await asyncio.sleep(0.1)
            before = len(asyncio.all_tasks())
            for i in range(2000):
                await _one_stream(server, i)
            await asyncio.sleep(0.2)
            return before, len(asyncio.all_tasks())
        finally:
            await server.stop()

    before, after = asyncio.run(main())
    assert after <= before, f"tasks grew from {before} to {after}"
