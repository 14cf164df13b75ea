"""Pure logic of the gRPC transport: grpc core's ping abuse policy and the frame-size guard."""

from __future__ import annotations

import pytest
from h2.errors import ErrorCodes

from tritium.frontends.grpc.frames import PREFACE, FrameSizeGuard
from tritium.frontends.grpc.pings import NO_CALLS_INTERVAL, PingPolicy
from tritium.options import GrpcOptions, ServerOptions


def _policy(**overrides: object) -> PingPolicy:
    return PingPolicy(ServerOptions(grpc=GrpcOptions(**overrides)))  # type: ignore[arg-type]


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


def _frame_header(length: int, kind: int = 0, sid: int = 1) -> bytes:
    return length.to_bytes(3, "big") + bytes([kind, 0]) + sid.to_bytes(4, "big")


def test_frame_guard_follows_frames_split_anywhere() -> None:
    stream = PREFACE + _frame_header(5) + b"hello" + _frame_header(16384) + bytes(16384)
    for cut in (1, 7, 24, 30, 33, 40, len(stream) - 1):
        guard = FrameSizeGuard(16384, 32768)
        assert guard.check(stream[:cut]) is None
        assert guard.check(stream[cut:]) is None


@pytest.mark.parametrize("split", [False, True])
def test_frame_guard_refuses_an_oversized_header_before_its_body(split: bool) -> None:
    guard = FrameSizeGuard(16384, 32768)
    header = _frame_header(16385)
    if split:
        assert guard.check(PREFACE + header[:4]) is None
        assert guard.check(header[4:]) == ErrorCodes.FRAME_SIZE_ERROR
    else:
        assert guard.check(PREFACE + header) == ErrorCodes.FRAME_SIZE_ERROR


def test_frame_guard_refuses_a_bad_preface() -> None:
    assert FrameSizeGuard(16384, 32768).check(b"GET / HTTP/1.1\r\n") == ErrorCodes.PROTOCOL_ERROR
    guard = FrameSizeGuard(16384, 32768)
    assert guard.check(PREFACE[:10]) is None
    assert guard.check(b"X" * 14) == ErrorCodes.PROTOCOL_ERROR


def test_frame_guard_refuses_a_header_block_past_its_bound() -> None:
    guard = FrameSizeGuard(16384, 32768)
    headers = (16000).to_bytes(3, "big") + bytes([0x1, 0x0]) + (1).to_bytes(4, "big")
    continuation = (16000).to_bytes(3, "big") + bytes([0x9, 0x0]) + (1).to_bytes(4, "big")
    assert guard.check(PREFACE + headers + bytes(16000)) is None
    assert guard.check(continuation + bytes(16000)) is None
    assert guard.check(continuation) == ErrorCodes.ENHANCE_YOUR_CALM  # 48,000 > 32,768


def test_frame_guard_starts_a_new_block_after_end_headers() -> None:
    guard = FrameSizeGuard(16384, 32768)
    ended = (16000).to_bytes(3, "big") + bytes([0x1, 0x4]) + (1).to_bytes(4, "big")
    assert guard.check(PREFACE) is None
    for _ in range(5):  # many calls, each with its own 16,000-byte block
        assert guard.check(ended + bytes(16000)) is None
