"""The server's side of the stub zygote (``stub_zygote``): one per server process, started
with its first stub, that forks the stubs of the models without an environment of their own.

Forked stubs share the zygote's imported modules (numpy, ``pb_utils``, the stub's code)
copy-on-write: a stub at rest costs what its model and its own state add, not a whole
interpreter with numpy (measured with four example models: 22 MiB PSS per stub spawned,
see bench/results/memory.md). ``spawn`` answers None where the zygote cannot serve (not
Linux, it does not start, it died, the stub's command line would not fit): the caller then
spawns the stub itself, as before.

A forked stub is not the server's child: ``ZygoteChild`` stands for it (its pid, its
``returncode`` once the zygote reported it), and its exit is reported through the zygote,
which kills its group before and reaps it only after the server has the status (so the
server never signals a recycled pid). If the zygote dies, its stubs die with it (their
``PR_SET_PDEATHSIG``); the server kills their groups and reports them killed, and the next
stub starts a new zygote.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from typing import Any, Final

log = logging.getLogger("tritium")
ZYGOTE_MODULE: Final = "tritium.backends.python.stub_zygote"
STUB_MODULE: Final = "tritium.backends.python.stub"
# The stub launcher named on a stub's command line (``pgrep -f triton_python_backend_stub``),
# as on a spawned stub's (execenv.LAUNCHER).
LAUNCHER: Final = os.path.join(os.path.dirname(__file__), "triton_python_backend_stub.py")
_REAP_S: Final = 2.0  # how long a zygote killed with its closed loop is waited for
TITLE_ROOM: Final = 1024  # bytes of command line a forked stub can have (``stub_zygote``)
_MAX_MESSAGE: Final = 4096


class ZygoteChild:
    """A stub forked by the zygote, as ``subprocess.Popen`` would show it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.on_exit: Callable[[], None] | None = None  # called once returncode is set

    def poll(self) -> int | None:
        return self.returncode

    def exited(self, returncode: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = returncode
        if self.on_exit is not None:
            self.on_exit()


class StubZygote:
    """One zygote process and the packets exchanged with it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, str(theirs.fileno()), str(os.getpid())]
                + [" " * TITLE_ROOM],
                pass_fds=(theirs.fileno(),),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                process_group=0,
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._control = ours
        self._pending: deque[asyncio.Future[int]] = deque()  # spawns, answered in order
        self._children: dict[int, ZygoteChild] = {}
        self.alive = True
        loop.add_reader(ours.fileno(), self._on_readable)

    async def spawn(self, sock: socket.socket, name: str, token: str) -> ZygoteChild | None:
        """Fork a stub serving ``sock`` (passed to it; the caller closes its copy); None if the
        zygote cannot (the caller spawns it)."""
        title = [sys.executable, LAUNCHER, STUB_MODULE, "0000", str(os.getpid()), name, token]
        if not self.alive or not _fits(title):
            return None
        future: asyncio.Future[int] = self._loop.create_future()
        try:
            self._control.sendmsg(
                [marshal.dumps(("spawn", name, token))],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_bytes(sock.fileno()))],
            )
        except OSError as exc:  # a full pair (never: one small packet per spawn) or gone
            log.warning("stub zygote: spawn request failed (%s); spawning '%s'", exc, name)
            return None
        self._pending.append(future)
        try:
            pid = await future
        except OSError as exc:
            log.warning("stub zygote: %s; spawning '%s'", exc, name)
            return None
        child = ZygoteChild(pid)
        self._children[pid] = child
        return child

    def _on_readable(self) -> None:
        while True:
            try:
                data = self._control.recv(_MAX_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            self._message(marshal.loads(data))

    def _message(self, message: Any) -> None:
        kind = message[0]
        if kind == "exited":
            pid, code = int(message[1]), int(message[2])
            child = self._children.pop(pid, None)
            if child is not None:
                child.exited(code)
            self._send(("reap", pid))  # the status is recorded: the pid may go
        elif kind in ("spawned", "failed") and self._pending:
            future = self._pending.popleft()
            if future.done():  # the start was cancelled: its stub is not wanted (unreaped)
                if kind == "spawned":
                    _kill(int(message[1]))
                return
            if kind == "spawned":
                future.set_result(int(message[1]))
            else:
                future.set_exception(OSError(str(message[1])))

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._control.send(marshal.dumps(message))
        except OSError:
            pass

    def _lost(self) -> None:
        """The zygote is gone: its stubs die with it (PR_SET_PDEATHSIG); their groups are
        killed here, their deaths reported."""
        if not self.alive:
            return
        self.alive = False
        if self._loop.is_closed():  # its server's loop ended (an in-process server stopped)
            self._abandon()
            return
        self._loop.remove_reader(self._control.fileno())
        self._control.close()
        log.warning("the stub zygote (pid %d) exited; its stubs are killed", self._proc.pid)
        while self._pending:
            future = self._pending.popleft()
            if not future.done():
                future.set_exception(OSError("the stub zygote exited"))
        children, self._children = self._children, {}
        for pid, child in children.items():
            _kill(pid)
            child.exited(-signal.SIGKILL)
        self._reap()

    def _abandon(self) -> None:
        """Gone with a loop that is closed: nothing is scheduled on it any more; its stubs
        are killed and the zygote reaped here (it was killed: that is at once)."""
        self._control.close()
        self._pending.clear()
        children, self._children = self._children, {}
        for pid in children:
            _kill(pid)
        try:
            self._proc.wait(_REAP_S)
        except subprocess.TimeoutExpired:
            pass

    def _reap(self) -> None:
        if self._proc.poll() is None:
            self._loop.call_later(0.1, self._reap)

    def close(self) -> None:
        """Stop the zygote (its stubs, if any are left, with it)."""
        if self.alive:
            self._proc.kill()
            self._lost()


def _kill(pid: int) -> None:
    """SIGKILL a stub and its group."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _fd_bytes(fd: int) -> bytes:
    return fd.to_bytes(4, sys.byteorder, signed=True)


def _fits(title: list[str]) -> bool:
    """Whether a stub's command line fits in the zygote's (``stub_zygote._retitle``); the
    zygote's own line is longer than the room by its other arguments."""
    size = sum(len(part.encode(errors="surrogateescape")) + 1 for part in title)
    return size <= TITLE_ROOM


_zygotes: dict[asyncio.AbstractEventLoop, StubZygote] = {}


def available() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open")


def for_loop(loop: asyncio.AbstractEventLoop) -> StubZygote | None:
    """This server's zygote (one per process and event loop), started on first use; None
    where there can be none."""
    if not available():
        return None
    zygote = _zygotes.get(loop)
    if zygote is not None and zygote.alive:
        return zygote
    for other in [other for other in _zygotes if other.is_closed()]:
        _zygotes.pop(other).close()
    try:
        zygote = _zygotes[loop] = StubZygote(loop)
    except OSError as exc:
        log.warning("the stub zygote does not start (%s): stubs are spawned", exc)
        return None
    return zygote
