"""HTTP/2 fuzz targets. ``h2_frames`` (issue 22): arbitrary frame sequences into one
``GrpcConnection`` after a valid preface and SETTINGS, on an in-memory transport
(tests/support/grpc_memory.py), over a real ``InferenceServer`` with no models, so that every gRPC
method runs and answers its error.

The input is a list of frames in a compact form the mutator can work with: per frame one byte
for the type (mod 12: the ten HTTP/2 types, an unknown type, or raw bytes written as they
are), one of flags, one for the stream id (low 4 bits) and one for the payload: its length,
taken from the input, except for HEADERS (< ``len(BLOCKS)``: a canned HPACK header block) and
DATA (>= 0xF0: a canned gRPC message repeated ``next byte`` times). The first byte picks how
the bytes arrive (whole, or in slices of 1..96 bytes).

It fails when the connection raises out of ``data_received``/``connection_lost``, logs an
error (an exception in a handler or the transport), writes a frame that is not well-formed,
is left with reading paused or work pending once the loop is idle, or does not settle.

``h2_core`` (issue 24): raw bytes after the preface and SETTINGS straight into tritium's
sans-IO HTTP/2 core (``transport/http2``) with a handler that answers every request and
gives every DATA byte back. It fails when anything but ``H2ConnectionError`` comes out of
``receive``, a window goes negative or past 2^31-1, a frame the core's own ``parse_frame``
accepts does not serialise back to its bytes, or what the core wrote is not a sequence of
well-formed frames (read by hyperframe, independently)."""

from __future__ import annotations

import asyncio
import gzip
import logging
import struct
import sys
from pathlib import Path

import hpack
from fuzz_harness import FuzzFailure, Target, byte_inputs
from hyperframe.exceptions import HyperframeError
from hyperframe.frame import Frame
from tritonclient.grpc import service_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run_fuzz.py's workers start in tests/fuzz
    sys.path.append(str(ROOT))

from tests.support.grpc_memory import MemoryTransport  # noqa: E402

from tritium.transport.grpc.connection import GrpcConnection  # noqa: E402
from tritium.transport.http2 import PREFACE, H2ConnectionError, H2Server  # noqa: E402
from tritium.transport.http2 import frames as h2frames  # noqa: E402
from tests.support.h2_sink import EventSink, core  # noqa: E402
from tritium.frontends.grpc.listener import GrpcListener  # noqa: E402
from tritium.options import ServerOptions  # noqa: E402
from tritium.server import InferenceServer  # noqa: E402

DATA, HEADERS, SETTINGS = 0, 1, 4
_SERVICE = "/inference.GRPCInferenceService/"


def _block(path: str, *extra: tuple[str, str], method: str = "POST") -> bytes:
    headers = [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]
    return hpack.Encoder().encode(headers)  # a fresh encoder: no dynamic-table references


BLOCKS = [
    _block(_SERVICE + "ServerLive"),
    _block(_SERVICE + "ModelStreamInfer"),
    _block(_SERVICE + "ModelInfer", ("grpc-encoding", "gzip")),
    _block(_SERVICE + "ModelInfer", ("grpc-timeout", "1m")),
    _block(_SERVICE + "RepositoryIndex"),
    _block("/no.Such/Method"),
    _block(_SERVICE + "ServerReady", method="GET"),
    _block("/grpc.health.v1.Health/Check"),
    hpack.Encoder().encode([("grpc-status", "0")]),  # trailers-like: no pseudo-headers
]


def _message(body: bytes, compressed: bool = False) -> bytes:
    if compressed:
        body = gzip.compress(body)
    return bytes([compressed]) + len(body).to_bytes(4, "big") + body


_INFER = pb.ModelInferRequest(model_name="m", id="7").SerializeToString()
MESSAGES = [
    _message(b""),
    _message(_INFER),
    _message(_INFER, compressed=True),
    _message(b"\xff\xff\xff"),  # not a protobuf message
    b"\x00\x00\x00\x00",  # a prefix cut short
    b"\x02\x00\x00\x00\x00",  # a bad compression flag
]


def _frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + payload


MAX_REPEATS = 1024  # canned messages per input: each costs the server ~30 µs


