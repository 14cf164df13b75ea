"""tritium's sans-IO HTTP/2 core (``transport/http2``), driven by ``h2`` as an independent
client: frames, SETTINGS, stream states, concurrency, flow control both ways, header blocks
and their bounds, PING, RST_STREAM and GOAWAY."""

from __future__ import annotations

import struct
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import pytest

from tests.support.h2_sink import EventSink, core

from tritium.transport.http2 import PREFACE, ErrorCode, H2ConnectionError, H2Server, StreamGone
from tritium.transport.http2 import frames as f
from tritium.transport.http2.headers import HeaderDecoder, HeaderEncoder, leaves_table_alone

REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/pkg.Service/Method"),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]
BIG = 1 << 30  # a turn budget that does not bind


class Pair:
    """The core and an h2 client, bytes carried both ways by hand."""

    def __init__(self, acknowledge: bool = True, **bounds: int) -> None:
        self.sink = EventSink(acknowledge)
        self.server = core(self.sink, **bounds)
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.client.initiate_connection()
        self.client_events: list[Any] = []
        self.pump()

    def pump(self) -> None:
        for _ in range(20):
            out = self.client.data_to_send()
            if out:
                self.server.receive(out, BIG, BIG)
            back = self.server.take_output()
            if back:
                self.client_events += self.client.receive_data(back)
            if not out and not back:
                return

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.client_events if isinstance(e, kind)]

    def request(self, body: bytes = b"", end: bool = True) -> int:
        sid: int = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, REQUEST, end_stream=end and not body)
        if body:
            self.client.send_data(sid, body, end_stream=end)
        self.pump()
        return sid


def _raw(*frames: bytes) -> bytes:
    return PREFACE + f.settings({}) + b"".join(frames)


def _error(data: bytes, **bounds: int) -> ErrorCode:
    with pytest.raises(H2ConnectionError) as caught:
        core(EventSink(), **bounds).receive(data, BIG, BIG)
    return caught.value.code


# -- frames ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        f.data(1, b"payload", end_stream=True),
        f.headers(3, b"\x82\x86", end_stream=False, max_frame=16384),
        f.priority(5, 3, 16, exclusive=True),
        f.rst_stream(7, ErrorCode.CANCEL),
        f.settings({f.INITIAL_WINDOW_SIZE: 1 << 20, f.MAX_FRAME_SIZE: 1 << 16}),
        f.SETTINGS_ACK,
        f.push_promise(1, 2, b"\x82"),
        f.ping(b"12345678", ack=True),
        f.goaway(9, ErrorCode.ENHANCE_YOUR_CALM, b"why"),
        f.window_update(0, 12345),
        f.continuation(3, b"\x84"),
        f.frame(0x42, 0xFF, 11, b"unknown"),
    ],
)
def test_each_frame_type_parses_back_to_what_was_serialised(wire: bytes) -> None:
    parsed = f.parse_frame(wire + b"next", max_frame=1 << 20)
    assert parsed is not None
    frame, used = parsed
    assert used == len(wire)
    assert f.frame(frame.kind, frame.flags, frame.stream_id, frame.payload) == wire
    assert f.parse_frame(wire[:-1], max_frame=1 << 20) is None or len(wire) == 9


def test_frame_rules_are_checked() -> None:
    bad = [
        (f.frame(f.PING, 0, 0, b"short"), ErrorCode.FRAME_SIZE_ERROR),
        (f.frame(f.SETTINGS, 0, 1, b""), ErrorCode.PROTOCOL_ERROR),
        (f.frame(f.DATA, 0, 0, b"x"), ErrorCode.PROTOCOL_ERROR),
        (f.frame(f.DATA, f.PADDED, 1, b"\x05abc"), ErrorCode.PROTOCOL_ERROR),
        (f.frame(f.SETTINGS, f.ACK, 0, bytes(6)), ErrorCode.FRAME_SIZE_ERROR),
        (f.frame(f.GOAWAY, 0, 0, bytes(4)), ErrorCode.FRAME_SIZE_ERROR),
    ]
    for wire, code in bad:
        with pytest.raises(f.FrameError) as caught:
            f.parse_frame(wire)
        assert caught.value.code == code
    with pytest.raises(f.FrameError):
        f.parse_frame(f.head(16385, f.DATA, 0, 1))  # past the frame size, from the header


