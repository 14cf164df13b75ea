"""``loop_spin``: a spin polls the loop's own epoll descriptor, ends at the loop's first
event (which the loop then still handles: nothing is read behind its back) or at its budget,
and is available only where it can work (uvloop, more than one CPU, a budget above 0)."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import uvloop

from tritium import loop_spin
from tritium.loop_spin import LoopSpin, for_loop

SEVERAL_CPUS = len(os.sched_getaffinity(0)) > 1


@pytest.mark.skipif(not SEVERAL_CPUS, reason="spinning is off on a single CPU")
def test_uvloop_has_a_spinner_polling_its_epoll_descriptor() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        spin = for_loop(loop)
        assert isinstance(spin, LoopSpin)
        assert for_loop(loop) is spin  # one per loop

    uvloop.run(main())


@pytest.mark.skipif(not SEVERAL_CPUS, reason="spinning is off on a single CPU")
def test_a_new_loop_gets_a_spinner_of_its_own_and_the_last_one_is_let_go() -> None:
    async def main() -> tuple[LoopSpin | None, asyncio.AbstractEventLoop]:
        return for_loop(asyncio.get_running_loop()), asyncio.get_running_loop()

    first, first_loop = uvloop.run(main())
    second, second_loop = uvloop.run(main())
    assert first is not None and second is not None and first is not second
    assert loop_spin._Current.loop is second_loop is not first_loop


def test_no_spinner_on_a_loop_without_an_epoll_backend_to_poll() -> None:
    async def main() -> LoopSpin | None:
        return for_loop(asyncio.get_running_loop())

    assert asyncio.run(main()) is None  # asyncio's own loop: uvloop's backend is what is polled


def test_no_spinner_when_the_budget_is_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_spin, "SPIN_NS", 0)

    async def main() -> LoopSpin | None:
        return for_loop(asyncio.get_running_loop())

    assert uvloop.run(main()) is None


def test_no_spinner_on_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})

    async def main() -> LoopSpin | None:
        return for_loop(asyncio.get_running_loop())

    assert uvloop.run(main()) is None


async def _spinner(budget_ns: int, epoll_fd: int | None = None) -> LoopSpin:
    """A spinner of the running uvloop polling ``epoll_fd`` (default: the loop's own), after a
    loop turn (libuv adds the descriptors of new readers to its epoll set when it next
    polls)."""
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    if epoll_fd is None:
        epoll_fd = loop._get_backend_id()  # type: ignore[attr-defined]
    return LoopSpin(loop, epoll_fd, budget_ns)


@pytest.mark.parametrize("delay", [0.0, 0.05], ids=["waiting", "during"])
def test_an_event_in_the_polled_epoll_ends_the_spin(delay: float) -> None:
    """An event already waiting when the spin starts, or one that comes 50 ms into it. (An
    epoll set of the test's own: the loop's would hand the event to the loop first.)"""
    ours, theirs = socket.socketpair()
    epoll = select.epoll()
    epoll.register(ours.fileno(), select.EPOLLIN)

    async def main() -> tuple[int, int]:
        spin = await _spinner(10 * 10**9, epoll.fileno())  # 10 s: only the event can end it
        sender = threading.Timer(delay, theirs.send, (b"event",))
        sender.start()
        if not delay:
            sender.join()  # sent before the spin starts
        spin.arm()
        while spin.spinning:
            await asyncio.sleep(0)
        sender.join()
        return spin.spins, spin.woken

    try:
        assert uvloop.run(main()) == (1, 1)
    finally:
        epoll.close()
        ours.close()
        theirs.close()


def test_the_loop_still_gets_its_events_while_it_spins() -> None:
    """Polling the loop's own epoll set reads nothing: what a process (as a stub would) sends
    during a spin is the loop's to read."""
    ours, theirs = socket.socketpair()
    script = (
        "import socket, sys, time; time.sleep(0.1); "
        "socket.socket(fileno=int(sys.argv[1])).send(b'later')"
    )
    sender = subprocess.Popen(
        [sys.executable, "-c", script, str(theirs.fileno())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[bytes] = loop.create_future()
        ours.setblocking(False)
        loop.add_reader(ours.fileno(), lambda: got.set_result(ours.recv(64)))
        spin = await _spinner(10 * 10**9)
        spin.arm()
        data = await got
        loop.remove_reader(ours.fileno())
        return data

    try:
        assert uvloop.run(main()) == b"later"
    finally:
        sender.wait()
        ours.close()


def test_without_an_event_the_spin_ends_at_its_budget() -> None:
    async def main() -> tuple[int, int]:
        spin = await _spinner(1_000_000)  # 1 ms
        spin.arm()
        spin.arm()  # armed twice before it runs: one spin
        while spin.spinning:
            await asyncio.sleep(0)
        return spin.spins, spin.woken

    assert uvloop.run(main()) == (1, 0)  # it ended: the budget, not an event


def test_callbacks_queued_behind_a_spin_run_while_it_spins() -> None:
    async def main() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        spin = await _spinner(10 * 10**9)
        ran: asyncio.Future[bool] = loop.create_future()
        spin.arm()
        loop.call_soon(lambda: ran.set_result(spin.spinning))
        during = await ran
        loop_spin.ACTIVE.requests += 1  # ends it (below)
        try:
            while spin.spinning:
                await asyncio.sleep(0)
        finally:
            loop_spin.ACTIVE.requests -= 1
        return during, spin.woken

    assert uvloop.run(main()) == (True, 0)


def test_a_change_in_the_requests_in_flight_ends_a_spin() -> None:
    """Something the spin was not armed for happened (a request came, or one was answered,
    and no caller armed a spin for what follows): the spin stops at its next slice."""

    async def main() -> tuple[int, int, bool]:
        spin = await _spinner(10 * 10**9)
        spin.arm()
        await asyncio.sleep(0)
        loop_spin.ACTIVE.requests += 1
        try:
            for _ in range(1000):
                if not spin.spinning:
                    break
                await asyncio.sleep(0)
        finally:
            loop_spin.ACTIVE.requests -= 1
        return spin.spins, spin.woken, spin.spinning

    assert uvloop.run(main()) == (1, 0, False)


@pytest.mark.parametrize(
    ("text", "ns"), [(None, 250_000), ("", 250_000), ("0", 0), ("80.5", 80_500)]
)
def test_the_budget_from_the_environment(text: str | None, ns: int) -> None:
    assert loop_spin.budget_ns(text) == ns


@pytest.mark.parametrize("text", ["abc", "-5", "nan", "inf"])
def test_a_budget_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="TRITIUM_LOOP_SPIN_US must be microseconds >= 0"):
        loop_spin.budget_ns(text)


def test_the_server_refuses_to_start_with_a_budget_that_is_no_duration(tmp_path: Path) -> None:
    env = {**os.environ, "TRITIUM_LOOP_SPIN_US": "fast"}
    command = [sys.executable, "-m", "tritium", "serve", "--model-repository", str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "error: TRITIUM_LOOP_SPIN_US must be microseconds >= 0, got 'fast'" in done.stderr


@pytest.mark.skipif(not SEVERAL_CPUS, reason="spinning is off on a single CPU")
def test_a_connection_spins_for_a_quick_client_only() -> None:
    """ClientPace: a connection's first request (no answer before it) arms nothing; one that
    came right after an answer arms a spin when the connection falls idle again."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        spin = for_loop(loop)
        assert spin is not None
        pace = loop_spin.ClientPace()
        seen = []
        pace.request_began()  # the first request: no answer before it
        pace.went_idle(loop)
        seen.append(spin.spins)
        pace.request_began()  # right after that answer: a quick client
        pace.went_idle(loop)
        seen.append(spin.spins)
        while spin.spinning:
            await asyncio.sleep(0)
        return seen

    assert uvloop.run(main()) == [0, 1]
