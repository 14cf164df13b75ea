"""An in-memory socket for tritium's gRPC transport: tests drive a ``GrpcConnection`` with
an h2 client without a network (unit tests of the transport, task-leak checks)."""

from __future__ import annotations

from typing import Any


class MemoryTransport:
    """What ``GrpcConnection`` writes, kept in ``out``; the peer is 127.0.0.1:1."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def get_extra_info(self, key: str) -> Any:
        return ("127.0.0.1", 1) if key == "peername" else None

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass
