"""ModelStreamInfer: many requests on one bidirectional stream, as Triton serves it.

- Non-decoupled models: exactly one response per request, written in the order the requests
  arrived on the stream (a per-stream queue of slots), whatever order they finish in.
- Decoupled models: 0..N responses per request, written as soon as they are ready.
- A failing request answers an in-stream ``error_message`` (with its ``id``) and the stream
  goes on; with the ``triton_grpc_error: true`` header the first error ends the stream with
  its gRPC status instead.
- Every response carries ``triton_final_response``; ``triton_enable_empty_final_response``
  turns a decoupled model's flag-only completion into an empty final response.
- Back-pressure: at most ``limit`` requests per stream are in flight (counted until their
  final response is written), so a fast sender or a slow reader stops the stream from being
  read and HTTP/2 flow control pushes back; memory stays bounded.
- When the client goes away, queued requests of the stream are dropped (CANCELLED).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from ...errors import ErrorKind, ServerError
from ...server import InferenceRequest, InferenceServer, ResponseSender, parse_version
from ...types import ClientRequest, InferenceResponse
from ..tensors import decode_off_loop
from .codec import decode_request, encode_response, parameter_value
from .wire import parse_request
from .call import ServerCall
from .errors import CODE, status_message
from .status import RpcError

log = logging.getLogger("tritium")

_EMPTY_FINAL = "triton_enable_empty_final_response"
_END = object()


class _Item:
    """One message to write, in the writer's queue."""

    __slots__ = ("message", "kind", "final")

    def __init__(self, message: pb.ModelStreamInferResponse | None, kind: Any, final: bool):
        self.message = message  # None: nothing to write, only a request to account for
        self.kind = kind  # the ErrorKind when the message is an error
        self.final = final


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


class StreamSession:
    def __init__(
        self,
        server: InferenceServer,
        limit: int,
        grpc_errors: bool,
        forwarded: dict[str, str] | None = None,
    ) -> None:
        self._server = server
        self._forwarded = forwarded
        self._grpc_errors = grpc_errors
        self._slots = asyncio.Semaphore(limit)
        self._out: asyncio.Queue[Any] = asyncio.Queue()
        self._ordered: deque[_Slot] = deque()
        self._active: set[InferenceRequest] = set()
        self._outstanding = 0
        self._input_done = False
        self._closed = False

    # -- reading -----------------------------------------------------------------------------
    async def read(self, requests: AsyncIterator[bytes | pb.ModelInferRequest]) -> None:
        """grpcio hands the messages over as bytes (see service); an in-process caller may
        pass parsed messages."""
        try:
            async for item in requests:
                raw = item if isinstance(item, bytes) else item.SerializeToString()
                await self._slots.acquire()
                if self._closed:
                    return
                message, request = await decode_off_loop(len(raw), _decode, raw, self._forwarded)
                self._start(message, request)
        except Exception as exc:  # the writer ends the stream with it
            self._out.put_nowait(exc)
            return
        self._out.put_nowait(_END)

    def _start(
        self, message: pb.ModelInferRequest | None, client: ClientRequest | ServerError
    ) -> None:
        self._outstanding += 1
        try:
            if isinstance(client, ServerError):
                raise client
            request = self._server.request(client)  # the one model lookup
        except ServerError as exc:
            self._ordered_error(exc, message.id if message is not None else "")
            return
        assert message is not None
        empty_final = False
        if _EMPTY_FINAL in message.parameters:
            empty_final = bool(parameter_value(message.parameters[_EMPTY_FINAL]))
        decoupled = request.decoupled
        if decoupled:
            callback = self._decoupled_callback(request, empty_final)
        else:
            callback = self._ordered_callback(request)
        self._active.add(request)
        try:
            self._server.submit(request, ResponseSender(callback))
        except ServerError as exc:
            self._active.discard(request)
            if decoupled:
                self._out.put_nowait(_Item(_error_message(exc, request.id), exc.kind, True))
            else:
                callback(InferenceResponse(request.model_name, "", request.id, error=exc), True)

    def _ordered_error(self, exc: ServerError, rid: str) -> None:
        slot = _Slot()
        slot.item = _Item(_error_message(exc, rid), exc.kind, True)
        self._ordered.append(slot)
        self._flush()

    def _ordered_callback(self, request: InferenceRequest) -> Any:
        slot = _Slot()
        self._ordered.append(slot)
        kept: list[InferenceResponse] = []  # a response sent before a flag-only final

        def on_response(response: InferenceResponse | None, final: bool) -> None:
            if not final:
                if response is not None:
                    kept[:] = [response]
                return
            self._active.discard(request)
            if response is None:
                response = (
                    kept[0] if kept else InferenceResponse(request.model_name, "", request.id)
                )
            kind = _kind(response.error) if response.error is not None else None
            slot.item = _Item(_response_message(response, True), kind, True)
            self._flush()

        return on_response

    def _flush(self) -> None:
        ordered = self._ordered
        while ordered and ordered[0].item is not None:
            self._out.put_nowait(ordered.popleft().item)

    def _decoupled_callback(self, request: InferenceRequest, empty_final: bool) -> Any:
        def on_response(response: InferenceResponse | None, final: bool) -> None:
            if final:
                self._active.discard(request)
            if response is not None:
                kind = _kind(response.error) if response.error is not None else None
                self._out.put_nowait(_Item(_response_message(response, final), kind, final))
            elif final:
                message = None
                if empty_final:
                    empty = InferenceResponse(request.model_name, _version(request), request.id)
                    message = _response_message(empty, True)
                self._out.put_nowait(_Item(message, None, True))

        return on_response

    # -- writing -----------------------------------------------------------------------------
    async def messages(self) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """What the stream writes: until the client half-closed and every request it sent
        has had its final response."""
        while True:
            item = await self._out.get()
            if isinstance(item, Exception):
                raise item
            if item is _END:
                self._input_done = True
            else:
                if item.message is not None:
                    if item.kind is not None and self._grpc_errors:
                        raise ServerError(item.kind, item.message.error_message)
                    yield item.message
                if item.final:
                    self._outstanding -= 1
                    self._slots.release()
            if self._input_done and self._outstanding == 0:
                return

    def close(self) -> None:
        """The client went away: requests of this stream that have not started are dropped."""
        self._closed = True
        for request in self._active:
            request.cancel()
        self._active.clear()


