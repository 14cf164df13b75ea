"""The values the HTTP transport and the routes exchange (a request, a response, a streamed
response) and the bytes of a response head. No I/O here."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

# Responses smaller than this are sent as they are even when the client accepts gzip/deflate
# (aiohttp-based clients always do): compressing a few hundred bytes costs more than it saves.
COMPRESS_MIN_BYTES: Final = 1024

REASONS = {
    200: b"OK",
    204: b"No Content",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Payload Too Large",
    414: b"URI Too Long",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}


class HttpRequest:
    __slots__ = (
        "method",
        "path",
        "headers",
        "body",
        "peer",
        "identity",
        "api_key",
        "params",
        "received",
    )

    def __init__(  # noqa: PLR0913  # its fields
        self,
        method: str,
        path: str,  # the request target as sent, query string included
        headers: dict[bytes, bytes],  # names lower-cased; a repeated header keeps its last value
        body: bytes | bytearray,  # a large body is gathered into a bytearray as it arrives
        peer: str = "",  # the client's address, "host:port" ("" when unknown)
        identity: str | None = None,
        api_key: str | None = None,
        params: dict[str, str] | None = None,  # captured by the route's pattern
        received: tuple[int, int] | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.peer = peer
        # Who access control admitted (set by access.HttpGuard): a token's name, the name of
        # the restricted-API header that let it in; for the access log, never their values.
        self.identity = identity
        self.api_key = api_key
        self.params: dict[str, str] = {} if params is None else params
        # (first byte, last byte) read times, perf_counter_ns, when tracing is on (HTTP_RECV_*)
        self.received = received


class HttpResponse:
    __slots__ = ("status", "body", "content_type", "headers", "compressible", "on_sent")

    def __init__(
        self,
        status: int = 200,
        body: list[Any] | None = None,  # bytes-like parts
        content_type: bytes | None = b"application/json",
        headers: list[tuple[bytes, bytes]] | None = None,
        compressible: bool = False,
        on_sent: Callable[[int, int], None] | None = None,
    ) -> None:
        self.status = status
        self.body: list[Any] = [] if body is None else body
        self.content_type = content_type
        self.headers: list[tuple[bytes, bytes]] = [] if headers is None else headers
        # Whether the body may be compressed when the client accepts it. Triton compresses
        # inference responses only: tritonclient's aio client reads every other answer as
        # plain JSON, whatever Accept-Encoding aiohttp sent.
        self.compressible = compressible
        # Told (start, end) perf_counter_ns of the write once the response is written, or
        # (0, 0) when it cannot be (a traced inference's HTTP_SEND_* stamps).
        self.on_sent = on_sent


@dataclass(slots=True)
class HttpStreamResponse:
    """A response written as it is produced (chunked transfer encoding), e.g. SSE."""

    chunks: AsyncIterator[bytes]
    content_type: bytes = b"text/event-stream; charset=utf-8"
    status: int = 200


Result = HttpResponse | HttpStreamResponse


class PendingResponse:
    """An answer a callback gives later, without a task: an inference answered from the
    server's response callback (``app.py:HttpApp._infer_now``). The request cycle
    ``attach``es what writes it; ``resolve`` hands over the HttpResponse or the error to
    render (at once if attached, else on ``attach``); ``cancel`` (the client went away)
    forgets the writer and calls ``on_cancel``."""

    __slots__ = ("_deliver", "_result", "on_cancel")

    def __init__(self) -> None:
        self._deliver: Callable[[HttpResponse | Exception], None] | None = None
        self._result: HttpResponse | Exception | None = None
        self.on_cancel: Callable[[], None] | None = None

    def attach(self, deliver: Callable[[HttpResponse | Exception], None]) -> None:
        result, self._result = self._result, None
        if result is None:
            self._deliver = deliver
        else:
            deliver(result)

    def resolve(self, result: HttpResponse | Exception) -> None:
        deliver, self._deliver = self._deliver, None
        self.on_cancel = None
        if deliver is None:
            self._result = result
        else:
            deliver(result)

    def cancel(self) -> None:
        self._deliver = None
        on_cancel, self.on_cancel = self.on_cancel, None
        if on_cancel is not None:
            on_cancel()


# A route's handler answers at once or with a coroutine (run as the request's task).
Handler = Callable[[HttpRequest], "HttpResponse | PendingResponse | Coroutine[Any, Any, Result]"]
ErrorRenderer = Callable[[BaseException], HttpResponse]


def error_body(message: str) -> bytes:
    """Triton's error document, ``{"error": "..."}``."""
    return orjson.dumps({"error": message})


orjson_error = error_body  # the name the routes used before the transport split


def error_response(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, [error_body(message)])


def body_length(parts: list[Any]) -> int:
    return sum(len(p) if isinstance(p, bytes) else memoryview(p).nbytes for p in parts)


def compress(parts: list[Any], accept: bytes) -> tuple[bytes, bytes] | None:
    """The body packed with the first of gzip/deflate the client accepts, and its name."""
    for token in accept.lower().split(b","):
        name = token.split(b";")[0].strip()
        if name in (b"gzip", b"deflate"):
            data = b"".join(bytes(p) for p in parts)
            packed = gzip.compress(data, 1) if name == b"gzip" else zlib.compress(data, 1)
            return packed, name
    return None


# The head of an answer with no header of its own, up to its Content-Length's value, by
# (status, content type): the statuses and types the routes answer with (not a client's), a
# few dozen at most, forgotten all at once past this.
_HEADS_MAX: Final = 64
_HEADS: Final[dict[tuple[int, bytes | None], bytes]] = {}


def response_head(
    response: HttpResponse, headers: list[tuple[bytes, bytes]], length: int, keep_alive: bool
) -> bytes:
    status = response.status
    if not headers and keep_alive and status != 204:  # most answers: one format, one join
        content_type = response.content_type if response.body else None
        key = (status, content_type)
        start = _HEADS.get(key)
        if start is None:
            if len(_HEADS) >= _HEADS_MAX:
                _HEADS.clear()
            start = _HEADS[key] = _head(response, [], -1, True)
        return b"%s%d\r\n\r\n" % (start, length)
    return _head(response, headers, length, keep_alive)


def _head(
    response: HttpResponse, headers: list[tuple[bytes, bytes]], length: int, keep_alive: bool
) -> bytes:
    """The head; with ``length`` -1, the head up to Content-Length's value (``_HEADS``)."""
    status = response.status
    head = [b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Error"))]
    if response.content_type is not None and response.body:
        head.append(b"Content-Type: " + response.content_type + b"\r\n")
    for name, value in headers:
        head.append(name + b": " + value + b"\r\n")
    if length < 0:
        return b"".join(head) + b"Content-Length: "
    if status != 204:  # RFC 9110 8.6: a 204 has no Content-Length
        head.append(b"Content-Length: %d\r\n" % length)
    if not keep_alive:
        head.append(b"Connection: close\r\n")
    head.append(b"\r\n")
    return b"".join(head)


def stream_head(
    response: HttpStreamResponse, keep_alive: bool, headers: Sequence[tuple[bytes, bytes]] = ()
) -> bytes:
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n" % (
        response.status,
        REASONS.get(response.status, b"Error"),
        response.content_type,
    )
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head + (b"\r\n" if keep_alive else b"Connection: close\r\n\r\n")
