"""The transport's one-piece unary answer (``Outbound.answer`` of ``GrpcConnection``, on
``H2Server.answer``) writes headers, DATA and trailers in one piece: an independent h2 client
must read exactly a normal answer, and the core's stream states and windows must stay what
the general path would make them."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events

from tests.support.grpc_memory import MemoryTransport, memory_endpoint

from tritium.transport.grpc.call import ServerCall
from tritium.transport.grpc.connection import GrpcConnection
from tritium.transport.grpc.endpoint import GrpcEndpoint
from tritium.transport.grpc.dispatch import Kind, Method

PATH = "/test.Service/Echo"
HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", PATH),
    (":authority", "localhost"),
    ("te", "trailers"),
    ("content-type", "application/grpc"),
]


def _echo(raw: bytes, call: ServerCall) -> bool:
    call.answer(raw * int(call.metadata.get("x-repeat", "1")))
    return True


async def _unused(request: Any, call: ServerCall) -> Any:
    raise AssertionError("the fast path answers")


def _endpoint() -> GrpcEndpoint:
    return memory_endpoint({PATH: Method(Kind.UNARY, _unused, lambda b: b, fast=_echo)})


def _exchange(calls: int, payload: bytes, repeat: int) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport = MemoryTransport()
        server = GrpcConnection(_endpoint())
        server.connection_made(transport)
        server.data_received(client.data_to_send())
        answers: dict[int, dict[str, Any]] = {}
        message = b"\0" + len(payload).to_bytes(4, "big") + payload
        for _ in range(calls):
            sid = client.get_next_available_stream_id()
            client.send_headers(sid, [*HEADERS, ("x-repeat", str(repeat))])
            client.send_data(sid, message, end_stream=True)
            answers[sid] = {"data": b"", "headers": None, "trailers": None, "ended": False}
            server.data_received(client.data_to_send())
            for _step in range(50):  # until the answer is out (large ones wait for windows)
                await asyncio.sleep(0)
                for event in client.receive_data(b"".join(transport.out)):
                    _record(client, answers, event)
                transport.out.clear()
                pending = client.data_to_send()
                if pending:
                    server.data_received(pending)
                if answers[sid]["ended"]:
                    break
            assert not server.calls, "the answered call is forgotten"
        return list(answers.values())

    return asyncio.run(run())


def _record(client: Any, answers: dict[int, dict[str, Any]], event: Any) -> None:
    if isinstance(event, h2.events.ResponseReceived):
        answers[event.stream_id]["headers"] = dict(event.headers)
    elif isinstance(event, h2.events.DataReceived):
        answers[event.stream_id]["data"] += event.data
        client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    elif isinstance(event, h2.events.TrailersReceived):
        answers[event.stream_id]["trailers"] = dict(event.headers)
    elif isinstance(event, h2.events.StreamEnded):
        answers[event.stream_id]["ended"] = True


def _check(answer: dict[str, Any], body: bytes) -> None:
    assert answer["ended"]
    assert answer["headers"][b":status"] == b"200"
    assert answer["headers"][b"content-type"] == b"application/grpc"
    assert answer["trailers"] == {b"grpc-status": b"0"}
    assert answer["data"] == b"\0" + len(body).to_bytes(4, "big") + body


def test_small_answers_read_as_normal_ones_and_close_their_streams() -> None:
    # more calls than the connection's stream bound: every stream must be closed and forgotten
    answers = _exchange(150, b"hello", 1)
    assert len(answers) == 150
    for answer in answers:
        _check(answer, b"hello")


def test_an_answer_over_one_frame_takes_the_general_path() -> None:
    payload = bytes(range(256)) * 4
    for answer in _exchange(3, payload, 100):  # 100 KiB: several frames and window updates
        _check(answer, payload * 100)
