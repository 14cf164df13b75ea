"""HTTP/2 done properly by the gRPC transport (issue 12, items 3 and 5), seen from a raw
socket (testkit/h2client.py): flow control both ways, SETTINGS, an HPACK bomb, pings and the
ping-strike policy, keepalive, GOAWAY on connection age and on shutdown, a bad preface and
malformed frames. Every wait is bounded; nothing is timed."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from testkit.grpc_raw import (
    ENHANCE_YOUR_CALM,
    FRAME_SIZE_ERROR,
    INFER,
    NO_ERROR,
    OK,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RESOURCE_EXHAUSTED,
    STREAM,
    check_simple,
    fp32_output,
    fp32_request,
    simple_request,
    start_server,
    stream_responses,
)
from h2.settings import SettingCodes
from testkit.h2client import DATA, HEADERS, PREFACE, H2Client, grpc_message, raw_frame
from tritonclient.grpc import service_pb2 as pb

from testkit.server_process import ServerProcess

MAX_STREAMS = 64
STREAM_INFLIGHT = 4
MODELS = ["simple", "slow", "identity_fp32"]


@pytest.fixture(scope="module")
def repos(example_repo: Path, test_repo: Path) -> list[Path]:
    return [example_repo, test_repo]


@pytest.fixture(scope="module")
def h2server(repos: list[Path]) -> Iterator[ServerProcess]:
    proc = start_server(
        repos,
        MODELS,
        f"--grpc-max-concurrent-streams={MAX_STREAMS}",
        f"--grpc-stream-inflight-limit={STREAM_INFLIGHT}",
    )
    yield proc
    proc.stop()


@pytest.fixture
def client(h2server: ServerProcess) -> Iterator[H2Client]:
    with H2Client(h2server.grpc_url) as c:
        yield c


def assert_serves(url: str) -> None:
    """A fresh connection gets a right answer: the server is unaffected."""
    with H2Client(url) as fresh:
        result = fresh.call(INFER, simple_request(9))
        assert result.status == OK, (result.status, result.message)
        check_simple(result.payloads()[0], 9)


def settled(client: H2Client) -> bool:
    """The server's SETTINGS arrived (and were acknowledged by the pump)."""
    return client.wait_for(lambda: bool(client.remote_settings), timeout=10)


def _slow_call(client: H2Client) -> int:
    sid = client.start_call(INFER)
    client.send_data(sid, grpc_message(fp32_request("slow", np.arange(4))), end_stream=True)
    return sid


def _assert_slow_answered(client: H2Client, sid: int) -> None:
    result = client.streams[sid]
    assert client.wait_for(lambda: result.done, timeout=15)
    assert result.status == OK, (result.status, result.message, result.reset)
    response = pb.ModelInferResponse.FromString(result.payloads()[0])
    np.testing.assert_array_equal(fp32_output(response), np.arange(4, dtype=np.float32))


# -- flow control ---------------------------------------------------------------------------


def test_response_stops_at_the_client_window(h2server: ServerProcess) -> None:
    """The client advertises a 16 KiB stream window and acknowledges nothing: a 1 MiB answer
    stops at 16 KiB, unfinished; a WINDOW_UPDATE lets it complete, intact."""
    window = 16384
    values = np.arange(1 << 18, dtype=np.float32)  # 1 MiB
    settings = {SettingCodes.INITIAL_WINDOW_SIZE: window}
    with H2Client(h2server.grpc_url, settings=settings, auto_ack=False) as client:
        sid = client.start_call(INFER)
        client.send_data(sid, grpc_message(fp32_request("identity_fp32", values)), True)
        result = client.streams[sid]
        assert client.wait_for(lambda: len(result.data) >= window)
        client.quiet(0.5)
        assert len(result.data) == window and not result.done
        client.grant(sid, 4 << 20)
        assert client.wait_for(lambda: result.done)
        assert result.status == OK, result.message
        response = pb.ModelInferResponse.FromString(result.payloads()[0])
        np.testing.assert_array_equal(fp32_output(response), values)


