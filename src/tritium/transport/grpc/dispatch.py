"""From an HTTP/2 request to a handler's answer: the method table, the request headers as
gRPC reads them, deadlines, the application's guard (access control), and the one place an
exception becomes a status (through the application's ``status_of``).

Handlers come in three shapes (``Kind``): unary ``async (request, call) -> response``,
server streaming ``(request, call) -> async iterator`` (Health.Watch), and bidirectional
``async (call) -> None`` that reads and writes through the call (ModelStreamInfer). A unary
call may also have a ``fast`` path: a plain function that answers through callbacks without
a task of its own, returning False when it cannot (the task path then runs).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .call import Deferred, ServerCall
from .frames import Pieces
from .metadata import ENCODINGS, parse_timeout, response_compression
from .status import RpcError, StatusCode, status_message

if TYPE_CHECKING:
    from .connection import GrpcConnection

log = logging.getLogger("tritium")

_ACCEPTED_ENCODINGS = ("identity", *ENCODINGS)


class Kind(enum.Enum):
    UNARY = 1
    SERVER_STREAM = 2
    BIDI = 3


@dataclass(frozen=True, slots=True)
class Method:
    kind: Kind
    handler: Callable[..., Any]
    parse: Callable[[bytes], Any]  # the request message from its bytes (identity: raw)
    infer: bool = False  # responses follow --grpc-infer-response-compression-level
    fast: Callable[[bytes, ServerCall], bool] | None = None


def _serialize(message: Any) -> bytes | Pieces:
    """A handler's answer: a message, or its bytes already (``Pieces``: ModelInfer's)."""
    if isinstance(message, (bytes, Pieces)):
        return message
    return bytes(message.SerializeToString())


class CallGate(Protocol):
    """One call's guard: admits its request (raises to refuse it), and hears its outcome."""

    def admit(self, metadata: dict[str, str], request: Any) -> None: ...

    def finish(self, request: Any, error: str | None) -> None: ...


class Guard(Protocol):
    """Access control (``frontends/grpc/guard.py:RpcGuard``): a gate for each call."""

    def call(self, method: str, peer: str) -> CallGate: ...


StatusOf = Callable[[BaseException], tuple[StatusCode, str]]


