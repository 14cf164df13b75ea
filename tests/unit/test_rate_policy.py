"""The rate limiter (``--rate-limit=execution_count``): the pure allocation policy against
Triton's rules (core src/rate_limiter.cc), the asyncio gates over it, and the CLI flags."""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tritium.cli.main import build_parser, options_from_args
from tritium.errors import ErrorKind, ServerError
from tritium.metrics.stats import ModelStats
from tritium.options import ServerOptions
from tritium.request import InferenceRequest
from tritium.types import ClientRequest
from tritium.scheduling.common import limited
from tritium.scheduling.rate_limiter import RateLimiter
from tritium.scheduling.rate_policy import (
    GLOBAL,
    PER_DEVICE,
    InstanceLimits,
    RateLimitPolicy,
    Resource,
    ResourcePool,
    explicit_counts,
)


def needs(*resources: tuple[str, int], priority: int = 0, device: int = 0) -> InstanceLimits:
    return InstanceLimits(tuple(Resource(n, c) for n, c in resources), priority, device)


def policy(*explicit: tuple[str, int, int]) -> RateLimitPolicy:
    return RateLimitPolicy(ResourcePool(explicit_counts(explicit)))


# -- counts -----------------------------------------------------------------------------------
def test_default_counts_are_the_most_any_instance_needs() -> None:
    """Triton's documented example: A [R1:4 R2:4], B [R2:5 R3:10 R4:5], C [R1:1 R3:7 R4:2]."""
    pool = ResourcePool()
    pool.add("A", needs(("R1", 4), ("R2", 4)))
    pool.add("B", needs(("R2", 5), ("R3", 10), ("R4", 5)))
    pool.add("C", needs(("R1", 1), ("R3", 7), ("R4", 2)))
    assert pool.limits == {0: {"R1": 4, "R2": 5, "R3": 10, "R4": 5}}
    pool.remove("B")  # the counts follow the instances that are loaded
    assert pool.limits == {0: {"R1": 4, "R2": 4, "R3": 7, "R4": 2}}


def test_explicit_counts_per_device_and_global() -> None:
    """The doc's example: R1:10 on every device, R2 5 on device 0 and 8 on 1, R3:2 global."""
    explicit = explicit_counts([("R1", 10, -1), ("R2", 5, 0), ("R2", 8, 1), ("R3", 2, -1)])
    pool = ResourcePool(explicit)
    pool.add("a", needs(("R1", 1), ("R2", 1), device=0))
    pool.add("b", needs(("R1", 1), ("R2", 1), device=1))
    pool.add("g", InstanceLimits((Resource("R3", 1, is_global=True),)))
    assert pool.limits == {0: {"R1": 10, "R2": 5}, 1: {"R1": 10, "R2": 8}, GLOBAL: {"R3": 2}}


def test_a_resource_given_twice_keeps_the_smaller_count() -> None:
    assert explicit_counts([("R", 4, -1), ("R", 2, -1), ("R", 3, 0)]) == {
        PER_DEVICE: {"R": 2},
        0: {"R": 3},
    }


def test_an_explicit_count_below_the_need_fails_with_tritons_text() -> None:
    pool = ResourcePool(explicit_counts([("R", 1, -1)]))
    with pytest.raises(ServerError) as caught:
        pool.add("a", needs(("R", 2)))
    assert caught.value.kind is ErrorKind.INVALID_ARG
    assert caught.value.message == (
        'Resource count for "R" is limited to 1 which will prevent scheduling of one or more '
        "model instances, the minimum required count is 2"
    )
    assert pool.limits == {}  # the failed instance left nothing behind
    pool.add("b", needs(("R", 1)))
    assert pool.limits == {0: {"R": 1}}


def test_once_counts_are_given_an_unlisted_resource_has_none() -> None:
    pool = ResourcePool(explicit_counts([("R", 4, -1)]))
    with pytest.raises(ServerError, match='Resource count for "S" is limited to 0'):
        pool.add("a", needs(("S", 1)))


def test_a_resource_cannot_be_both_global_and_per_device() -> None:
    pool = ResourcePool()
    pool.add("a", needs(("R", 1)))
    with pytest.raises(ServerError) as caught:
        pool.add("g", InstanceLimits((Resource("R", 1, is_global=True),)))
    assert caught.value.message == (
        'Resource "R" is present as both global and device-specific resource in the model '
        "configuration."
    )


def test_limits_come_from_the_instance_group_message() -> None:
    group = mc.ModelInstanceGroup()
    resource = group.rate_limiter.resources.add(name="R", count=3)
    setattr(resource, "global", True)
    group.rate_limiter.resources.add(name="S", count=1)
    group.rate_limiter.priority = 2
    assert InstanceLimits.from_group(group) == InstanceLimits(
        (Resource("R", 3, True), Resource("S", 1, False)), 2, 0
    )


