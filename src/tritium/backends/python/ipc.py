"""Framing between the server and a Python-model stub process.

A frame is ``<u32 payload_len><u32 nbuf><u64 len>*nbuf`` + a pickle-5 payload + the raw
out-of-band buffers (numpy arrays travel as buffers, never pickled in-band), so one frame is
one write and one wake-up, and tensors are not copied into the pickle.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

_HEAD = struct.Struct("<II")
_SMALL = 1 << 16

# server → stub
AUTOCOMPLETE, INIT, EXECUTE, IS_READY, FINALIZE = range(1, 6)
# stub → server
REPLY, EXEC_DONE, RESPONSE = range(10, 13)


def encode(kind: int, body: Any) -> list[bytes | memoryview]:
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps((kind, body), protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    head = _HEAD.pack(len(payload), len(views))
    if views:
        head += struct.pack(f"<{len(views)}Q", *(v.nbytes for v in views))
    return [head, payload, *views]


def decode(payload: bytes | memoryview, buffers: list[bytearray]) -> tuple[int, Any]:
    return pickle.loads(payload, buffers=buffers)


class FrameReader:
    """Incremental parser for the asyncio side: feed bytes, take complete frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, Any]]:
        buf = self._buf
        buf += data
        frames = []
        while True:
            if len(buf) < 8:
                break
            plen, nbuf = _HEAD.unpack_from(buf, 0)
            lens_end = 8 + 8 * nbuf
            if len(buf) < lens_end:
                break
            lens = struct.unpack_from(f"<{nbuf}Q", buf, 8) if nbuf else ()
            total = lens_end + plen + sum(lens)
            if len(buf) < total:
                break
            payload = bytes(buf[lens_end : lens_end + plen])
            pos = lens_end + plen
            buffers = []
            for n in lens:
                buffers.append(bytearray(buf[pos : pos + n]))
                pos += n
            del buf[:total]
            frames.append(decode(payload, buffers))
        return frames


class BlockingChannel:
    """The stub's side: blocking reads and writes of whole frames.

    Reads go through a buffer so a small frame costs one ``recv`` system call."""

    _CHUNK = 1 << 16

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._pos = 0

    def _fill(self, need: int) -> None:
        """Make at least ``need`` unread bytes available in the buffer."""
        buf = self._buf
        if self._pos:
            del buf[: self._pos]
            self._pos = 0
        while len(buf) < need:
            chunk = self._sock.recv(max(self._CHUNK, need - len(buf)))
            if not chunk:
                raise EOFError("server closed the connection")
            buf += chunk

    def _take(self, n: int) -> bytearray:
        if len(self._buf) - self._pos < n:
            self._fill(n)
        start = self._pos
        self._pos = start + n
        return self._buf[start : start + n]

    def recv(self) -> tuple[int, Any]:
        plen, nbuf = _HEAD.unpack(self._take(8))
        lens = struct.unpack(f"<{nbuf}Q", self._take(8 * nbuf)) if nbuf else ()
        payload = self._take(plen)
        buffers = [self._take(n) for n in lens]
        return decode(payload, buffers)

    def send(self, kind: int, body: Any) -> None:
        parts = encode(kind, body)
        if sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts) < _SMALL:
            self._sock.sendall(b"".join(parts))
        else:
            for part in parts:
                self._sock.sendall(part)
