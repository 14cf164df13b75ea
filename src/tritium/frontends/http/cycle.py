"""One request/response exchange on a connection (as uvicorn's ``RequestResponseCycle``).

The cycle runs the route's handler, turns what it returns (or raises) into a response,
writes it whole or as chunks, and tells the connection it is done. It holds the connection
only while it runs; the connection drops it when it is done or lost, so nothing of a closed
connection outlives it."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from ...logs.budget import UNEXPECTED_ERRORS
from .messages import (
    COMPRESS_MIN_BYTES,
    HttpRequest,
    HttpResponse,
    HttpStreamResponse,
    PendingResponse,
    body_length,
    compress,
    error_response,
    response_head,
    stream_head,
)

if TYPE_CHECKING:
    from .protocol import HttpConnection


class RequestCycle:
    __slots__ = ("request", "keep_alive", "_conn", "_task", "_pending", "_ready")

    def __init__(
        self,
        conn: HttpConnection,
        request: HttpRequest | None,
        keep_alive: bool,
        ready: HttpResponse | None = None,
    ) -> None:
        self.request = request
        self.keep_alive = keep_alive
        self._conn: HttpConnection | None = conn
        self._task: asyncio.Future[Any] | None = None
        self._pending: PendingResponse | None = None
        self._ready = ready  # an answer decided by the transport (an error), not by a route

    def start(self) -> None:
        conn = self._conn
        assert conn is not None
        if self._ready is not None or self.request is None:
            self._finish(self._ready or error_response(500, "no request"))
            return
        try:
            result = conn.handler(self.request)
        except Exception as exc:  # the one place a route's error becomes a response
            result = conn.render_error(exc)
        if isinstance(result, HttpResponse):
            self._finish(result)
            return
        if isinstance(result, PendingResponse):  # answered by a callback: no task
            self._pending = result
            result.attach(self._on_pending)
            return
        task = conn.loop.create_task(result)
        self._task = task
        task.add_done_callback(self._on_result)

    def cancel(self) -> None:
        """The client went away: stop the work done for it, and forget the connection."""
        self._conn = None
        if self._task is not None:
            self._task.cancel()
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.cancel()

    def _on_pending(self, result: HttpResponse | Exception) -> None:
        """A ``PendingResponse``'s answer, given from inside whoever answered (a backend's
        frame handler): written here, and never raising there."""
        self._pending = None
        conn = self._conn
        if conn is None:
            return
        try:
            self._finish(result if isinstance(result, HttpResponse) else conn.render_error(result))
        except Exception as exc:
            UNEXPECTED_ERRORS.report("error while writing an HTTP response", exc)

    def _on_result(self, task: asyncio.Future[Any]) -> None:
        self._task = None
        conn = self._conn
        if conn is None:
            return
        try:
            response: Any = task.result()
        except asyncio.CancelledError:
            response = error_response(503, "request cancelled")
        except Exception as exc:  # the one place a route's error becomes a response
            response = conn.render_error(exc)
        if isinstance(response, HttpStreamResponse):
            pump = asyncio.ensure_future(self._stream(response))
            self._task = pump
            pump.add_done_callback(self._on_streamed)
            return
        self._finish(response)

    def _on_streamed(self, task: asyncio.Future[Any]) -> None:
        self._task = None
        failed = None if task.cancelled() else task.exception()
        if failed is not None:
            UNEXPECTED_ERRORS.report("error while streaming an HTTP response", failed)
            self.keep_alive = False  # the chunked body is cut short: the client must see it
        self._done()

    def _finish(self, response: HttpResponse) -> None:
        self._send(response)
        self._done()

    def _done(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.cycle_done(self)

    def _send(self, response: HttpResponse) -> None:
        conn = self._conn
        if conn is None:
            if response.on_sent is not None:
                response.on_sent(0, 0)
            return
        parts = response.body
        headers = response.headers
        length = body_length(parts)
        if response.compressible and length >= COMPRESS_MIN_BYTES and self.request is not None:
            accept = self.request.headers.get(b"accept-encoding")
            packed = compress(parts, accept) if accept else None
            if packed is not None:
                parts = [packed[0]]
                length = len(packed[0])
                headers = [*headers, (b"Content-Encoding", packed[1])]
        if conn.cors is not None:
            headers = [*headers, *self._origin_headers(conn)]
        head = response_head(response, headers, length, self.keep_alive)
        if response.on_sent is None:
            conn.write_soon([head, *parts], len(head) + length)
            return
        started = time.perf_counter_ns()
        conn.write([head, *parts])
        response.on_sent(started, time.perf_counter_ns())

    def _origin_headers(self, conn: HttpConnection) -> list[tuple[bytes, bytes]]:
        """CORS's headers for the request's Origin (cors.py), on every answer the API gives
        while CORS is on; none on the transport's own errors (no request was read whole)."""
        if conn.cors is None or self.request is None:
            return []
        return conn.cors.response_headers(self.request.headers.get(b"origin"))

    async def _stream(self, response: HttpStreamResponse) -> None:
        """Write a response chunk by chunk, waiting whenever the client reads slowly."""
        conn = self._conn
        if conn is None:
            return
        flow = conn.flow
        conn.write([stream_head(response, self.keep_alive, self._origin_headers(conn))])
        # Closed after the loop, however it ends, but not awaited inside an except/finally:
        # under mypyc a coroutine that awaits while handling an exception leaves that
        # exception as the thread's current one (sys.exc_info) for whatever runs next.
        failed: BaseException | None = None
        try:
            async for chunk in response.chunks:
                if self._conn is None:
                    break
                conn.write([b"%x\r\n%s\r\n" % (len(chunk), chunk)])
                await flow.drain()
        except BaseException as exc:  # raised again once the chunks are closed
            failed = exc
        aclose = getattr(response.chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        if failed is not None:
            raise failed
        if self._conn is not None:
            conn.write([b"0\r\n\r\n"])
