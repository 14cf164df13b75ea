"""Request bodies with ``Content-Encoding: gzip`` or ``deflate``, inflated as they arrive.

Inflation stops as soon as the output passes the size limit, so a small "zip bomb" costs at
most the limit plus one step of memory and time, never what it would expand to."""

from __future__ import annotations

import zlib


class BodyRejected(Exception):
    """A request body the server refuses; ``message`` is what the client reads (400).
    ``close``: the client is likely still sending it, so the connection ends after.
    ``too_large``: refused for its size (before or after inflation). ``target``: the
    request's target, set by the reader when it reports the refusal (a door with its own
    error format answers it in that format: the OpenAI API's 413)."""

    def __init__(self, message: str, close: bool = False, too_large: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.close = close
        self.too_large = too_large
        self.target = ""


def too_large(size: int, limit: int, what: str = "request") -> BodyRejected:
    return BodyRejected(
        f"{what} size {size} exceeds the maximum allowed value of {limit} bytes; "
        "use --http-max-input-size to increase the limit",
        close=what == "request",
        too_large=True,
    )


def _zlib_header(head: bytes) -> bool:
    """True when ``head`` starts a zlib stream (RFC 1950), false for raw deflate: HTTP's
    "deflate" is zlib-wrapped, but some clients send the bare stream."""
    return head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0


class Inflater:
    """Inflates one body; ``feed`` returns the output so far, ``finish`` checks the end."""

    __slots__ = ("_encoding", "_limit", "_size", "_inflater", "_pending", "_wbits")

    def __init__(self, encoding: bytes, limit: int) -> None:
        if encoding not in (b"gzip", b"x-gzip", b"deflate"):
            name = encoding.decode(errors="replace")
            raise BodyRejected(f"unsupported Content-Encoding '{name}'")
        self._encoding = encoding
        self._limit = limit
        self._size = 0
        self._wbits = 16 + zlib.MAX_WBITS if encoding != b"deflate" else 0
        self._inflater: zlib._Decompress | None = None
        self._pending = b""  # deflate: bytes held until its two header bytes are known

    def feed(self, data: bytes) -> list[bytes]:
        if self._inflater is None:
            data = self._pending + data
            if not self._wbits:
                if len(data) < 2:
                    self._pending = data
                    return []
                self._wbits = zlib.MAX_WBITS if _zlib_header(data) else -zlib.MAX_WBITS
            self._pending = b""
            self._inflater = zlib.decompressobj(self._wbits)
        out: list[bytes] = []
        try:
            while data:
                data = self._step(data, out)
        except zlib.error as exc:
            raise BodyRejected(f"failed to decompress the request body: {exc}") from None
        return out

    def _step(self, data: bytes, out: list[bytes]) -> bytes:
        """Inflate at most what still fits under the limit (plus one byte, to notice
        passing it); return the input not yet consumed."""
        inflater = self._inflater
        assert inflater is not None
        piece = inflater.decompress(data, self._limit - self._size + 1)
        self._size += len(piece)
        if self._size > self._limit:
            raise too_large(self._size, self._limit, "decompressed request")
        if piece:
            out.append(piece)
        if inflater.eof:
            rest = inflater.unused_data
            if rest and self._wbits > zlib.MAX_WBITS:  # gzip allows several members
                self._inflater = inflater = zlib.decompressobj(self._wbits)
                return rest
            return b""  # anything after the end of a deflate stream is ignored, as zlib does
        return inflater.unconsumed_tail

    def finish(self) -> None:
        """Raise unless the compressed stream ended (a truncated body is an error)."""
        if self._inflater is None and not self._pending:
            return  # an empty body stays empty
        if self._inflater is None or not self._inflater.eof:
            raise BodyRejected(
                "failed to decompress the request body: the compressed data is incomplete"
            )

    @property
    def size(self) -> int:
        return self._size
