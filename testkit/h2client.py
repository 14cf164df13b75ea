"""A small HTTP/2 + gRPC client on a raw socket, for black-box tests of the gRPC transport.

It drives ``h2``'s client state machine but keeps every byte in the test's hands: messages are
framed by hand (1-byte compressed flag + 4-byte big-endian length + payload), DATA can be cut
at any size, flow control is acknowledged only when the test says so, and malformed frames
that ``h2`` refuses to produce are written with :func:`raw_frame`.

GOAWAY frames are taken off the byte stream before ``h2`` sees them (and recorded in
``goaways``): ``h2`` closes its connection state on the first GOAWAY and would then refuse the
frames of calls still allowed to complete, which is exactly what the tests want to observe.

    client = H2Client(server.grpc_url)
    result = client.call("/inference.GRPCInferenceService/ModelInfer", request.SerializeToString())
    assert result.status == 0
"""

from __future__ import annotations

import gzip
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = struct.Struct(">I")  # the 24-bit length is packed as 4 bytes, first dropped
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    """One length-prefixed gRPC message; ``compressed`` gzips the payload and sets flag 1."""
    if compressed:
        payload = gzip.compress(payload)
    return bytes([int(compressed)]) + struct.pack(">I", len(payload)) + payload


def parse_messages(data: bytes) -> list[tuple[int, bytes]]:
    """Split a stream's DATA bytes into ``(flag, payload)`` messages; a truncated tail fails."""
    messages, offset = [], 0
    while offset < len(data):
        assert len(data) - offset >= 5, f"truncated message prefix at {offset} of {len(data)}"
        flag, length = data[offset], struct.unpack_from(">I", data, offset + 1)[0]
        payload = data[offset + 5 : offset + 5 + length]
        assert len(payload) == length, f"truncated message: {len(payload)} of {length} bytes"
        messages.append((flag, bytes(payload)))
        offset += 5 + length
    return messages


def raw_frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    """An HTTP/2 frame built byte by byte, for the malformed ones ``h2`` will not write."""
    return (
        FRAME_HEADER.pack(len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream_id)
        + payload
    )


@dataclass
class GoAway:
    last_stream_id: int
    error_code: int
    debug: bytes


@dataclass
class StreamResult:
    """What one stream received: response headers, DATA bytes, trailers, RST_STREAM code."""

    headers: dict[str, str] | None = None
    trailers: dict[str, str] | None = None
    data: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: int | None = None

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None

    @property
    def trailers_only(self) -> bool:
        """Trailers-Only: one HEADERS block carrying grpc-status, no DATA, no second block."""
        return bool(self.headers and "grpc-status" in self.headers and self.trailers is None)

    def _final(self) -> dict[str, str]:
        return self.trailers if self.trailers is not None else (self.headers or {})

    @property
    def status(self) -> int | None:
        value = self._final().get("grpc-status")
        return None if value is None else int(value)

    @property
    def message(self) -> str:
        """grpc-message as sent on the wire (still percent-encoded)."""
        return self._final().get("grpc-message", "")

    def messages(self) -> list[tuple[int, bytes]]:
        return parse_messages(bytes(self.data))

    def payloads(self) -> list[bytes]:
        """Message payloads, gunzipped where the flag says compressed."""
        return [gzip.decompress(p) if flag else p for flag, p in self.messages()]


