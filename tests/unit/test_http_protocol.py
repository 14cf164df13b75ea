"""The HTTP/1.1 connection protocol with a fake transport, no sockets: pipelining, chunked
bodies, disconnects mid-body and mid-response, every limit and timeout, and that a closed
connection is freed without the cyclic garbage collector."""

from __future__ import annotations

import asyncio
import sys
import gc
import gzip
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

from testkit.http_fakes import connect, responses, run, until, written

from tritium.frontends.http.messages import HttpRequest, HttpResponse, HttpStreamResponse
from tritium.frontends.http.protocol import WRITE_SOON_MAX_BYTES


def echo(request: HttpRequest) -> HttpResponse:
    doc = {"method": request.method, "path": request.path, "body": request.body.decode()}
    doc["peer"] = request.peer
    return HttpResponse(200, [json.dumps(doc).encode()])


def get(path: str = "/a", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


def post(body: bytes, path: str = "/p", extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def test_request_and_keep_alive() -> None:
    async def main() -> None:
        protocol, transport = connect(echo)
        protocol.data_received(post(b"hello"))
        protocol.data_received(get("/b"))
        (s1, h1, b1), (s2, _, b2) = responses(await written(transport))
        assert (s1, s2) == (200, 200)
        assert json.loads(b1) == {
            "method": "POST",
            "path": "/p",
            "body": "hello",
            "peer": "10.1.2.3:4567",
        }
        assert json.loads(b2)["path"] == "/b"
        assert "connection" not in h1 and not transport.closed

    run(main)


def test_answers_of_one_loop_turn_are_written_at_its_end() -> None:
    """A small answer waits for the end of the loop's turn, so that the answers of all the
    connections served in one turn leave together; one too big for that, and any answer on
    a connection that closes after it, is written at once, in order."""

    async def main() -> None:
        (p1, t1), (p2, t2) = connect(echo), connect(echo)
        p1.data_received(get("/1"))
        p2.data_received(get("/2"))
        assert t1.take() == t2.take() == b""
        [(s1, _, b1)], [(s2, _, b2)] = responses(await written(t1)), responses(await written(t2))
        assert (s1, s2) == (200, 200)
        assert json.loads(b1)["path"] == "/1" and json.loads(b2)["path"] == "/2"

        big = b"x" * (WRITE_SOON_MAX_BYTES + 1)
        p3, t3 = connect(lambda request: HttpResponse(200, [big]))
        p3.data_received(get())
        [(status, _, body)] = responses(t3.take())
        assert status == 200 and body == big

        def small_then_big(request: HttpRequest) -> HttpResponse:
            return HttpResponse(200, [big if request.path == "/big" else b"{}"])

        p5, t5 = connect(small_then_big, max_pipelined=2)
        p5.data_received(get("/small") + get("/big"))  # the big one takes the small one along
        assert [body for _, _, body in responses(t5.take())] == [b"{}", big]

        p4, t4 = connect(echo)
        p4.data_received(get("/a") + get("/b", "Connection: close\r\n"))
        answers = responses(t4.take())
        assert [json.loads(body)["path"] for _, _, body in answers] == ["/a", "/b"]
        assert t4.closed

    run(main)


def test_connection_close_is_honoured() -> None:
    async def main() -> None:
        protocol, transport = connect(echo)
        protocol.data_received(get(extra="Connection: close\r\n"))
        [(status, headers, _)] = responses(transport.take())
        assert status == 200 and headers["connection"] == "close"
        assert transport.closed

    run(main)


def test_pipelined_answers_in_order_even_when_the_first_is_slow() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def handler(request: HttpRequest) -> HttpResponse:
            if request.path == "/slow":
                await release.wait()
            return HttpResponse(200, [request.path.encode()], b"text/plain")

        protocol, transport = connect(handler)
        protocol.data_received(get("/slow") + get("/fast") + get("/third"))
        await asyncio.sleep(0.01)
        assert transport.take() == b""  # /fast waits for /slow
        release.set()
        await until(lambda: transport.buffer.count(b"HTTP/1.1") == 3)
        assert [b for _, _, b in responses(transport.take())] == [b"/slow", b"/fast", b"/third"]

    run(main)


def test_parse_error_after_a_good_pipelined_request_answers_both_then_closes() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def handler(request: HttpRequest) -> HttpResponse:
            await release.wait()
            return HttpResponse(200, [b"good"], b"text/plain")

        protocol, transport = connect(handler)
        protocol.data_received(get("/good") + b"NOT HTTP AT ALL\r\n\r\n")
        assert transport.read_paused and not transport.closed
        release.set()
        await until(lambda: transport.closed)
        (s1, _, b1), (s2, h2, b2) = responses(transport.take())
        assert (s1, b1) == (200, b"good")
        assert s2 == 400 and h2["connection"] == "close"
        assert "malformed HTTP request" in json.loads(b2)["error"]

    run(main)


def test_chunked_body_in_pieces() -> None:
    async def main() -> None:
        protocol, transport = connect(echo)
        head = b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        for piece in (head, b"5\r\nhel", b"lo\r\n6\r\n wor", b"ld\r\n0\r\n", b"\r\n"):
            protocol.data_received(piece)
        [(status, _, body)] = responses(await written(transport))
        assert status == 200 and json.loads(body)["body"] == "hello world"

    run(main)


def test_disconnect_mid_body_never_calls_the_handler() -> None:
    async def main() -> None:
        calls: list[HttpRequest] = []

        def handler(request: HttpRequest) -> HttpResponse:
            calls.append(request)
            return HttpResponse()

        protocol, transport = connect(handler)
        protocol.data_received(post(b"x" * 100)[:-40])
        transport.lose(ConnectionResetError())
        protocol.data_received(b"y" * 40)  # late bytes are ignored
        await asyncio.sleep(0.01)
        assert calls == [] and transport.take() == b""

    run(main)


def test_disconnect_mid_response_cancels_the_handler() -> None:
    async def main() -> None:
        state: dict[str, Any] = {}

        async def handler(request: HttpRequest) -> HttpResponse:
            state["started"] = True
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                state["cancelled"] = True
                raise
            return HttpResponse()

        protocol, transport = connect(handler)
        protocol.data_received(get())
        await until(lambda: "started" in state)
        transport.lose()
        await until(lambda: "cancelled" in state)
        assert transport.take() == b""

    run(main)


def test_disconnect_mid_stream_closes_the_stream() -> None:
    async def main() -> None:
        state: dict[str, Any] = {"sent": 0}

        async def chunks() -> AsyncIterator[bytes]:
            try:
                while True:
                    state["sent"] += 1
                    yield b"data: x\n\n"
                    await asyncio.sleep(0.001)
            finally:
                state["closed"] = True

        async def handler(request: HttpRequest) -> HttpStreamResponse:
            return HttpStreamResponse(chunks())

        protocol, transport = connect(handler)
        protocol.data_received(get())
        await until(lambda: state["sent"] >= 3)
        assert transport.buffer.startswith(b"HTTP/1.1 200 OK\r\n")
        transport.lose()
        await until(lambda: "closed" in state)

    run(main)
    # No exception is left as the thread's current one (sys.exc_info) once the stream was
    # cancelled: a compiled coroutine awaiting inside an except/finally would leave it.
    assert sys.exc_info() == (None, None, None)


def test_handler_errors_go_through_the_renderer() -> None:
    async def main() -> None:
        def boom(request: HttpRequest) -> HttpResponse:
            raise KeyError("bug")

        seen: list[BaseException] = []

        def render(exc: BaseException) -> HttpResponse:
            seen.append(exc)
            return HttpResponse(418, [b'{"error":"rendered"}'])

        protocol, transport = connect(boom, render_error=render)
        protocol.data_received(get())
        [(status, _, body)] = responses(await written(transport))
        assert status == 418 and isinstance(seen[0], KeyError)

    run(main)


def test_compression_is_a_property_of_the_response() -> None:
    async def main() -> None:
        big = b"[" + b"1," * 2000 + b"1]"

        def handler(request: HttpRequest) -> HttpResponse:
            return HttpResponse(200, [big], compressible=request.path == "/yes")

        protocol, transport = connect(handler)
        accept = "Accept-Encoding: gzip\r\n"
        protocol.data_received(get("/yes", accept) + get("/no", accept))
        (_, h1, b1), (_, h2, b2) = responses(await written(transport))
        assert h1["content-encoding"] == "gzip" and gzip.decompress(b1) == big
        assert "content-encoding" not in h2 and b2 == big

    run(main)


def test_write_backpressure_holds_the_next_pipelined_request() -> None:
    async def main() -> None:
        protocol, transport = connect(echo)
        protocol.pause_writing()
        protocol.data_received(get("/1") + get("/2"))
        assert transport.take() == b""
        protocol.resume_writing()
        assert len(responses(await written(transport))) == 2

    run(main)


def test_freed_without_the_cyclic_gc_after_disconnect() -> None:
    async def main() -> None:
        async def handler(request: HttpRequest) -> HttpResponse:
            await asyncio.sleep(60)
            return HttpResponse()

        refs = []
        for data in (post(b"x" * 1000)[:-10], get()):  # mid-body, and mid-response
            protocol, transport = connect(handler)
            protocol.data_received(data)
            await asyncio.sleep(0)
            refs.append(weakref.ref(protocol))
            transport.lose()
            del protocol, transport
        await asyncio.sleep(0.01)  # the cancelled handler finishes
        assert [r() for r in refs] == [None, None]

    gc.collect()
    gc.disable()
    try:
        run(main)
    finally:
        gc.enable()
