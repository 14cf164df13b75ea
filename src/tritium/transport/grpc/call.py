"""One gRPC call (one HTTP/2 stream) as a handler sees it: its metadata, the messages the
client sent, and the way to answer.

Reading: DATA is cut into length-prefixed messages here (any split across frames, several
per frame). A message's declared length is checked against the bound before anything is
buffered; a compressed one is inflated under the same bound. Received bytes are given back
to the client's flow-control window when the handler takes the message (``read``), so a
handler that stops reading stops the client from sending: memory stays bounded by the window.

Writing: ``send`` frames a message and hands it to the connection, which writes what the
peer's window allows and keeps the rest; ``drain`` waits until what is kept falls under a
bound, so a client that stops reading stops a streaming handler.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from .metadata import InflateError, compress_message, inflate
from .state import CANCEL, END_INPUT, HALF_CLOSED, IDLE, OPEN, next_request, next_response
from .status import RpcError, StatusCode
from .frames import Pieces

if TYPE_CHECKING:
    from .dispatch import Method

_PREFIX: Final = 5  # compressed flag (1 byte) + big-endian length (4 bytes)


class CallOwner(Protocol):
    """What a call uses of its connection (``GrpcConnection``; unit tests pass stand-ins). A
    Protocol, so that compiled code does not check the connection's class at each call."""

    max_receive: int
    max_send: int
    peer: str
    message_budget: int  # request messages this loop turn may still cut (inbound.py)

    def acknowledge(self, sid: int, size: int) -> None: ...

    def hold_input(self, size: int) -> None:
        """The call holds ``size`` request bytes more (or fewer): the connection's count,
        and the server's memory budget (bounds.py)."""

    def admit_output(self, call: ServerCall, size: int) -> bool: ...

    def answer(self, call: ServerCall, data: bytes) -> bool: ...

    def finish_call(self, call: ServerCall, code: StatusCode, message: str) -> None: ...

    def send_message(self, call: ServerCall, head: bytes, payload: bytes | Pieces) -> None: ...

    def watch_stall(self, delay: float | None = None) -> None: ...


HIGH_WATER = 1 << 20  # bytes kept for a slow reader before ``drain`` waits
_ONE_FRAME = 16384 - _PREFIX  # an answer that fits one DATA frame of the default size


INLINE_INFLATE = 64 * 1024  # a message inflating to more is inflated off the event loop


def _inflate_error(exc: InflateError) -> RpcError:
    code = StatusCode.RESOURCE_EXHAUSTED if exc.too_large else StatusCode.INTERNAL
    return RpcError(code, str(exc))


class Deferred:
    """A compressed message that inflates to more than ``INLINE_INFLATE`` bytes."""

    __slots__ = ("_data", "_encoding", "_limit")

    def __init__(self, data: bytes, encoding: str, limit: int) -> None:
        self._data = data
        self._encoding = encoding
        self._limit = limit

    def __len__(self) -> int:
        return len(self._data)  # what it holds until inflated

    async def inflate(self) -> bytes:
        """On a worker thread (zlib lets the GIL go), bounded by the max receive size."""
        try:
            return await asyncio.to_thread(inflate, self._data, self._encoding, self._limit)
        except InflateError as exc:
            raise _inflate_error(exc) from None


