"""The floor of the server ↔ stub hand-off on this machine: a small frame's round trip between
two processes, over the channels the Python backend could use (issue 14 item 10).

Each variant runs a "server" (this process) and an "echo" child (a fork, as a stub would be a
child) that answers every frame with a frame of the same size; the server sends the next one
as soon as the answer arrives (closed loop, one in flight, as a client at concurrency 1). It
reports the median round trip (µs) over ``--repeats`` runs of ``--seconds`` each, their spread
(min, max) and the CPU both processes spent per round trip (µs): the machine is shared, so the
spread says how noisy the figure is.

Variants:

* ``socket``: a ``socketpair`` (AF_UNIX stream), blocking ``send``/``recv`` on both sides;
* ``pipe``: two pipes, blocking ``os.write``/``os.read``;
* ``eventfd``: the frame in a shared ``mmap``, the wake-up through two ``eventfd``s (what a
  shared-memory ring with an eventfd wake costs: the wake-up is the same kernel work);
* ``socket-spin``: as ``socket``, but the echo side spins on a non-blocking ``recv`` for up to
  ``--spin-us`` after answering before it blocks (a stub that expects the next request soon);
* ``uvloop-protocol``: the server side as the server speaks to a stub today, an
  ``asyncio.Protocol`` on a uvloop loop (``data_received`` → future), the echo side blocking;
* ``uvloop-reader``: the server side with ``loop.add_reader`` and a plain ``recv``;
* ``uvloop-pipe``: the server side on uvloop's pipe transports, the echo side on two pipes;
* ``stub``: the real thing without HTTP: the server's ``StubProcess`` on uvloop and a real
  stub running ``examples/model_repository/add_sub_python``; each round trip is one EXECUTE
  frame of one request (INT32 [1, 16] × 2, wired as ``PythonInstance._wire`` does) → the
  model's ``execute`` → EXEC_DONE back on the loop, its outputs unpacked. Minus the
  model's in-process ``execute`` (``stub-model``: the same call in this process), it is the
  hand-off round trip of the stub path alone;
* ``socket-1cpu``, ``stub-1cpu``: ``socket`` and ``stub`` with both processes on one CPU (the
  last this process may use; the child inherits it): no CPU ever wakes another, so the
  difference to the plain variant is what waking the other CPU costs (on a virtual machine
  whose idle vCPUs halt, most of a small frame's round trip);
* ``stub-inproc``: the Python work of that round trip without the processes and the socket:
  the same EXECUTE frame built, parsed by a ``Stub`` in this process (the model's
  ``execute`` included), its EXEC_DONE frame parsed back and unpacked. Its CPU minus
  ``stub-model``'s is what the hand-off costs in Python; ``stub`` minus ``stub-inproc`` is
  the kernel's share (system calls, wake-ups, waiting for a CPU).

Run: ``python -m bench stub-channels [--seconds 1 --repeats 5]``;
``make bench`` runs it with the defaults. Writes ``bench/results/stub-channels.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FRAME = 64  # bytes: a small EXECUTE frame's order of magnitude (the header, a few tuples)
RESULTS = Path(__file__).resolve().parent / "results" / "stub-channels.json"

from bench.proctree import cpu_seconds  # noqa: E402
from bench.stub_probe import (  # noqa: E402 - after the path
    async_closed_loop,
    closed_loop,
    run_stub,
    run_stub_inproc,
    run_stub_model,
)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = sock.recv(n)
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise EOFError
        data += more
    return data


# -- echo sides (the child) ---------------------------------------------------------------------
def echo_socket(sock: socket.socket, spin_s: float) -> None:
    while True:
        data = sock.recv(FRAME)
        if not data:
            return
        sock.sendall(data)
        if spin_s:
            _spin_then_block(sock, spin_s)


def _spin_then_block(sock: socket.socket, spin_s: float) -> None:
    """Poll the socket without blocking for up to ``spin_s``; answer what comes meanwhile."""
    sock.setblocking(False)
    try:
        deadline = time.perf_counter() + spin_s
        while time.perf_counter() < deadline:
            try:
                data = sock.recv(FRAME)
            except BlockingIOError:
                continue
            if not data:
                return
            sock.sendall(data)
            deadline = time.perf_counter() + spin_s
    finally:
        sock.setblocking(True)


def echo_pipe(rfd: int, wfd: int) -> None:
    while True:
        data = os.read(rfd, FRAME)
        if not data:
            return
        os.write(wfd, data)


def echo_eventfd(shared: mmap.mmap, to_child: int, to_parent: int) -> None:
    while True:
        os.eventfd_read(to_child)
        if shared[0] == 0xFF:
            return
        shared[FRAME : 2 * FRAME] = shared[0:FRAME]
        os.eventfd_write(to_parent, 1)


# -- server sides (this process) ---------------------------------------------------------------
def _forked(child: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            child()
        finally:
            os._exit(0)
    return pid


def _measure(pid: int, run: Callable[[], tuple[int, float]]) -> dict[str, float]:
    cpu0 = cpu_seconds(os.getpid()) + cpu_seconds(pid)
    n, wall = run()
    cpu = cpu_seconds(os.getpid()) + cpu_seconds(pid) - cpu0
    return {"us": wall * 1e6 / n, "cpu_us": cpu * 1e6 / n}


def run_socket(seconds: float, spin_s: float = 0.0) -> dict[str, float]:
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = _forked(lambda: (parent.close(), echo_socket(child, spin_s)))
    child.close()
    frame = b"x" * FRAME

    def round_trip() -> None:
        parent.sendall(frame)
        _recv_exact(parent, FRAME)

    try:
        return _measure(pid, lambda: closed_loop(round_trip, seconds))
    finally:
        parent.close()
        os.waitpid(pid, 0)


def run_pipe(seconds: float) -> dict[str, float]:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = _forked(lambda: (os.close(w1), os.close(r2), echo_pipe(r1, w2)))
    os.close(r1)
    os.close(w2)
    frame = b"x" * FRAME

    def round_trip() -> None:
        os.write(w1, frame)
        os.read(r2, FRAME)

    try:
        return _measure(pid, lambda: closed_loop(round_trip, seconds))
    finally:
        os.close(w1)
        os.close(r2)
        os.waitpid(pid, 0)


def run_eventfd(seconds: float) -> dict[str, float]:
    shared = mmap.mmap(-1, 2 * FRAME)
    to_child, to_parent = os.eventfd(0), os.eventfd(0)
    pid = _forked(lambda: echo_eventfd(shared, to_child, to_parent))
    frame = b"x" * FRAME

    def round_trip() -> None:
        shared[0:FRAME] = frame
        os.eventfd_write(to_child, 1)
        os.eventfd_read(to_parent)
        shared[FRAME : 2 * FRAME]  # noqa: B018 - the answer is read

    try:
        return _measure(pid, lambda: closed_loop(round_trip, seconds))
    finally:
        shared[0] = 0xFF
        os.eventfd_write(to_child, 1)
        os.waitpid(pid, 0)
        for fd in (to_child, to_parent):
            os.close(fd)


class _Echoed(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.got = 0

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= FRAME and self.waiter is not None:
            self.got -= FRAME
            self.waiter.set_result(None)


async def _uvloop_protocol(parent: socket.socket, seconds: float) -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    proto = _Echoed()
    transport, _ = await loop.create_unix_connection(lambda: proto, sock=parent)
    frame = b"x" * FRAME

    async def round_trip() -> None:
        proto.waiter = loop.create_future()
        transport.write(frame)
        await proto.waiter

    result = await async_closed_loop(round_trip, seconds)
    transport.close()
    return result


async def _uvloop_reader(parent: socket.socket, seconds: float) -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    parent.setblocking(False)
    waiter: list[asyncio.Future[None] | None] = [None]

    def readable() -> None:
        parent.recv(FRAME)
        if waiter[0] is not None:
            waiter[0].set_result(None)

    loop.add_reader(parent.fileno(), readable)
    frame = b"x" * FRAME

    async def round_trip() -> None:
        waiter[0] = loop.create_future()
        parent.send(frame)
        await waiter[0]

    result = await async_closed_loop(round_trip, seconds)
    loop.remove_reader(parent.fileno())
    parent.close()
    return result


async def _uvloop_pipes(rfd: int, wfd: int, seconds: float) -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    proto = _Echoed()
    await loop.connect_read_pipe(lambda: proto, os.fdopen(rfd, "rb", buffering=0))
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(wfd, "wb", buffering=0))
    frame = b"x" * FRAME

    async def round_trip() -> None:
        proto.waiter = loop.create_future()
        writer.write(frame)
        await proto.waiter

    result = await async_closed_loop(round_trip, seconds)
    writer.close()
    return result


def run_uvloop_pipe(seconds: float) -> dict[str, float]:
    import uvloop

    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = _forked(lambda: (os.close(w1), os.close(r2), echo_pipe(r1, w2)))
    os.close(r1)
    os.close(w2)
    try:
        return _measure(pid, lambda: uvloop.run(_uvloop_pipes(r2, w1, seconds)))
    finally:
        os.waitpid(pid, 0)


def run_uvloop(seconds: float, how: str) -> dict[str, float]:
    import uvloop

    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = _forked(lambda: (parent.close(), echo_socket(child, 0.0)))
    child.close()
    side = _uvloop_protocol if how == "protocol" else _uvloop_reader
    try:
        return _measure(pid, lambda: uvloop.run(side(parent, seconds)))
    finally:
        os.waitpid(pid, 0)


def on_one_cpu(run: Callable[[float], dict[str, float]]) -> Callable[[float], dict[str, float]]:
    """``run`` with this process, and the child it starts (which inherits it), on one CPU."""

    def pinned(seconds: float) -> dict[str, float]:
        allowed = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {max(allowed)})
        try:
            return run(seconds)
        finally:
            os.sched_setaffinity(0, allowed)

    return pinned


def variants(spin_us: float) -> dict[str, Callable[[float], dict[str, float]]]:
    return {
        "socket": run_socket,
        "socket-1cpu": on_one_cpu(run_socket),
        "pipe": run_pipe,
        "eventfd": run_eventfd,
        "socket-spin": lambda s: run_socket(s, spin_us / 1e6),
        "uvloop-protocol": lambda s: run_uvloop(s, "protocol"),
        "uvloop-reader": lambda s: run_uvloop(s, "reader"),
        "uvloop-pipe": run_uvloop_pipe,
        "stub": run_stub,
        "stub-1cpu": on_one_cpu(run_stub),
        "stub-inproc": run_stub_inproc,
        "stub-model": run_stub_model,
    }


def summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    us = [s["us"] for s in samples]
    return {
        "median_us": statistics.median(us),
        "min_us": min(us),
        "max_us": max(us),
        "cpu_us": statistics.median(s["cpu_us"] for s in samples),
        "samples_us": [round(u, 1) for u in us],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--spin-us", type=float, default=50.0)
    ap.add_argument("--only", default="", help="comma-separated variants")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    chosen = variants(args.spin_us)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    for _ in range(args.repeats):  # interleaved: a busy moment hits every variant alike
        for name, fn in chosen.items():
            samples[name].append(fn(args.seconds))
    results = {name: summary(s) for name, s in samples.items()}
    print(
        f"{FRAME}-byte frame round trip, {args.repeats} × {args.seconds:g} s, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"{'variant':18} {'median µs':>10} {'min':>8} {'max':>8} {'CPU µs/rt':>10}")
    for name, r in results.items():
        print(
            f"{name:18} {r['median_us']:10.1f} {r['min_us']:8.1f} {r['max_us']:8.1f} "
            f"{r['cpu_us']:10.1f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "frame_bytes": FRAME,
        "spin_us": args.spin_us,
        "loadavg": os.getloadavg(),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "variants": results,
    }
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    return 0
