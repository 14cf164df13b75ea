"""One Python-model stub process and the framed socket the server speaks to it over.

The stub runs a model the server does not trust, so its process is watched, not only its
socket: a model that forked keeps the socket open after the stub died. The stub is started
in a process group of its own (the model's children stay in it); the server watches its pid
(``os.pidfd_open`` on the loop) and, when it exits, kills the whole group, reaps the stub
without blocking and reports the death. A socket closed under a live stub kills it too, and
so does a frame the server cannot trust (``ipc.MalformedFrame``, or one whose handling
fails): the model may only hurt itself. Large tensors travel in shared-memory segments the
server copies out of (``shm_tensors``, ``segments``).

A stub of the server's own interpreter is forked from the server's stub zygote (``zygote``,
``stub_zygote``: the stubs share its imported modules); the zygote reports its exit, having
killed its group, and reaps it once the server has the status. A model with an environment
of its own (``EXECUTION_ENV_PATH``), or a server without a zygote, spawns its stub.
"""

from __future__ import annotations

import asyncio
import asyncio.protocols  # noqa: F401  # mypyc's code for the base class below refers to it
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from ...errors import ServerError, internal, unavailable
from . import ipc, shm_tensors, zygote
from .execenv import LAUNCHER, PythonEnv

if TYPE_CHECKING:
    from .bls_host import BlsHost
    from .observer import StubObserver

STUB_MODULE = "tritium.backends.python.stub"
_EXIT_POLL_S = 0.25  # without pidfd: how often an exit is looked for
_SOCKET_GRACE_S = 0.2  # after an exit: how long the frames still in the socket have to arrive

log = logging.getLogger("tritium")