class ServerCall:
    __slots__ = (
        "_conn",
        "stream_id",
        "method",
        "metadata",
        "encoding",
        "response_encoding",
        "_buffer",
        "_need",
        "_compressed",
        "_inbox",
        "_received",
        "_acked",
        "_padding",
        "_backlogged",
        "_waiter",
        "request_state",
        "response_state",
        "headers_sent",
        "pending",
        "pending_bytes",
        "trailers",
        "task",
        "on_cancel",
        "timer",
        "_drained",
        "rpc",
        "guard",
        "consumer",
        "held",
        "_inbox_bytes",
        "progress",
        "_mark",
    )

    def __init__(
        self,
        conn: CallOwner,
        stream_id: int,
        method: str,
        metadata: dict[str, str],
        encoding: str | None,
    ) -> None:
        self._conn = conn
        self.stream_id = stream_id
        self.method = method
        self.metadata = metadata  # custom metadata and grpc-* headers, lower-case names
        self.encoding = encoding  # the request messages' grpc-encoding (None: identity)
        self.response_encoding: tuple[str, int] | None = None  # (algorithm, zlib level)
        self._buffer = bytearray()
        self._need = -1  # the length of the message being received; -1: a prefix is due
        self._compressed = False
        # (message, stream offset of its end)
        self._inbox: deque[tuple[bytes | Deferred, int]] = deque()
        self._received = 0  # DATA bytes received (stream offset)
        self._acked = 0  # of those, given back to the client's window
        self._padding = 0  # padding received, not yet given back
        self._backlogged = False  # complete messages may wait uncut in _buffer (feed's budget)
        self._waiter: asyncio.Future[None] | None = None
        self.request_state = OPEN  # the client's side of the call (state.py)
        self.response_state = IDLE  # the answer's side (state.py)
        self.headers_sent = False
        # framed response bytes the peer's window does not allow yet, in order
        self.pending: deque[memoryview] = deque()
        self.pending_bytes = 0
        self.trailers: list[tuple[str, str]] | None = None  # sent once pending is written
        self.task: asyncio.Task[Any] | None = None
        self.on_cancel: Callable[[], None] | None = None  # called once when it is cancelled
        self.timer: asyncio.TimerHandle | None = None  # the deadline
        self._drained: asyncio.Future[None] | None = None
        self.rpc: Method | None = None  # the dispatcher's
        # the application's per-call guard (``dispatch.py:Guard``), when access control is on
        self.guard: Any = None
        # takes a message as it completes, inside data_received (no task hop), or says no
        # (False: it waits in the inbox for ``read``)
        self.consumer: Callable[[bytes], bool] | None = None
        # request bytes received and not yet taken (counted in the connection's input_held)
        self.held = 0
        self._inbox_bytes = 0
        self.progress = time.monotonic()  # the client last sent, or read, something of it
        self._mark = 0  # pending_bytes when progress was last looked at

    @property
    def peer(self) -> str:
        return self._conn.peer

    @property
    def connection(self) -> object:
        """The connection the call came on (an identity, for per-connection bounds)."""
        return self._conn

    # -- the lifecycle (state.py's table) ----------------------------------------------------
    @property
    def half_closed(self) -> bool:
        """The client sent END_STREAM."""
        return self.request_state == HALF_CLOSED

    @property
    def done(self) -> bool:
        """The answer's end (a status, or a reset) is decided: nothing more is sent."""
        return self.response_state != IDLE

    def respond(self, event: int) -> None:
        """The answer's side moves on ``event`` (state.py); CallStateError when illegal."""
        self.response_state = next_response(self.response_state, event)

    # -- receiving (called by the connection) ------------------------------------------------
    def feed(self, data: bytes | memoryview, flow: int) -> bool:
        """DATA of this stream: complete messages go to the inbox (raises RpcError for a
        message over the bound or one that cannot be inflated), as many as the connection's
        ``message_budget`` for this turn allows. True when messages may be left uncut: the
        connection calls ``feed(b"", 0)`` again on a later turn.

        Window accounting by stream offset: the bytes of a message in the inbox are given
        back when the handler takes it; the bytes of the message still arriving, only while
        the inbox is empty (a message larger than the window must be able to complete) and
        no complete message waits uncut; padding at once."""
        self._padding += flow - len(data)
        buffer = self._buffer
        buffer += data
        self._received += len(data)
        start = self._received - len(buffer)  # stream offset of the buffer's first byte
        conn = self._conn
        more = False
        while len(buffer) >= _PREFIX:
            if self._need < 0:  # a prefix is due
                self._need = self._prefix(buffer)
            end = _PREFIX + self._need
            if len(buffer) < end:
                break
            if conn.message_budget <= 0:
                more = True  # the rest on a later turn
                break
            conn.message_budget -= 1
            with memoryview(buffer) as view:
                message = view[_PREFIX:end].tobytes()
            del buffer[:end]
            start += end
            self._need = -1
            body = self._inflate(message) if self._compressed else message
            consumer = self.consumer
            if consumer is None or self._inbox or isinstance(body, Deferred) or not consumer(body):
                self._inbox.append((body, start))
                self._inbox_bytes += len(body)
        self._backlogged = more
        if not self._inbox or self._waiter is not None:
            self._give_back(self._taken())  # the handler keeps up: nothing waits
        elif self._padding:
            self._give_back(self._acked)
        self.progress = time.monotonic()
        self._count()
        self._wake()
        return more

    def _taken(self) -> int:
        """The stream offset up to which bytes may go back to the client's window when the
        inbox is empty: all received, unless complete messages wait uncut."""
        return self._received - len(self._buffer) if self._backlogged else self._received

    def _count(self) -> None:
        """The bytes this call holds, into the connection's count (bounds.py)."""
        held = len(self._buffer) + self._inbox_bytes
        if held != self.held:
            self._conn.hold_input(held - self.held)
            self.held = held

    def release(self) -> None:
        """The call is over: drop the request bytes it holds, and give their window back
        (only the connection's, once the stream is closed)."""
        if self.held or self._inbox:
            self._buffer = bytearray()
            self._inbox.clear()
            self._inbox_bytes = 0
            self._need = -1
            self._count()
        if self._received > self._acked or self._padding:
            self._give_back(self._received)

    def _prefix(self, buffer: bytearray) -> int:
        """The next message's length from its prefix, checked against the bound."""
        flag = buffer[0]
        if flag > 1:
            raise RpcError(StatusCode.INTERNAL, "invalid message compression flag")
        self._compressed = flag == 1
        size = int.from_bytes(buffer[1:5], "big")
        limit = self._conn.max_receive
        if size > limit:
            raise RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({size} vs. {limit})",
            )
        return size

    def _inflate(self, message: bytes) -> bytes | Deferred:
        """A compressed message inflated here when it inflates to at most ``INLINE_INFLATE``
        bytes; a larger one is inflated on a worker thread by whoever takes it (a few KiB of
        a "zip bomb" must not hold the event loop for the time 64 MiB of output takes)."""
        encoding = self.encoding
        if encoding is None or encoding == "identity":
            raise RpcError(StatusCode.INTERNAL, "compressed message received without grpc-encoding")
        limit = self._conn.max_receive
        try:
            return inflate(message, encoding, min(limit, INLINE_INFLATE))
        except InflateError as exc:
            if not exc.too_large or limit <= INLINE_INFLATE:
                raise _inflate_error(exc) from None
        return Deferred(message, encoding, limit)

    def end_of_input(self) -> None:
        self.request_state = next_request(self.request_state, END_INPUT)
        self._wake()

    def _give_back(self, upto: int) -> None:
        """Gives back the received bytes up to stream offset ``upto``, and any padding."""
        size = max(0, upto - self._acked) + self._padding
        if size:
            self._acked = max(self._acked, upto)
            self._padding = 0
            self._conn.acknowledge(self.stream_id, size)
            self.progress = time.monotonic()  # the client may send again: its clock restarts

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    @property
    def incomplete(self) -> bool:
        """Bytes of a message that did not all arrive."""
        return len(self._buffer) > 0

    def take(self) -> bytes | Deferred | None:
        """The next message if one is here (no waiting)."""
        if not self._inbox:
            return None
        message, end = self._inbox.popleft()
        self._inbox_bytes -= len(message)
        self._count()
        self._give_back(end if self._inbox else self._taken())
        return message

    @property
    def messages_waiting(self) -> int:
        return len(self._inbox)

    # -- the handler's side ------------------------------------------------------------------
    async def read(self) -> bytes | None:
        """The next request message; None when the client half-closed and all were read."""
        while True:
            message = self.take()
            if isinstance(message, Deferred):
                return await message.inflate()
            if message is not None:
                return message
            if self.half_closed or self.done:
                if self.incomplete and not self.done:
                    raise RpcError(StatusCode.INTERNAL, "truncated message at end of stream")
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            self._give_back(self._taken())
            await self._waiter

    def frame(self, payload: bytes | Pieces) -> tuple[bytes, bytes | Pieces]:
        """A response message (serialised protobuf, or its ``Pieces``) as (5-byte prefix,
        body), compressed when the call says so; RpcError when it is over the send bound."""
        encoding = self.response_encoding
        compressed = None
        if encoding is not None:  # sent as it is when compression would not make it smaller
            joined = payload if isinstance(payload, bytes) else payload.join()
            compressed = compress_message(joined, encoding[0], encoding[1])
        if compressed is not None:
            payload = compressed
        size = len(payload)
        if size > self._conn.max_send:
            raise RpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({size} vs. {self._conn.max_send})",
            )
        flag = b"\x01" if compressed is not None else b"\x00"
        return flag + size.to_bytes(4, "big"), payload

    def send(self, payload: bytes | Pieces) -> None:
        """One response message of a streaming call."""
        if not self.done:
            head, body = self.frame(payload)
            if self._conn.admit_output(self, len(head) + len(body)):
                self._conn.send_message(self, head, body)

    def answer(self, payload: bytes | Pieces) -> None:
        """The one response of a unary call and its OK status."""
        if self.done:
            return
        head, body = self.frame(payload)
        if isinstance(body, bytes) and len(body) < _ONE_FRAME:  # Pieces are never this small
            if self._conn.answer(self, head + body):
                return
        if self._conn.admit_output(self, len(head) + len(body)):
            self._conn.send_message(self, head, body)
            self.finish()

    async def drain(self) -> None:
        """Waits while more than ``HIGH_WATER`` bytes wait for the peer's window."""
        while self.pending_bytes > HIGH_WATER and not self.done:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def writable(self) -> None:
        """Called by the connection when pending bytes may have gone out."""
        if self.pending_bytes != self._mark:  # some did: the client reads
            self._mark = self.pending_bytes
            self.progress = time.monotonic()
        drained = self._drained
        if drained is not None and self.pending_bytes <= HIGH_WATER:
            self._drained = None
            if not drained.done():
                drained.set_result(None)

    def keep(self, view: memoryview) -> None:
        """Response bytes to send when the peer's window opens."""
        if not self.pending:  # the stall clock (bounds.py) runs from the first byte kept
            self.progress = time.monotonic()
            self._conn.watch_stall()
        self.pending.append(view)
        self.pending_bytes += len(view)
        self._mark = self.pending_bytes

    def finish(self, code: StatusCode = StatusCode.OK, message: str = "") -> None:
        """Ends the call with its status (trailers; Trailers-Only before any message)."""
        if not self.done:
            self._conn.finish_call(self, code, message)

    # -- ending ------------------------------------------------------------------------------
    def cancelled(self) -> None:
        """The client reset the stream, the deadline passed, or the connection went away:
        wake every waiter and cancel the work (once)."""
        self.respond(CANCEL)
        self.release()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._wake()
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)
        callback, self.on_cancel = self.on_cancel, None
        if callback is not None:
            callback()
        if self.task is not None and not self.task.done():
            self.task.cancel()
