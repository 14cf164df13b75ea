"""A compressed request message is inflated on the event loop only while it stays small:
one that inflates past ``INLINE_INFLATE`` is handed over undecoded and inflated on a worker
thread by whoever takes it, still bounded by the max receive size."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import pytest

from tritium.transport.grpc.call import INLINE_INFLATE, Deferred, ServerCall
from tritium.transport.grpc.status import RpcError, StatusCode


class _Conn:
    max_receive = 4 * INLINE_INFLATE
    max_send = 1 << 20
    peer = "127.0.0.1:1"
    message_budget = 1 << 30  # no per-turn bound here (tests/unit/test_grpc_budgets.py)

    def __init__(self) -> None:
        self.given_back = 0
        self.input_held = 0  # request bytes the calls hold (transport/grpc/bounds.py)

    def acknowledge(self, sid: int, size: int) -> None:
        self.given_back += size

    def hold_input(self, size: int) -> None:
        self.input_held += size


def _call() -> tuple[ServerCall, _Conn]:
    conn = _Conn()
    return ServerCall(conn, 1, "/x/Y", {}, "gzip"), conn  # type: ignore[arg-type]


def _message(body: bytes) -> bytes:
    packed = gzip.compress(body)
    return b"\1" + len(packed).to_bytes(4, "big") + packed


def test_a_small_message_is_inflated_where_it_arrives() -> None:
    call, _ = _call()
    call.feed(_message(b"a" * 1000), len(_message(b"a" * 1000)))
    assert call.take() == b"a" * 1000


def test_a_large_one_is_inflated_off_the_loop_when_taken() -> None:
    body = bytes(2 * INLINE_INFLATE)  # a few hundred bytes compressed
    call, conn = _call()
    wire = _message(body)
    call.feed(wire, len(wire))
    call.end_of_input()
    assert conn.given_back == 0  # held until the handler takes it

    async def read() -> Any:
        return await call.read()

    assert asyncio.run(read()) == body
    assert conn.given_back == len(wire)


def test_a_large_one_past_the_bound_is_resource_exhausted() -> None:
    call, _ = _call()
    wire = _message(bytes(8 * INLINE_INFLATE))  # past max_receive
    call.feed(wire, len(wire))
    taken = call.take()
    assert isinstance(taken, Deferred)
    with pytest.raises(RpcError) as caught:
        asyncio.run(taken.inflate())
    assert caught.value.code is StatusCode.RESOURCE_EXHAUSTED


def test_a_corrupt_one_is_refused_at_once() -> None:
    call, _ = _call()
    wire = b"\1" + (10).to_bytes(4, "big") + b"not gzip!!"
    with pytest.raises(RpcError) as caught:
        call.feed(wire, len(wire))
    assert caught.value.code is StatusCode.INTERNAL
