"""HTTP/1.1 on a bare ``asyncio.Protocol`` with httptools: keep-alive, chunked bodies,
body-size limits, gzip/deflate. One request at a time per connection, answered in order."""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httptools
import orjson

from ...access import format_peer

log = logging.getLogger("tritium")

# Responses smaller than this are sent as they are even when the client accepts gzip/deflate
# (aiohttp-based clients always do): compressing a few hundred bytes costs more than it saves.
COMPRESS_MIN_BYTES = 1024

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Payload Too Large",
    429: b"Too Many Requests",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[bytes, bytes]
    body: bytes
    peer: str = ""  # the client's "host:port" ("[v6]:port"), for access control and audit


@dataclass(slots=True)
class HttpResponse:
    status: int = 200
    body: list[Any] = field(default_factory=list)  # bytes-like parts
    content_type: bytes | None = b"application/json"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class HttpStreamResponse:
    """A response written as it is produced (chunked transfer encoding), e.g. SSE."""

    chunks: AsyncIterator[bytes]
    content_type: bytes = b"text/event-stream; charset=utf-8"
    status: int = 200


Handler = Callable[[HttpRequest], "HttpResponse | Awaitable[HttpResponse | HttpStreamResponse]"]


class TooLarge(Exception):
    pass


def decompress(body: bytes, encoding: bytes, limit: int) -> bytes:
    if encoding == b"gzip":
        out = gzip.decompress(body)
    elif encoding == b"deflate":
        try:
            out = zlib.decompress(body)
        except zlib.error:
            out = zlib.decompress(body, -zlib.MAX_WBITS)
    elif encoding in (b"", b"identity"):
        return body
    else:
        raise ValueError(f"unsupported Content-Encoding '{encoding.decode(errors='replace')}'")
    if len(out) > limit:
        raise TooLarge(len(out))
    return out


def compress(parts: list[Any], accept: bytes) -> tuple[bytes, bytes] | None:
    for token in accept.lower().split(b","):
        name = token.split(b";")[0].strip()
        if name in (b"gzip", b"deflate"):
            data = b"".join(bytes(p) for p in parts)
            packed = gzip.compress(data, 1) if name == b"gzip" else zlib.compress(data, 1)
            return packed, name
    return None


