"""ModelStreamInfer: many requests on one bidirectional stream, as Triton serves it.

- Non-decoupled models: exactly one response per request, written in the order the requests
  arrived on the stream (a per-stream queue of slots), whatever order they finish in.
- Decoupled models: 0..N responses per request, written as soon as they are ready.
- A failing request answers an in-stream ``error_message`` (with its ``id``) and the stream
  goes on; with the ``triton_grpc_error: true`` header the first error ends the stream with
  its gRPC status instead.
- Every response carries ``triton_final_response``; ``triton_enable_empty_final_response``
  turns a decoupled model's flag-only completion into an empty final response.
- Responses are written from the response callbacks straight to the call (no queue, no
  writer task). Back-pressure: at most ``limit`` requests per stream are in flight (counted
  until their final response is written), and no request is read while the client leaves
  more than the call's high-water mark of our answers unread, so a fast sender or a slow
  reader stops the stream from being read and HTTP/2 flow control pushes back.
- With ``--max-inflight-per-client``, each request holds one of its client's slots from its
  arrival to its final response (``guard.py:CallGuard.hold``); one over the bound is answered
  in the stream with RESOURCE_EXHAUSTED's message (the status itself with
  ``triton_grpc_error``) and the stream goes on.
- When the client goes away, the stream's requests still in the server are cancelled.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from ...access.policy import ALLOWED, Verdict
from ...errors import ErrorKind, ServerError
from ...api import Door, InferenceCall
from ...server import (
    FinalAnswer,
    InferenceRequest,
    InferenceServer,
    ResponseCallback,
    ResponseSender,
    parse_version,
)
from ...types import ClientRequest, InferenceResponse
from ...transport.grpc.budgets import MESSAGES_PER_TURN
from ...transport.grpc.call import HIGH_WATER, ServerCall
from ...transport.grpc.status import RpcError, StatusCode, status_message
from ..tensors import OFFLOAD_BYTES, decode_off_loop
from .codec import decode_request, encode_response, parameter_value
from .wire import parse_request
from .errors import CODE, triton_status
from .guard import CallGuard, refusal_code
from .traces import RECEIVED, SENT, identity, sample


_EMPTY_FINAL = "triton_enable_empty_final_response"
_NOBODY: tuple[str | None, str | None] = (None, None)  # the identity of a call that logs nothing
# ModelStreamInfer's door of the inference call: decoupled models stream, gRPC's stamps.
STREAM = Door("grpc", None, RECEIVED, SENT)


class _Item:
    """One message to write, in the writer's queue."""

    __slots__ = ("message", "kind", "final", "access")

    def __init__(
        self,
        message: pb.ModelStreamInferResponse | None,
        kind: Any,
        final: bool,
        access: InferenceCall | None = None,
    ):
        self.message = message  # None: nothing to write, only a request to account for
        self.kind = kind  # the ErrorKind (or a refusal's StatusCode) when it is an error
        self.final = final
        self.access = access  # its request's call (the access-log line, put with the final one)


class _Slot:
    """A non-decoupled request's place in the stream's response order."""

    __slots__ = ("item",)

    def __init__(self) -> None:
        self.item: _Item | None = None


def _response_message(response: InferenceResponse, final: bool) -> pb.ModelStreamInferResponse:
    if response.error is not None:
        return _error_message(
            response.error, response.id, response.model_name, response.model_version
        )
    infer = encode_response(response)
    infer.parameters["triton_final_response"].bool_param = final
    return pb.ModelStreamInferResponse(infer_response=infer)


def _error_message(
    error: Exception, rid: str, model: str = "", version: str = ""
) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(
        error_message=str(error),
        infer_response=pb.ModelInferResponse(id=rid, model_name=model, model_version=version),
    )


def _kind(error: Exception) -> ErrorKind:
    return error.kind if isinstance(error, ServerError) else ErrorKind.INTERNAL


