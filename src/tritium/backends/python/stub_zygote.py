"""The stub zygote: a process that has imported the stub (numpy, ``pb_utils``, the stub's
modules) once and forks every stub of its server from that state, so the stubs share those
pages copy-on-write instead of each importing them again.

Run as ``python -m tritium.backends.python.stub_zygote <fd> <server pid> <room>`` by the
server (``zygote.StubZygote``), in a process group of its own; ``fd`` is one end of a
``SOCK_SEQPACKET`` pair, ``room`` a run of spaces that makes the command line long enough
for a stub's (below). It never starts a thread: it waits in ``poll`` on the pair, the
server's pidfd and its stubs' pidfds, so each fork copies a one-threaded process.

Messages (``marshal``, one per packet). The server sends ``("spawn", name, token)`` with the
stub's socket attached (``SCM_RIGHTS``) and ``("reap", pid)``; the zygote answers
``("spawned", pid)`` or ``("failed", reason)``, and ``("exited", pid, returncode)`` when a
stub exits. A stub forked here keeps every guarantee of one the server spawns
(``process.StubProcess``):

- its own process group (``setpgid`` in both processes, before the zygote answers);
- ``PR_SET_PDEATHSIG`` (and the stub's parent watch) with the zygote as its parent;
- its exit: when a stub exits the zygote kills its group while its pid is still held (the
  stub unreaped), reads its status without reaping it (``waitid`` with ``WNOWAIT``) and
  reports it; it reaps the stub only when the server says ``reap``, having recorded the
  status: the server never signals a pid that could name another process;
- its group's keeper (``stub_group``): the zygote is the keeper of all its stubs' groups. It
  kills a stub's group when the stub exits (above), and every group, then exits, when the
  server exits, even by SIGKILL (the server's pidfd in its poll; the stubs also have
  ``PR_SET_PDEATHSIG`` on the zygote). One keeper per server instead of one interpreter per
  stub (3.6 MiB PSS each). If the zygote itself dies the server kills the groups
  (``zygote.StubZygote``);
- its command line: the stub's, as the server would have spawned it
  (``python -m tritium.backends.python.stub <fd> <server pid> <name> <token>``), written
  over the zygote's own (``_retitle``); a stub whose line does not fit is spawned instead.

Environment, working directory and interpreter are the server's, as for a spawned stub; a
model with its own environment (``EXECUTION_ENV_PATH``) is always spawned. What a fork shares
that a spawn did not: the zygote's string-hash seed (``PYTHONHASHSEED``; set iteration order is
the same in every stub), nothing else: random state is reseeded (``_reseed``), threads and
locks are the stub's own (the zygote has no thread). The zygote lives as long as its server
process (or the event loop it was started on: ``zygote.for_loop``).
"""

from __future__ import annotations

import ctypes
import gc
import marshal
import os
import select
import signal
import socket
import sys

from . import stub

# The stub imports asyncio (and ssl with it) with a model's first coroutine (stub_loop): a
# spawned stub of a model without one never pays for it. Here it is imported once, shared by
# every forked stub: a coroutine then costs its stub nothing of its own (a fork importing it
# measured +4.1 MiB PSS), for 0.7 MiB PSS per stub of the zygote's pages.
import asyncio  # noqa: E402, F401  # isort: skip

STUB_MODULE = "tritium.backends.python.stub"
LAUNCHER = os.path.join(os.path.dirname(__file__), "triton_python_backend_stub.py")  # ps
MAX_MESSAGE = 4096
_FD_SPACE = socket.CMSG_SPACE(4)


class _Spawn:
    """What a forked child goes on to run: the stub over ``fd``."""

    def __init__(self, fd: int, server_pid: int, name: str, token: str) -> None:
        self.fd, self.server_pid, self.name, self.token = fd, server_pid, name, token


