"""Pure logic of the gRPC transport: grpc core's ping policy and the HTTP/2 core's frame bounds."""

from __future__ import annotations

import hpack
import pytest
from h2.errors import ErrorCodes

from tests.support.h2_sink import EventSink, core

from tritium.frontends.grpc.listener import grpc_settings
from tritium.transport.http2.pings import NO_CALLS_INTERVAL, PingPolicy
from tritium.options import GrpcOptions, ServerOptions
from tritium.transport.grpc.settings import ping_policy
from tritium.transport.http2 import PREFACE, H2ConnectionError, H2Server


def _policy(**overrides: object) -> PingPolicy:
    options = ServerOptions(grpc=GrpcOptions(**overrides))  # type: ignore[arg-type]
    return ping_policy(grpc_settings(options))


def test_pings_within_the_interval_are_strikes_and_too_many_end_the_connection() -> None:
    policy = _policy(http2_min_recv_ping_interval_without_data_ms=1000)
    assert not policy.received(0.0, calls_active=True)  # the first is free
    assert not policy.received(0.1, calls_active=True)  # strike 1
    assert not policy.received(0.2, calls_active=True)  # strike 2 (Triton's default limit)
    assert policy.received(0.3, calls_active=True)  # strike 3: too many


def test_spaced_pings_are_never_strikes() -> None:
    policy = _policy(http2_min_recv_ping_interval_without_data_ms=1000)
    assert not any(policy.received(t * 1.5, calls_active=True) for t in range(20))


def test_data_resets_the_strikes() -> None:
    policy = _policy(http2_min_recv_ping_interval_without_data_ms=1000)
    for t in range(10):  # a client pinging with every answer (bandwidth probes)
        assert not policy.received(t * 0.01, calls_active=True)
        policy.data()


def test_without_calls_pings_need_two_hours_unless_permitted() -> None:
    idle = _policy(http2_min_recv_ping_interval_without_data_ms=1000)
    idle.received(0.0, calls_active=False)
    idle.received(10.0, calls_active=False)
    idle.received(20.0, calls_active=False)
    assert idle.received(30.0, calls_active=False)  # 10 s apart < NO_CALLS_INTERVAL
    permitted = _policy(
        http2_min_recv_ping_interval_without_data_ms=1000,
        keepalive_permit_without_calls=True,
    )
    assert not any(permitted.received(t * 10.0, calls_active=False) for t in range(10))
    assert NO_CALLS_INTERVAL == 7200.0


def test_zero_strikes_means_no_limit() -> None:
    policy = _policy(http2_max_ping_strikes=0)
    assert not any(policy.received(t * 0.001, calls_active=True) for t in range(100))


def test_keepalive_pings_stop_after_the_limit_without_data() -> None:
    policy = _policy(http2_max_pings_without_data=2)
    policy.sent_without_data = 2
    assert not policy.may_send_keepalive(calls_active=False)
    assert policy.may_send_keepalive(calls_active=True)
    policy.sent_data()
    assert policy.may_send_keepalive(calls_active=False)


def _frame_header(length: int, kind: int = 0x20, sid: int = 1, flags: int = 0) -> bytes:
    return length.to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big")


SETTINGS = _frame_header(0, 0x4, 0)


def _check(h2: H2Server, data: bytes) -> int | None:
    """None, or the HTTP/2 error code that ends the connection."""
    try:
        h2.receive(data, len(data) + 1, len(data))
    except H2ConnectionError as exc:
        return exc.code
    return None


def _core() -> H2Server:
    return core(EventSink(), max_frame=16384, max_block=32768)


def test_frames_are_followed_split_anywhere() -> None:
    stream = PREFACE + SETTINGS + _frame_header(5) + b"hello" + _frame_header(16384)
    stream += bytes(16384)
    for cut in (1, 7, 24, 30, 33, 40, 42, len(stream) - 1):
        h2 = _core()
        assert _check(h2, stream[:cut]) is None
        assert _check(h2, stream[cut:]) is None


@pytest.mark.parametrize("split", [False, True])
def test_an_oversized_frame_is_refused_from_its_header(split: bool) -> None:
    h2 = _core()
    header = _frame_header(16385)
    if split:
        assert _check(h2, PREFACE + SETTINGS + header[:4]) is None
        assert _check(h2, header[4:]) == ErrorCodes.FRAME_SIZE_ERROR
    else:
        assert _check(h2, PREFACE + SETTINGS + header) == ErrorCodes.FRAME_SIZE_ERROR


def test_a_bad_preface_is_refused() -> None:
    assert _check(_core(), b"GET / HTTP/1.1\r\n") == ErrorCodes.PROTOCOL_ERROR
    h2 = _core()
    assert _check(h2, PREFACE[:10]) is None
    assert _check(h2, b"X" * 14) == ErrorCodes.PROTOCOL_ERROR
    assert _check(_core(), PREFACE + _frame_header(8, 0x6, 0) + bytes(8)) == (
        ErrorCodes.PROTOCOL_ERROR  # the preface's first frame is SETTINGS
    )


def test_a_header_block_past_its_bound_is_refused_before_its_body() -> None:
    h2 = _core()
    headers = _frame_header(16000, 0x1, 1)
    continuation = _frame_header(16000, 0x9, 1)
    assert _check(h2, PREFACE + SETTINGS + headers + bytes(16000)) is None
    assert _check(h2, continuation + bytes(16000)) is None
    assert _check(h2, continuation) == ErrorCodes.ENHANCE_YOUR_CALM  # 48,000 > 32,768


def test_each_header_block_has_its_own_bound() -> None:
    h2 = _core()
    assert _check(h2, PREFACE + SETTINGS) is None
    block = hpack.Encoder().encode([(":method", "POST"), ("x-pad", "p" * 8000)])
    for sid in range(1, 11, 2):  # many calls, each with its own 8,000-byte block
        assert _check(h2, _frame_header(len(block), 0x1, sid, 0x4) + block) is None
