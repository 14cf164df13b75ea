"""An in-memory socket for tritium's gRPC transport: tests drive a ``GrpcConnection`` with
an h2 client without a network (unit tests of the transport, task-leak checks, the HTTP/2
fuzz target)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tritium.frontends.accept import Connections
from tritium.frontends.grpc.errors import status_of
from tritium.frontends.grpc.listener import GrpcNotices, grpc_settings
from tritium.loop_spin import ClientPace
from tritium.options import ServerOptions
from tritium.transport.grpc.dispatch import Dispatcher, Method
from tritium.transport.grpc.endpoint import GrpcEndpoint

# What the unit tests' connections may receive and send, and open at once.
TEST_SETTINGS = {"max_receive": 1 << 24, "max_send": 1 << 24, "max_streams": 100}


def memory_endpoint(methods: dict[str, Method], **settings: Any) -> GrpcEndpoint:
    """A gRPC endpoint with the front-end's settings of default flags (with ``settings``
    over them, ``TEST_SETTINGS`` by default) serving ``methods``, no access guard."""
    chosen = replace(grpc_settings(ServerOptions()), **{**TEST_SETTINGS, **settings})
    dispatch = Dispatcher(methods, chosen.compression, None, status_of)
    pool = Connections()
    return GrpcEndpoint(chosen, dispatch, pool, pool.memory, GrpcNotices(), ClientPace)


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
