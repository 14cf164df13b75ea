"""HTTP/1.1 requests out of a byte stream, under their size bounds (httptools parses).

``RequestReader.feed`` takes bytes; each request, once whole, goes to the ``ReaderEvents``
handler as ``on_request`` (method, target, headers, body, keep-alive). Bounds: the request
target (414), the header block and the header count (431), the body before and after
``Content-Encoding`` inflation (400). A body refused is read to its end and dropped, and
``on_refused`` comes in its request's place, so the answers stay in order; anything that
makes the byte stream untrustworthy (a malformed request, a bound on the head, an upgrade)
is ``on_fail`` and nothing more is read. ``state`` says what is being read, for the
front-end's clocks.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import httptools

from .inflate import BodyRejected, Inflater, too_large

IDLE: Final = 0  # what the parser is reading
HEAD: Final = 1
BODY: Final = 2
_GATHER_AFTER: Final = 16  # body pieces kept as they are; past that, gathered as they arrive


class ReaderEvents(Protocol):
    def on_begin(self) -> None:
        """A request's first byte arrived."""

    def on_request(
        self,
        method: str,
        target: str,
        headers: dict[bytes, bytes],
        body: bytes | bytearray,
        keep_alive: bool,
    ) -> None: ...

    def on_refused(self, reason: BodyRejected, keep_alive: bool) -> None:
        """A request whose body was refused (answer 400 with ``reason.message``)."""

    def on_fail(self, status: int, message: str) -> None:
        """The byte stream cannot be trusted past this point: answer ``status`` and close."""


class _Gone:
    """The events of a reader whose connection closed: none arrive."""

    def on_begin(self) -> None:
        pass

    def on_request(self, *args: Any) -> None:
        pass

    def on_refused(self, reason: BodyRejected, keep_alive: bool) -> None:
        pass

    def on_fail(self, status: int, message: str) -> None:
        pass


_GONE: ReaderEvents = _Gone()


class RequestReader:
    """``max_body``: body bytes, before and after decompression; ``max_header_bytes``: the
    names and values of the headers; ``max_url``: the request target; ``max_headers``: the
    header lines."""

    __slots__ = (
        "_events", "_parser", "_max_body", "_max_head", "_max_url", "_max_headers", "state",
        "failed", "messages", "_url", "_headers", "_head_size", "_header_lines", "_body",
        "size", "_inflater", "_rejected",
    )  # fmt: skip

    def __init__(
        self, events: ReaderEvents, max_body: int, max_head: int, max_url: int, max_headers: int
    ) -> None:
        self._events = events
        self._parser: Any = httptools.HttpRequestParser(self)
        self._max_body = max_body
        self._max_head = max_head
        self._max_url = max_url
        self._max_headers = max_headers
        self.state = IDLE
        self.failed = False  # the stream is unusable: nothing more is read
        self.messages = 0  # requests begun
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._head_size = 0
        self._header_lines = 0
        self._body: list[bytes | bytearray] = []
        self.size = 0  # body bytes of the request being read
        self._inflater: Inflater | None = None
        self._rejected: BodyRejected | None = None  # why the body being read is refused

    def feed(self, data: bytes) -> None:
        if self.failed:
            return
        before, begun = self.state, self.messages
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(400, "protocol upgrade is not supported")
        except httptools.HttpParserError as exc:
            self.fail(400, f"malformed HTTP request: {str(exc)[:100]}")
        if before == HEAD and begun == self.messages and self.state == HEAD and not self.failed:
            # The whole chunk belongs to one request's headers, which httptools accumulates
            # itself until they end: count it here so a huge header is refused early.
            self._head_size += len(data)
            if self._head_size > self._max_head + self._max_url:
                self.fail(431, "the request header block is too large")

    def fail(self, status: int, message: str) -> None:
        if self.failed:
            return
        self.failed = True
        self.drop()
        self._events.on_fail(status, message)

    def drop(self) -> None:
        """Forget the request being read (and the parser's hold on the handler)."""
        self._url = b""
        self._headers = {}
        self._body = []
        self._inflater = None
        self._rejected = None

    def close(self) -> None:
        """The connection is gone: nothing more is read, and the reader lets go of the
        handler (and httptools of the reader), so their memory is freed at once rather than
        by the cyclic garbage collector."""
        self.failed = True
        self.drop()
        self._parser = None
        self._events = _GONE

    # httptools callbacks ---------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.failed:
            return
        self.messages += 1
        self.state = HEAD
        self._url = b""
        self._headers = {}
        self._head_size = 0
        self._header_lines = 0
        self._body = []
        self.size = 0
        self._events.on_begin()

    def on_url(self, url: bytes) -> None:
        if self.failed:
            return
        self._url += url
        if len(self._url) > self._max_url:
            self._url = b""
            self.fail(414, f"the request URL is longer than {self._max_url} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value
        self._head_size += len(name) + len(value) + 4
        self._header_lines += 1
        if self._head_size > self._max_head:
            self.fail(431, f"the request headers exceed {self._max_head} bytes")

    def on_headers_complete(self) -> None:
        if self.failed:
            return
        self.state = BODY
        if self._header_lines > self._max_headers:
            self.fail(431, f"the request has more than {self._max_headers} headers")
            return
        encoding = self._headers.get(b"content-encoding")
        if encoding is not None:
            encoding = encoding.strip().lower()
            if encoding not in (b"", b"identity"):
                try:
                    self._inflater = Inflater(encoding, self._max_body)
                except BodyRejected as exc:
                    self._rejected = exc

    def on_body(self, body: bytes) -> None:
        if self.failed:
            return
        self.size += len(body)
        if self._rejected is not None:
            return  # read to its end and dropped, so the answer comes in order
        if self.size > self._max_body:
            self._reject(too_large(self.size, self._max_body))
        elif self._inflater is None:
            self._gather(body)
        else:
            try:
                for piece in self._inflater.feed(body):
                    self._gather(piece)
            except BodyRejected as exc:
                self._reject(exc)

    def _gather(self, piece: bytes) -> None:
        """Keep a piece of the body. A body of many pieces is gathered into one bytearray as
        it arrives, so no single join of tens of MiB (with its page faults) stalls the loop
        when the message completes."""
        parts = self._body
        if len(parts) == 1 and type(parts[0]) is bytearray:
            parts[0] += piece
        elif len(parts) >= _GATHER_AFTER:
            gathered = bytearray().join(parts)
            gathered += piece
            parts[:] = [gathered]
        else:
            parts.append(piece)

    def _reject(self, reason: BodyRejected) -> None:
        """Refuse the body being read: drop what was kept, answer 400 once it has ended."""
        self._rejected = reason
        self._body = []
        self._inflater = None

    def on_message_complete(self) -> None:
        if self.failed:
            return
        self.state = IDLE
        parser = self._parser
        keep_alive = parser.should_keep_alive()
        rejected = self._rejected
        if rejected is None and self._inflater is not None:
            try:
                self._inflater.finish()
            except BodyRejected as exc:
                rejected = exc
        if rejected is not None:
            rejected.target = self._url.decode("latin-1")
            self.drop()
            self._events.on_refused(rejected, keep_alive)
            return
        parts = self._body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        headers, target = self._headers, self._url.decode("latin-1")
        self.drop()  # the request holds them now; the reader keeps nothing
        self._events.on_request(parser.get_method().decode(), target, headers, body, keep_alive)
