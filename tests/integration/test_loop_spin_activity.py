"""What ``loop_spin`` gates its spins on: the server counts the inferences it has in flight
(``loop_spin.ACTIVE``), one while a request runs in a model's stub, none once it is answered,
whether it succeeded, failed in its model or was refused before reaching one. In process:
the real InferenceServer and Python stub, on uvloop as the server runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import uvloop

from tritium.datatypes import DataType
from tritium.errors import ServerError
from tritium.loop_spin import ACTIVE
from tritium.options import RepositoryOptions, ServerOptions
from tritium.server import InferenceServer
from tritium.types import ClientRequest, Tensor


def _add_sub(values: np.ndarray, dims: int = 16) -> ClientRequest:
    data = values.reshape(1, dims)
    inputs = tuple(Tensor(n, DataType.INT32, (1, dims), data) for n in ("INPUT0", "INPUT1"))
    return ClientRequest("add_sub_python", inputs=inputs)


def test_requests_in_flight_are_counted_until_answered(example_repo: Path) -> None:
    async def main() -> list[int]:
        server = InferenceServer(ServerOptions(repository=RepositoryOptions(paths=(example_repo,))))
        await server.start()
        seen = [ACTIVE.requests]
        try:
            running = asyncio.ensure_future(
                server.inference.infer(_add_sub(np.arange(16, dtype=np.int32)))
            )
            await asyncio.sleep(0)  # submitted: the stub has it
            seen.append(ACTIVE.requests)
            response = await running
            assert response.error is None
            seen.append(ACTIVE.requests)
            with pytest.raises(ServerError):  # refused before any model: never counted
                await server.inference.infer(_add_sub(np.arange(8, dtype=np.int32), dims=8))
            seen.append(ACTIVE.requests)
        finally:
            await server.stop()
        return seen

    assert uvloop.run(main()) == [0, 1, 0, 0]
