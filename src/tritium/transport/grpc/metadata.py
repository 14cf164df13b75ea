"""gRPC metadata and message-compression rules, as pure functions the transport calls.

Each follows the gRPC HTTP/2 protocol (PROTOCOL-HTTP2.md) or, where the protocol leaves a
choice, what grpc core does under Triton, so that clients see what Triton's server shows them:

- ``parse_timeout``: the ``grpc-timeout`` header.
- ``encode_grpc_message``/``decode_grpc_message``: the percent-encoded ``grpc-message``.
- ``response_compression``: Triton's ``--grpc-infer-response-compression-level``.
- ``compress``/``compress_message``/``Inflater``: gzip and deflate message bodies, inflation
  bounded by the max receive size."""

from __future__ import annotations

import re
import zlib
from typing import ClassVar
from urllib.parse import unquote_to_bytes

# ----------------------------------------------------------------------------------------
# grpc-timeout
# ----------------------------------------------------------------------------------------

_TIMEOUT = re.compile(r"([0-9]{1,8})([HMSmun])")
_UNIT_SECONDS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout(value: str) -> float | None:
    """Seconds from a ``grpc-timeout`` value: 1 to 8 ASCII digits and one unit of H, M, S, m,
    u, n (hours … nanoseconds), nothing else around them; None when it is not that.

    None means a malformed header, not "no deadline": the caller answers the call with status
    INTERNAL ("malformed grpc-timeout …"), as grpc-go and current grpc core do, and does not
    run it. "0S" is a valid, already expired deadline (DEADLINE_EXCEEDED)."""
    match = _TIMEOUT.fullmatch(value)
    if match is None:
        return None
    return int(match[1]) * _UNIT_SECONDS[match[2]]


# ----------------------------------------------------------------------------------------
# grpc-message
# ----------------------------------------------------------------------------------------

_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%")}


def encode_grpc_message(text: str, max_bytes: int | None = None) -> str:
    """``grpc-message``: the UTF-8 bytes of ``text``, each byte outside 0x20–0x7E and ``%``
    itself written as ``%XX`` (the gRPC HTTP/2 spec).

    ``max_bytes`` (optional) cuts the encoded value at that length without splitting an escape:
    clients refuse trailers past their max header list size (grpc's default is 8 KiB), which
    would hide the error behind a protocol failure."""
    if text.isascii() and text.isprintable() and "%" not in text:
        encoded = text  # the common case: nothing to escape
    else:
        raw = text.encode("utf-8", "surrogatepass")
        encoded = "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in raw)
    if max_bytes is not None and len(encoded) > max_bytes:
        cut = max(max_bytes, 0)
        while cut > 0 and "%" in encoded[max(cut - 2, 0) : cut]:
            cut -= 1  # the cut fell inside an escape: back off to its start
        encoded = encoded[:cut]
    return encoded


def decode_grpc_message(value: str) -> str:
    """The text of a ``grpc-message``. As the spec asks, a malformed escape is kept as it is
    rather than failing or dropping the message, and bytes that are not UTF-8 become U+FFFD."""
    return unquote_to_bytes(value).decode("utf-8", "replace")


# ----------------------------------------------------------------------------------------
# Compression: --grpc-infer-response-compression-level, grpc-encoding, grpc-accept-encoding
# ----------------------------------------------------------------------------------------

ENCODINGS = ("identity", "deflate", "gzip")  # what tritium reads and writes
ACCEPT_ENCODING = ",".join(ENCODINGS)  # our grpc-accept-encoding header value
LEVELS = ("none", "low", "medium", "high")
_WBITS = {"deflate": zlib.MAX_WBITS, "gzip": zlib.MAX_WBITS | 16}  # zlib and gzip wrappers


def accepted_encodings(accept_encoding: str | None) -> frozenset[str]:
    """The names in a ``grpc-accept-encoding`` value (comma-separated, spaces ignored);
    ``identity`` is always accepted. An absent header accepts only identity (grpc core)."""
    if not accept_encoding:
        return frozenset({"identity"})
    names = (item.strip().lower() for item in accept_encoding.split(","))
    return frozenset({"identity", *(name for name in names if name)})


