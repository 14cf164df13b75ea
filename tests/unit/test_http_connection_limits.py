"""Every bound of an HTTP connection, socket-free: URL, header block, header count, body size
(raw and inflated), pipelined requests held, and the header, body and keep-alive timeouts."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import pytest
from testkit.http_fakes import connect, responses, run, until, written

from tritium.transport.http1.inflate import BodyRejected, Inflater
from tritium.frontends.http.messages import HttpRequest, HttpResponse


def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, [b'{"size":%d}' % len(request.body)])


def error_of(data: bytes) -> tuple[int, str, dict[str, str]]:
    [(status, headers, body)] = responses(data)
    return status, json.loads(body)["error"], headers


def test_url_too_long_is_414_and_closes() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, max_url=100)
        protocol.data_received(b"GET /" + b"a" * 60)
        protocol.data_received(b"b" * 60 + b" HTTP/1.1\r\n\r\n")
        await until(lambda: transport.closed)
        status, message, _ = error_of(transport.take())
        assert status == 414 and "URL" in message

    run(main)


def test_huge_header_is_431_before_it_is_all_received() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, max_header_bytes=1000, max_url=100)
        protocol.data_received(b"GET / HTTP/1.1\r\nX-Big: ")
        sent = 0
        while not transport.closed and sent < 100:  # 100 x 4 KiB would be 400 KiB
            protocol.data_received(b"v" * 4096)
            sent += 1
            await asyncio.sleep(0)
        assert sent <= 2
        status, message, _ = error_of(transport.take())
        assert status == 431 and "header" in message

    run(main)


def test_header_block_over_the_limit_is_431() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, max_header_bytes=1000)
        headers = "".join(f"X-H{i}: {'v' * 90}\r\n" for i in range(12))
        protocol.data_received(f"GET / HTTP/1.1\r\n{headers}\r\n".encode())
        await until(lambda: transport.closed)
        assert error_of(transport.take())[0] == 431

    run(main)


def test_too_many_headers_is_431() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, max_headers=10)
        headers = "".join(f"X-H{i}: v\r\n" for i in range(11))
        protocol.data_received(f"GET / HTTP/1.1\r\n{headers}\r\n".encode())
        await until(lambda: transport.closed)
        status, message, _ = error_of(transport.take())
        assert status == 431 and "more than 10 headers" in message

    run(main)


def test_body_over_the_limit_is_400_read_to_its_end_then_closed() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, max_body=1000)
        protocol.data_received(b"POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + b"x" * 2000)
        assert transport.take() == b""
        protocol.data_received(b"x" * 3000)
        await until(lambda: transport.closed)
        status, message, headers = error_of(transport.take())
        assert status == 400 and headers["connection"] == "close"
        assert "exceeds the maximum allowed value of 1000 bytes" in message

    run(main)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_compressed_body_inflates_and_a_bomb_stops_at_the_limit(encoding: str) -> None:
    def pack(data: bytes) -> bytes:
        if encoding == "gzip":
            return gzip.compress(data)
        packer = zlib.compressobj(wbits=-15 if encoding == "raw-deflate" else 15)
        return packer.compress(data) + packer.flush()

    async def main() -> None:
        name = "deflate" if "deflate" in encoding else "gzip"
        protocol, transport = connect(ok, max_body=100_000)
        for body in (pack(b"a" * 50_000), pack(b"\0" * 5_000_000)):
            head = f"POST / HTTP/1.1\r\nContent-Encoding: {name}\r\nContent-Length: {len(body)}"
            protocol.data_received(head.encode() + b"\r\n\r\n" + body)
        (s1, _, b1), (s2, h2, b2) = responses(await written(transport))
        assert (s1, json.loads(b1)) == (200, {"size": 50_000})
        assert s2 == 400 and "decompressed request size" in json.loads(b2)["error"]
        assert "connection" not in h2  # the body was read whole: the connection goes on

    run(main)


def test_inflater_never_holds_more_than_the_limit_and_a_step() -> None:
    bomb = gzip.compress(b"\0" * 20_000_000, 1)
    inflater = Inflater(b"gzip", 1 << 20)
    held = 0
    with pytest.raises(BodyRejected, match="exceeds the maximum allowed value"):
        for start in range(0, len(bomb), 65536):
            held += sum(len(p) for p in inflater.feed(bomb[start : start + 65536]))
    assert held <= 1 << 20 and inflater.size <= (1 << 20) + 1


def test_inflater_rejects_bad_and_truncated_streams() -> None:
    with pytest.raises(BodyRejected, match="unsupported Content-Encoding 'br'"):
        Inflater(b"br", 100)
    with pytest.raises(BodyRejected, match="failed to decompress"):
        Inflater(b"gzip", 100).feed(b"this is not gzip")
    truncated = Inflater(b"gzip", 100)
    truncated.feed(gzip.compress(b"hello")[:-4])
    with pytest.raises(BodyRejected, match="incomplete"):
        truncated.finish()
    members = Inflater(b"gzip", 100)
    assert b"".join(members.feed(gzip.compress(b"ab") + gzip.compress(b"cd"))) == b"abcd"


def test_pipelined_requests_held_are_capped_and_reading_resumes() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def slow(request: HttpRequest) -> HttpResponse:
            await release.wait()
            return HttpResponse(200, [b"{}"])

        protocol, transport = connect(slow, max_pipelined=2)
        protocol.data_received(b"GET /1 HTTP/1.1\r\n\r\n")
        assert not transport.read_paused
        protocol.data_received(b"GET /2 HTTP/1.1\r\n\r\n")
        assert transport.read_paused  # two held: stop reading until one is answered
        release.set()
        await until(lambda: not transport.read_paused)
        await until(lambda: len(responses(bytes(transport.buffer))) == 2)

    run(main)


def test_idle_keep_alive_connection_is_closed() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, keepalive_timeout=0.05)
        protocol.data_received(b"GET / HTTP/1.1\r\n\r\n")
        assert responses(await written(transport))[0][0] == 200
        await until(lambda: transport.closed)
        assert transport.take() == b""  # closed without a word, as idle connections are

    run(main)


def test_busy_connection_is_not_closed_as_idle() -> None:
    async def main() -> None:
        async def slow(request: HttpRequest) -> HttpResponse:
            await asyncio.sleep(0.3)
            return HttpResponse(200, [b"{}"])

        protocol, transport = connect(slow, keepalive_timeout=0.05)
        protocol.data_received(b"GET / HTTP/1.1\r\n\r\n")
        await until(lambda: bool(transport.buffer))
        assert responses(transport.take())[0][0] == 200

    run(main)


def test_slow_headers_time_out_with_408() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, header_timeout=0.05)
        protocol.data_received(b"GET / HTTP/1.1\r\nX-A: 1\r\n")
        await until(lambda: transport.closed)
        status, message, _ = error_of(transport.take())
        assert status == 408 and "headers" in message

    run(main)


def test_content_length_larger_than_the_body_times_out_with_408() -> None:
    async def main() -> None:
        protocol, transport = connect(ok, body_timeout=0.05)
        protocol.data_received(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await until(lambda: transport.closed)
        status, message, _ = error_of(transport.take())
        assert status == 408 and "received 10" in message

    run(main)
