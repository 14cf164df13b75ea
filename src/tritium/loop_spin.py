"""Spin instead of sleeping when the loop's next event is due within microseconds.

At concurrency 1 the server's loop goes to sleep twice per request: while the model's stub
runs, and while the client turns its answer into the next request. On a virtual machine a
sleeping CPU is halted, and waking it costs both sides: the sender's write runs the wake-up
(an inter-processor interrupt, a VM exit) and the halted CPU takes tens of microseconds to
resume. `python -m bench stub-channels` measures it on this 2-core machine: a 64-byte round trip
between two processes takes 66-75 µs across CPUs, 31-32 µs when the receiver polls instead of
sleeping, 5 µs on one CPU. For a Python-model ``simple`` over HTTP at concurrency 1 the two
sleeps were about 130 µs of a 350 µs request (bench/results/loop-spin.md).

So when the loop is about to wait for an answer that came quickly last time, and nothing else
is in flight in this process, it polls its own epoll descriptor (the loop's backend) with a
zero timeout for up to ``TRITIUM_LOOP_SPIN_US`` µs (default 250; 0 turns spinning off) before
it lets the loop sleep. Any event of the loop's (the answer, another client, a signal) ends
the spin at once, the loop then handles it without sleeping; nothing is read behind the
loop's back. Callers arm a spin only when it should pay:

* ``Activity.requests``: inferences in flight in this process (submitted and not finished,
  counted by the server facade). A spin is armed only when the awaited one is all there is:
  under load the loop has other work, and a spinning loop would take a CPU from the stubs and
  the clients.
* the awaited party answered within the budget last time (an instance's last stub round
  trip, an HTTP connection's last gap between an answer and the next request), so a slow
  model or a client that pauses never costs a spin;
* the loop may use more than one CPU: on one (``--worker-affinity cpu``), a spin would only
  keep the stub it waits for off that CPU.
"""

from __future__ import annotations

import asyncio
import os
import select
import time
from typing import ClassVar

from .transport.host import Pace


def budget_ns(text: str | None) -> int:
    """``TRITIUM_LOOP_SPIN_US`` in ns (unset: 250 µs); anything but a number >= 0 is refused."""
    if text is None or not text.strip():
        return 250_000
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"TRITIUM_LOOP_SPIN_US must be microseconds >= 0, got '{text}'")
    return int(value * 1000)


SPIN_NS = budget_ns(os.environ.get("TRITIUM_LOOP_SPIN_US"))


class Activity:
    """What this process has in flight (one loop per process: the server's, or a worker's)."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests = 0  # inferences submitted and not finished (InferenceServer._began/_ended)


ACTIVE = Activity()
SLICE_NS = 100_000  # the longest a spin keeps the loop's other callbacks waiting


class LoopSpin:
    """Spins of one event loop, polling its epoll descriptor.

    A spin runs as a callback of the loop, in slices of at most ``SLICE_NS``: after each, it
    queues itself again, so that the callbacks queued behind it run and the loop polls its
    descriptors (with a zero timeout: it never sleeps while a callback is ready) before it
    goes on. It ends when its descriptor shows an event (the loop handles it next), when its
    budget is spent, or when the count of inferences in flight is no longer the one it was
    armed with (something happened that no caller armed a spin for).
    """

    __slots__ = ("_loop", "_poll", "_budget", "_deadline", "_expect", "spinning", "spins", "woken")

    def __init__(self, loop: asyncio.AbstractEventLoop, epoll_fd: int, budget_ns: int) -> None:
        self._loop = loop
        self._poll = select.poll()
        self._poll.register(epoll_fd, select.POLLIN)
        self._budget = budget_ns
        self._deadline = 0
        self._expect = 0  # ACTIVE.requests when armed
        self.spinning = False
        self.spins = 0  # spins started
        self.woken = 0  # of which an event ended

    def arm(self) -> None:
        """Spin once the callbacks now ready have run; a spin already running starts its
        budget again."""
        self._deadline = time.perf_counter_ns() + self._budget
        self._expect = ACTIVE.requests
        if not self.spinning:
            self.spinning = True
            self.spins += 1
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        if ACTIVE.requests != self._expect:
            self.spinning = False
            return
        poll = self._poll.poll
        clock = time.perf_counter_ns
        now = clock()
        deadline = self._deadline
        until = min(now + SLICE_NS, deadline)
        while not poll(0):
            now = clock()
            if now >= until:
                if now >= deadline:
                    self.spinning = False
                else:
                    self._loop.call_soon(self._spin)
                return
        self.spinning = False
        self.woken += 1


class _Current:
    """The spinner of the loop that asked last (a process runs one loop at a time: the
    server's; tests run one after another), so a closed loop is not kept."""

    loop: ClassVar[asyncio.AbstractEventLoop | None] = None
    spin: ClassVar[LoopSpin | None] = None


def for_loop(loop: asyncio.AbstractEventLoop) -> LoopSpin | None:
    """The spinner of ``loop``, or None where spinning is off or cannot work: not uvloop
    (whose backend descriptor it polls), or a process allowed a single CPU."""
    if _Current.loop is loop:
        return _Current.spin
    spin = None
    if SPIN_NS > 0 and len(os.sched_getaffinity(0)) > 1:
        fd = _epoll_fd(loop)
        if fd is not None:
            spin = LoopSpin(loop, fd, SPIN_NS)
    _Current.loop, _Current.spin = loop, spin
    return spin


def arm(loop: asyncio.AbstractEventLoop) -> None:
    """A spin on ``loop`` once its ready callbacks have run, where spinning works."""
    spin = for_loop(loop)
    if spin is not None:
        spin.arm()


class ClientPace(Pace):
    """One client connection's pace: whether its last request came within the spin budget
    of the answer before it. A connection that fell idle after answering a quick client, with
    nothing else in flight, spins for the client's next request (HTTP/1.1 and gRPC alike)."""

    __slots__ = ("_answered_ns", "_quick")

    def __init__(self) -> None:
        self._answered_ns = 0  # when the connection last fell idle (perf_counter ns)
        self._quick = False

    def request_began(self) -> int:
        """A request's first bytes came; the time (perf_counter ns)."""
        now = time.perf_counter_ns()
        self._quick = now - self._answered_ns < SPIN_NS
        return now

    def went_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """The last answer is out (written, or queued to be written before a spin runs)."""
        if self._quick and ACTIVE.requests == 0:
            arm(loop)
        self._answered_ns = time.perf_counter_ns()


def _epoll_fd(loop: asyncio.AbstractEventLoop) -> int | None:
    """uvloop's libuv backend descriptor (``uv_backend_fd``), checked to be an epoll one."""
    backend = getattr(loop, "_get_backend_id", None)
    if backend is None:
        return None
    try:
        fd = int(backend())
        if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:[eventpoll]":
            return None
    except (OSError, ValueError, TypeError):
        return None
    return fd