def test_headers_past_the_frame_size_go_as_continuations() -> None:
    block = bytes(40000)
    wire = f.headers(1, block, end_stream=True, max_frame=16384)
    kinds, pos, body = [], 0, b""
    while pos < len(wire):
        parsed = f.parse_frame(wire[pos:])
        assert parsed is not None
        frame, used = parsed
        kinds.append((frame.kind, frame.flags))
        body += frame.payload
        pos += used
    assert body == block
    assert kinds == [(f.HEADERS, f.END_STREAM), (f.CONTINUATION, 0), (f.CONTINUATION, 4)]


# -- HPACK -------------------------------------------------------------------------------------


def test_the_encoder_writes_blocks_hpack_decodes() -> None:
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc"),
               (b"grpc-status", b"13"), (b"grpc-message", b"x" * 300)]  # fmt: skip
    encoder = HeaderEncoder()
    for _ in range(2):  # the second from the cache
        assert hpack.Decoder().decode(encoder.encode(headers), raw=True) == headers
    encoder.table_size_changed()
    block = encoder.encode(headers[:1])
    assert block[0] == 0x20  # a size update to 0 first
    assert hpack.Decoder().decode(block, raw=True) == headers[:1]


def test_the_decoder_cache_holds_only_while_the_table_stays() -> None:
    client = hpack.Encoder()
    decoder = HeaderDecoder(16384)
    first = client.encode(REQUEST)  # adds to the dynamic table
    again = client.encode(REQUEST)  # indexed references only
    assert not leaves_table_alone(first) and leaves_table_alone(again)
    expected = tuple((k.encode(), v.encode()) for k, v in REQUEST)
    assert decoder.decode(first) == expected
    assert decoder.decode(again) == expected
    assert decoder.decode(again) == expected  # cached
    changed = client.encode([(":path", "/other")])  # a new entry moves every index
    assert decoder.decode(changed) == ((b":path", b"/other"),)
    repeat = client.encode(REQUEST)
    assert decoder.decode(repeat) == expected


# -- SETTINGS and the preface ------------------------------------------------------------------


def test_settings_are_stated_first_and_the_peers_are_acknowledged() -> None:
    pair = Pair()
    changed = pair.of(h2.events.RemoteSettingsChanged)[0].changed_settings
    codes = h2.settings.SettingCodes
    assert changed[codes.MAX_CONCURRENT_STREAMS].new_value == 100
    assert changed[codes.INITIAL_WINDOW_SIZE].new_value == 1 << 20
    assert changed[codes.MAX_FRAME_SIZE].new_value == 1 << 20
    assert pair.of(h2.events.SettingsAcknowledged)
    assert pair.sink.named("settings")
    assert pair.client.outbound_flow_control_window == 16 << 20


def test_initial_window_size_moves_every_open_streams_window() -> None:
    pair = Pair()
    sid = pair.request(end=False)
    before = pair.server.send_window(sid)
    pair.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    pair.pump()
    assert before == 65535 and pair.server.send_window(sid) == 1000
    assert _error(_raw(f.settings({f.INITIAL_WINDOW_SIZE: 1 << 31}))) == (
        ErrorCode.FLOW_CONTROL_ERROR
    )
    assert _error(_raw(f.settings({f.MAX_FRAME_SIZE: 100}))) == ErrorCode.PROTOCOL_ERROR


# -- streams -----------------------------------------------------------------------------------


def test_a_request_and_its_answer_walk_the_stream_states() -> None:
    pair = Pair()
    sid = pair.request(b"hello", end=False)
    assert pair.sink.named("request")[0][1:] == (
        sid, [(k.encode(), v.encode()) for k, v in REQUEST], False
    )  # fmt: skip
    assert pair.sink.named("data") == [("data", sid, b"hello", 5, False)]
    pair.client.end_stream(sid)
    pair.pump()
    assert pair.sink.named("data")[-1] == ("data", sid, b"", 0, True)  # half-closed (remote)
    assert pair.server.receive_window(sid) == 0 and pair.server.can_send(sid)
    pair.server.send_headers(sid, [(b":status", b"200")])
    assert pair.server.send_data(sid, b"answer") == 6
    pair.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    assert sid not in pair.server.streams  # closed both ways: forgotten
    with pytest.raises(StreamGone):
        pair.server.send_data(sid, b"late")
    pair.pump()
    assert pair.of(h2.events.StreamEnded)[0].stream_id == sid
    assert b"".join(e.data for e in pair.of(h2.events.DataReceived)) == b"answer"