# A regular Python class even when compiled (setup.py): observer.py keeps a WeakSet of these,
# and mypyc's native class with a non-native base does not clear its weak references.
@mypyc_attr(native_class=False)
class StubProcess(asyncio.Protocol):
    """A stub process: started, spoken to, stopped (politely, or killed)."""

    def __init__(self, name: str, env: PythonEnv | None = None) -> None:
        self.name = name
        self.env = env  # EXECUTION_ENV_PATH: run under that environment's interpreter
        self._reader = ipc.FrameReader()
        self._transport: asyncio.Transport | None = None
        self._proc: subprocess.Popen[bytes] | zygote.ZygoteChild | None = None
        self._call_lock = asyncio.Lock()
        self._reply: asyncio.Future[tuple[bool, Any]] | None = None
        self._ready: asyncio.Future[tuple[bool, Any]] | None = None  # IS_READY in flight
        self._exited: asyncio.Future[None] | None = None  # resolved once the stub is reaped
        self._pidfd: int | None = None
        self._connected = False
        self._gone = False  # the death is handled (reported if it was one)
        self.cause: str | None = None  # why the server killed it (a malformed frame)
        # Set by the PythonInstance it serves, before it sends any execution: an EXEC_DONE
        # entry, a RESPONSE (a decoupled model's, or a sender's), and a death the server
        # did not cause (the exit status).
        self.on_batch_done: Callable[[ipc.ExecDone, ipc.Buffers], None] | None = None
        self.on_response: Callable[[ipc.ResponseFrame, ipc.Buffers], None] | None = None
        self.on_death: Callable[[str], None] | None = None
        self.observer: StubObserver | None = None  # the model's logs and metrics
        self.bls: BlsHost | None = None  # the model's BLS requests (from its start)
        self.segments: shm_tensors.SegmentPool | None = None  # the pair's, from the start
        self.inputs: shm_tensors.InputSegments | None = None  # large inputs lent to the stub
        self.alive = False
        # Whether readiness is the model's to say (its is_ready(), INIT's reply): else the
        # stub is ready while it is alive and is not asked.
        self.asks_ready = True

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    async def start(self) -> None:
        """Start the stub (forked from the zygote, or spawned); its command line names the
        server (so it dies with it) and the instance (so an operator can tell the stubs
        apart in ``ps``)."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        token = shm_tensors.server_token()  # in the names of the pair's segments
        try:
            if self.env is None:  # forked from the server's zygote where it can
                self._proc = await self._fork(child, token)
            if self._proc is None:
                self._proc = self._spawn(child, token)
        except OSError as exc:
            parent.close()
            raise unavailable(f"stub process '{self.name}' does not start: {exc}") from None
        except asyncio.CancelledError:  # while the zygote forked it (which then kills it)
            parent.close()
            raise
        finally:
            child.close()
        names = shm_tensors.SegmentNames(os.getpid(), self._proc.pid, token)
        self.segments = shm_tensors.SegmentPool(names, peer_trusted=False)
        self.inputs = shm_tensors.InputSegments(names)
        loop = asyncio.get_running_loop()
        self._exited = loop.create_future()
        self._watch_exit(loop)
        await loop.create_unix_connection(lambda: self, sock=parent)
        if self._proc.returncode is not None:
            raise unavailable(self._unhealthy())
        self.alive = True

    async def _fork(self, child: socket.socket, token: str) -> zygote.ZygoteChild | None:
        forker = zygote.for_loop(asyncio.get_running_loop())
        return None if forker is None else await forker.spawn(child, self.name, token)

    def _spawn(self, child: socket.socket, token: str) -> subprocess.Popen[bytes]:
        """A stub of its own interpreter (a model's environment, or no zygote)."""
        args = [str(child.fileno()), str(os.getpid()), self.name, token]
        if self.env is None:
            command = [sys.executable, str(LAUNCHER), STUB_MODULE, *args]
            environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
        else:
            command, environ = self.env.command(args), self.env.environ()
        return subprocess.Popen(command, pass_fds=(child.fileno(),), env=environ, process_group=0)

    # the process --------------------------------------------------------------------------
    def _watch_exit(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._proc is not None
        if isinstance(self._proc, zygote.ZygoteChild):  # the zygote reports its exit
            self._proc.on_exit = self._on_exit
            if self._proc.returncode is not None:
                loop.call_soon(self._on_exit)
            return
        try:
            self._pidfd = os.pidfd_open(self._proc.pid)
            loop.add_reader(self._pidfd, self._on_exit)
        except (AttributeError, OSError):  # no pidfd (not Linux, old kernel): poll
            self._pidfd = None
            loop.call_later(_EXIT_POLL_S, self._poll_exit)

    def _poll_exit(self) -> None:
        assert isinstance(self._proc, subprocess.Popen)
        if self._proc.returncode is not None:
            return
        if _exited(self._proc.pid):
            self._on_exit()
        else:
            asyncio.get_running_loop().call_later(_EXIT_POLL_S, self._poll_exit)

    def _on_exit(self) -> None:
        """The stub exited: kill its group (the model's children) while its pid is still
        ours, reap it, and stop waiting for a socket its children may hold open."""
        assert self._proc is not None
        if self._pidfd is not None:
            asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        self._kill_group()
        self._proc.poll()
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)
        if self._connected and self._transport is not None:
            asyncio.get_running_loop().call_later(_SOCKET_GRACE_S, self._transport.close)
        self._check_gone()

    def _kill_group(self) -> None:
        """SIGKILL the stub and everything in its process group (not once it is reaped:
        its pid could name another process by then)."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        for kill in (os.killpg, os.kill):
            try:
                kill(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _check_gone(self) -> None:
        """Once the stub is reaped and its socket closed: release what it held, and report
        its death if the server did not ask for it."""
        if self._gone or self._connected or self._proc is None or self._proc.returncode is None:
            return
        self._gone = True
        was_alive, self.alive = self.alive, False
        if self.observer is not None:
            self.observer.close()  # the model's metrics leave /metrics with the process
        for pending in (self._reply, self._ready):
            if pending is not None and not pending.done():
                pending.set_result((False, self._unhealthy()))
        self._close_segments()
        if was_alive and self.on_death is not None:
            self.on_death(self.exit_status())

    def _unhealthy(self) -> str:
        """Why a call failed because the stub is gone: Triton's words, then how it ended."""
        return f"Stub process '{self.name}' is not healthy. It exited: {self.exit_status()}."

    def exit_status(self) -> str:
        """How the stub ended (never waits: the loop reaps it when it exits)."""
        if self._proc is None:
            return "not started"
        code = self._proc.returncode
        if code is None:
            return "still running"
        if self.cause is not None:
            return f"killed: {self.cause}"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def _close_segments(self) -> None:
        if self.inputs is not None:
            self.inputs.close()
        if self.segments is None:
            return
        self.segments.close()
        removed = self.segments.names.sweep()
        if removed:
            log.info("removed %d shared-memory segment(s) of stub '%s'", removed, self.name)

    # asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._connected = True

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        for kind, body, buffers in reader.feed(data):
            try:
                self._handle(kind, body, buffers)
            except Exception as exc:  # a frame of the right shape with the wrong contents
                log.debug("stub '%s': frame %d failed", self.name, kind, exc_info=True)
                self.malformed(f"its frame of kind {kind} could not be used: {exc!r}")
                return
        if reader.error is not None:
            self.malformed(reader.error)
        elif self.segments is not None and self.alive:
            returned = self.segments.take_returned()
            if returned:  # the stub's large outputs, copied: its segments to reuse
                self.send(ipc.RELEASED, returned)

    def _handle(self, kind: int, body: Any, buffers: ipc.Buffers) -> None:
        if kind in (ipc.EXEC_DONE, ipc.RESPONSE) and self.on_batch_done is None:
            raise ValueError("no execution was sent to it")  # no instance attached yet
        if kind == ipc.EXEC_DONE:
            assert self.on_batch_done is not None
            for entry in body:
                self.on_batch_done(entry, buffers)
        elif kind == ipc.RESPONSE:
            assert self.on_response is not None  # attached with on_batch_done
            self.on_response(body, buffers)
        elif kind == ipc.REPLY and self._reply is not None and not self._reply.done():
            ok, value = body
            self._reply.set_result((bool(ok), value))
        elif kind == ipc.READY_REPLY and self._ready is not None and not self._ready.done():
            ok, value = body
            self._ready.set_result((bool(ok), value))
        elif kind in (ipc.OBSERVE, ipc.CALL):
            self._observed(kind, body)
        elif kind == ipc.INPUTS_FREE and self.inputs is not None:
            self.inputs.free(body)
        elif ipc.BLS_REQUEST <= kind <= ipc.BLS_CONTROL and self.bls is not None:
            self.bls.on_frame(kind, body, buffers)

    def malformed(self, reason: str) -> None:
        """The stub sent what no stub sends: it is killed, its death reported (the requests
        it held fail with ``cause``) and, by its instance, restarted."""
        if self.cause is not None or self._gone:
            return
        self.cause = f"it sent a malformed frame ({reason})"
        log.error("stub process '%s' %s; killing it", self.name, self.cause)
        self._kill_group()
        if self._transport is not None:
            self._transport.close()

    def _observed(self, kind: int, body: Any) -> None:
        if self.observer is None:  # nobody to tell: logs and updates go nowhere
            if kind == ipc.CALL:
                self.send(ipc.CALL_REPLY, (body[0], False, "no observer for this stub"))
        elif kind == ipc.OBSERVE:
            self.observer.observe(body)
        else:
            self.send(ipc.CALL_REPLY, self.observer.call(body))

    def connection_lost(self, exc: Exception | None) -> None:
        self._connected = False
        if self.alive and self._proc is not None and self._proc.returncode is None:
            self._kill_group()  # a stub without its socket is of no use (a stop waits)
        self._check_gone()

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

    async def ready(self, timeout: float) -> bool:
        """The model's ``is_ready()`` (IS_READY → READY_REPLY), as Triton asks it: one at a
        time, a check while one is in flight waits for that one's answer; ``TimeoutError``
        past ``timeout`` (an answer that comes later serves the next check), ``ServerError``
        if it raised or the stub is gone."""
        if not self.alive:
            raise unavailable(f"Stub process '{self.name}' is not healthy.")
        pending = self._ready
        if pending is None or pending.done():
            pending = self._ready = asyncio.get_running_loop().create_future()
            self.send(ipc.IS_READY, None)
        ok, value = await asyncio.wait_for(asyncio.shield(pending), timeout)
        if not ok:
            raise internal(str(value))
        return bool(value)

    def kill(self) -> None:
        """SIGKILL the stub (and its group) now; the server is done with it (no death is
        reported)."""
        self.alive = False
        self._kill_group()

    async def stop(self, timeout: float = 5.0) -> None:
        """Finalize the model and let the stub exit; kill it if that takes over ``timeout``.
        The model's own children go with it (its process group)."""
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
        # The stub exits by itself once finalize returned and the socket closed.
        if self._exited is not None and not await _within(self._exited, timeout):
            self._kill_group()
            await self._exited
        if self.bls is not None:
            self.bls.close()  # its children cancelled
        self._close_segments()


async def _within(exited: asyncio.Future[None], timeout: float) -> bool:
    """Whether the stub exits within ``timeout`` (no await inside ``except``: see
    frontends/http/cycle.py:RequestCycle._stream, mypyc and sys.exc_info)."""
    try:
        await asyncio.wait_for(asyncio.shield(exited), timeout)
    except TimeoutError:
        return False
    return True


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (``waitid`` with WNOWAIT)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None
