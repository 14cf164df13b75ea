"""transport/grpc/state.py: a gRPC call's lifecycle table, every legal transition and the
illegal ones raising; and ServerCall following it (its ``half_closed`` and ``done``)."""

from __future__ import annotations

import pytest

from tritium.transport.grpc import state
from tritium.transport.grpc.call import ServerCall
from tritium.transport.grpc.state import CallStateError, next_request, next_response
from tritium.transport.grpc.status import StatusCode

R = state
LEGAL_REQUEST = {(R.OPEN, R.END_INPUT): R.HALF_CLOSED}
LEGAL_RESPONSE = {
    (R.IDLE, R.FINISH): R.CLOSING,
    (R.IDLE, R.ANSWER): R.CLOSED,
    (R.IDLE, R.CANCEL): R.CANCELLED,
    (R.IDLE, R.RESET): R.CANCELLED,
    (R.CLOSING, R.TRAILERS): R.CLOSED,
    (R.CLOSING, R.CANCEL): R.CLOSING,  # a decided status's trailers still go out
    (R.CLOSING, R.RESET): R.CANCELLED,
    (R.CLOSED, R.CANCEL): R.CLOSED,
    (R.CLOSED, R.RESET): R.CLOSED,
    (R.CANCELLED, R.CANCEL): R.CANCELLED,
    (R.CANCELLED, R.RESET): R.CANCELLED,
}


def test_every_request_transition() -> None:
    for s in range(len(R.REQUEST_STATES)):
        for e in range(len(R.REQUEST_EVENTS)):
            if (s, e) in LEGAL_REQUEST:
                assert next_request(s, e) == LEGAL_REQUEST[s, e]
            else:
                with pytest.raises(CallStateError, match=R.REQUEST_EVENTS[e]):
                    next_request(s, e)


def test_every_response_transition() -> None:
    for s in range(len(R.RESPONSE_STATES)):
        for e in range(len(R.RESPONSE_EVENTS)):
            if (s, e) in LEGAL_RESPONSE:
                assert next_response(s, e) == LEGAL_RESPONSE[s, e], (s, e)
            else:
                with pytest.raises(CallStateError, match=R.RESPONSE_STATES[s]):
                    next_response(s, e)


def test_an_illegal_transition_names_the_event_and_the_state() -> None:
    with pytest.raises(CallStateError, match="response TRAILERS in state IDLE"):
        next_response(R.IDLE, R.TRAILERS)
    with pytest.raises(CallStateError, match="request END_INPUT in state HALF_CLOSED"):
        next_request(R.HALF_CLOSED, R.END_INPUT)


class _Owner:
    """What a call uses of its connection, recording the status it finishes with."""

    max_receive = max_send = 1 << 20
    peer = "127.0.0.1:1"
    message_budget = 64

    def __init__(self) -> None:
        self.finished: list[StatusCode] = []

    def acknowledge(self, sid: int, size: int) -> None:
        pass

    def hold_input(self, size: int) -> None:
        pass

    def finish_call(self, call: ServerCall, code: StatusCode, message: str) -> None:
        self.finished.append(code)
        call.respond(R.FINISH)

    def watch_stall(self, delay: float | None = None) -> None:
        pass


def test_a_call_follows_the_table() -> None:
    owner = _Owner()
    call = ServerCall(owner, 1, "/x/Y", {}, None)  # type: ignore[arg-type]
    assert (call.request_state, call.response_state) == (R.OPEN, R.IDLE)
    assert not call.half_closed and not call.done
    call.end_of_input()
    assert call.half_closed and call.request_state == R.HALF_CLOSED
    with pytest.raises(CallStateError):
        call.end_of_input()  # END_STREAM twice is the transport's bug
    call.finish(StatusCode.DEADLINE_EXCEEDED)
    assert call.done and call.response_state == R.CLOSING
    call.finish(StatusCode.INTERNAL)  # the status is decided once
    assert owner.finished == [StatusCode.DEADLINE_EXCEEDED]
    call.cancelled()  # the deadline's cancellation after its status: the status stands
    assert call.response_state == R.CLOSING
    call.respond(R.TRAILERS)
    assert call.response_state == R.CLOSED and call.done
    with pytest.raises(CallStateError):
        call.respond(R.FINISH)


def test_a_cancelled_call_is_done_without_a_status() -> None:
    call = ServerCall(_Owner(), 1, "/x/Y", {}, None)  # type: ignore[arg-type]
    call.cancelled()
    assert call.done and call.response_state == R.CANCELLED
    call.cancelled()  # idempotent
    assert call.response_state == R.CANCELLED