# -- allocation -------------------------------------------------------------------------------
def test_instances_sharing_a_resource_of_one_run_one_at_a_time() -> None:
    p = policy()
    p.register("a", needs(("R", 1)))
    p.register("b", needs(("R", 1)))
    assert p.stage("a") == ["a"]
    assert p.stage("b") == []  # waits for a
    assert p.release("a") == ["b"]
    assert p.release("b") == []


def test_per_device_resources_do_not_block_other_devices() -> None:
    p = policy()
    p.register("d0", needs(("R", 1), device=0))
    p.register("d1", needs(("R", 1), device=1))
    assert p.stage("d0") == ["d0"]
    assert p.stage("d1") == ["d1"]


def test_a_global_resource_is_shared_across_devices() -> None:
    p = policy()
    shared = (Resource("G", 1, is_global=True),)
    p.register("d0", InstanceLimits(shared, device=0))
    p.register("d1", InstanceLimits(shared, device=1))
    assert p.stage("d0") == ["d0"]
    assert p.stage("d1") == []
    assert p.release("d0") == ["d1"]


def test_counts_let_as_many_run_as_fit() -> None:
    p = policy(("R", 3, -1))
    for key in "abcd":
        p.register(key, needs(("R", 1)))
    assert [p.stage(k) for k in "abcd"] == [["a"], ["b"], ["c"], []]
    assert p.release("b") == ["d"]


def test_an_instance_without_resources_always_fits() -> None:
    p = policy()
    p.register("a", needs(("R", 1)))
    p.register("free", needs())
    assert p.stage("a") == ["a"]
    assert p.stage("free") == ["free"]


def test_waiting_instances_run_by_executions_times_priority() -> None:
    """Triton's ScaledPriority: executions x priority, lowest first. Three instances that
    always want to run share one resource: the one with priority 2 gets half the turns."""
    p = policy()
    for key, priority in (("a", 1), ("b", 1), ("c", 2)):
        p.register(key, needs(("R", 1), priority=priority))
    running = p.stage("a")
    p.stage("b")
    p.stage("c")
    turns = {"a": 1, "b": 0, "c": 0}
    for _ in range(50):
        (current,) = running
        running = p.release(current)  # the next one is chosen among the two waiting
        turns[running[0]] += 1
        p.stage(current)  # and the one that ran wants to run again
    # 51 turns: c's scaled priority (2 per run) catches up with a's and b's (1 per run)
    # after half as many runs; ties go to the one waiting longest.
    assert (turns["a"], turns["b"], turns["c"]) == (20, 20, 11), turns


def test_fewer_executions_go_first() -> None:
    p = policy()
    for key in ("holder", "busy", "fresh"):
        p.register(key, needs(("R", 1)))
    p.stage("busy")
    p.release("busy")  # busy has run once
    p.stage("holder")
    p.stage("busy")
    p.stage("fresh")  # arrived last, but has never run
    assert p.release("holder") == ["fresh"]


def test_priority_zero_counts_as_one() -> None:
    p = policy()
    p.register("holder", needs(("R", 1)))
    p.register("zero", needs(("R", 1), priority=0))
    p.register("one", needs(("R", 1), priority=1))
    p.stage("holder")
    p.stage("zero")
    p.stage("one")  # equal scaled priority (0 executions): arrival order decides
    assert p.release("holder") == ["zero"]


def test_the_first_in_order_that_does_not_fit_blocks_the_rest() -> None:
    """No starvation of a large need: later small needs do not overtake it."""
    p = policy(("R", 2, -1))
    p.register("small1", needs(("R", 1)))
    p.register("big", needs(("R", 2)))
    p.register("small2", needs(("R", 1)))
    assert p.stage("small1") == ["small1"]
    assert p.stage("big") == []
    assert p.stage("small2") == []  # one R is free, but big is first
    assert p.release("small1") == ["big"]
    assert p.release("big") == ["small2"]


def test_the_inline_path_takes_only_what_is_free_with_nobody_waiting() -> None:
    p = policy()
    p.register("a", needs(("R", 1)))
    p.register("b", needs(("R", 1)))
    assert p.try_take("a")
    assert not p.try_take("b")
    p.stage("b")
    assert p.release("a") == ["b"]
    assert not p.try_take("a")  # b runs
    p.release("b")
    assert p.try_take("a")


def test_unregistering_a_waiter_or_a_blocking_head() -> None:
    p = policy()
    p.register("a", needs(("R", 1)))
    p.register("b", needs(("R", 2)))
    p.register("c", needs(("R", 1)))
    assert p.stage("a") == ["a"]
    assert p.stage("b") == []
    assert p.stage("c") == []  # behind b
    assert p.unregister("b") == []  # the count drops to 1 and a still holds it
    assert p.release("a") == ["c"]
    assert p.withdraw("c") is False  # c runs: nothing to withdraw
    assert p.waiting() == 0


