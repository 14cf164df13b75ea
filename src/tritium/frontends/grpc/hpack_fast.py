"""HPACK for a server whose calls repeat the same headers: hpack's own coder, with caches.

- ``LiteralEncoder`` (responses): every header a literal never added to the dynamic table
  (or a static-table index), so a header's encoding never changes and is cached. The few
  headers a gRPC server sends (``:status 200``, ``content-type``, ``grpc-status``...) repeat
  on every call; hpack's stateful encoder searches and updates its table for each one (~15 µs
  a response). Literals cost a few bytes per response and leave the peer's table untouched.
  Table size changes the peer asks for are still signalled.
- ``CachingDecoder`` (requests): a client that sends the same headers again sends the same
  block of indexed references, which decode the same as long as the dynamic table has not
  changed; such blocks are remembered per table generation (any insertion or resize starts a
  new one), so the ~9 headers of a gRPC call are decoded once, not per call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hpack import Decoder, Encoder
from hpack.hpack import INDEX_NONE
from hpack.table import HeaderTable

_CACHE_LIMIT = 512  # distinct (name, value) pairs remembered (error messages vary)
_BLOCKS_LIMIT = 64  # header blocks remembered per table generation
_BLOCK_BYTES = 1024  # only blocks this small are remembered (indexed references are tiny)


class LiteralEncoder(Encoder):
    def __init__(self) -> None:
        super().__init__()
        self._known: dict[tuple[bytes, bytes], bytes] = {}

    def encode(self, headers: Iterable[Any], huffman: bool = True) -> bytes:
        parts = [self._encode_table_size_change()] if self.table_size_changes else []
        known = self._known
        for header in headers:
            key = (bytes(header[0]), bytes(header[1]))
            encoded = known.get(key)
            if encoded is None:
                encoded = self._literal(key[0], key[1], huffman)
                if len(known) >= _CACHE_LIMIT:
                    known.clear()
                known[key] = encoded
            parts.append(encoded)
        return b"".join(parts)

    def _literal(self, name: bytes, value: bytes, huffman: bool) -> bytes:
        match = self.header_table.search(name, value)
        if match is not None and match[2] is not None:
            return bytes(self._encode_indexed(match[0]))  # in the static table
        if match is not None:
            return bytes(self._encode_indexed_literal(match[0], value, INDEX_NONE, huffman))
        return bytes(self._encode_literal(name, value, INDEX_NONE, huffman))


class _CountingTable(HeaderTable):
    """The decoder's dynamic table, counting its insertions."""

    def __init__(self) -> None:
        super().__init__()
        self.insertions = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.insertions += 1
        super().add(name, value)


class CachingDecoder(Decoder):
    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size)
        self._table = _CountingTable()
        self.header_table = self._table
        self._blocks: dict[tuple[bytes, bool], list[Any]] = {}
        self._generation = (0, self._table.maxsize)

    def decode(self, data: bytes, raw: bool = False) -> Any:
        table = self._table
        generation = (table.insertions, table.maxsize)  # a resize may evict entries too
        if generation != self._generation:
            self._blocks.clear()
            self._generation = generation
        key = (bytes(data), raw)
        cached = self._blocks.get(key)
        if cached is not None:
            return list(cached)
        headers = list(super().decode(data, raw))
        replayable = (table.insertions, table.maxsize) == generation  # it changed nothing
        if replayable and len(key[0]) <= _BLOCK_BYTES:
            if len(self._blocks) >= _BLOCKS_LIMIT:
                self._blocks.clear()
            self._blocks[key] = list(headers)
        return headers