class HttpProtocol(asyncio.Protocol):
    __slots__ = (
        "_handler",
        "_limit",
        "_parser",
        "_transport",
        "_url",
        "_headers",
        "_body",
        "_size",
        "_too_large",
        "_busy",
        "_pending",
        "_closed",
        "_task",
        "_writable",
        "_peer",
    )

    def __init__(self, handler: Handler, limit: int) -> None:
        self._handler = handler
        self._limit = limit
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._too_large = False
        self._busy = False
        self._pending: list[HttpRequest | None] = []
        self._closed = False
        self._task: asyncio.Future[Any] | None = None  # the request being answered
        self._writable = asyncio.Event()  # HTTP flow control for streamed responses
        self._writable.set()
        self._peer = ""

    # transport callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._peer = format_peer(transport.get_extra_info("peername"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._writable.set()
        if self._task is not None:  # the client went away: stop the work done for it
            self._task.cancel()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reply_now(400, b'{"error":"protocol upgrade is not supported"}', close=True)
        except httptools.HttpParserError as exc:
            message = f'{{"error":"malformed HTTP request: {str(exc)[:100]}"}}'.encode()
            self._reply_now(400, message, close=True)

    # parser callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = 0
        self._too_large = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._limit:
            self._too_large = True
            self._body = []
        elif not self._too_large:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._too_large:
            self._queue(None)
            return
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        method = self._parser.get_method().decode()
        self._queue(
            HttpRequest(method, self._url.decode("latin-1"), self._headers, body, self._peer)
        )

    # dispatch ------------------------------------------------------------------------------
    def _queue(self, request: HttpRequest | None) -> None:
        if self._busy:
            self._pending.append(request)
            return
        self._dispatch(request)

    def _dispatch(self, request: HttpRequest | None) -> None:
        keep_alive = self._parser.should_keep_alive()
        if request is None:
            message = (
                f'{{"error":"request size {self._size} exceeds the maximum allowed value of '
                f'{self._limit} bytes; use --http-max-input-size to increase the limit"}}'
            )
            self._write(HttpResponse(400, [message.encode()]), request, keep_alive=False)
            return
        try:
            request.body = decompress(
                request.body, request.headers.get(b"content-encoding", b"").lower(), self._limit
            )
        except TooLarge as exc:
            self._reply_now(
                400,
                f'{{"error":"decompressed request size {exc} exceeds the '
                f'maximum allowed value of {self._limit} bytes"}}'.encode(),
            )
            return
        except (OSError, ValueError, zlib.error, EOFError) as exc:
            self._reply_now(400, orjson_error(f"failed to decompress the request body: {exc}"))
            return
        try:
            result = self._handler(request)
        except Exception as exc:  # a bug in a handler answers 500; the server goes on
            log.exception("unhandled error in HTTP handler")
            result = HttpResponse(500, [orjson_error(f"{type(exc).__name__}: {exc}")])
        if isinstance(result, HttpResponse):
            self._write(result, request, keep_alive)
            return
        self._busy = True
        task = asyncio.ensure_future(result)
        self._task = task
        task.add_done_callback(lambda t: self._finish(t, request, keep_alive))

    def _finish(self, task: asyncio.Future[Any], request: HttpRequest, keep_alive: bool) -> None:
        self._task = None
        if task.cancelled():
            response: Any = HttpResponse(503, [b'{"error":"request cancelled"}'])
        elif task.exception() is not None:
            log.error("unhandled error in HTTP handler", exc_info=task.exception())
            response = HttpResponse(500, [orjson_error(str(task.exception()))])
        else:
            response = task.result()
        if isinstance(response, HttpStreamResponse):
            pump = asyncio.ensure_future(self._stream(response, keep_alive))
            self._task = pump
            pump.add_done_callback(lambda _: self._next())
            return
        self._write(response, request, keep_alive)
        self._next()

    def _next(self) -> None:
        self._task = None
        self._busy = False
        while self._pending and not self._busy and not self._closed:
            self._dispatch(self._pending.pop(0))

    async def _stream(self, response: HttpStreamResponse, keep_alive: bool) -> None:
        """Write a response chunk by chunk, waiting whenever the client reads slowly."""
        transport = self._transport
        if transport is None or self._closed:
            await _aclose(response.chunks)  # whoever produces the chunks learns it is over
            return
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n" % (
            response.status,
            _REASONS.get(response.status, b"Error"),
            response.content_type,
        )
        transport.write(head + (b"\r\n" if keep_alive else b"Connection: close\r\n\r\n"))
        try:
            async for chunk in response.chunks:
                if self._closed:
                    return
                transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await self._writable.wait()
        finally:
            await _aclose(response.chunks)
        if not self._closed:
            transport.write(b"0\r\n\r\n")
            if not keep_alive:
                transport.close()
                self._closed = True

    def _reply_now(self, status: int, body: bytes, close: bool = False) -> None:
        self._write(HttpResponse(status, [body]), None, keep_alive=not close)

    def _write(self, response: HttpResponse, request: HttpRequest | None, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None or self._closed:
            return
        parts = response.body
        headers = response.headers
        length = sum(len(p) if isinstance(p, bytes) else memoryview(p).nbytes for p in parts)
        # Triton compresses inference responses only; tritonclient's aio client reads every
        # other answer as plain JSON, whatever Accept-Encoding aiohttp sent.
        if request is not None and length >= COMPRESS_MIN_BYTES and request.path.endswith("/infer"):
            accept = request.headers.get(b"accept-encoding")
            if accept:
                packed = compress(parts, accept)
                if packed is not None:
                    parts = [packed[0]]
                    length = len(packed[0])
                    headers = [*headers, (b"Content-Encoding", packed[1])]
        head = [b"HTTP/1.1 %d %s\r\n" % (response.status, _REASONS.get(response.status, b"Error"))]
        if response.content_type is not None and parts:
            head.append(b"Content-Type: " + response.content_type + b"\r\n")
        for name, value in headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"Content-Length: %d\r\n" % length)
        if not keep_alive:
            head.append(b"Connection: close\r\n")
        head.append(b"\r\n")
        transport.writelines([b"".join(head), *parts])
        if not keep_alive:
            transport.close()
            self._closed = True


async def _aclose(chunks: AsyncIterator[bytes]) -> None:
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def orjson_error(message: str) -> bytes:
    return orjson.dumps({"error": message})