class H2Client:
    """One HTTP/2 connection. ``settings``: the client's SETTINGS (h2 SettingCodes -> value).
    ``auto_ack``: hand received DATA back to the flow-control windows (WINDOW_UPDATE) as it
    arrives; off, the test grants window itself with :meth:`grant`."""

    def __init__(
        self,
        address: str,
        settings: dict[int, int] | None = None,
        auto_ack: bool = True,
        preface: bool = True,
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config)
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.auto_ack = auto_ack
        self.silent = False  # True: stop writing anything (not even PING/SETTINGS acks)
        self.streams: dict[int, StreamResult] = {}
        self.goaways: list[GoAway] = []
        self.pings: list[bytes] = []  # PINGs the server sent (not acks)
        self.ping_acks: list[bytes] = []
        self.remote_settings: dict[int, int] = {}
        self.frames: list[tuple[int, int, int]] = []  # (type, flags, stream) of every frame
        self.closed = False
        self.close_reason = ""  # how the connection ended: "eof" or the socket error
        self.raw = bytearray()  # every byte received, for a server that does not speak HTTP/2
        self._pending = bytearray()
        if preface:
            self.conn.initiate_connection()
            self.flush()

    # -- writing ---------------------------------------------------------------------------
    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.silent:
            self.send_raw(data)

    def send_raw(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.closed, self.close_reason = True, f"send: {exc!r}"

    def start_call(
        self,
        path: str,
        metadata: Iterable[tuple[str, str]] = (),
        content_type: str = "application/grpc",
        method: str = "POST",
        end_stream: bool = False,
        flush: bool = True,
    ) -> int:
        """Open a stream with gRPC's request headers (plus ``metadata``); its id. ``flush``
        False keeps the HEADERS frame back, to go out in one write with the DATA after it."""
        sid = self.conn.get_next_available_stream_id()
        headers = [
            (":method", method),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
            ("content-type", content_type),
            ("te", "trailers"),
            *metadata,
        ]
        self.streams[sid] = StreamResult()
        self.conn.send_headers(sid, headers, end_stream=end_stream)
        if flush:
            self.flush()
        return sid

    def send_data(
        self, sid: int, data: bytes, end_stream: bool = False, chunk: int | None = None
    ) -> bool:
        """Send ``data`` on ``sid`` in DATA frames of at most ``chunk`` bytes, waiting (bounded)
        for window when flow control stops it. False if the stream ended or the wait failed."""
        view, offset = memoryview(data), 0
        while offset < len(data):
            if self.streams[sid].done or self.closed:
                return False
            window = min(
                self.conn.local_flow_control_window(sid),
                self.conn.max_outbound_frame_size,
                chunk or len(data),
            )
            if window <= 0:
                if not self.wait_for(lambda: self._window(sid) > 0, timeout=10):
                    return False
                continue
            piece = view[offset : offset + window]
            offset += len(piece)
            self.conn.send_data(sid, piece.tobytes(), end_stream=end_stream and offset == len(data))
            self.flush()
        if end_stream and not data:
            self.conn.end_stream(sid)
            self.flush()
        return True

    def _window(self, sid: int) -> int:
        if self.streams[sid].done:
            return 1  # nothing more to wait for
        return self.conn.local_flow_control_window(sid)

    def end(self, sid: int) -> None:
        self.conn.end_stream(sid)
        self.flush()

    def reset(self, sid: int, code: int = 8) -> None:
        """RST_STREAM (default CANCEL)."""
        self.conn.reset_stream(sid, error_code=code)
        self.flush()

    def ping(self, opaque: bytes) -> None:
        self.conn.ping(opaque)
        self.flush()

    def grant(self, sid: int, size: int) -> None:
        """Open both windows by ``size`` bytes (WINDOW_UPDATE on the stream and connection)."""
        self.conn.increment_flow_control_window(size, stream_id=sid)
        self.conn.increment_flow_control_window(size)
        self.flush()

    def call(
        self,
        path: str,
        payload: bytes,
        metadata: Iterable[tuple[str, str]] = (),
        chunk: int | None = None,
        timeout: float = 15.0,
    ) -> StreamResult:
        """One unary call: headers, one message (cut in ``chunk``-byte frames), the end; waits
        for the stream to end."""
        sid = self.start_call(path, metadata)
        self.send_data(sid, grpc_message(payload), end_stream=True, chunk=chunk)
        result = self.streams[sid]
        assert self.wait_for(lambda: result.done, timeout), f"no answer on stream {sid}"
        return result

    def call_async(self, path: str, payload: bytes) -> int:
        """One unary call sent whole (headers, one message, the end) without waiting for
        the answer; its stream id."""
        sid = self.start_call(path, flush=False)
        self.send_data(sid, grpc_message(payload), end_stream=True)
        return sid

    # -- reading ---------------------------------------------------------------------------
    def wait_for(self, condition: Callable[[], bool], timeout: float = 15.0) -> bool:
        """Read and process frames until ``condition()`` holds (True), the connection closes
        or ``timeout`` seconds pass (False, unless the condition holds then)."""
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                return condition()
            self.pump(min(remaining, 0.5))
        return True

    def quiet(self, seconds: float) -> None:
        """Keep reading for ``seconds`` (to see that nothing more arrives)."""
        self.wait_for(lambda: False, seconds)

    def poll(self) -> None:
        """Process whatever has arrived, without waiting."""
        self.pump(0.0)

    def pump(self, timeout: float) -> None:
        """One read of at most ``timeout`` seconds, processed."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except (TimeoutError, BlockingIOError):
            return
        except OSError as exc:
            self.closed, self.close_reason = True, f"recv: {exc!r}"
            return
        if not data:
            self.closed, self.close_reason = True, "eof"
            return
        self.raw += data
        self._pending += data
        self._feed_frames()
        self.flush()

    def _feed_frames(self) -> None:
        """Cut whole frames off the pending bytes; GOAWAY is recorded here, the rest goes to h2."""
        passthrough = bytearray()
        while len(self._pending) >= 9:
            length = int.from_bytes(self._pending[:3], "big")
            if len(self._pending) < 9 + length:
                break
            frame = bytes(self._pending[: 9 + length])
            del self._pending[: 9 + length]
            kind, flags = frame[3], frame[4]
            sid = struct.unpack_from(">I", frame, 5)[0] & 0x7FFFFFFF
            self.frames.append((kind, flags, sid))
            if kind == GOAWAY:
                last, code = struct.unpack_from(">II", frame, 9)
                self.goaways.append(GoAway(last & 0x7FFFFFFF, code, frame[17:]))
                continue
            passthrough += frame
        if passthrough:
            for event in self.conn.receive_data(bytes(passthrough)):
                self._handle(event)

    def _handle(self, event: h2.events.Event) -> None:  # noqa: C901 - a flat dispatch
        sid = getattr(event, "stream_id", 0)
        result = self.streams.get(sid)
        if isinstance(event, h2.events.ResponseReceived) and result is not None:
            result.headers = dict(event.headers)
        elif isinstance(event, h2.events.TrailersReceived) and result is not None:
            result.trailers = dict(event.headers)
        elif isinstance(event, h2.events.DataReceived):
            if result is not None:
                result.data += event.data
            if self.auto_ack and event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
        elif isinstance(event, h2.events.StreamEnded) and result is not None:
            result.ended = True
        elif isinstance(event, h2.events.StreamReset) and result is not None:
            result.reset = event.error_code
        elif isinstance(event, h2.events.PingReceived):
            self.pings.append(event.ping_data)
        elif isinstance(event, h2.events.PingAckReceived):
            self.ping_acks.append(event.ping_data)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for code, change in event.changed_settings.items():
                self.remote_settings[int(code)] = change.new_value

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
