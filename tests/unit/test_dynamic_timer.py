"""The dynamic batcher's timer on uvloop, whose timers wake in whole milliseconds (a delay
under 0.5 ms runs on the next loop turn): ``batch_policy.py:timer_delay`` says when to arm a
timer and when to look again on the next turn with ``TIMER_SLACK_NS``, so that a queue
delay below the loop's resolution is a next-turn look, not a zero timer re-armed every turn
until the deadline (the spin that cost a c1 request ~560 us of CPU at a 300 us delay)."""

from __future__ import annotations

import asyncio
import time

import uvloop

from tritium.metrics.stats import ModelStats
from tritium.request import InferenceRequest, ResponseSender
from tritium.scheduling.batch_policy import TIMER_SLACK_NS, BatchConfig, timer_delay
from tritium.scheduling.dynamic import DynamicBatcher
from tritium.types import ClientRequest

US = 1000


def test_a_wait_past_the_slack_arms_a_timer_for_what_remains() -> None:
    assert timer_delay(10_000 * US, 1_000 * US) == 0.009
    assert timer_delay(1_000 * US + TIMER_SLACK_NS + 1, 1_000 * US) == (TIMER_SLACK_NS + 1) / 1e9


def test_a_wait_within_the_slack_is_a_look_on_the_next_turn() -> None:
    assert timer_delay(1_300 * US, 1_000 * US) is None  # 300 us: under uvloop's resolution
    assert timer_delay(1_000 * US + TIMER_SLACK_NS, 1_000 * US) is None
    assert timer_delay(900 * US, 1_000 * US) is None  # already past


class _Instance:
    name = "fake"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.ran = asyncio.Event()

    async def execute(self, requests: list[InferenceRequest]) -> None:
        self.batches.append([r.id for r in requests])
        self.ran.set()

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        await self.execute(requests)


def _request(stats: ModelStats, rid: str) -> InferenceRequest:
    request = InferenceRequest(ClientRequest("m", 1, id=rid))
    ResponseSender(lambda response, final: None).bind(request, lambda r, error, last: None)
    request.queued(stats)
    return request


def _run(delay_us: int, ids: list[str]) -> list[list[str]]:
    """The batches ``ids`` leave in, submitted in one loop turn. Where this process was kept
    off the CPU for longer than the delay while it submitted them (a loaded machine), the
    first request's wait really ended before the last one came, so a split batch is right
    then: the scenario runs again (the requests still leave in order, and all of them)."""

    async def scenario() -> tuple[list[list[str]], int]:
        stats, instance = ModelStats("m", "1"), _Instance()
        config = BatchConfig(max_batch_size=8, max_delay_ns=delay_us * US)
        batcher = DynamicBatcher([instance], "1", config)  # type: ignore[list-item]
        requests = [_request(stats, rid) for rid in ids]
        began = time.perf_counter_ns()
        for request in requests:  # one loop turn: every request can join the first batch
            batcher.submit(request)
        took = time.perf_counter_ns() - began
        await asyncio.wait_for(instance.ran.wait(), 10)
        await batcher.close()
        return instance.batches, took

    for _ in range(5):
        batches, took = uvloop.run(scenario())
        assert [rid for batch in batches for rid in batch] == ids
        if took < delay_us * US:
            break
    return batches


def test_a_lone_request_under_a_delay_below_the_resolution_runs() -> None:
    assert _run(300, ["a"]) == [["a"]]


def test_requests_of_one_turn_leave_in_one_batch_under_a_short_delay() -> None:
    assert _run(300, ["a", "b", "c"]) == [["a", "b", "c"]]


def test_requests_of_one_turn_leave_in_one_batch_under_a_delay_past_the_resolution() -> None:
    assert _run(3_000, ["a", "b"]) == [["a", "b"]]
