"""The stub's event loop (backends/python/stub_loop.py): coroutines waited for, and
background ones bounded."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tritium.backends.python.stub_loop import StubLoop

_WAIT_S = 30.0


async def _until(gate: threading.Event) -> None:
    while not gate.is_set():
        await asyncio.sleep(0.005)


def test_run_gives_the_result_or_raises_what_the_coroutine_raised() -> None:
    loop = StubLoop()

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fails() -> None:
        raise ValueError("from the coroutine")

    assert loop.run(answer()) == 42
    with pytest.raises(ValueError, match="from the coroutine"):
        loop.run(fails())
    loop.stop()


def test_background_coroutines_run_together_and_the_next_waits_at_the_limit() -> None:
    loop = StubLoop(limit=2)
    gate = threading.Event()
    loop.start(_until(gate))
    loop.start(_until(gate))
    assert loop.running() == 2  # both started: start() did not wait for either
    third = threading.Thread(target=loop.start, args=(_until(gate),))
    third.start()
    third.join(0.2)
    assert third.is_alive()  # at the limit: the third start waits for a slot
    gate.set()
    third.join(_WAIT_S)
    assert not third.is_alive()
    while loop.running():
        threading.Event().wait(0.01)
    loop.stop()


def test_run_works_while_background_coroutines_wait() -> None:
    loop = StubLoop(limit=4)
    gate = threading.Event()
    loop.start(_until(gate))

    async def quick() -> str:
        return "done"

    assert loop.run(quick()) == "done"  # the loop is not held by the one that waits
    gate.set()
    loop.stop()
