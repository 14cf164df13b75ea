"""Flow control of one HTTP connection, in both directions (as uvicorn's ``FlowControl``).

Reading pauses while the connection holds as many requests as it may (pipelining), so a
client cannot queue unbounded work; writing waits while the transport's buffer is full, so a
client that does not read cannot make the server buffer unbounded responses."""

from __future__ import annotations

import asyncio


class FlowControl:
    __slots__ = ("_transport", "_writable", "read_paused", "writable")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._writable = asyncio.Event()
        self._writable.set()
        self.read_paused = False
        self.writable = True  # the transport's buffer is below its high-water mark

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            if not self._transport.is_closing():
                self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()

    # the transport's own calls (through the protocol's pause_writing/resume_writing)
    def pause_writing(self) -> None:
        self.writable = False
        self._writable.clear()

    def resume_writing(self) -> None:
        self.writable = True
        self._writable.set()

    async def drain(self) -> None:
        """Wait until the client has read enough of what was written."""
        await self._writable.wait()