def test_streams_past_the_bound_are_refused_and_the_connection_goes_on() -> None:
    pair = Pair(max_streams=2)
    first, second = pair.request(end=False), pair.request(end=False)

    def raw_request(sid: int, body: bytes) -> bytes:  # h2 itself keeps to the bound
        block = pair.client.encoder.encode(REQUEST)
        pair.server.receive(f.headers(sid, block, False, 16384) + f.data(sid, body), BIG, BIG)
        return pair.server.take_output()

    assert raw_request(5, b"x" * 1000) == f.rst_stream(5, ErrorCode.REFUSED_STREAM)
    assert [e[1] for e in pair.sink.named("request")] == [first, second]
    assert not [e for e in pair.sink.named("data") if e[1] == 5]
    pair.server.reset_stream(first, ErrorCode.CANCEL)
    raw_request(7, b"y")
    assert pair.sink.named("request")[-1][1] == 7


def test_data_after_end_stream_resets_that_stream() -> None:
    pair = Pair()
    sid = pair.request(end=True)
    late = f.data(sid, b"late")
    pair.server.receive(late, BIG, BIG)
    assert pair.sink.named("reset") == [("reset", sid, ErrorCode.STREAM_CLOSED)]
    assert sid not in pair.server.streams


def test_frames_on_an_idle_stream_end_the_connection() -> None:
    for frame in (f.data(1, b"x"), f.rst_stream(1, 0), f.window_update(1, 5)):
        assert _error(_raw(frame)) == ErrorCode.PROTOCOL_ERROR
    assert _error(_raw(f.headers(2, b"\x82", True, 16384))) == ErrorCode.PROTOCOL_ERROR
    assert _error(_raw(f.push_promise(1, 2, b""))) == ErrorCode.PROTOCOL_ERROR


def test_the_peers_reset_reaches_the_handler() -> None:
    pair = Pair()
    sid = pair.request(end=False)
    pair.client.reset_stream(sid, ErrorCode.CANCEL)
    pair.pump()
    assert pair.sink.named("reset") == [("reset", sid, ErrorCode.CANCEL)]
    assert not pair.server.can_send(sid)


# -- flow control ------------------------------------------------------------------------------


def test_received_bytes_come_back_as_window_updates_once_half_is_given() -> None:
    pair = Pair(acknowledge=False, stream_window=1000, connection_window=65535)
    sid = pair.request(b"x" * 400, end=False)
    pair.server.acknowledge(sid, 400)
    assert not pair.server.take_output()  # under half of either window
    pair.client.send_data(sid, b"y" * 200)
    pair.pump()
    pair.server.acknowledge(sid, 200)
    pair.pump()
    updates = [(e.stream_id, e.delta) for e in pair.of(h2.events.WindowUpdated)]
    assert (sid, 600) in updates
    assert pair.client.local_flow_control_window(sid) == 1000


def test_data_past_a_window_is_an_error() -> None:
    pair = Pair(acknowledge=False, stream_window=100)
    sid = pair.request(end=False)
    pair.server.receive(f.data(sid, bytes(101)), BIG, BIG)
    assert pair.sink.named("reset") == [("reset", sid, ErrorCode.FLOW_CONTROL_ERROR)]
    small = core(EventSink(), connection_window=65535)
    request = hpack.Encoder().encode(REQUEST)
    wire = _raw(f.headers(1, request, False, 16384), f.data(1, bytes(40000)) * 2)
    with pytest.raises(H2ConnectionError) as caught:
        small.receive(wire, BIG, BIG)
    assert caught.value.code == ErrorCode.FLOW_CONTROL_ERROR


