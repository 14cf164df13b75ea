"""A fake transport for socket-free tests of the HTTP connection protocol (as uvicorn's tests
drive its protocols), and a parser of what the server wrote."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tritium.frontends.http.limits import HttpLimits
from tritium.frontends.http.protocol import HttpProtocol


class FakeTransport(asyncio.Transport):
    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol: asyncio.Protocol | None = protocol
        self.buffer = bytearray()
        self.closed = False
        self.read_paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.1.2.3", 4567) if name == "peername" else default

    def write(self, data: Any) -> None:
        assert not self.closed, "write after close"
        self.buffer += data

    def writelines(self, parts: Any) -> None:
        for part in parts:
            self.write(part)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self._lost)

    def _lost(self) -> None:
        self.lose(None)

    def lose(self, exc: Exception | None = None) -> None:
        """The connection ends: tell the protocol and drop it, as asyncio's and uvloop's
        transports do."""
        self.closed = True
        protocol, self.protocol = self.protocol, None
        if protocol is not None:
            protocol.connection_lost(exc)

    def pause_reading(self) -> None:
        self.read_paused = True

    def resume_reading(self) -> None:
        self.read_paused = False

    def take(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


def connect(handler: Callable[..., Any], **limits: Any) -> tuple[HttpProtocol, FakeTransport]:
    render = limits.pop("render_error", None)
    protocol = HttpProtocol(handler, HttpLimits(**limits), *([render] if render else []))
    transport = FakeTransport(protocol)
    protocol.connection_made(transport)
    return protocol, transport


def responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """(status, headers, body) of each response in ``data`` (Content-Length or chunked)."""
    found = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, data = data.partition(b"\r\n")
                size = int(size_line, 16)
                body += data[:size]
                data = data[size + 2 :]
                if size == 0:
                    break
        else:
            length = int(headers["content-length"])
            body, data = data[:length], data[length:]
        found.append((status, headers, body))
    return found


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the loop run until ``condition`` holds (generous bound; no timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def written(transport: FakeTransport) -> bytes:
    """What the connection wrote by the end of this turn of the loop (an answer waits for
    it: HttpConnection.write_soon)."""
    await asyncio.sleep(0)
    return transport.take()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]
