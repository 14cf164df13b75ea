"""Opening and closing many ModelStreamInfer streams leaves nothing behind in the server's
event loop: the real InferenceServer, gRPC transport and stream code run in this process,
driven by an h2 client in memory (half-closing streams, and resetting them mid-request as a
client that goes away), so the loop's task count can be read directly."""

from __future__ import annotations

import asyncio
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import numpy as np
import pytest
from h2.errors import ErrorCodes
from tritonclient.grpc import service_pb2 as pb

from tests.support.grpc_memory import MemoryTransport

from tritium.transport.grpc.connection import GrpcConnection
from tritium.frontends.grpc.listener import GrpcListener
from tritium.options import RepositoryOptions, ServerOptions
from tritium.server import InferenceServer

HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/inference.GRPCInferenceService/ModelStreamInfer"),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
]


def _message(i: int) -> bytes:
    message = pb.ModelInferRequest(model_name="simple", id=str(i))
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    data = np.full(16, i, dtype=np.int32).tobytes()
    message.raw_input_contents.extend([data, data])
    raw = message.SerializeToString()
    return b"\0" + len(raw).to_bytes(4, "big") + raw


class _Client:
    def __init__(self, listener: GrpcListener) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.transport = MemoryTransport()
        self.server = GrpcConnection(listener.endpoint)
        self.server.connection_made(self.transport)
        self.answers: dict[int, int] = {}  # stream → messages received
        self.ended: set[int] = set()

    async def pump(self) -> None:
        for _ in range(20):
            pending = self.h2.data_to_send()
            if pending:
                self.server.data_received(pending)
            await asyncio.sleep(0)
            out = b"".join(self.transport.out)
            self.transport.out.clear()
            for event in self.h2.receive_data(out) if out else ():
                if isinstance(event, h2.events.DataReceived):
                    self.answers[event.stream_id] = self.answers.get(event.stream_id, 0) + 1
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)


async def _one_stream(client: _Client, i: int) -> None:
    sid = client.h2.get_next_available_stream_id()
    client.h2.send_headers(sid, HEADERS)
    for k in range(3):
        client.h2.send_data(sid, _message(k))
    if i % 2:  # read every answer, then half-close
        client.h2.end_stream(sid)
        while sid not in client.ended:
            await client.pump()
        return
    # drop the stream mid-request, as a client that goes away
    await client.pump()
    client.h2.reset_stream(sid, ErrorCodes.CANCEL)
    await client.pump()


@pytest.mark.timeout(300)
def test_streams_leave_no_tasks_behind(example_repo: Path) -> None:
    async def main() -> tuple[int, int]:
        server = InferenceServer(ServerOptions(repository=RepositoryOptions(paths=(example_repo,))))
        await server.start()
        try:
            client = _Client(GrpcListener(server, None))
            for i in range(20):  # warm up: lazily created loop machinery
                await _one_stream(client, i)
            await asyncio.sleep(0.1)
            before = len(asyncio.all_tasks())
            for i in range(2000):
                await _one_stream(client, i)
            await asyncio.sleep(0.2)
            assert not client.server.calls, "every stream is forgotten"
            return before, len(asyncio.all_tasks())
        finally:
            await server.stop()

    before, after = asyncio.run(main())
    assert after <= before, f"tasks grew from {before} to {after}"