def test_sending_stops_at_the_peers_window_and_resumes_on_its_update() -> None:
    pair = Pair()
    pair.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 20000})
    pair.pump()
    sid = pair.request()
    pair.server.send_headers(sid, [(b":status", b"200")])
    body = memoryview(bytes(range(256)) * 200)  # 51,200 bytes
    sent = pair.server.send_data(sid, body)
    assert sent == 20000 and pair.server.send_window(sid) == 0
    assert pair.server.send_data(sid, body[sent:]) == 0  # a zero window: stalled
    pair.pump()
    received = pair.of(h2.events.DataReceived)
    assert [len(e.data) for e in received] == [16384, 20000 - 16384]  # the peer's frame size
    for event in received:
        pair.client.acknowledge_received_data(event.flow_controlled_length, sid)
    pair.client.increment_flow_control_window(40000, sid)
    pair.pump()
    assert ("window", sid) in pair.sink.events
    rest = body[sent:]
    assert pair.server.send_data(sid, rest, end_stream=True) == len(rest)
    pair.pump()
    data = b"".join(e.data for e in pair.of(h2.events.DataReceived))
    assert data == body.tobytes() and pair.of(h2.events.StreamEnded)


def test_a_small_answer_goes_in_one_piece() -> None:
    pair = Pair()
    sid = pair.request(b"q")
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    assert pair.server.answer(sid, headers, b"\0\0\0\0\x01a", [(b"grpc-status", b"0")])
    assert sid not in pair.server.streams
    pair.pump()
    assert dict(pair.of(h2.events.ResponseReceived)[0].headers)[b":status"] == b"200"
    assert dict(pair.of(h2.events.TrailersReceived)[0].headers) == {b"grpc-status": b"0"}


# -- header blocks -----------------------------------------------------------------------------


def test_a_block_in_continuations_decodes_and_nothing_may_come_between() -> None:
    block = hpack.Encoder().encode(REQUEST)
    cut = len(block) // 2
    first = f.frame(f.HEADERS, f.END_STREAM, 1, block[:cut])
    rest = f.continuation(1, block[cut:])
    sink = EventSink()
    core(sink).receive(_raw(first, rest), BIG, BIG)
    assert sink.named("request")[0][1] == 1
    assert _error(_raw(first, f.ping(bytes(8)), rest)) == ErrorCode.PROTOCOL_ERROR
    assert _error(_raw(f.continuation(1, block))) == ErrorCode.PROTOCOL_ERROR


def test_a_header_list_over_its_bound_is_enhance_your_calm() -> None:
    block = hpack.Encoder().encode([*REQUEST, ("x-big", "v" * 3000)])
    assert _error(_raw(f.headers(1, block, True, 1 << 20)), max_header_list=2048) == (
        ErrorCode.ENHANCE_YOUR_CALM
    )
    assert _error(_raw(f.headers(1, b"\xff\xff\xff\x7f", True, 1 << 20))) == (
        ErrorCode.COMPRESSION_ERROR
    )


# -- PING, GOAWAY ------------------------------------------------------------------------------


def test_pings_are_acknowledged_and_goaway_is_heard() -> None:
    pair = Pair()
    pair.client.ping(b"pingpong")
    pair.pump()
    assert pair.sink.named("ping") and pair.of(h2.events.PingAckReceived)[0].ping_data == (
        b"pingpong"
    )
    pair.server.ping(b"12345678")
    pair.pump()
    assert pair.sink.named("ping_ack") == [("ping_ack", b"12345678")]
    sid = pair.request(end=False)
    pair.client.close_connection(ErrorCode.NO_ERROR, additional_data=b"bye", last_stream_id=0)
    pair.pump()
    assert pair.sink.named("goaway") == [("goaway", 0, 0, b"bye")]
    pair.server.close(ErrorCode.NO_ERROR)
    out = pair.server.take_output()
    assert out[3] == f.GOAWAY and struct.unpack(">LL", out[9:17]) == (sid, 0)
    assert pair.server.receive(f.ping(bytes(8)), BIG, BIG) == (0, 0)  # nothing more is read


def test_a_turn_reads_only_its_budget() -> None:
    h2: H2Server = core(EventSink())
    data = _raw(*[f.ping(bytes(8))] * 5)
    used, begun = h2.receive(data, 3, BIG)  # SETTINGS and two PINGs
    assert begun == 3 and used == len(PREFACE) + 9 + 2 * 17
