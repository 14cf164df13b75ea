"""One Python-model stub process and the framed socket the server speaks to it over."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from typing import Any

from ...errors import ServerError, internal, unavailable
from . import ipc
from .execenv import PythonEnv

STUB_MODULE = "tritium.backends.python.stub"


class StubProcess(asyncio.Protocol):
    """A stub process: started, spoken to, stopped (politely, or killed)."""

    def __init__(self, name: str, env: PythonEnv | None = None) -> None:
        self.name = name
        self.env = env  # EXECUTION_ENV_PATH: run under that environment's interpreter
        self._reader = ipc.FrameReader()
        self._transport: asyncio.Transport | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._call_lock = asyncio.Lock()
        self._reply: asyncio.Future[tuple[bool, Any]] | None = None
        self.on_batch_done: Any = None  # set by PythonInstance
        self.on_response: Any = None
        self.on_death: Any = None  # (status) -> None, for a death the server did not cause
        self.observer: Any = None  # observer.StubObserver: the model's logs and metrics
        self.bls: Any = None  # bls_host.BlsHost: the model's BLS requests (from its start)
        self.alive = False

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    async def start(self) -> None:
        """Spawn the stub; its command line names the server (so it dies with it) and the
        instance (so an operator can tell the stubs apart in ``ps``)."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            args = [str(child.fileno()), str(os.getpid()), self.name]
            if self.env is None:
                command = [sys.executable, "-m", STUB_MODULE, *args]
                environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
            else:
                command, environ = self.env.command(args), self.env.environ()
            self._proc = subprocess.Popen(command, pass_fds=(child.fileno(),), env=environ)
        except OSError as exc:
            parent.close()
            raise unavailable(f"stub process '{self.name}' does not start: {exc}") from None
        finally:
            child.close()
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self, sock=parent)
        self.alive = True

    # asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for kind, body, buffers in self._reader.feed(data):
            if kind == ipc.EXEC_DONE:
                for entry in body:
                    self.on_batch_done(entry, buffers)
            elif kind == ipc.RESPONSE:
                self.on_response(body, buffers)
            elif kind == ipc.REPLY and self._reply is not None and not self._reply.done():
                self._reply.set_result(body)
            elif kind in (ipc.OBSERVE, ipc.CALL):
                self._observed(kind, body)
            elif ipc.BLS_REQUEST <= kind <= ipc.BLS_CONTROL and self.bls is not None:
                self.bls.on_frame(kind, body, buffers)

    def _observed(self, kind: int, body: Any) -> None:
        if self.observer is None:  # nobody to tell: logs and updates go nowhere
            if kind == ipc.CALL:
                self.send(ipc.CALL_REPLY, (body[0], False, "no observer for this stub"))
        elif kind == ipc.OBSERVE:
            self.observer.observe(body)
        else:
            self.send(ipc.CALL_REPLY, self.observer.call(body))

    def connection_lost(self, exc: Exception | None) -> None:
        was_alive, self.alive = self.alive, False
        if self.observer is not None:
            self.observer.close()  # the model's metrics leave /metrics with the process
        if self._reply is not None and not self._reply.done():
            self._reply.set_result(
                (False, f"stub process '{self.name}' exited: {self.exit_status()}")
            )
        if was_alive and self.on_death is not None:
            self.on_death(self.exit_status())

    def exit_status(self) -> str:
        if self._proc is None:
            return "not started"
        try:
            code = self._proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    # calls -----------------------------------------------------------------------------------
    def send(self, kind: int, body: Any, buffers: ipc.Buffers | None = None) -> None:
        assert self._transport is not None
        parts = ipc.frame(kind, body, buffers)
        if len(parts) == 1:
            self._transport.write(parts[0])
        else:
            self._transport.writelines(parts)

    async def call(self, kind: int, body: Any, timeout: float | None = None) -> Any:
        """A request/reply exchange (autocomplete, init, is_ready, finalize)."""
        async with self._call_lock:
            if not self.alive:
                raise unavailable(f"Stub process '{self.name}' is not healthy.")
            self._reply = asyncio.get_running_loop().create_future()
            self.send(kind, body)
            ok, value = await asyncio.wait_for(self._reply, timeout)
            if not ok:
                raise internal(str(value))
            return value

    def kill(self) -> None:
        """SIGKILL the stub now; the server is done with it (no death is reported)."""
        self.alive = False
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    async def stop(self, timeout: float = 5.0) -> None:
        """Finalize the model and let the stub exit; kill it if that takes over ``timeout``."""
        if self.alive:
            self.alive = False  # a clean exit is not a death
            try:
                async with self._call_lock:
                    self._reply = asyncio.get_running_loop().create_future()
                    self.send(ipc.FINALIZE, None)
                    await asyncio.wait_for(self._reply, timeout)
            except (TimeoutError, ServerError, OSError):
                pass
        if self._transport is not None:
            self._transport.close()
        if self._proc is not None and self._proc.poll() is None:
            try:  # the stub exits by itself once finalize returned and the socket closed
                await asyncio.to_thread(self._proc.wait, timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                await asyncio.to_thread(self._proc.wait)
        if self.bls is not None:
            self.bls.close()  # its children cancelled, its shared-memory segments removed
