"""The stub's asyncio event loop, as Triton's Python backend has it: one per stub, running on
a thread of its own, made the first time a coroutine must run (``async def execute``,
``initialize``, ``is_ready`` or ``finalize``).

Coroutines run there two ways (Triton's ``Stub::RunCoroutine``):

- ``run``: the caller waits for the result. A model that is not decoupled has its
  ``async def execute`` awaited this way, so its executions run one after the other.
- ``start``: in the background. A decoupled model's ``async def execute`` answers through
  its response senders, so the stub goes on to the next execution at once and the
  coroutines of several executions run concurrently on the loop (Triton's README, "Async
  Execute"). Triton puts no bound on how many; here at most ``MAX_BACKGROUND`` run at once
  and the next ``start`` waits for one of them to end, so the server queues what comes next
  (its EXECUTE is answered only then) instead of the stub gathering coroutines without end.

While coroutines wait on the loop, the main thread goes back to reading the server's frames;
BLS calls made on the loop read their answers as ``bls_client`` describes. Standard library
only (the stub may run under a model's own interpreter).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # asyncio (and ssl with it) is imported by the first coroutine: a stub
    import asyncio  # of a model without one never pays for it (issue 43, memory at rest)
    import concurrent.futures

MAX_BACKGROUND = 1024


class StubLoop:
    """The stub's one event loop and the background coroutines running on it."""

    def __init__(self, limit: int = MAX_BACKGROUND) -> None:
        self._limit = limit
        self.after_fork()

    def after_fork(self) -> None:
        """No loop yet (and, in a forked child, none of the parent's: its thread is not
        there, and its locks may have been held)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(self._limit)
        self._running: set[concurrent.futures.Future[Any]] = set()  # keeps their tasks alive

    def _get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                import asyncio

                loop = asyncio.new_event_loop()
                asyncio.set_event_loop(loop)  # as Triton: the thread that made it sees it
                thread = threading.Thread(
                    target=loop.run_forever, name="tritium-stub-loop", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Run ``awaitable`` on the loop and wait for its result (or its exception)."""
        loop = self._get()
        import asyncio

        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()

    def start(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` in the background; first wait while ``limit`` of them run."""
        self._slots.acquire()
        loop = self._get()
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        self._running.add(future)
        future.add_done_callback(self._ended)

    def running(self) -> int:
        return len(self._running)

    def _ended(self, future: concurrent.futures.Future[Any]) -> None:
        self._running.discard(future)
        self._slots.release()

    def stop(self, wait_s: float = 1.0) -> None:
        """Stop the loop (the stub is finalizing): what still runs there is abandoned. The loop
        is closed once its thread has stopped, if that takes at most ``wait_s`` (a coroutine
        that blocks the loop keeps it; the process ends anyway)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(wait_s)
        if not thread.is_alive():
            loop.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