def _flood(client: H2Client, sid: int, message: bytes, cap: int, last_apart: bool) -> int:
    """Send copies of ``message`` back to back on ``sid`` while the server grants window,
    never acknowledging its answers; stop once the window stays shut for 2 s (or at ``cap``
    bytes). ``last_apart``: each message's last byte goes in a DATA frame of its own. The
    bytes sent."""
    sent = 0
    while sent < cap:
        window = client.conn.local_flow_control_window(sid)
        if window == 0:
            if not client.wait_for(lambda: client.conn.local_flow_control_window(sid) > 0, 2):
                break
            continue
        left = len(message) - sent % len(message)  # of the current message
        size = min(window, client.conn.max_outbound_frame_size, left)
        if last_apart and left > 1:
            size = min(size, left - 1)
        offset = sent % len(message)
        client.conn.send_data(sid, message[offset : offset + size])
        client.flush()
        sent += size
        client.poll()  # take in WINDOW_UPDATEs
    return sent


@pytest.mark.parametrize("last_apart", [False, True])
def test_flooding_client_that_does_not_read_gets_back_pressure(
    h2server: ServerProcess, last_apart: bool
) -> None:
    """A ModelStreamInfer client floods 4 KiB requests and never acknowledges the answers:
    once its window is full the server stops reading, so the client's send window reaches 0
    well before 16 MiB (grpc core's server stops near 6 MiB); then the client reads
    everything and gets every answer. Small messages against a large window catch a server
    that gives back more window than the messages it took. With each message's last byte in
    a frame of its own, the window held back must still be every byte not handled, not only
    the frames that completed a message."""
    cap = 16 << 20
    message = grpc_message(fp32_request("identity_fp32", np.ones(1 << 10, np.float32)))
    with H2Client(h2server.grpc_url, auto_ack=False) as client:
        assert settled(client)
        sid = client.start_call(STREAM)
        sent = _flood(client, sid, message, cap, last_apart)
        assert sent < cap, f"the server read {sent} bytes without back-pressure"
        assert client.conn.local_flow_control_window(sid) == 0
        result = client.streams[sid]
        client.auto_ack = True
        client.grant(sid, len(result.data) + (1 << 20))
        partial = sent % len(message)
        if partial:  # finish the message cut by the shut window
            client.send_data(sid, message[partial:])
        client.end(sid)
        assert client.wait_for(lambda: result.done, timeout=30)
        assert result.status == OK, result.message
        assert len(stream_responses(result.payloads())) == -(-sent // len(message))


# -- SETTINGS and headers -------------------------------------------------------------------


def test_settings_advertise_streams_and_header_list_size(client: H2Client) -> None:
    assert settled(client)
    assert client.remote_settings.get(SettingCodes.MAX_CONCURRENT_STREAMS) == MAX_STREAMS
    assert client.remote_settings.get(SettingCodes.MAX_HEADER_LIST_SIZE, 0) > 0


def test_streams_over_the_bound_are_refused_and_the_connection_lives(
    h2server: ServerProcess,
) -> None:
    """RFC 9113 §5.1.2: a client that opens more streams than SETTINGS_MAX_CONCURRENT_STREAMS
    (here all in one write, before it could read our SETTINGS) gets RST_STREAM(REFUSED_STREAM)
    on each stream beyond the bound, not a connection error. DATA it had already sent on a
    refused stream is dropped (its bytes given back to the connection window); the open
    streams are served, and once one ends a new call is taken."""
    extra = 8
    message = grpc_message(fp32_request("identity_fp32", np.arange(4)))
    with H2Client(h2server.grpc_url) as client:
        sids = [client.start_call(STREAM, flush=False) for _ in range(MAX_STREAMS + extra)]
        client.flush()  # one write of MAX_STREAMS + extra HEADERS frames
        refused = sids[MAX_STREAMS:]
        assert client.wait_for(lambda: all(client.streams[s].done for s in refused))
        assert [client.streams[s].reset for s in refused] == [REFUSED_STREAM] * extra
        for sid in refused:  # the client did not know yet: its DATA is dropped
            client.send_raw(raw_frame(DATA, 0, sid, message * 64))
        assert not client.goaways and not client.closed
        first, rest = sids[0], sids[1:MAX_STREAMS]
        client.send_data(first, message, end_stream=True)
        result = client.streams[first]
        assert client.wait_for(lambda: result.done)
        assert result.status == OK and result.reset is None, (result.status, result.message)
        assert len(stream_responses(result.payloads())) == 1
        after = client.call(INFER, simple_request(5))  # a free stream again: served
        assert after.status == OK, (after.status, after.message)
        check_simple(after.payloads()[0], 5)
        for sid in rest:
            client.end(sid)
        assert client.wait_for(lambda: all(client.streams[s].done for s in rest))
        assert all(client.streams[s].status == OK for s in rest)
        assert not client.goaways
    assert_serves(h2server.grpc_url)


def _bomb_headers(kind: str) -> list[tuple[str, str]]:
    """Headers far over any sane limit: 100 distinct 4 KiB values (~400 KB of header block,
    ~26 CONTINUATION frames), or one 3 KB header repeated 20,000 times (60 MB decoded from
    ~40 KB: HPACK sends it once, then 1-2 byte references to the dynamic table)."""
    if kind == "many_values":
        return [(f"x-pad-{i}", "v" * 4096) for i in range(100)]
    return [("x-pad", "v" * 3000)] * 20000


@pytest.mark.parametrize("kind", ["many_values", "dynamic_table"])
def test_hpack_bomb_is_refused(h2server: ServerProcess, kind: str) -> None:
    """Headers far over the advertised MAX_HEADER_LIST_SIZE are refused, never served: the
    connection ends with GOAWAY ENHANCE_YOUR_CALM (h2's verdict on an HPACK bomb), or the
    stream with RST_STREAM ENHANCE_YOUR_CALM or RESOURCE_EXHAUSTED (grpc core's answer); a new
    connection is served."""
    with H2Client(h2server.grpc_url) as client:
        assert settled(client)
        limit = client.remote_settings[SettingCodes.MAX_HEADER_LIST_SIZE]
        headers = _bomb_headers(kind)
        assert sum(len(n) + len(v) + 32 for n, v in headers) > 20 * limit
        sid = client.start_call(INFER, headers)
        client.send_data(sid, grpc_message(simple_request()), end_stream=True)
        result = client.streams[sid]
        assert client.wait_for(lambda: result.done or bool(client.goaways) or client.closed)
        if client.goaways:
            assert client.goaways[-1].error_code == ENHANCE_YOUR_CALM, client.goaways
        elif result.status is None:
            assert result.reset == ENHANCE_YOUR_CALM, (result, client.closed)
        else:
            assert result.status == RESOURCE_EXHAUSTED, result
    assert_serves(h2server.grpc_url)


# -- pings and keepalive --------------------------------------------------------------------


def test_ping_is_acknowledged(client: H2Client) -> None:
    client.ping(b"tritium!")
    assert client.wait_for(lambda: b"tritium!" in client.ping_acks)


def test_ping_flood_gets_goaway_enhance_your_calm(h2server: ServerProcess) -> None:
    """Pings with no call, far faster than allowed, past --grpc-http2-max-ping-strikes (2):
    GOAWAY ENHANCE_YOUR_CALM; other connections are served."""
    with H2Client(h2server.grpc_url) as client:
        assert settled(client)
        for i in range(20):
            client.ping(i.to_bytes(8, "big"))
        assert client.wait_for(lambda: bool(client.goaways) or client.closed)
        assert [g.error_code for g in client.goaways][-1:] == [ENHANCE_YOUR_CALM]
    assert_serves(h2server.grpc_url)


def test_keepalive_ping_unanswered_closes_connection(repos: list[Path]) -> None:
    """--grpc-keepalive-time=200 --grpc-keepalive-timeout=500: the server pings (a slow call
    is in flight, and pings without calls are permitted too); a client that never acknowledges
    has its connection closed; the server goes on serving."""
    proc = start_server(
        repos,
        ["simple", "slow"],
        "--grpc-keepalive-time=200",
        "--grpc-keepalive-timeout=500",
        "--grpc-keepalive-permit-without-calls",
    )
    try:
        with H2Client(proc.grpc_url) as client:
            assert settled(client)
            _slow_call(client)
            client.silent = True  # from now on the client writes nothing, not even PING acks
            assert client.wait_for(lambda: bool(client.pings), timeout=15), "no keepalive ping"
            assert client.wait_for(lambda: client.closed, timeout=15), client.goaways
        assert_serves(proc.grpc_url)
    finally:
        proc.stop()


# -- GOAWAY ---------------------------------------------------------------------------------


def test_max_connection_age_goaway_lets_call_finish(repos: list[Path]) -> None:
    """--grpc-max-connection-age=300: GOAWAY NO_ERROR arrives while a slow call (0.5 s) is
    in flight, and the call still completes within the grace."""
    proc = start_server(
        repos,
        ["slow", "simple"],
        "--grpc-max-connection-age=300",
        "--grpc-max-connection-age-grace=10000",
    )
    try:
        with H2Client(proc.grpc_url) as client:
            sid = _slow_call(client)
            assert client.wait_for(lambda: bool(client.goaways), timeout=15), "no GOAWAY"
            assert client.goaways[0].error_code == NO_ERROR
            _assert_slow_answered(client, sid)
            assert all(g.last_stream_id >= sid for g in client.goaways)
    finally:
        proc.stop()


def test_sigterm_goaway_lets_call_finish(repos: list[Path]) -> None:
    """SIGTERM with a call in flight (the server has read its frames: a PING sent after them
    is acknowledged): GOAWAY NO_ERROR covering the call arrives, and the call completes."""
    proc = start_server(repos, ["slow"])
    try:
        with H2Client(proc.grpc_url) as client:
            sid = _slow_call(client)
            client.ping(b"barrier!")  # acked once the server has read the call's frames
            assert client.wait_for(lambda: b"barrier!" in client.ping_acks)
            proc.proc.send_signal(signal.SIGTERM)
            _assert_slow_answered(client, sid)
            assert client.wait_for(lambda: bool(client.goaways) or client.closed)
            assert client.goaways, "closed without GOAWAY"
            assert client.goaways[0].error_code == NO_ERROR
            assert client.goaways[-1].last_stream_id >= sid
        assert proc.proc.wait(30) == 0
    finally:
        proc.stop()


# -- malformed input ------------------------------------------------------------------------


def test_bad_preface_closes_only_that_connection(h2server: ServerProcess) -> None:
    """Garbage instead of the connection preface: that connection is closed (with a GOAWAY
    PROTOCOL_ERROR if any); another client is served."""
    assert len(b"GARBAGE! " * 8) > len(PREFACE)
    with H2Client(h2server.grpc_url, preface=False) as client:
        client.send_raw(b"GARBAGE! " * 8)
        assert client.wait_for(lambda: client.closed)
        assert all(g.error_code == PROTOCOL_ERROR for g in client.goaways), client.goaways
    assert_serves(h2server.grpc_url)


def _malformed(kind: str, max_frame: int) -> bytes:
    if kind == "data_on_stream_0":
        return raw_frame(DATA, 0, 0, b"x" * 10)
    if kind == "oversized_frame":  # a HEADERS frame one byte over SETTINGS_MAX_FRAME_SIZE
        return raw_frame(HEADERS, 0x4, 1, b"\x00" * (max_frame + 1))
    # A header declaring the largest frame HTTP/2 can express (16 MiB - 1), then 1 KiB of it:
    # the declared length alone is the error; waiting for 16 MiB per connection before
    # refusing it would let each hostile connection pin that much memory.
    header = raw_frame(HEADERS, 0x4, 1, b"")
    return ((1 << 24) - 1).to_bytes(3, "big") + header[3:] + bytes(1024)


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        ("data_on_stream_0", PROTOCOL_ERROR),
        ("oversized_frame", FRAME_SIZE_ERROR),
        ("oversized_frame_header", FRAME_SIZE_ERROR),
    ],
)
def test_malformed_frame_goaway(h2server: ServerProcess, kind: str, code: int) -> None:
    """A malformed frame ends its connection with GOAWAY and the right error code; another
    connection, open meanwhile, keeps working."""
    with H2Client(h2server.grpc_url) as bystander, H2Client(h2server.grpc_url) as client:
        assert settled(client) and settled(bystander)
        max_frame = client.remote_settings.get(SettingCodes.MAX_FRAME_SIZE, 16384)
        client.send_raw(_malformed(kind, max_frame))
        assert client.wait_for(lambda: bool(client.goaways) or client.closed)
        assert [g.error_code for g in client.goaways][:1] == [code], client.goaways
        result = bystander.call(INFER, simple_request(4))
        assert result.status == OK
        check_simple(result.payloads()[0], 4)


def test_closed_socket_mid_call_leaves_server_serving(h2server: ServerProcess) -> None:
    """Connection loss with a call in flight (the socket just closes): others are served."""
    client = H2Client(h2server.grpc_url)
    _slow_call(client)
    client.sock.shutdown(socket.SHUT_RDWR)
    client.close()
    assert_serves(h2server.grpc_url)