class Zygote:
    def __init__(self, control: socket.socket, server_pid: int) -> None:
        self._control = control
        self._server_pid = server_pid
        self._server = os.pidfd_open(server_pid)
        self._children: dict[int, int] = {}  # pidfd → pid, until it exits
        self._poll = select.poll()
        self._poll.register(control.fileno(), select.POLLIN)
        self._poll.register(self._server, select.POLLIN)

    def serve(self) -> _Spawn | None:
        """Answer the server until it goes; returns only in a forked child (what it runs)."""
        try:
            return self._serve()
        finally:
            if self._children:  # the server is gone (or this is a child, which has none)
                for pid in self._children.values():
                    _kill_group(pid)

    def _serve(self) -> _Spawn | None:
        while True:
            for fd, _ in self._poll.poll():
                if fd == self._server:
                    return None
                if fd != self._control.fileno():
                    self._exited(fd)
                    continue
                spawn = self._message()
                if spawn is not None or self._control.fileno() < 0:
                    return spawn

    def _message(self) -> _Spawn | None:
        try:
            data, fds = _receive(self._control)
        except OSError:
            data, fds = b"", []
        if not data:  # the server closed its end: it is gone
            self._control.close()
            return None
        try:
            message = marshal.loads(data)
            if message[0] == "reap":
                _reap(int(message[1]))
            elif message[0] == "spawn" and len(fds) == 1:
                spawn = self._fork(fds[0], str(message[1]), str(message[2]))
                if spawn is not None:  # the child's: its socket
                    fds = []
                return spawn
        finally:
            for fd in fds:
                _close(fd)
        return None

    def _fork(self, fd: int, name: str, token: str) -> _Spawn | None:
        title = [sys.executable, LAUNCHER, STUB_MODULE, str(fd), str(self._server_pid), name, token]
        try:
            pid = os.fork()
        except OSError as exc:
            self._send(("failed", f"fork: {exc}"))
            return None
        if pid == 0:
            return self._child(fd, title)
        try:
            os.setpgid(pid, pid)
        except OSError:  # it did so itself and has already exited: reported below
            pass
        pidfd = os.pidfd_open(pid)
        self._children[pidfd] = pid
        self._poll.register(pidfd, select.POLLIN)
        self._send(("spawned", pid))
        return None

    def _child(self, fd: int, title: list[str]) -> _Spawn:
        """In the forked stub: its own group, tied to the zygote, its command line."""
        parent = os.getppid()
        os.setpgid(0, 0)
        self._control.close()
        for pidfd in (self._server, *self._children):
            _close(pidfd)
        self._children = {}
        stub._die_with_parent(parent)
        _retitle(title)
        _reseed()
        return _Spawn(fd, self._server_pid, title[5], title[6])

    def _exited(self, pidfd: int) -> None:
        """A stub exited: kill its group while its pid is held, report its status."""
        pid = self._children.pop(pidfd)
        self._poll.unregister(pidfd)
        os.close(pidfd)
        _kill_group(pid)
        self._send(("exited", pid, _status(pid)))

    def _send(self, message: tuple[str | int, ...]) -> None:
        try:
            self._control.send(marshal.dumps(message))
        except OSError:  # the server is gone: the poll sees it
            pass


def _reseed() -> None:
    """A stub's random state is its own, as a spawned stub's: ``random`` reseeds itself at a
    fork; numpy's global generator is seeded when ``numpy.random`` is first imported, which
    the zygote does not do, but were it imported here every stub would draw the same numbers."""
    generator = sys.modules.get("numpy.random")
    if generator is not None:
        generator.seed()


def _receive(control: socket.socket) -> tuple[bytes, list[int]]:
    data, ancillary, _, _ = control.recvmsg(MAX_MESSAGE, _FD_SPACE)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds.extend(memoryview(payload)[:usable].cast("i"))
    return data, fds


def _status(pid: int) -> int:
    """The exited stub's returncode, as ``subprocess`` gives it, without reaping it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        return -signal.SIGKILL
    if info is None:
        return -signal.SIGKILL
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _retitle(args: list[str]) -> bool:
    """Write ``args`` over this process's command line (``/proc/self/cmdline``, ``ps``), in
    the room the zygote's own line left; False when they do not fit (nothing written)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
    except (OSError, IndexError, ValueError):
        return False
    line = b"".join(a.encode(errors="surrogateescape") + b"\0" for a in args)
    if not start or len(line) > end - start:
        return False
    ctypes.memmove(start, line.ljust(end - start, b"\0"), end - start)
    return True


def main() -> None:
    server_pid = int(sys.argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops it (and its stubs)
    control = socket.socket(fileno=int(sys.argv[1]))
    zygote = Zygote(control, server_pid)  # the server's pidfd: its exit ends the zygote
    if os.getppid() != server_pid:  # the server died before the pidfd was opened
        return
    gc.freeze()  # what is here stays out of the stubs' collections: its pages stay shared
    spawn = zygote.serve()
    if spawn is not None:  # a stub: the zygote's frames are gone, it runs as the main program
        stub.run(spawn.fd, spawn.server_pid, spawn.name, spawn.token)


if __name__ == "__main__":
    main()
