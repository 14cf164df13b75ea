"""``transport/http1/reader.py:RequestReader`` alone: bytes in, requests and refusals out,
under the size bounds (the HTTP front-end's timers and pipelining are tested with
``HttpProtocol`` in test_http_protocol.py and test_http_connection_limits.py)."""

from __future__ import annotations

import gzip
from typing import Any

from tritium.transport.http1.inflate import BodyRejected
from tritium.transport.http1.reader import BODY, HEAD, IDLE, RequestReader


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def on_begin(self) -> None:
        self.seen.append(("begin",))

    def on_request(self, method: str, target: str, headers: dict[bytes, bytes],
                   body: bytes | bytearray, keep_alive: bool) -> None:  # fmt: skip
        self.seen.append(("request", method, target, dict(headers), bytes(body), keep_alive))

    def on_refused(self, reason: BodyRejected, keep_alive: bool) -> None:
        self.seen.append(("refused", reason.message, keep_alive))

    def on_fail(self, status: int, message: str) -> None:
        self.seen.append(("fail", status, message))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [event for event in self.seen if event[0] == name]


def reader(**bounds: int) -> tuple[RequestReader, Events]:
    events = Events()
    limits = {"max_body": 1000, "max_head": 1000, "max_url": 100, "max_headers": 10, **bounds}
    return RequestReader(events, **limits), events


def post(body: bytes, *headers: bytes, target: bytes = b"/v2/x") -> bytes:
    head = b"POST " + target + b" HTTP/1.1\r\nHost: h\r\n" + b"".join(h + b"\r\n" for h in headers)
    return head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def test_pipelined_requests_split_anywhere_come_whole_and_in_order() -> None:
    wire = post(b"one") + post(b"two", b"Connection: close")
    for step in (1, 5, 17, len(wire)):
        parser, events = reader()
        for at in range(0, len(wire), step):
            parser.feed(wire[at : at + step])
        requests = events.named("request")
        assert [(r[1], r[2], r[4], r[5]) for r in requests] == [
            ("POST", "/v2/x", b"one", True), ("POST", "/v2/x", b"two", False)
        ]  # fmt: skip
        assert requests[0][3][b"host"] == b"h" and parser.state == IDLE


def test_state_follows_what_is_being_read() -> None:
    parser, _ = reader()
    wire = post(b"abcdef")
    parser.feed(wire[:10])
    assert parser.state == HEAD
    parser.feed(wire[10:-3])
    assert parser.state == BODY and parser.size == 3
    parser.feed(wire[-3:])
    assert parser.state == IDLE


def test_head_bounds_fail_the_stream() -> None:
    parser, events = reader()
    parser.feed(post(b"", target=b"/" + b"u" * 200))
    assert events.named("fail")[0][1] == 414 and parser.failed
    parser.feed(post(b"x"))
    assert not events.named("request")  # nothing more is read
    many, events = reader()
    many.feed(post(b"", *[b"X-%d: v" % i for i in range(11)]))
    assert [e[1] for e in events.named("fail")] == [431]
    big, events = reader()
    big.feed(b"POST / HTTP/1.1\r\nX-Big: ")
    big.feed(b"v" * 1200)  # a header still arriving is counted as it comes
    assert [e[1] for e in events.named("fail")] == [431]


def test_a_refused_body_is_read_to_its_end_and_answered_in_its_place() -> None:
    parser, events = reader()
    parser.feed(post(b"x" * 1001) + post(b"after"))
    assert events.named("refused")[0][1].startswith("request size 1001 exceeds")
    assert events.named("request")[0][4] == b"after"
    parser, events = reader()
    parser.feed(post(gzip.compress(b"z" * 5000), b"Content-Encoding: gzip"))
    assert events.named("refused")[0][1].startswith("decompressed request size")
    parser, events = reader()
    parser.feed(post(gzip.compress(b"small"), b"Content-Encoding: gzip"))
    assert events.named("request")[0][4] == b"small"
    parser, events = reader()
    parser.feed(post(b"x", b"Content-Encoding: br"))
    assert "unsupported Content-Encoding" in events.named("refused")[0][1]


def test_malformed_bytes_fail_with_400_and_a_closed_reader_reads_nothing() -> None:
    parser, events = reader()
    parser.feed(b"NOT HTTP AT ALL\r\n\r\n")
    assert events.named("fail")[0][1] == 400
    parser, events = reader()
    parser.close()
    parser.feed(post(b"x"))
    assert events.seen == []
