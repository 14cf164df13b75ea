"""HPACK (RFC 7541) for a server whose calls repeat the same headers.

- ``HeaderDecoder`` (requests): ``hpack``'s decoder through its public API (``Decoder``,
  ``decode``, ``max_header_list_size``, its exceptions), with a cache: a block made only of
  representations that leave the dynamic table alone (indexed fields, literals without
  indexing or never indexed) decodes the same as long as the table has not changed, and the
  table changes only by a block that has other representations; so such blocks are
  remembered until a block that may change the table is decoded. The ~9 headers a gRPC client
  sends again on each call are decoded once, not per call.
- ``HeaderEncoder`` (responses): tritium's own encoder. Every header is a static-table
  index or a literal never added to the dynamic table, so its encoding never changes and is
  cached; the peer's table is never used. A change of the peer's SETTINGS_HEADER_TABLE_SIZE
  is answered by a dynamic table size update to 0 at the start of the next block (§4.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hpack import Decoder, HPACKError, OversizedHeaderListError

Header = tuple[bytes, bytes]
Headers = Sequence[Header]

_CACHE_LIMIT = 512  # distinct (name, value) pairs remembered by the encoder
_BLOCKS_LIMIT = 64  # header blocks remembered by the decoder
_BLOCK_BYTES = 1024  # only blocks this small are remembered (indexed references are tiny)

# RFC 7541 Appendix A: the static table, index 1 up.
_STATIC: tuple[tuple[bytes, bytes], ...] = tuple(
    (name.encode(), value.encode())
    for name, value in [
        (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
        (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"),
        (":status", "200"), (":status", "204"), (":status", "206"), (":status", "304"),
        (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
        ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
        ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
        ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
        ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
        ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
        ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""),
        ("host", ""), ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""),
        ("if-range", ""), ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""),
        ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""),
        ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
        ("retry-after", ""), ("server", ""), ("set-cookie", ""),
        ("strict-transport-security", ""), ("transfer-encoding", ""), ("user-agent", ""),
        ("vary", ""), ("via", ""), ("www-authenticate", ""),
    ]
)  # fmt: skip
_FULL = {entry: index for index, entry in reversed(list(enumerate(_STATIC, 1))) if entry[1]}
_NAMES = {name: index for index, (name, _) in reversed(list(enumerate(_STATIC, 1)))}


def integer(value: int, prefix: int, first: int = 0) -> bytes:
    """``value`` as an HPACK integer with a ``prefix``-bit prefix (§5.1), ``first`` holding
    the representation's leading bits."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: bytes) -> bytes:
    return integer(len(value), 7) + value  # not Huffman-coded


def encode_header(name: bytes, value: bytes) -> bytes:
    """One header: a static-table index when it is there whole, else a literal never
    indexed in a dynamic table (0000 pattern: "without indexing")."""
    index = _FULL.get((name, value))
    if index is not None:
        return integer(index, 7, 0x80)
    index = _NAMES.get(name)
    if index is not None:
        return integer(index, 4) + _string(value)
    return b"\x00" + _string(name) + _string(value)


class HeaderEncoder:
    __slots__ = ("_known", "_resize")

    def __init__(self) -> None:
        self._known: dict[Header, bytes] = {}
        self._resize = False  # the next block starts with a table size update

    def table_size_changed(self) -> None:
        """The peer sent SETTINGS_HEADER_TABLE_SIZE."""
        self._resize = True

    def encode(self, headers: Iterable[Header]) -> bytes:
        known = self._known
        parts = []
        if self._resize:
            self._resize = False
            parts.append(b"\x20")  # dynamic table size update: 0 (we use no entries)
        for header in headers:
            encoded = known.get(header)
            if encoded is None:
                encoded = encode_header(header[0], header[1])
                if len(known) >= _CACHE_LIMIT:
                    known.clear()
                known[header] = encoded
            parts.append(encoded)
        return b"".join(parts)


class HeaderError(Exception):
    """A header block that cannot be decoded; ``too_large``: over the header-list bound."""

    def __init__(self, message: str, too_large: bool) -> None:
        super().__init__(message)
        self.too_large = too_large


class HeaderDecoder:
    __slots__ = ("_decoder", "_blocks")

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = Decoder(max_header_list_size=max_header_list_size)
        self._blocks: dict[bytes, tuple[Header, ...]] = {}

    def decode(self, block: bytes) -> tuple[Header, ...]:
        cached = self._blocks.get(block)
        if cached is not None:
            return cached
        try:
            decoded = self._decoder.decode(block, raw=True)
        except OversizedHeaderListError as exc:
            raise HeaderError(str(exc), too_large=True) from None
        except (HPACKError, IndexError, ValueError) as exc:
            raise HeaderError(f"undecodable header block: {exc}", too_large=False) from None
        headers = tuple((bytes(name), bytes(value)) for name, value in decoded)
        if not leaves_table_alone(block):
            self._blocks.clear()  # the table may have changed: what is cached may not hold
        elif len(block) <= _BLOCK_BYTES:
            if len(self._blocks) >= _BLOCKS_LIMIT:
                self._blocks.clear()
            self._blocks[block] = headers
        return headers


def _skip_integer(block: bytes, pos: int, prefix: int) -> int:
    """The position after the HPACK integer at ``pos``."""
    if block[pos] & ((1 << prefix) - 1) != (1 << prefix) - 1:
        return pos + 1
    pos += 1
    while block[pos] & 0x80:
        pos += 1
    return pos + 1


def _integer_at(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    limit = (1 << prefix) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80 or shift > 28:
            return value, pos


def _skip_string(block: bytes, pos: int) -> int:
    length, pos = _integer_at(block, pos, 7)
    return pos + length


def leaves_table_alone(block: bytes) -> bool:
    """True when ``block`` (a block that decoded) holds only indexed fields and literals
    without indexing or never indexed: decoding it changes no dynamic table."""
    pos, end = 0, len(block)
    try:
        while pos < end:
            first = block[pos]
            if first & 0x80:  # indexed field
                pos = _skip_integer(block, pos, 7)
            elif first & 0xE0:  # incremental indexing (01), or a table size update (001)
                return False
            else:  # 0000 or 0001: a literal that is not indexed
                name_index = first & 0x0F
                pos = _skip_integer(block, pos, 4)
                if not name_index:
                    pos = _skip_string(block, pos)
                pos = _skip_string(block, pos)
    except IndexError:
        return False
    return pos == end
