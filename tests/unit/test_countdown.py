"""The exit timeout's countdown (countdown.py): Triton's "Timeout N: Found ..." lines, one
budget spent by the shutdown's phases in turn."""

from __future__ import annotations

import asyncio

import pytest

from tritium.countdown import ExitCountdown


def _line(left: int, count: int) -> str:
    return f"Timeout {left}: Found {count} things"


def test_a_phase_ends_when_nothing_is_pending(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[bool, int]:
        countdown = ExitCountdown(30)
        pending = [2]

        async def finish() -> None:
            await asyncio.sleep(0.1)
            pending[0] = 0

        task = asyncio.ensure_future(finish())
        done = await countdown.wait(lambda: pending[0], _line)
        await task
        return done, countdown.left()

    with caplog.at_level("INFO", logger="tritium"):
        done, left = asyncio.run(main())
    assert done and left == 30
    assert "Timeout 30: Found 2 things" in caplog.text
    assert "Found 0 things" not in caplog.text  # a front-end's loop logs only what it waits on


def test_the_core_loop_logs_down_to_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> bool:
        return await ExitCountdown(5).wait(lambda: 0, _line, always=True)

    with caplog.at_level("INFO", logger="tritium"):
        assert asyncio.run(main())
    assert "Timeout 5: Found 0 things" in caplog.text


def test_the_budget_is_shared_and_runs_out(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> tuple[bool, bool]:
        countdown = ExitCountdown(1)
        first = await countdown.wait(lambda: 1, _line)
        second = await countdown.wait(lambda: 1, _line, always=True)  # nothing left
        return first, second

    with caplog.at_level("INFO", logger="tritium"):
        assert asyncio.run(main()) == (False, False)
    assert "Timeout 1: Found 1 things" in caplog.text
    assert "Timeout 0: Found 1 things" in caplog.text
