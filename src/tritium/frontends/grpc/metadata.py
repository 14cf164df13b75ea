"""Pure helpers of the gRPC wire: deadlines, status-message encoding, message compression
and forwarded metadata (gRPC's PROTOCOL-HTTP2 spec and Triton's flags)."""

from __future__ import annotations

import re
import zlib

_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# The spec's grpc-message alphabet: printable ASCII except '%' stays as it is.
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%")}
# Triton's --grpc-infer-response-compression-level → zlib level (grpc core's low/medium/high).
_LEVELS = {"low": 1, "medium": 6, "high": 9}
ENCODINGS = ("gzip", "deflate")


def parse_timeout(value: str) -> float | None:
    """``grpc-timeout`` in seconds: 1–8 ASCII digits then a unit; None when malformed (the
    caller answers INTERNAL, as grpc does for a header it cannot parse)."""
    if not 2 <= len(value) <= 9 or not value[:-1].isascii() or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


def encode_grpc_message(text: str) -> str:
    """Percent-encodes the UTF-8 bytes of ``text`` outside the spec's plain alphabet."""
    data = text.encode("utf-8", "replace")
    if all(byte in _PLAIN for byte in data):
        return text
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in data)


def decode_grpc_message(value: str) -> str:
    """The inverse of ``encode_grpc_message``; a malformed escape stays as it is."""
    out = bytearray()
    i = 0
    raw = value.encode("latin-1", "replace")
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw) + 0 and _is_hex(raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


def response_compression(level: str, accept_encoding: str | None) -> tuple[str, int] | None:
    """The (algorithm, zlib level) an inference response is sent with: none unless the level
    is set and the client accepts gzip or deflate (gzip first, as grpc core prefers)."""
    zlevel = _LEVELS.get(level)
    if zlevel is None or not accept_encoding:
        return None
    accepted = {item.strip() for item in accept_encoding.split(",")}
    for algorithm in ENCODINGS:
        if algorithm in accepted:
            return algorithm, zlevel
    return None


def compress(data: bytes, algorithm: str, level: int) -> bytes:
    """gzip (RFC 1952) or deflate (zlib stream, RFC 1950, as grpc's "deflate")."""
    wbits = 31 if algorithm == "gzip" else 15
    packer = zlib.compressobj(level, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


class InflateError(Exception):
    """A compressed message that is corrupt (``too_large`` False) or inflates past the bound."""

    def __init__(self, message: str, too_large: bool) -> None:
        super().__init__(message)
        self.too_large = too_large


def inflate(data: bytes | memoryview, algorithm: str, limit: int) -> bytes:
    """The message inflated, never allocating more than ``limit`` + 1 bytes of output."""
    wbits = 31 if algorithm == "gzip" else 15
    unpacker = zlib.decompressobj(wbits)
    try:
        out = unpacker.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InflateError(f"failed to decompress the message: {exc}", False) from None
    if len(out) > limit:
        raise InflateError(
            f"Received message larger than max after decompression ({limit} bytes)", True
        )
    if not unpacker.eof:
        raise InflateError("failed to decompress the message: truncated stream", False)
    return out


def forwarded_parameters(
    pattern: re.Pattern[str] | None, headers: list[tuple[str, str]]
) -> dict[str, str]:
    """Triton's ``--grpc-header-forward-pattern``: metadata whose (lower-case) name matches
    the regex becomes a string parameter of the request; pseudo-headers never do."""
    if pattern is None:
        return {}
    return {
        name: value
        for name, value in headers
        if not name.startswith(":") and pattern.fullmatch(name) is not None
    }
