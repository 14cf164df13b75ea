"""A gRPC call's lifecycle: every state, every event, and the one table of transitions
between them (h11's ``_state.py``: everything that changes a call's state lives here). An
event a state has no transition for raises ``CallStateError``: a bug of the transport, never
something a client can cause (the connection checks what a client sends before it becomes an
event).

Two sides, as in h11: the request's (what the client sends) and the response's (what the
server answers); a call is over when its response is. States and events are small ints and
the table a flat tuple, so a transition is one index into it (no allocation, no hashing).

Request:   OPEN --END_INPUT--> HALF_CLOSED (the client's END_STREAM).

Response:  IDLE --FINISH--> CLOSING --TRAILERS--> CLOSED   status decided, then written
           IDLE --ANSWER--> CLOSED                          a unary answer in one piece
           IDLE, CLOSING --RESET--> CANCELLED               the stream or connection gone
           IDLE --CANCEL--> CANCELLED                       the work stopped, no status

``FINISH`` decides the status: its trailers go at once, or after the response bytes the
peer's window still holds back (``ServerCall.pending``); ``TRAILERS`` is when they are
written. ``CANCEL`` (``ServerCall.cancelled``: a deadline, a bound, the peer's reset) stops
the call's work: it may come in any state and leaves a decided status as it is, so that
trailers still waiting for the window go out. ``RESET``: RST_STREAM either way, or the
connection gone; nothing more is written.
"""

from __future__ import annotations

from typing import Final

# -- the request's side ----------------------------------------------------------------------
OPEN: Final = 0  # the client may send more
HALF_CLOSED: Final = 1  # the client sent END_STREAM
REQUEST_STATES: Final = ("OPEN", "HALF_CLOSED")

END_INPUT: Final = 0  # END_STREAM from the client (after its messages were cut)
REQUEST_EVENTS: Final = ("END_INPUT",)

# -- the response's side ---------------------------------------------------------------------
IDLE: Final = 0  # no status decided (messages may be going out)
CLOSING: Final = 1  # status decided; its trailers not written yet
CLOSED: Final = 2  # the answer's end is written (trailers, or the one-piece unary answer)
CANCELLED: Final = 3  # ended without an answer: reset, deadline, bound, connection gone
RESPONSE_STATES: Final = ("IDLE", "CLOSING", "CLOSED", "CANCELLED")

FINISH: Final = 0  # the status is decided (``finish_call``)
TRAILERS: Final = 1  # its trailers are written
ANSWER: Final = 2  # headers, the one message and OK trailers written in one piece
CANCEL: Final = 3  # the call's work is stopped (``ServerCall.cancelled``)
RESET: Final = 4  # the stream is reset (either way) or the connection gone
RESPONSE_EVENTS: Final = ("FINISH", "TRAILERS", "ANSWER", "CANCEL", "RESET")

_NONE: Final = -1  # no transition: the event is illegal in that state

# The transition tables: ``TABLE[state * len(EVENTS) + event]`` is the next state.
# fmt: off
REQUEST_TABLE: Final[tuple[int, ...]] = (
    # END_INPUT
    HALF_CLOSED,  # OPEN
    _NONE,        # HALF_CLOSED
)
RESPONSE_TABLE: Final[tuple[int, ...]] = (
    # FINISH   TRAILERS  ANSWER   CANCEL     RESET
    CLOSING,   _NONE,    CLOSED,  CANCELLED, CANCELLED,  # IDLE
    _NONE,     CLOSED,   _NONE,   CLOSING,   CANCELLED,  # CLOSING
    _NONE,     _NONE,    _NONE,   CLOSED,    CLOSED,     # CLOSED
    _NONE,     _NONE,    _NONE,   CANCELLED, CANCELLED,  # CANCELLED
)
# fmt: on
_REQUEST_EVENTS: Final = 1
_RESPONSE_EVENTS: Final = 5


class CallStateError(Exception):
    """An event its call's state has no transition for (a bug of the transport)."""


def next_request(state: int, event: int) -> int:
    """The request's state after ``event``; raises CallStateError when it is illegal."""
    after = REQUEST_TABLE[state * _REQUEST_EVENTS + event]
    if after < 0:
        raise CallStateError(f"request {REQUEST_EVENTS[event]} in state {REQUEST_STATES[state]}")
    return after


def next_response(state: int, event: int) -> int:
    """The response's state after ``event``; raises CallStateError when it is illegal."""
    after = RESPONSE_TABLE[state * _RESPONSE_EVENTS + event]
    if after < 0:
        raise CallStateError(f"response {RESPONSE_EVENTS[event]} in state {RESPONSE_STATES[state]}")
    return after
