"""The inline-or-thread decision of the threaded backends (backends/inline_policy.py): pure
logic, costs injected; the model-wide setting and the hard bound (``ModelExecution``), the
bound on a real ThreadedInstance whose run computes on the calling thread."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterator

import pytest

from tritium.backends.inline_policy import (
    BOUND_CPU,
    ENV,
    LEGACY_ENV,
    PARAMETER,
    SHARE_EVERY,
    SUSPECT_RUNS,
    SWITCH_ENV,
    SWITCH_INTERVAL_US,
    InlinePolicy,
    ModelExecution,
    execution_mode,
    mode_from_env,
    switch_interval,
)
from tritium.backends.threaded import ThreadedInstance
from tritium.errors import ServerError
from tritium.request import InferenceRequest
from tritium.types import InferenceResponse

US = 1e-6


def _measured(
    inline_us: float, handoff_us: float, probe_every: int = 64, probe_gap: float = 0.0
) -> InlinePolicy:
    policy = InlinePolicy(probe_every=probe_every, probe_gap=probe_gap)
    policy.record_handoff(1, roundtrip=(handoff_us + 5) * US, compute=5 * US, busy=inline_us * US)
    return policy


def test_nothing_measured_goes_to_the_thread() -> None:
    assert not InlinePolicy().prefers_inline()


def test_first_handoff_measures_both_costs() -> None:
    policy = InlinePolicy()
    policy.record_handoff(1, roundtrip=60 * US, compute=5 * US, busy=12 * US)
    assert policy.handoff_cost == pytest.approx(55 * US)  # the round trip less the compute
    assert policy.inline_cost == pytest.approx(12 * US) and policy.seeded
    assert policy.prefers_inline()


def test_a_run_dearer_than_the_handoff_stays_on_the_thread() -> None:
    policy = _measured(inline_us=900, handoff_us=60)
    assert not policy.prefers_inline()


def test_the_stand_in_gives_way_to_the_first_inline_measurement() -> None:
    policy = _measured(inline_us=40, handoff_us=60)
    policy.record_inline(10 * US)
    assert policy.inline_cost == pytest.approx(10 * US) and not policy.seeded


def test_a_handoff_of_several_runs_weighs_them_together() -> None:
    policy = _measured(inline_us=20, handoff_us=50)
    assert policy.prefers_inline(runs=2)
    assert not policy.prefers_inline(runs=3)  # 60 µs of loop time against one 50 µs trip


def test_a_slower_machine_keeps_the_same_choice_when_both_costs_scale() -> None:
    fast, slow = _measured(inline_us=10, handoff_us=50), _measured(inline_us=40, handoff_us=200)
    assert fast.prefers_inline() and slow.prefers_inline()


def test_a_gil_convoy_on_the_thread_path_moves_the_run_inline() -> None:
    # inline runs of 150 µs looked dear against 60 µs hand-offs, until the hand-offs began to
    # wait for the GIL behind a busy loop (switch interval: milliseconds per trip)
    policy = _measured(inline_us=150, handoff_us=60)
    assert not policy.prefers_inline()
    for _ in range(10):
        policy.record_handoff(1, roundtrip=5000 * US, compute=5 * US, busy=150 * US)
    assert policy.prefers_inline()


def test_probes_of_the_other_path_let_the_decision_flip_back() -> None:
    policy = _measured(inline_us=10, handoff_us=50, probe_every=4)
    for _ in range(4):
        assert policy.prefers_inline()
        policy.record_inline(10 * US)
    assert policy.probing and not policy.prefers_inline()  # one trip to refresh its cost
    # conditions changed: the thread is now cheap, the loop's runs dear
    policy.record_handoff(1, roundtrip=8 * US, compute=5 * US, busy=30 * US)
    assert not policy.probing
    for _ in range(4):  # a lasting change (one sample alone is capped: see below)
        policy.record_inline(400 * US)
    for _ in range(20):
        policy.record_handoff(1, roundtrip=8 * US, compute=5 * US, busy=30 * US)
        if not policy.probing:
            assert not policy.prefers_inline()


def test_a_probe_lasts_until_the_probed_path_gives_a_sample() -> None:
    policy = _measured(inline_us=10, handoff_us=50, probe_every=1)
    policy.record_inline(10 * US)
    assert policy.probing and not policy.probe_inline
    policy.record_inline(10 * US)  # a run of the preferred path does not end the probe
    assert policy.probing and not policy.prefers_inline()


@pytest.mark.parametrize(("mode", "inline"), [("inline", True), ("thread", False)])
def test_a_forced_mode_ignores_the_costs(mode: str, inline: bool) -> None:
    policy = InlinePolicy(mode)
    assert policy.prefers_inline() is inline
    policy.record_handoff(1, roundtrip=1.0 if inline else 1e-6, compute=0.0, busy=1e-6)
    policy.record_inline(1e-6 if not inline else 1.0)
    assert policy.prefers_inline() is inline and not policy.probing


@pytest.mark.parametrize(
    ("environ", "mode"),
    [
        ({}, "auto"),
        ({ENV: ""}, "auto"),
        ({ENV: "Thread"}, "thread"),
        ({ENV: " inline "}, "inline"),
        ({LEGACY_ENV: "thread"}, "thread"),  # the older name still works
        ({ENV: "auto", LEGACY_ENV: "thread"}, "auto"),  # the new name first
    ],
)
def test_mode_from_env(environ: dict[str, str], mode: str) -> None:
    assert mode_from_env(environ) == mode


@pytest.mark.parametrize(
    ("parameters", "environ", "mode"),
    [
        ({}, {}, "auto"),
        ({}, {ENV: "thread"}, "thread"),  # the server-wide default
        ({PARAMETER: "thread"}, {}, "thread"),
        ({PARAMETER: " Auto "}, {ENV: "thread"}, "auto"),  # the model's own setting wins
        ({PARAMETER: "inline"}, {}, "inline"),
    ],
)
def test_a_models_setting_over_the_server_default(
    parameters: dict[str, str], environ: dict[str, str], mode: str
) -> None:
    assert execution_mode(parameters, environ) == mode


def test_an_unknown_setting_of_a_model_is_refused_with_the_choices() -> None:
    with pytest.raises(ServerError) as caught:
        execution_mode({PARAMETER: "fast"}, {})
    message = str(caught.value.message)
    assert PARAMETER in message and "auto, inline, thread" in message and "'fast'" in message


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(ServerError) as caught:
        mode_from_env({LEGACY_ENV: "fast"})
    message = str(caught.value.message)
    assert LEGACY_ENV in message and "auto, inline, thread" in message and "'fast'" in message


def test_settled_names_the_preferred_path_probes_aside() -> None:
    assert InlinePolicy().settled() == "unmeasured"
    assert InlinePolicy("thread").settled() == "thread"
    policy = _measured(inline_us=10, handoff_us=50, probe_every=1)
    policy.record_inline(10 * US)
    assert policy.probing and policy.settled() == "inline"
    assert _measured(inline_us=900, handoff_us=50).settled() == "thread"


@pytest.mark.parametrize(
    ("environ", "seconds"),
    [
        ({}, SWITCH_INTERVAL_US / 1e6),
        ({SWITCH_ENV: ""}, SWITCH_INTERVAL_US / 1e6),
        ({SWITCH_ENV: "5000"}, 0.005),
        ({SWITCH_ENV: " 1 "}, 1e-6),
    ],
)
def test_switch_interval(environ: dict[str, str], seconds: float) -> None:
    assert switch_interval(environ) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0", "-5", "2.5", "fast", "1000001"])
def test_a_bad_switch_interval_is_refused(text: str) -> None:
    with pytest.raises(ServerError) as caught:
        switch_interval({SWITCH_ENV: text})
    assert SWITCH_ENV in str(caught.value.message) and f"'{text}'" in str(caught.value.message)


def test_probes_are_spaced_in_time_too() -> None:
    """However fast the samples come, two probes are at least ``probe_gap`` apart: a probe of
    the thread stalls the requests queued behind it."""
    now = [100.0]
    policy = _measured(inline_us=10, handoff_us=50, probe_every=1, probe_gap=0.5)
    policy.clock = lambda: now[0]
    policy.record_inline(10 * US)  # the preferred path's sample: a probe is due
    assert policy.probing and not policy.probe_inline
    policy.record_handoff(1, roundtrip=55 * US, compute=5 * US, busy=10 * US)  # its sample
    assert not policy.probing
    for _ in range(100):  # many samples, no time: no probe
        policy.record_inline(10 * US)
    assert not policy.probing
    now[0] += 0.5
    policy.record_inline(10 * US)
    assert policy.probing


def test_an_idle_loop_overlaps_nothing_and_keeps_a_cheap_run_inline() -> None:
    policy = InlinePolicy(probe_gap=0.0)
    for _ in range(10):
        policy.record_inline(40 * US, cpu=40 * US)
        policy.record_handoff(1, roundtrip=90 * US, compute=10 * US, busy=40 * US, overlap=0.0)
    assert policy.handoff_cost == pytest.approx(80 * US)  # wake-ups and waits, all lost
    assert policy.settled() == "inline"


def test_a_saturated_loop_overlaps_the_trip_and_sends_the_batch_to_the_thread() -> None:
    # the same model and run costs, but the loop spent the trip on other requests' protocol
    # work: only what it could not overlap (the thread's share of the GIL) is lost to it
    policy = InlinePolicy(probe_gap=0.0)
    for _ in range(10):
        policy.record_inline(40 * US, cpu=40 * US)
        policy.record_handoff(
            1, roundtrip=300 * US, compute=10 * US, busy=40 * US, overlap=280 * US
        )
    assert policy.handoff_cost == pytest.approx(20 * US)
    assert policy.settled() == "thread"


def test_a_gil_convoy_overlaps_little_and_keeps_the_run_inline() -> None:
    # a long trip that the loop spent waiting (for the GIL, for the thread's wake-up)
    policy = InlinePolicy(probe_gap=0.0)
    for _ in range(10):
        policy.record_inline(40 * US, cpu=40 * US)
        policy.record_handoff(
            1, roundtrip=900 * US, compute=10 * US, busy=40 * US, overlap=100 * US
        )
    assert policy.settled() == "inline"


def test_the_overlap_is_counted_in_wall_time_at_the_loops_share_of_a_core() -> None:
    # a throttled core: the loop gets half of it (its inline runs: CPU half their wall), so
    # 100 µs of its CPU during a trip stand for 200 µs of the trip
    policy = InlinePolicy(probe_gap=0.0)
    for _ in range(40):
        policy.record_inline(80 * US, cpu=40 * US)
    assert policy.share == pytest.approx(0.5, abs=0.01)
    policy.record_handoff(1, roundtrip=250 * US, compute=10 * US, busy=40 * US, overlap=100 * US)
    assert policy.handoff_cost == pytest.approx(50 * US, rel=0.05)


def test_the_overlap_never_credits_more_than_the_trip() -> None:
    policy = InlinePolicy()
    policy.record_handoff(1, roundtrip=100 * US, compute=10 * US, busy=40 * US, overlap=500 * US)
    assert policy.handoff_cost == 0.0


def test_an_inline_run_without_its_cpu_leaves_the_share() -> None:
    policy = InlinePolicy()
    policy.record_inline(40 * US)
    assert policy.share == 1.0


def test_one_preempted_run_does_not_flip_the_choice_but_a_lasting_change_does() -> None:
    policy = _measured(inline_us=20, handoff_us=50)
    policy.record_inline(20 * US)
    policy.record_inline(100_000 * US)  # preempted for 100 ms once: counted as 80 µs
    assert policy.inline_cost == pytest.approx(32 * US) and policy.settled() == "inline"
    for _ in range(5):
        policy.record_inline(1000 * US)
    assert policy.settled() == "thread"


# -- ModelExecution: where a model may run at all ---------------------------------------------


def test_a_value_dependent_model_stays_on_its_threads_whatever_the_setting() -> None:
    assert ModelExecution("m", "inline", "a Loop node").threads_only
    assert ModelExecution("m", "thread").threads_only
    assert not ModelExecution("m", "auto").threads_only


def test_a_run_past_the_bound_pins_the_model_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    execution = ModelExecution("m", "auto")
    execution.bounded(wall=0.030, cpu=0.0001)  # preempted, not computing: no pin
    assert not execution.threads_only and not execution.suspect
    execution.bounded(wall=0.004, cpu=None)  # slow, CPU not timed: the next runs are
    assert not execution.threads_only and execution.suspect == SUSPECT_RUNS
    with caplog.at_level(logging.WARNING, logger="tritium"):
        execution.bounded(wall=0.004, cpu=0.003)
        execution.bounded(wall=9.0, cpu=9.0)
    assert execution.threads_only and "3.0 ms of CPU" in execution.reason
    assert [r.getMessage().count("threads only") for r in caplog.records] == [1]
    other = ModelExecution("m2", "auto")
    other.bounded(wall=0.5, cpu=None)  # past the wall bound: CPU or not
    assert other.threads_only


def test_suspicion_wears_off_after_runs_under_the_bound() -> None:
    execution = ModelExecution("m", "auto")
    execution.bounded(wall=0.004, cpu=None)
    for _ in range(SUSPECT_RUNS):
        execution.bounded(wall=0.0001, cpu=0.0001)
    assert execution.suspect == 0 and not execution.threads_only


class _Computes(ThreadedInstance):
    """Computes on the calling thread for ``seconds`` of its CPU per run."""

    seconds = 0.0

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        return []


@pytest.fixture
def switch() -> Iterator[None]:
    saved = sys.getswitchinterval()  # a ThreadedInstance sets the process's
    yield
    sys.setswitchinterval(saved)


@pytest.mark.usefixtures("switch")
def test_a_dear_run_on_the_loop_sends_every_instance_of_the_model_to_its_thread() -> None:
    execution = ModelExecution("m", "inline")
    first, second = (_Computes(f"m_{i}", 1, "test", execution) for i in range(2))
    try:
        first.seconds = BOUND_CPU / 20
        for _ in range(SHARE_EVERY + 2):  # timed in CPU once among them: well under the bound
            first._run_inline([])
        assert first.cheap([]) and second.cheap([])
        first.seconds = BOUND_CPU * 1.5
        first._run_inline([])  # not timed in CPU: slow, maybe preempted; the next are timed
        assert first.cheap([]) and execution.suspect
        first._run_inline([])
        assert not first.cheap([]) and not second.cheap([])
        assert "of CPU" in execution.reason
    finally:
        for instance in (first, second):
            asyncio.run(instance.close())