class Dispatcher:
    """``compression``: the level of the ``infer`` methods' responses (``Settings``);
    ``status_of``: the status a handler's exception ends its call with (logging a bug)."""

    def __init__(
        self,
        methods: dict[str, Method],
        compression: str,
        guard: Guard | None,
        status_of: StatusOf,
    ) -> None:
        self._methods = methods
        self._guard = guard
        self._compression = compression
        self._status_of = status_of

    # -- a new stream ------------------------------------------------------------------------
    def start(self, conn: GrpcConnection, sid: int, headers: Sequence[tuple[bytes, bytes]]) -> None:
        verb, path, metadata = _read_headers(headers)
        content_type = metadata.get("content-type", "")
        if verb != b"POST":
            conn.refuse(sid, 405)
            return
        if not content_type.startswith("application/grpc"):
            conn.refuse(sid, 415)  # what the gRPC spec asks for a non-gRPC body
            return
        method = path.decode("latin-1")
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose >= 1 (changeable at run time)
            log.debug("gRPC request: %s", method)
        encoding = metadata.get("grpc-encoding")
        call = conn.open_call(sid, method, metadata, encoding)
        rpc = self._methods.get(method)
        if rpc is None:
            call.finish(StatusCode.UNIMPLEMENTED, status_message(f"Method not found: {method}"))
            return
        if encoding is not None and encoding not in _ACCEPTED_ENCODINGS:
            why = f"Compression algorithm '{encoding}' is not supported"
            call.finish(StatusCode.UNIMPLEMENTED, status_message(why))
            return
        if not self._deadline(call, metadata.get("grpc-timeout")):
            return
        if rpc.infer and self._compression != "none":
            accept = metadata.get("grpc-accept-encoding")
            call.response_encoding = response_compression(self._compression, accept)
        call.rpc = rpc
        if self._guard is not None:
            call.guard = self._guard.call(method, conn.peer)
        if rpc.kind is Kind.BIDI:
            call.task = asyncio.get_running_loop().create_task(self._run(call, rpc, None))
        # a unary call runs at its END_STREAM (``input_ended``)

    @staticmethod
    def _deadline(call: ServerCall, timeout: str | None) -> bool:
        if timeout is None:
            return True
        seconds = parse_timeout(timeout)
        if seconds is None:
            call.finish(StatusCode.INTERNAL, f"Invalid grpc-timeout value '{timeout[:32]}'")
            return False
        call.timer = asyncio.get_running_loop().call_later(seconds, _expire, call)
        return True

    def input_ended(self, call: ServerCall) -> None:
        """A unary or server-streaming call has its one request message: run it."""
        rpc: Method | None = call.rpc
        if rpc is None or rpc.kind is Kind.BIDI:
            return
        raw = call.take()
        if raw is None or call.messages_waiting or call.incomplete:
            why = "missing request message" if raw is None else "too many request messages"
            call.finish(StatusCode.INTERNAL, why)
            return
        fast = rpc.fast if call.guard is None else None
        if fast is not None and isinstance(raw, bytes) and fast(raw, call):
            return
        call.task = asyncio.get_running_loop().create_task(self._run(call, rpc, raw))

    # -- running handlers --------------------------------------------------------------------
    async def _run(self, call: ServerCall, rpc: Method, raw: bytes | Deferred | None) -> None:
        """One call's handler, whatever its kind: admission, the handler, its status. The
        guard is released (a control action audited) before the answer goes out, so the
        audit line exists by the time the client learns the outcome."""
        guard: CallGate | None = call.guard
        request: Any = None
        try:
            if isinstance(raw, Deferred):
                raw = await raw.inflate()
            if raw is not None:
                request = rpc.parse(raw)
            if guard is not None:
                guard.admit(call.metadata, request)
            answer = await _handle(call, rpc, request)
        except asyncio.CancelledError:
            _release(guard, request, "cancelled")
            raise
        except Exception as exc:
            code, message = self._status_of(exc)
            _release(guard, request, message)
            call.finish(code, message)
            return
        _release(guard, request, None)
        try:
            if answer is None:
                call.finish()
            else:
                call.answer(answer)
        except RpcError as exc:  # a response over the send bound
            call.finish(exc.code, exc.message)


async def _handle(call: ServerCall, rpc: Method, request: Any) -> bytes | Pieces | None:
    """Runs the handler: a unary one's answer, or None once a streaming one has written."""
    if rpc.kind is Kind.UNARY:
        return _serialize(await rpc.handler(request, call))
    if rpc.kind is Kind.BIDI:
        await rpc.handler(call)
    else:  # closed here, also when cancelled mid-drain: its ``finally`` runs at once
        await _stream_out(call, rpc.handler(request, call))
    return None


async def _stream_out(call: ServerCall, messages: AsyncGenerator[Any, None]) -> None:
    """A server-streaming handler's messages sent, then the generator closed however that
    ended. (Not ``async with aclosing``: under mypyc a coroutine that awaits while handling an
    exception leaves it as the thread's current one, sys.exc_info, for what runs next.)"""
    failed: BaseException | None = None
    try:
        async for message in messages:
            call.send(_serialize(message))
            await call.drain()
    except BaseException as exc:  # raised again once the generator is closed
        failed = exc
    await messages.aclose()
    if failed is not None:
        raise failed


def _read_headers(
    headers: Sequence[tuple[bytes, bytes]],
) -> tuple[bytes, bytes, dict[str, str]]:
    """(:method, :path, the other headers by name, a repeated one comma-joined as HTTP
    reads it). Names and values stay opaque text: nothing is built from them."""
    path = verb = b""
    metadata: dict[str, str] = {}
    for name, value in headers:
        if name[:1] == b":":
            if name == b":path":
                path = value
            elif name == b":method":
                verb = value
            continue
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        metadata[key] = f"{metadata[key]}, {text}" if key in metadata else text
    return verb, path, metadata


def _release(guard: CallGate | None, request: Any, error: str | None) -> None:
    if guard is not None:
        guard.finish(request, error)


def _expire(call: ServerCall) -> None:
    """The deadline passed: DEADLINE_EXCEEDED, and the work inside the server is cancelled."""
    call.timer = None
    call.finish(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    call.cancelled()