def response_compression(level: str, accept_encoding: str | None) -> tuple[str, int] | None:
    """(algorithm, zlib level) for an inference response, or None to send it uncompressed.

    grpc core (``CompressionAlgorithmForLevel``) ranks the peer's accepted algorithms among
    gzip then deflate and takes the first for ``low``, the middle one for ``medium`` and the
    last for ``high``; with none accepted it does not compress. The level only picks the
    algorithm: grpc deflates at zlib's default level whatever it is, and so do we."""
    if level not in LEVELS:
        raise ValueError(f"unknown compression level {level!r}, expected one of {LEVELS}")
    if level == "none":
        return None
    accepted = accepted_encodings(accept_encoding)
    ranked = [name for name in ("gzip", "deflate") if name in accepted]
    if not ranked:
        return None
    index = {"low": 0, "medium": len(ranked) // 2, "high": len(ranked) - 1}[level]
    return ranked[index], zlib.Z_DEFAULT_COMPRESSION


def _wbits(algorithm: str) -> int:
    try:
        return _WBITS[algorithm]
    except KeyError:
        raise ValueError(f"unsupported compression algorithm {algorithm!r}") from None


def compress(data: bytes | memoryview, algorithm: str, level: int) -> bytes:
    """``data`` as one gzip or deflate (zlib-wrapped, as HTTP and grpc mean it) stream."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, _wbits(algorithm))
    return compressor.compress(data) + compressor.flush()


def compress_message(data: bytes | memoryview, algorithm: str, level: int) -> bytes | None:
    """The compressed message, or None when it is not smaller: grpc then sends the message
    as it is, with the compressed flag 0, under the same ``grpc-encoding``."""
    packed = compress(data, algorithm, level)
    return packed if len(packed) < len(data) else None


class InflateError(ValueError):
    """A compressed message that is not a whole, valid gzip/deflate stream (grpc: INTERNAL);
    ``too_large`` tells the subclass MessageTooLarge apart (grpc: RESOURCE_EXHAUSTED)."""

    too_large: ClassVar[bool] = False  # ClassVar: a class attribute under mypyc too


class MessageTooLarge(InflateError):
    """Inflating would pass the max receive size (grpc: RESOURCE_EXHAUSTED, "Received message
    larger than max (N vs. MAX)"); ``size`` is how far inflation got, at most max + 1."""

    too_large: ClassVar[bool] = True

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Received message larger than max ({size} vs. {limit})")
        self.size = size
        self.limit = limit


class Inflater:
    """Inflates the compressed messages of one call (``grpc-encoding`` gzip or deflate), each
    bounded by ``max_size`` bytes: zlib stops at ``max_size + 1`` bytes of output, so a small
    "zip bomb" costs at most that much memory and time before it is refused."""

    __slots__ = ("_limit", "_wbits", "algorithm")

    def __init__(self, algorithm: str, max_size: int) -> None:
        if max_size < 0:
            raise ValueError("max_size must be >= 0")
        self._wbits = _wbits(algorithm)
        self._limit = max_size
        self.algorithm = algorithm

    def inflate(self, data: bytes | memoryview) -> bytes:
        """One message's bytes. Raises MessageTooLarge past the bound, InflateError when the
        stream is corrupt, truncated, or followed by anything (grpc core refuses all three)."""
        inflater = zlib.decompressobj(self._wbits)
        try:
            out = inflater.decompress(data, self._limit + 1)
        except zlib.error as exc:
            raise InflateError(f"invalid {self.algorithm} data: {exc}") from None
        if len(out) > self._limit:
            raise MessageTooLarge(len(out), self._limit)
        if not inflater.eof:
            raise InflateError(f"truncated {self.algorithm} data")
        if inflater.unused_data:
            raise InflateError(f"data after the end of the {self.algorithm} stream")
        return out


def inflate(data: bytes | memoryview, algorithm: str, limit: int) -> bytes:
    """One message inflated under ``limit`` bytes: ``Inflater(algorithm, limit).inflate``."""
    return Inflater(algorithm, limit).inflate(data)
