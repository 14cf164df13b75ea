"""HTTP fuzz targets: the request parser/transport (HttpProtocol on a fake transport) and the
infer request codec (JSON + binary tensor extension)."""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httptools
import orjson
from fuzz_harness import FuzzFailure, Target, byte_inputs, check_rejection

from tritium.errors import ServerError
from tritium.frontends.http.codec import decode_request
from tritium.extensions.parameters import parse_parameters
from tritium.frontends.http.limits import HttpLimits
from tritium.frontends.http.messages import HttpRequest, HttpResponse, HttpStreamResponse
from tritium.frontends.http.protocol import HttpProtocol
from tritium.types import DataType

BODY_LIMIT = 2048  # small, so that the size limit paths are reached


class FakeTransport:
    """What HttpProtocol uses of an asyncio transport. Writes after close are dropped, as a
    real transport does."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: Any) -> None:
        if not self.closed:
            self.out += data

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        info = {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}
        return info.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Handler:
    """Answers at once (``/``), later (``/async``), streamed (``/stream``), or fails with
    its own exception (``/boom``): the only 5xx the server may send."""

    def __init__(self) -> None:
        self.raised = 0

    def __call__(self, request: HttpRequest) -> Any:
        if request.path.startswith("/boom"):
            self.raised += 1
            raise RuntimeError("the handler's own failure")
        if request.path.startswith("/async"):
            return self._later(request)
        if request.path.startswith("/stream"):
            return self._stream()
        return HttpResponse(200, [b'{"size":%d}' % len(request.body)])

    async def _later(self, request: HttpRequest) -> HttpResponse:
        await asyncio.sleep(0)
        return HttpResponse(200, [b"x" * (len(request.body) % 1500)])

    async def _stream(self) -> HttpStreamResponse:
        async def chunks() -> AsyncIterator[bytes]:
            for part in (b"data: 1\n\n", b"data: 2\n\n"):
                await asyncio.sleep(0)
                yield part

        return HttpStreamResponse(chunks())


class _Responses:
    """Parses what the server wrote; every byte must be a well-formed HTTP/1.1 response."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self._parser = httptools.HttpResponseParser(self)

    def on_message_complete(self) -> None:
        self.statuses.append(self._parser.get_status_code())

    def feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise FuzzFailure(f"malformed response: {exc}: {data[:200]!r}") from exc


def _chunks(data: bytes) -> list[bytes]:
    """The first byte picks how the rest arrives: whole, or in slices of 1..96 bytes."""
    if not data:
        return []
    step, rest = data[0] % 97, data[1:]
    if step == 0:
        return [rest]
    return [rest[i : i + step] for i in range(0, len(rest), step)]


async def _settle(transport: FakeTransport) -> None:
    """Run the loop until only this coroutine is left (handlers and streams done) for a few
    turns: a finished task's done-callbacks, which may start the next task, run a turn later."""
    current = asyncio.current_task()
    quiet = 0
    for _ in range(500):
        busy = any(t is not current and not t.done() for t in asyncio.all_tasks())
        quiet = 0 if busy else quiet + 1
        if quiet > 3:
            return
        await asyncio.sleep(0)
    raise FuzzFailure("request handling did not finish")


async def _drive(data: bytes) -> tuple[FakeTransport, Handler]:
    handler = Handler()
    protocol = HttpProtocol(handler, HttpLimits(max_body=BODY_LIMIT))
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    for chunk in _chunks(data):
        await _settle(transport)
        if transport.closed:
            break  # a closed connection delivers nothing more
        if not transport.reading:
            raise FuzzFailure("reading stayed paused with no request left to answer")
        protocol.data_received(chunk)
    await _settle(transport)
    protocol.connection_lost(None)
    await _settle(transport)
    return transport, handler


_LOOP: asyncio.AbstractEventLoop | None = None


def check_http_protocol(data: bytes) -> None:
    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
    log = logging.getLogger("tritium")
    was_disabled, log.disabled = log.disabled, True  # the /boom handler logs each failure
    try:
        transport, handler = _LOOP.run_until_complete(_drive(data))
    finally:
        log.disabled = was_disabled
    responses = _Responses()
    responses.feed(bytes(transport.out))
    server_errors = [s for s in responses.statuses if s >= 500]
    if any(s != 500 for s in server_errors) or len(server_errors) > handler.raised:
        raise FuzzFailure(
            f"5xx answers {server_errors} but the handler raised {handler.raised} times"
        )


def _request(method: bytes, path: bytes, headers: list[bytes], body: bytes = b"") -> bytes:
    head = b"%s %s HTTP/1.1\r\nHost: x\r\n" % (method, path)
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


