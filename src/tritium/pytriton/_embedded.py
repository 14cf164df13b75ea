"""tritium's server on an event loop of its own thread, in the caller's process: what
``Triton`` starts. The same pieces as ``tritium serve`` (runtime.py) without its signal
handlers (the process is the caller's), stopped by ``stop``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..access.policy import build_access
from ..frontends.grpc.listener import ssl_context
from ..frontends.http.listener import https_context
from ..options import ServerOptions
from ..runtime import _serve, _shutdown, bind_all
from ..server import InferenceServer
from ..tritonserver._loop import new_loop

T = TypeVar("T")
_START_S = 120.0  # PyTriton's DEFAULT_TRITON_STARTUP_TIMEOUT_S


class EmbeddedServer:
    """One started server: ``ports`` (name -> bound port), ``call`` runs a coroutine on its
    loop and waits for it."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.ports: dict[str, int] = {}
        self.server: InferenceServer | None = None
        self._loop = new_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="tritium-pytriton", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()
        self._started.wait(_START_S)
        if self._error is not None:
            raise self._error
        if not self._started.is_set():
            raise TimeoutError("tritium did not start in time")

    def alive(self) -> bool:
        return self._thread.is_alive() and self._started.is_set() and self._error is None

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(), which re-raises it
            self._error = exc
            self._started.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        options = self.options
        self._stop = asyncio.Event()
        contexts = (https_context(options), ssl_context(options))  # bad files: fail now
        access = build_access(options.access, None)
        server = self.server = InferenceServer(options)
        try:
            bound = await bind_all(options)
        except BaseException:
            await server.stop()
            access.close()
            raise
        await server.start()
        listeners, grpc_server, self.ports = await _serve(server, options, contexts, access, bound)
        self._started.set()
        await self._stop.wait()
        await _shutdown(server, listeners, grpc_server, access)
