"""The control plane between the supervisor and one worker: a Unix stream socket pair
carrying length-prefixed JSON messages (a 4-byte big-endian length, then the document).

Both ends trust each other (the supervisor made the pair before starting the worker), but a
message is still bounded (``MAX_MESSAGE``): a worker that goes wrong cannot make the other
end buffer without limit. No message carries a request's bulk: a load's files go through the
supervisor's uploads directory (history.py), the replays one action per message; a reply
that would still be over the bound goes back as an error, never dropped.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..errors import ErrorKind, ServerError

MAX_MESSAGE = 256 << 20  # a load's config is bounded by --http-max-input-size first
_HEADER = struct.Struct(">I")


class ChannelClosed(ConnectionError):
    """The other end went away (its process exited, or closed the channel)."""


class Channel:
    """One end: ``send`` a message (a dict), ``recv`` the next one (ChannelClosed at the
    end). Writes are queued on the transport; ``send`` never waits."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, sock: socket.socket) -> Channel:
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        return cls(reader, writer)

    def send(self, message: dict[str, Any]) -> None:
        if self._writer.is_closing():
            raise ChannelClosed("control channel closed")
        body = orjson.dumps(message)
        if len(body) > MAX_MESSAGE:
            raise ValueError(f"control message of {len(body)} bytes over {MAX_MESSAGE}")
        self._writer.write(_HEADER.pack(len(body)) + body)

    async def recv(self) -> dict[str, Any]:
        try:
            header = await self._reader.readexactly(_HEADER.size)
            (size,) = _HEADER.unpack(header)
            if size > MAX_MESSAGE:
                raise ChannelClosed(f"control message of {size} bytes over {MAX_MESSAGE}")
            body = await self._reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise ChannelClosed("control channel closed") from exc
        message = orjson.loads(body)
        if not isinstance(message, dict):
            raise ChannelClosed("control message is not an object")
        return message

    def close(self) -> None:
        self._writer.close()


def error_doc(exc: BaseException) -> dict[str, str]:
    """An error as it crosses the channel: Triton's kind and the message clients see."""
    if isinstance(exc, ServerError):
        return {"kind": exc.kind.value, "message": exc.message}
    return {"kind": ErrorKind.INTERNAL.value, "message": str(exc) or type(exc).__name__}


def error_of(doc: dict[str, str]) -> ServerError:
    try:
        kind = ErrorKind(doc.get("kind", "INTERNAL"))
    except ValueError:
        kind = ErrorKind.INTERNAL
    return ServerError(kind, str(doc.get("message", "")))


Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]
NoteHandler = Callable[[dict[str, Any]], None]


class Peer:
    """Calls and notes over one channel, both ways: ``call`` sends ``{"op": "call", "id",
    "action", "args"}`` and waits for its ``reply``; an incoming call runs ``on_call`` as a
    task of its own (a slow load does not hold up heartbeats), its result or ServerError
    returned as the reply; any other message is a note for ``on_note``."""

    def __init__(self, channel: Channel, on_call: Handler, on_note: NoteHandler) -> None:
        self.channel = channel
        self._on_call = on_call
        self._on_note = on_note
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, action: str, args: dict[str, Any]) -> Any:
        self._next += 1
        ident = self._next
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        try:
            self.channel.send({"op": "call", "id": ident, "action": action, "args": args})
            return await future
        finally:
            self._waiting.pop(ident, None)

    def note(self, op: str, **fields: Any) -> None:
        self.channel.send({"op": op, **fields})

    async def serve(self) -> None:
        """Read until the channel closes; every call still waiting then fails."""
        try:
            while True:
                message = await self.channel.recv()
                op = message.get("op")
                if op == "call":
                    self._start(message)
                elif op == "reply":
                    self._resolve(message)
                else:
                    self._on_note(message)
        finally:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ChannelClosed("the other process went away"))
            for task in list(self._tasks):
                task.cancel()

    def _start(self, message: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self._answer(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"op": "reply", "id": message.get("id")}
        try:
            reply["result"] = await self._on_call(str(message.get("action")), message["args"])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure goes back as an error
            reply["error"] = error_doc(exc)
        try:
            try:
                self.channel.send(reply)
            except ValueError as exc:  # over MAX_MESSAGE: the caller must still hear
                self.channel.send({"op": "reply", "id": reply["id"], "error": error_doc(exc)})
        except ChannelClosed:
            pass

    def _resolve(self, message: dict[str, Any]) -> None:
        future = self._waiting.get(int(message.get("id", -1)))
        if future is None or future.done():
            return
        if "error" in message:
            future.set_exception(error_of(message["error"]))
        else:
            future.set_result(message.get("result"))