_JSON = b'{"inputs":[]}'
_GZIP, _ZLIB = gzip.compress(b"a" * 3000), zlib.compress(b"ab")
_GZIP_LENGTH = b"Content-Length: %d" % len(_GZIP)
_ZLIB_LENGTH = b"Content-Length: %d" % len(_ZLIB)
HTTP_SEEDS = [
    b"\x00" + _request(b"GET", b"/v2/health/ready", []),
    b"\x00" + _request(b"POST", b"/", [b"Content-Length: 13"], _JSON),
    b"\x05" + _request(b"POST", b"/async", [b"Content-Length: 13"], _JSON) * 3,
    b"\x00" + _request(b"GET", b"/stream", []) + _request(b"GET", b"/", []),
    b"\x00" + _request(b"GET", b"/boom", []) + _request(b"GET", b"/", [b"Connection: close"]),
    b"\x07" + _request(b"POST", b"/", [b"Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\n\r\n"),
    b"\x00" + _request(b"POST", b"/", [b"Content-Encoding: gzip", _GZIP_LENGTH], _GZIP),
    b"\x00" + _request(b"POST", b"/", [b"Content-Encoding: deflate", _ZLIB_LENGTH], _ZLIB),
    b"\x00" + _request(b"POST", b"/", [b"Content-Length: 4000"], b"y" * 4000),
    b"\x00" + _request(b"GET", b"/", [b"Connection: Upgrade", b"Upgrade: websocket"]),
    b"\x00GET / HTTP/1.0\r\n\r\n",
]
HTTP_TOKENS = [
    b"\r\n",
    b"\r\n\r\n",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Encoding: gzip\r\n",
    b"Connection: keep-alive\r\n",
    b"Connection: close\r\n",
    b"Expect: 100-continue\r\n",
    b"HTTP/1.1",
    b"POST /async HTTP/1.1\r\n",
    b"GET /stream HTTP/1.1\r\n",
    b"0\r\n\r\n",
    b"99999999999999999999",
]

HTTP_PROTOCOL = Target(
    "http_protocol",
    check_http_protocol,
    byte_inputs(HTTP_SEEDS, HTTP_TOKENS, 512),
    seeds=HTTP_SEEDS,
    tokens=HTTP_TOKENS,
    max_len=8192,
)


# -- the infer codec -----------------------------------------------------------------------


def _split(data: bytes) -> tuple[bytes, int | None]:
    """Byte 0 even: JSON only. Odd: bytes 1-2 are the Inference-Header-Content-Length."""
    if not data or data[0] % 2 == 0:
        return data[1:], None
    return data[3:], int.from_bytes(data[1:3], "little")


def decode_http(body: bytes, header_length: int | None) -> None:
    try:
        request, _plan = decode_request(body, header_length, "m", 1)
        parse_parameters(request.parameters)  # what the core reads of them next
    except ServerError as exc:
        check_rejection(exc)
        return
    check_tensors(request.inputs)


def check_tensors(tensors: list[Any]) -> None:
    """What the core relies on after a decode: data matches the declared shape and type."""
    for tensor in tensors:
        if tensor.shm is not None:
            continue
        if tensor.data.shape != tuple(tensor.shape):
            raise FuzzFailure(f"'{tensor.name}' has shape {tensor.data.shape}, not {tensor.shape}")
        if tensor.data.dtype != tensor.datatype.dtype:
            raise FuzzFailure(f"'{tensor.name}' has dtype {tensor.data.dtype}")
        if tensor.datatype is DataType.BYTES and not all(
            isinstance(v, bytes) for v in tensor.data.reshape(-1)
        ):
            raise FuzzFailure(f"BYTES input '{tensor.name}' holds non-bytes elements")


def check_http_codec(data: bytes) -> None:
    decode_http(*_split(data))


def _with_header(doc: dict[str, Any], binary: bytes) -> bytes:
    head = orjson.dumps(doc)
    return b"\x01" + len(head).to_bytes(2, "little") + head + binary


CODEC_SEEDS = [
    b"\x00" + _JSON,
    b"\x00"
    + orjson.dumps(
        {
            "id": "7",
            "parameters": {"priority": 1, "timeout": 5, "sequence_id": 3, "x": "y"},
            "inputs": [
                {"name": "A", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
                {"name": "B", "datatype": "BYTES", "shape": [1], "data": ["s"]},
                {"name": "C", "datatype": "BOOL", "shape": [1], "data": [True]},
            ],
            "outputs": [{"name": "Z", "parameters": {"binary_data": True}}],
        }
    ),
    _with_header(
        {
            "inputs": [
                {
                    "name": "A",
                    "datatype": "FP32",
                    "shape": [2],
                    "parameters": {"binary_data_size": 8},
                },
                {
                    "name": "B",
                    "datatype": "BYTES",
                    "shape": [1],
                    "parameters": {"binary_data_size": 6},
                },
            ]
        },
        b"\x00\x00\x80?\x00\x00\x00@" + b"\x02\x00\x00\x00hi",
    ),
    b"\x00"
    + orjson.dumps(
        {
            "inputs": [
                {
                    "name": "S",
                    "datatype": "UINT8",
                    "shape": [4],
                    "parameters": {
                        "shared_memory_region": "r",
                        "shared_memory_byte_size": 4,
                        "shared_memory_offset": 0,
                    },
                }
            ],
            "outputs": [{"name": "Z", "parameters": {"classification": 2}}],
        }
    ),
]
CODEC_TOKENS = [
    b'"inputs"',
    b'"outputs"',
    b'"parameters"',
    b'"binary_data_size"',
    b'"shared_memory_region"',
    b'"datatype"',
    b'"shape"',
    b'"data"',
    b'"BYTES"',
    b'"FP16"',
    b'"INT8"',
    b'"UINT64"',
    b"1e400",
    b"-1",
    b"18446744073709551616",
    b"null",
    b"[[",
]

HTTP_CODEC = Target(
    "http_codec",
    check_http_codec,
    byte_inputs(CODEC_SEEDS, CODEC_TOKENS, 512),
    seeds=CODEC_SEEDS,
    tokens=CODEC_TOKENS,
)