def frames_of(data: bytes) -> bytes:
    """The wire bytes of the compact frame list (see the module docstring)."""
    out, pos, repeats = bytearray(), 0, 0
    while pos + 4 <= len(data):
        pick, flags, sid, size = data[pos : pos + 4]
        pos += 4
        kind = pick % 12
        if kind == 11:  # raw bytes, as they are
            out += data[pos : pos + size]
            pos += size
            continue
        if kind == 10:
            kind = 0x0A + pick % 0xF0  # a type this HTTP/2 does not know
        if kind == HEADERS and size < len(BLOCKS):
            payload = BLOCKS[size]
        elif kind == DATA and size >= 0xF0:
            count = min(data[pos] if pos < len(data) else 1, MAX_REPEATS - repeats)
            pos += 1
            repeats += count
            payload = MESSAGES[(size - 0xF0) % len(MESSAGES)] * count
        else:
            payload = data[pos : pos + size]
            pos += size
        out += _frame(kind, flags, sid & 0x0F, payload)
    return bytes(out)


def _chunks(data: bytes) -> tuple[bytes, list[bytes]]:
    """The first byte picks how the rest arrives: whole, or in slices of 1..96 bytes."""
    if not data:
        return b"", []
    step, rest = data[0] % 97, data[1:]
    wire = PREFACE + _frame(SETTINGS, 0, 0, b"") + frames_of(rest)
    if step == 0:
        return wire, [wire]
    return wire, [wire[i : i + step] for i in range(0, len(wire), step)]


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


_LOOP: asyncio.AbstractEventLoop | None = None
_LISTENER: GrpcListener | None = None
_ERRORS = _Errors()


def _listener() -> tuple[asyncio.AbstractEventLoop, GrpcListener]:
    global _LOOP, _LISTENER
    if _LOOP is None or _LISTENER is None:
        _LOOP = asyncio.new_event_loop()
        server = InferenceServer(ServerOptions())  # no repository
        _LOOP.run_until_complete(server.start())
        _LISTENER = GrpcListener(server, None)
    return _LOOP, _LISTENER


async def _quiet() -> None:
    """Run the loop until nothing is ready to run for a few turns (the connection's later
    turns done; handlers may wait for more of their stream)."""
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(20_000):
        quiet = 0 if loop._ready else quiet + 1  # type: ignore[attr-defined]
        if quiet > 3:
            return
        await asyncio.sleep(0)
    raise FuzzFailure("the connection never went quiet")


async def _ended() -> None:
    """Run the loop until every task but this one is done (the calls' tasks cancelled)."""
    current = asyncio.current_task()
    for _ in range(20_000):
        if all(t is current or t.done() for t in asyncio.all_tasks()):
            return
        await asyncio.sleep(0)
    raise FuzzFailure("tasks were left behind after the connection ended")


async def _drive(listener: GrpcListener, chunks: list[bytes]) -> MemoryTransport:
    transport = MemoryTransport()
    conn = GrpcConnection(listener.endpoint)
    conn.connection_made(transport)
    for index, chunk in enumerate(chunks):
        if transport.closed:
            break  # a closed connection delivers nothing more
        conn.data_received(chunk)
        await asyncio.sleep(0)
        if index % 32 == 31:
            await _quiet()
    await _quiet()
    if not transport.closed:
        _check_idle(conn, transport)
    conn.connection_lost(None)
    await _ended()
    return transport


def _check_idle(conn: GrpcConnection, transport: MemoryTransport) -> None:
    """Nothing may wait for a turn that never comes."""
    if not transport.reading or conn.reader.holds or conn.reader.backlog or conn.reader.deferred:
        raise FuzzFailure(
            f"idle with reading={transport.reading} holds={conn.reader.holds} "
            f"backlog={len(conn.reader.backlog)} deferred={list(conn.reader.deferred)}"
        )


