"""The bounds of one gRPC connection (transport/grpc/bounds.py) driven by an h2 client in
memory: the request bytes its calls hold are counted (and forgotten with the calls), past the
input bound the newest calls end and the oldest never does, past the output bound responses
that would wait end their calls, and an idle connection can be shed."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from tests.support.grpc_memory import MemoryTransport, memory_endpoint
from h2.settings import SettingCodes

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
    ("content-type", "application/grpc"),
]


def _echo(raw: bytes, call: ServerCall) -> bool:
    call.answer(raw)
    return True


async def _unused(request: Any, call: ServerCall) -> Any:
    raise AssertionError("the fast path answers")


async def _hold(call: ServerCall) -> None:
    """A streaming handler that reads nothing: flow control holds its client back."""
    await asyncio.Event().wait()


async def _read_all(call: ServerCall) -> None:
    while await call.read() is not None:
        pass


def _endpoint(**limits: Any) -> GrpcEndpoint:
    methods = {
        PATH: Method(Kind.UNARY, _unused, lambda b: b, fast=_echo),
        "/test.Service/Hold": Method(Kind.BIDI, _hold, lambda b: b),
        "/test.Service/Read": Method(Kind.BIDI, _read_all, lambda b: b),
    }
    return memory_endpoint(methods, **limits)


class _Peer:
    """An h2 client and the server connection it talks to, in memory."""

    def __init__(self, listener: GrpcEndpoint, settings: dict[int, int] | None = None) -> None:
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        if settings:
            self.h2.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.h2.initiate_connection()
        self.transport = MemoryTransport()
        self.transport.get_write_buffer_size = lambda: 0  # type: ignore[attr-defined]
        self.server = GrpcConnection(listener)
        self.server.connection_made(self.transport)
        self.status: dict[int, str] = {}
        self.data: dict[int, bytes] = {}

    async def pump(self) -> None:
        for _ in range(20):
            pending = self.h2.data_to_send()
            if pending:
                self.server.data_received(pending)
            await asyncio.sleep(0)  # what a turn makes is written at its end
            out = self.transport.take()
            if not out and not pending:
                return
            for event in self.h2.receive_data(out) if out else ():
                self._event(event)

    def _event(self, event: Any) -> None:
        sid = getattr(event, "stream_id", 0)
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            headers = dict(event.headers)
            if b"grpc-status" in headers:
                self.status[sid] = headers[b"grpc-status"].decode()
        elif isinstance(event, h2.events.DataReceived):
            self.data[sid] = self.data.get(sid, b"") + event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, sid)

    async def start(self, body: bytes, end: bool = False, path: str = PATH) -> int:
        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(sid, [(k, path if k == ":path" else v) for k, v in HEADERS])
        await self.send(sid, body, end)
        return sid

    async def send(self, sid: int, body: bytes, end: bool = False) -> None:
        """``body`` in DATA frames; stops where the server ended the stream."""
        try:
            for at in range(0, len(body), 16384):
                piece = body[at : at + 16384]
                if self.h2.local_flow_control_window(sid) < len(piece):
                    break  # the server holds the client back
                self.h2.send_data(sid, piece)
                await self.pump()
            if end:
                self.h2.end_stream(sid)
        except h2.exceptions.StreamClosedError:
            pass
        await self.pump()


def _message(size: int) -> bytes:
    return b"\0" + size.to_bytes(4, "big") + bytes(size)


def test_held_bytes_are_counted_and_forgotten_with_the_call() -> None:
    async def main() -> None:
        peer = _Peer(_endpoint())
        await peer.pump()
        message = _message(100_000)
        sid = await peer.start(message[:60_000])
        assert peer.server.bounds.input_held == 60_000  # the prefix counts too
        await peer.send(sid, message[60_000:])  # whole, waiting for END_STREAM in the inbox
        assert peer.server.bounds.input_held == 100_000
        await peer.send(sid, b"", end=True)
        assert peer.status[sid] == "0" and peer.data[sid] == message
        assert peer.server.bounds.input_held == 0 and not peer.server.calls
        other = await peer.start(message[:50_000])
        peer.h2.reset_stream(other)
        await peer.pump()
        assert peer.server.bounds.input_held == 0

    asyncio.run(main())


def test_past_the_input_bound_the_newest_end_and_the_oldest_goes_on() -> None:
    async def main() -> None:
        peer = _Peer(_endpoint(input_bytes=50_000))  # less than one message
        await peer.pump()
        message = _message(100_000)
        sids = [await peer.start(message[:40_000]) for _ in range(3)]
        assert peer.status == {sids[1]: "8", sids[2]: "8"}  # RESOURCE_EXHAUSTED
        await peer.send(sids[0], message[40_000:], end=True)
        assert peer.status[sids[0]] == "0" and peer.data[sids[0]] == message
        assert peer.server.bounds.input_held == 0

    asyncio.run(main())


def test_past_the_output_bound_a_response_that_would_wait_ends_its_call() -> None:
    async def main() -> None:
        listener = _endpoint(output_bytes=250_000)
        peer = _Peer(listener, {SettingCodes.INITIAL_WINDOW_SIZE: 0})
        await peer.pump()
        sids = [await peer.start(_message(100_000), end=True) for _ in range(5)]
        assert peer.server.bounds.output_waiting() >= 250_000
        refused = [sid for sid in sids if peer.status.get(sid) == "8"]
        assert refused == sids[3:]  # three answers wait (300 KB), then the bound holds
        late = await peer.start(_message(10), end=True)
        assert peer.status[late] == "8"  # a new call while at the bound
        for sid in sids[:3]:
            peer.h2.increment_flow_control_window(200_000, stream_id=sid)
        peer.h2.increment_flow_control_window(600_000)
        await peer.pump()
        assert [peer.status.get(sid) for sid in sids[:3]] == ["0"] * 3
        assert peer.server.bounds.output_waiting() == 0

    asyncio.run(main())


def test_an_idle_connection_is_sheddable_and_a_busy_one_is_not() -> None:
    async def main() -> None:
        listener = _endpoint()
        peer = _Peer(listener)
        await peer.pump()
        assert peer.server in list(listener.pool)
        assert peer.server.idle_since() is not None
        sid = await peer.start(_message(10))  # open, no END_STREAM
        assert peer.server.idle_since() is None
        await peer.send(sid, b"", end=True)
        assert peer.server.idle_since() is not None
        peer.server.shed()
        assert peer.server.idle_since() is None  # closed

    asyncio.run(main())


def test_a_client_held_back_by_flow_control_is_not_stalled_one_that_stops_is() -> None:
    """A stream whose handler reads nothing fills its window mid-message: the client waits
    on the server, and the stall clock leaves it alone. A stream whose handler reads, with
    a client that stops mid-message, ends DEADLINE_EXCEEDED."""

    async def main() -> None:
        peer = _Peer(_endpoint(stall_timeout=0.05))
        await peer.pump()
        held = await peer.start(_message(100_000) + _message(2 << 20), path="/test.Service/Hold")
        assert peer.h2.local_flow_control_window(held) < 16384
        stopped = await peer.start(_message(100_000)[:50_000], path="/test.Service/Read")
        for _ in range(10):  # several stall periods
            await asyncio.sleep(0.05)
            await peer.pump()
        assert peer.status.get(stopped) == "4"  # DEADLINE_EXCEEDED
        assert held not in peer.status and held in peer.server.calls

    asyncio.run(main())