def _decode(
    raw: bytes, forwarded: dict[str, str] | None = None
) -> tuple[pb.ModelInferRequest | None, ClientRequest | ServerError]:
    """A stream message, decoded; a refused one gives its error (and the message when it
    parsed, so that the error answer carries its id)."""
    try:
        message, contents = parse_request(raw)
    except ServerError as exc:
        return None, exc
    try:
        version = parse_version(message.model_version)
        return message, decode_request(message, version, contents, forwarded)
    except ServerError as exc:
        return message, exc


def _version(request: InferenceRequest) -> str:
    return str(request.model_version) if request.model_version > 0 else ""


async def model_stream_infer(
    server: InferenceServer, requests: AsyncIterator[Any], context: Any, limit: int
) -> AsyncIterator[pb.ModelStreamInferResponse]:
    metadata = dict(context.invocation_metadata() or ())
    grpc_errors = str(metadata.get("triton_grpc_error", "")).lower() == "true"
    session = StreamSession(server, limit, grpc_errors)
    reader = asyncio.ensure_future(session.read(requests))
    try:
        async for message in session.messages():
            yield message
    except ServerError as exc:  # triton_grpc_error mode: the first error ends the stream
        await context.abort(grpc.StatusCode[CODE[exc.kind].name], status_message(exc.message))
    except (asyncio.CancelledError, grpc.aio.AbortError):
        raise
    except Exception as exc:  # a bug (or a broken request iterator): INTERNAL, as unary calls
        log.exception("unhandled error in ModelStreamInfer")
        message = status_message(f"{type(exc).__name__}: {exc}")
        await context.abort(grpc.StatusCode.INTERNAL, message)
    finally:
        session.close()
        reader.cancel()


async def _requests(call: ServerCall) -> AsyncIterator[bytes]:
    while (message := await call.read()) is not None:
        yield message


async def stream_infer(
    server: InferenceServer, call: ServerCall, limit: int, forwarded: dict[str, str] | None
) -> None:
    """ModelStreamInfer on tritium's transport: responses are written as the session makes
    them, each waiting for the client's window (``drain``) so a client that stops reading
    stops the stream from being read."""
    grpc_errors = call.metadata.get("triton_grpc_error", "").lower() == "true"
    session = StreamSession(server, limit, grpc_errors, forwarded)
    reader = asyncio.ensure_future(session.read(_requests(call)))
    try:
        async for message in session.messages():
            call.send(message.SerializeToString())
            await call.drain()
    except ServerError as exc:  # triton_grpc_error mode: the first error ends the stream
        raise RpcError(CODE[exc.kind], status_message(exc.message)) from None
    finally:
        session.close()
        reader.cancel()