def _check_output(data: bytes) -> None:
    """What the server wrote is a sequence of well-formed HTTP/2 frames."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 9:
            raise FuzzFailure(f"a frame header cut short at {pos}: {data[pos:]!r}")
        try:
            frame, length = Frame.parse_frame_header(memoryview(data[pos : pos + 9]))
            body = data[pos + 9 : pos + 9 + length]
            if len(body) < length:
                raise FuzzFailure(f"a {type(frame).__name__} body cut short at {pos}")
            frame.parse_body(memoryview(body))
        except HyperframeError as exc:
            raise FuzzFailure(f"malformed frame written at {pos}: {exc}") from exc
        pos += 9 + length


def check_h2_frames(data: bytes) -> None:
    loop, listener = _listener()
    _ERRORS.records.clear()
    _, chunks = _chunks(data)
    log = logging.getLogger("tritium")
    log.addHandler(_ERRORS)
    try:
        transport = loop.run_until_complete(_drive(listener, chunks))
    finally:
        log.removeHandler(_ERRORS)
    if _ERRORS.records:
        raise FuzzFailure(f"logged an error: {_ERRORS.records[0][:500]}")
    _check_output(transport.take())


def _spec(kind: int, flags: int, sid: int, size: int, payload: bytes = b"") -> bytes:
    return bytes([kind, flags, sid, size]) + payload


_END_HEADERS, _END_STREAM = 0x4, 0x1
H2_SEEDS = [
    b"\x00"
    + _spec(HEADERS, _END_HEADERS, 1, 0)
    + _spec(DATA, _END_STREAM, 1, 0xF0, b"\x01"),  # ServerLive
    b"\x00"
    + _spec(HEADERS, _END_HEADERS, 3, 1)
    + _spec(DATA, 0, 3, 0xF0, b"\xc8")  # ModelStreamInfer: 200 empty messages
    + _spec(DATA, 0, 3, 0xF1, b"\x03")
    + _spec(DATA, _END_STREAM, 3, 0),
    b"\x07"
    + _spec(HEADERS, _END_HEADERS, 5, 2)
    + _spec(DATA, _END_STREAM, 5, 0xF2, b"\x01"),  # ModelInfer, gzip, in 7-byte slices
    b"\x00"
    + _spec(SETTINGS, 0, 0, 6, struct.pack(">HI", 4, 1 << 20))
    + _spec(6, 0, 0, 8, b"pingping")  # PING
    + _spec(8, 0, 0, 4, struct.pack(">I", 1000))  # WINDOW_UPDATE
    + _spec(2, 0, 1, 5, bytes(5))  # PRIORITY
    + _spec(3, 0, 1, 4, bytes(4)),  # RST_STREAM
    b"\x00"
    + _spec(HEADERS, 0, 7, 3)  # no END_HEADERS: a CONTINUATION must follow
    + _spec(9, _END_HEADERS, 7, 0)
    + _spec(DATA, _END_STREAM, 7, 0xF3, b"\x01")
    + _spec(7, 0, 0, 8, bytes(8)),  # GOAWAY
    b"\x00" + _spec(HEADERS, _END_HEADERS, 9, 1) + _spec(DATA, 0, 9, 0) * 50,  # empty DATA
]
H2_TOKENS = [
    _spec(HEADERS, _END_HEADERS, 1, 1),
    _spec(DATA, 0, 1, 0xF0, b"\xff"),
    _spec(DATA, _END_STREAM, 1, 0),
    _spec(SETTINGS, 0, 0, 0),
    _spec(6, 0, 0, 8, bytes(8)),
    _spec(3, 0, 1, 4, b"\x00\x00\x00\x08"),
    _spec(8, 0, 1, 4, b"\x7f\xff\xff\xff"),
]

H2_FRAMES = Target(
    "h2_frames",
    check_h2_frames,
    byte_inputs(H2_SEEDS, H2_TOKENS, 512),
    seeds=H2_SEEDS,
    tokens=H2_TOKENS,
    max_len=4096,
)


# -- the sans-IO core alone ----------------------------------------------------------------------


class _Answering(EventSink):
    """Answers each request once its input ended; gives every DATA byte back."""

    def __init__(self) -> None:
        super().__init__(acknowledge=True)

    def on_request(self, stream_id: int, headers: object, end_stream: bool) -> None:
        if end_stream:
            self._answer(stream_id)

    def on_data(self, stream_id: int, data: memoryview, flow: int, end_stream: bool) -> None:
        assert self.core is not None
        if flow:
            self.core.acknowledge(stream_id, flow)
        if end_stream:
            self._answer(stream_id)

    def on_window(self, stream_id: int) -> None:
        pass

    def _answer(self, sid: int) -> None:
        h2 = self.core
        assert h2 is not None
        if sid % 3 == 0 and h2.answer(sid, [(b":status", b"200")], b"ok", [(b"grpc-status", b"0")]):
            return
        if h2.can_send(sid):
            h2.send_headers(sid, [(b":status", b"200"), (b"x-big", b"v" * (sid * 97 % 20000))])
            h2.send_data(sid, memoryview(bytes(sid * 131 % 70000)))
            if h2.can_send(sid):
                h2.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)


def _check_windows(h2: H2Server) -> None:
    send, receive = h2.connection_windows
    if not 0 <= receive <= h2frames.MAX_WINDOW or send > h2frames.MAX_WINDOW:
        raise FuzzFailure(f"connection windows {send}/{receive}")
    for sid, stream in h2.streams.items():
        if stream.recv_window < 0 or stream.send_window > h2frames.MAX_WINDOW:
            raise FuzzFailure(f"stream {sid}: windows {stream.recv_window}/{stream.send_window}")


def _round_trips(data: bytes) -> None:
    """Every frame ``parse_frame`` accepts from the input serialises back to its bytes."""
    pos = 0
    while pos < len(data):
        try:
            parsed = h2frames.parse_frame(data[pos:], max_frame=1 << 20)
        except h2frames.FrameError:
            return
        if parsed is None:
            return
        frame, used = parsed
        wire = h2frames.frame(frame.kind, frame.flags, frame.stream_id, frame.payload)
        if wire[:5] + wire[9:] != data[pos : pos + 5] + data[pos + 9 : pos + used]:
            raise FuzzFailure(f"frame at {pos} does not serialise back")
        pos += used


def check_h2_core(data: bytes) -> None:
    if not data:
        return
    step, rest = data[0] % 33, data[1:]
    _round_trips(rest)
    wire = PREFACE + _frame(SETTINGS, 0, 0, b"") + rest
    chunks = [wire] if not step else [wire[i : i + step] for i in range(0, len(wire), step)]
    sink = _Answering()
    h2 = core(sink, max_streams=8, max_frame=16384, max_block=32768)
    out = bytearray()
    for chunk in chunks:
        try:
            used, _ = h2.receive(chunk, 100, 1 << 20)
        except H2ConnectionError:
            h2.close(0)
            out += h2.take_output()
            break
        if used != len(chunk) and not h2.closed:
            raise FuzzFailure(f"took {used} of {len(chunk)} bytes within the budget")
        _check_windows(h2)
        out += h2.take_output()
    _check_output(bytes(out))


def _raw_frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    return b"\x00" + _frame(kind, flags, sid, payload)


_REQUEST = BLOCKS[0]
CORE_SEEDS = [
    _raw_frame(HEADERS, 0x5, 1, _REQUEST),
    b"\x05" + _frame(HEADERS, 0x4, 3, _REQUEST) + _frame(DATA, 0x1, 3, _message(_INFER)),
    b"\x00"
    + _frame(HEADERS, 0x0, 1, _REQUEST[:10])
    + _frame(9, 0x4, 1, _REQUEST[10:])
    + _frame(8, 0, 0, struct.pack(">I", 1 << 20))
    + _frame(6, 0, 0, b"pingpong"),
    b"\x00"
    + _frame(SETTINGS, 0, 0, struct.pack(">HIHIHI", 4, 100, 5, 20000, 1, 0))
    + _frame(HEADERS, 0x4, 9, _REQUEST)
    + _frame(8, 0, 9, struct.pack(">I", 70000))
    + _frame(DATA, 0x9, 9, b"\x03abc" + bytes(3))
    + _frame(3, 0, 9, bytes(4))
    + _frame(7, 0, 0, bytes(8) + b"bye"),
]
CORE_TOKENS = [
    _frame(HEADERS, 0x5, 5, _REQUEST),
    _frame(DATA, 0x1, 5, b"x"),
    _frame(SETTINGS, 0, 0, b""),
    _frame(SETTINGS, 0x1, 0, b""),
    _frame(6, 0, 0, bytes(8)),
    _frame(8, 0, 0, b"\x7f\xff\xff\xff"),
    _frame(3, 0, 5, b"\x00\x00\x00\x08"),
    _frame(2, 0, 5, bytes(5)),
]

H2_CORE = Target(
    "h2_core",
    check_h2_core,
    byte_inputs(CORE_SEEDS, CORE_TOKENS, 512),
    seeds=CORE_SEEDS,
    tokens=CORE_TOKENS,
    max_len=4096,
)