# -- the asyncio gates ------------------------------------------------------------------------
def test_gates_serialise_executions_and_release_after_errors() -> None:
    async def scenario() -> list[str]:
        limiter = RateLimiter()
        a, b = limiter.gates("m", [needs(("R", 1)), needs(("R", 1))])
        log: list[str] = []

        def run(name: str, fail: bool = False):  # noqa: ANN202
            async def body() -> None:
                log.append(f"{name} start")
                await asyncio.sleep(0.01)
                log.append(f"{name} end")
                if fail:
                    raise RuntimeError("boom")

            return body

        results = await asyncio.gather(
            limited(a, run("a", fail=True)), limited(b, run("b")), return_exceptions=True
        )
        assert isinstance(results[0], RuntimeError)
        assert limiter.policy.try_take(a)  # everything was given back
        return log

    assert asyncio.run(scenario()) == ["a start", "a end", "b start", "b end"]


def test_a_cancelled_wait_leaves_the_queue_and_keeps_no_resources() -> None:
    async def scenario() -> None:
        limiter = RateLimiter()
        a, b, c = limiter.gates("m", [needs(("R", 1))] * 3)
        assert a.acquire() is None
        waiting = asyncio.ensure_future(limited(b, _nothing))
        await asyncio.sleep(0)
        waiting.cancel()
        a.release()  # grants b's cancelled wait; its coroutine gives it back
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert limiter.policy.waiting() == 0
        await asyncio.wait_for(limited(c, _nothing), 1)  # R is free again

    asyncio.run(scenario())


def test_registering_a_model_that_cannot_be_served_leaves_nothing() -> None:
    limiter = RateLimiter([("R", 1, -1)])
    with pytest.raises(ServerError, match="minimum required count is 2"):
        limiter.gates("m", [needs(("R", 1)), needs(("R", 2))])
    assert limiter.policy.limits == {}
    assert len(limiter.gates("n", [needs(("R", 1))])) == 1
    assert limiter.describe() == "R=1 (device 0)"


async def _nothing() -> None:
    return None


# -- flags ------------------------------------------------------------------------------------
def _options(*flags: str) -> ServerOptions:
    args = build_parser().parse_args(["serve", "--model-repository", "/m", *flags])
    return options_from_args(args)


def test_rate_limit_flags_reach_the_options() -> None:
    assert _options().rate_limit.mode == "off"
    options = _options(
        "--rate-limit=EXECUTION_COUNT",
        "--rate-limit-resource=R1:10",
        "--rate-limit-resource=R2:5:0",
    )
    assert options.rate_limit.mode == "execution_count"
    assert options.rate_limit.resources == (("R1", 10, -1), ("R2", 5, 0))


@pytest.mark.parametrize(
    "flag",
    [
        "--rate-limit=sometimes",
        "--rate-limit-resource=R",
        "--rate-limit-resource=R:x",
        "--rate-limit-resource=R:1:2:3",
        "--rate-limit-resource=:1",
    ],
)
def test_bad_rate_limit_flags_stop_the_server(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _options(flag)
    assert "rate-limit" in capsys.readouterr().err


# -- the default scheduler's inline path -------------------------------------------------------
def _request() -> InferenceRequest:
    """A queued request, as DirectScheduler receives one (its statistics count executions)."""
    request = InferenceRequest(ClientRequest("m", 1, id="r"))
    request.queued(ModelStats("m", "1"))
    return request


class _InlineInstance:
    """Answers cheap requests on the loop; an execution in a task waits for ``gate``."""

    name = "fake"

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name
        self.proceed = asyncio.Event()

    def cheap(self, requests: list[object]) -> bool:
        return True

    def run_now(self, request: object) -> None:
        self.log.append(f"{self.name} inline")

    async def execute(self, requests: list[object]) -> None:
        self.log.append(f"{self.name} start")
        await self.proceed.wait()
        self.log.append(f"{self.name} end")


def test_the_inline_path_runs_only_when_the_limiter_grants_at_once() -> None:
    """Two models share R:1: while the other holds R, a cheap request is not answered inline
    but waits in a task for R, and runs once R is given back."""
    from tritium.scheduling.direct import DirectScheduler

    async def scenario() -> list[str]:
        log: list[str] = []
        limiter = RateLimiter()
        (holder,) = limiter.gates("other", [needs(("R", 1))])
        (gate,) = limiter.gates("m", [needs(("R", 1))])
        instance = _InlineInstance(log, "m")
        scheduler = DirectScheduler([instance], "1", [gate])
        scheduler.submit(_request())  # R is free: answered inline, at once
        assert holder.acquire() is None  # the other model executes...
        scheduler.submit(_request())  # ... so this one may not run inline
        await asyncio.sleep(0.01)
        log.append("other releases")
        holder.release()
        instance.proceed.set()
        await asyncio.wait_for(asyncio.gather(*scheduler._running), 5)
        assert limiter.policy.try_take(holder)  # m gave R back
        return log

    assert asyncio.run(scenario()) == ["m inline", "other releases", "m start", "m end"]
