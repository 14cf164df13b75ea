"""An in-memory socket for tritium's gRPC transport: tests drive a ``GrpcConnection`` with
an h2 client without a network (unit tests of the transport, task-leak checks, the HTTP/2
fuzz target)."""

from __future__ import annotations

from typing import Any


class MemoryTransport:
    """What ``GrpcConnection`` writes, kept in ``out``; the peer is 127.0.0.1:1. Whether the
    connection reads (``reading``, ``pauses``: how often it paused) and whether it closed
    (``closed``) are recorded."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.reading = True
        self.pauses = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.out.append(bytes(data))

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def get_extra_info(self, key: str) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else None

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True