class _OrderedAnswer(FinalAnswer):
    """A non-decoupled request's callback: its answer (exactly one response) goes to its
    slot in the stream's order (with its access-log line, when the log is on)."""

    __slots__ = ("_session", "_slot", "_access")

    def __init__(
        self,
        request: InferenceRequest,
        session: StreamSession,
        slot: _Slot,
        access: InferenceCall,
    ) -> None:
        self.request = request
        self._session = session
        self._slot = slot
        self._access = access

    def answer(self, response: InferenceResponse) -> None:
        kind = _kind(response.error) if response.error is not None else None
        item = _Item(_response_message(response, True), kind, True, self._access)
        self._session.answered(self.request, self._slot, item)


class StreamSession:
    def __init__(
        self,
        server: InferenceServer,
        call: ServerCall,
        limit: int,
        forwarded: dict[str, str] | None = None,
    ) -> None:
        self._server = server
        self._call = call
        self._guard: CallGuard | None = call.guard  # per-client slots, when access is on
        self._forwarded = forwarded
        self._grpc_errors = call.metadata.get("triton_grpc_error", "").lower() == "true"
        self._free = limit  # requests that may still start before a final response
        self._freed: asyncio.Future[None] | None = None  # run() waiting for a free slot
        self._decoding = False  # run() decodes a large message off the loop
        self._ordered: deque[_Slot] = deque()
        self._active: set[InferenceRequest] = set()
        self._outstanding = 0
        self._input_done = False
        self._idle: asyncio.Future[None] | None = None
        self._inference = server.inference
        self._quiet: InferenceCall | None = None  # the messages' shared call (see below)

    async def run(self) -> None:
        """Starts the requests ``consume`` left in the inbox until the client half-closes,
        then waits until every request has had its final response. The loop gets a turn
        after every ``MESSAGES_PER_TURN`` messages (the inbox may hold many)."""
        call = self._call
        call.consumer = self.consume
        started = 0
        while True:
            while self._free <= 0 and not call.done:
                self._freed = asyncio.get_running_loop().create_future()
                await self._freed
            await call.drain()
            if started and started % MESSAGES_PER_TURN == 0:
                await asyncio.sleep(0)  # other connections' turn
            raw = await call.read()
            if raw is None or call.done:
                break
            started += 1
            self._free -= 1
            if len(raw) <= OFFLOAD_BYTES:
                message, request = _decode(raw, self._forwarded)
            else:
                self._decoding = True  # ``consume`` must not start a later message first
                try:
                    message, request = await decode_off_loop(
                        len(raw), _decode, raw, self._forwarded
                    )
                finally:
                    self._decoding = False
            self._start(message, request, len(raw))
        self._input_done = True
        if self._outstanding and not call.done:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle

    def consume(self, raw: bytes) -> bool:
        """A message as it arrives (inside the transport's read): started at once when a
        slot is free, the client keeps up with our answers and it is small; otherwise it
        waits for ``run``."""
        call = self._call
        if (
            self._free <= 0
            or self._decoding
            or call.pending_bytes > HIGH_WATER
            or len(raw) > OFFLOAD_BYTES
        ):
            return False
        self._free -= 1
        message, request = _decode(raw, self._forwarded)
        self._start(message, request, len(raw))
        return True

    def _inference_call(self, message: pb.ModelInferRequest | None, size: int) -> InferenceCall:
        """A stream request's call (its trace and access-log line), the model as asked. With
        neither tracing nor the access log on (``Inference.inline``) a call holds nothing of
        its request: the stream's messages share one."""
        call = self._call
        if self._inference.inline():
            quiet = self._quiet
            if quiet is None:
                quiet = self._quiet = self._inference.call(STREAM, call.peer, 0, _NOBODY, True)
            return quiet
        inference_call = self._inference.call(STREAM, call.peer, size, identity(call), True)
        if message is not None:
            inference_call.asked(message.model_name, message.model_version, message.id)
        return inference_call

    def _start(
        self,
        message: pb.ModelInferRequest | None,
        client: ClientRequest | ServerError,
        size: int = 0,
    ) -> None:
        self._outstanding += 1
        inference_call = self._inference_call(message, size)
        held = self._hold(message, client, inference_call)
        if held is None:
            return
        try:
            if isinstance(client, ServerError):
                raise client
            if inference_call is not self._quiet:  # (a shared call samples nothing)
                sample(inference_call, client, self._call)
            request = self._inference.prepare(client, inference_call)  # the one lookup
        except ServerError as exc:
            inference_call.sent(0, 0)
            self._release(held)
            self._ordered_error(exc, message.id if message is not None else "", inference_call)
            return
        assert message is not None
        decoupled = request.decoupled
        callback = self._callback(message, request, inference_call, held)
        self._active.add(request)
        try:
            self._inference.submit(request, ResponseSender(callback))
        except ServerError as exc:
            self._active.discard(request)
            if decoupled:
                inference_call.sent(0, 0)
                self._release(held)
                self._write(_Item(_error_message(exc, request.id), exc.kind, True, inference_call))
            else:
                callback(InferenceResponse(request.model_name, "", request.id, error=exc), True)

    def _callback(
        self,
        message: pb.ModelInferRequest,
        request: InferenceRequest,
        inference_call: InferenceCall,
        held: Verdict,
    ) -> ResponseCallback:
        """The request's response callback: ordered or decoupled, traced, giving its slot
        back."""
        callback: ResponseCallback
        if request.decoupled:
            empty_final = False
            if _EMPTY_FINAL in message.parameters:
                empty_final = bool(parameter_value(message.parameters[_EMPTY_FINAL]))
            callback = self._decoupled_callback(request, empty_final, inference_call)
        else:
            callback = self._ordered_callback(request, inference_call)
        callback = inference_call.traced(callback)
        if held.client is not None:
            callback = _releasing(callback, self, held)
        return callback

    def _hold(
        self,
        message: pb.ModelInferRequest | None,
        client: ClientRequest | ServerError,
        entry: InferenceCall,
    ) -> Verdict | None:
        """The request's per-client slot (ALLOWED without a bound); None when the bound
        refuses it, after answering it in the stream. A message that did not decode takes
        none: it is answered at once."""
        guard = self._guard
        if guard is None or isinstance(client, ServerError):
            return ALLOWED
        held = guard.hold(message)
        refusal = held.refusal
        if refusal is None:
            return held
        rid = message.id if message is not None else ""
        code = refusal_code(refusal.kind)
        slot = _Slot()
        error = _error_message(RpcError(code, refusal.message), rid)
        slot.item = _Item(error, code, True, entry)
        self._ordered.append(slot)
        self._flush()
        return None

    def _release(self, held: Verdict) -> None:
        if self._guard is not None and held.client is not None:
            self._guard.release(held)

    def _ordered_error(self, exc: ServerError, rid: str, entry: InferenceCall) -> None:
        slot = _Slot()
        slot.item = _Item(_error_message(exc, rid), exc.kind, True, entry)
        self._ordered.append(slot)
        self._flush()

    def _ordered_callback(self, request: InferenceRequest, entry: InferenceCall) -> _OrderedAnswer:
        slot = _Slot()
        self._ordered.append(slot)
        return _OrderedAnswer(request, self, slot, entry)

    def answered(self, request: InferenceRequest, slot: _Slot, item: _Item) -> None:
        """A non-decoupled request's final answer: its slot is filled, and the ready slots
        at the head of the order are written."""
        self._active.discard(request)
        slot.item = item
        self._flush()

    def _flush(self) -> None:
        ordered = self._ordered
        while ordered and ordered[0].item is not None:
            item = ordered.popleft().item
            assert item is not None
            self._write(item)

    def _decoupled_callback(
        self, request: InferenceRequest, empty_final: bool, entry: InferenceCall
    ) -> ResponseCallback:
        def on_response(response: InferenceResponse | None, final: bool) -> None:
            if final:
                self._active.discard(request)
            if response is not None:
                kind = _kind(response.error) if response.error is not None else None
                self._write(_Item(_response_message(response, final), kind, final, entry))
            elif final:
                message = None
                if empty_final:
                    empty = InferenceResponse(request.model_name, _version(request), request.id)
                    message = _response_message(empty, True)
                self._write(_Item(message, None, True, entry))

        return on_response

    def _write(self, item: _Item) -> None:
        """One response to the client (or only the accounting of a final without one)."""
        call = self._call
        message = item.message
        if message is not None and not call.done:
            if item.kind is not None and self._grpc_errors:  # the first error ends the stream
                call.finish(_code(item.kind), status_message(message.error_message))
                if item.access is not None:
                    self._account(item, 0, False)
                call.cancelled()
                self._wake()
                return
            data = message.SerializeToString()
            call.send(data)
            if item.access is not None:
                self._account(item, len(data), False)
        elif item.access is not None:
            self._account(item, 0, message is not None)  # the call ended: not written
        if item.final:
            self._outstanding -= 1
            self._free += 1
            freed, self._freed = self._freed, None
            if freed is not None and not freed.done():
                freed.set_result(None)
            if self._input_done and self._outstanding == 0:
                self._wake()

    def _account(self, item: _Item, sent: int, lost: bool) -> None:
        """The access-log line of the item's request: its bytes, its first error, and once
        its final response is out, the line itself."""
        call = item.access
        entry = None if call is None else call.entry
        if call is None or entry is None:
            return
        entry.bytes_out += sent
        if entry.code is None:
            if lost:
                entry.outcome("CANCELLED", int(CODE[ErrorKind.CANCELLED]))
            elif item.kind is not None:
                code = _code(item.kind)
                kind = item.kind
                entry.outcome(triton_status(code) if kind is code else kind.value, int(code))
        if item.final:
            if entry.code is None:
                entry.outcome("SUCCESS", 0)
            call.logged()
            item.access = None

    def _wake(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None and not idle.done():
            idle.set_result(None)

    def close(self) -> None:
        """The call ended (or the client went away): requests still in the server are
        cancelled."""
        self._call.consumer = None
        freed, self._freed = self._freed, None
        if freed is not None and not freed.done():
            freed.set_result(None)
        for request in self._active:
            request.cancel()
        self._active.clear()
        self._wake()


def _code(kind: ErrorKind | StatusCode) -> StatusCode:
    """An item's status: a refusal's own, or its error kind's."""
    return kind if isinstance(kind, StatusCode) else CODE[kind]


def _releasing(
    callback: ResponseCallback, session: StreamSession, held: Verdict
) -> ResponseCallback:
    """The callback of a request holding a per-client slot: the final response gives the
    slot back (the request has left the server), before it is written."""

    def on_response(response: InferenceResponse | None, final: bool) -> None:
        if final:
            session._release(held)
        callback(response, final)

    return on_response


def _decode(
    raw: bytes, forwarded: dict[str, str] | None = None
) -> tuple[pb.ModelInferRequest | None, ClientRequest | ServerError]:
    """A stream message, decoded; a refused one gives its error (and the message when it
    parsed, so that the error answer carries its id)."""
    try:
        message, contents, views = parse_request(raw)
    except ServerError as exc:
        return None, exc
    try:
        version = parse_version(message.model_version)
        return message, decode_request(message, version, contents, forwarded, views)
    except ServerError as exc:
        return message, exc


def _version(request: InferenceRequest) -> str:
    return str(request.model_version) if request.model_version > 0 else ""


async def stream_infer(
    server: InferenceServer, call: ServerCall, limit: int, forwarded: dict[str, str] | None
) -> None:
    """ModelStreamInfer on one call; the dispatcher ends it with OK when this returns."""
    session = StreamSession(server, call, limit, forwarded)
    call.on_cancel = session.close
    try:
        await session.run()
    finally:
        session.close()
