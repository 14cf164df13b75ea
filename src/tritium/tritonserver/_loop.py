"""The server's event loop on a thread of its own (``ServerLoop``), and the hand-offs between
it and the caller's threads or event loops.

Every object of the server (the repository, the inference call, the front-ends) lives on this
loop and is touched only from it. A caller never runs on it: a plain thread waits for a
coroutine's result (``call``), an inference is started there by ``call_soon_threadsafe``, and
responses come back through a ``ThreadSink`` (a thread-safe queue) or an ``AsyncSink`` (the
caller's own loop woken with ``call_soon_threadsafe``, once per wait). Nothing the caller
does (converting tensors, iterating responses) runs on the server's loop."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from ._errors import UnavailableError, UnsupportedError

T = TypeVar("T")
Item = TypeVar("Item")


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop for a server run on a thread of its own (the in-process API's,
    tritium.pytriton's): uvloop's where it is installed, as ``tritium serve`` runs."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class ServerLoop:
    """An event loop running on a daemon thread until ``close``."""

    def __init__(self) -> None:
        self.loop = new_loop()
        # Set once ``close`` began: nothing more is scheduled, so that everything scheduled
        # runs before the loop stops (a caller never waits for a callback that cannot run).
        self._closing = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tritium-server", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())

    def on_loop(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the server's loop and wait for its result in this thread."""
        if self.on_loop():
            work.close()
            raise UnsupportedError(
                "a blocking in-process API call from the server's own event loop thread would "
                "deadlock: call it from another thread, or use async_infer"
            )
        with self._lock:
            if self._closing:
                work.close()
                raise UnavailableError("the in-process server is stopping")
            future = asyncio.run_coroutine_threadsafe(work, self.loop)
        return future.result(timeout)

    def soon(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop; UnavailableError once the server stops."""
        with self._lock:
            if self._closing:
                raise UnavailableError("the in-process server is stopping")
            self.loop.call_soon_threadsafe(callback, *args)

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.on_loop():
            self._thread.join()
            self.loop.close()


class ThreadSink(Generic[Item]):
    """Items put on the server's loop, taken by a plain thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()

    def put(self, item: Item) -> None:
        self._queue.put(item)

    def get(self, timeout: float | None = None) -> Item:
        return self._queue.get(timeout=timeout)


class AsyncSink(Generic[Item]):
    """Items put on the server's loop, awaited on the caller's loop: the waiting coroutine's
    future is resolved on its own loop (``call_soon_threadsafe``), once per wait however many
    items arrive meanwhile."""

    def __init__(self) -> None:
        self._items: deque[Item] = deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Item) -> None:
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            try:
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # the caller's loop is closed: nobody waits any more
                pass

    async def get(self) -> Item:
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                waiter = asyncio.get_running_loop().create_future()
                self._waiter = waiter
            try:
                await waiter
            finally:
                with self._lock:
                    if self._waiter is waiter:
                        self._waiter = None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
