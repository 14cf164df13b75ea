"""The sliding-window summary (prometheus-cpp's TimeWindowQuantiles semantics) and the
histogram, on a fake clock; ``--metrics-config`` parsing with Triton's messages; the CPU
sampler's interval."""

from __future__ import annotations

import math

import pytest

from tritium.cli.main import build_parser, options_from_args
from tritium.metrics.latency import AGE_BUCKETS, MAX_AGE_NS, Histogram, SlidingSummary
from tritium.metrics.render import CpuSampler
from tritium.metrics.settings import (
    DEFAULT_QUANTILES,
    MetricsConfigError,
    MetricsSettings,
    parse_metrics_config,
)

S = 1_000_000_000
STEP = MAX_AGE_NS // AGE_BUCKETS  # 12 s
QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.99, 0.001))


def test_quantiles_are_exact_in_rank_for_small_values() -> None:
    summary = SlidingSummary(QUANTILES, now_ns=0)
    for value in range(1, 101):  # 1..100 µs
        summary.observe(value, now_ns=S)
    assert summary.quantiles(2 * S) == [(0.5, 50.0), (0.9, 90.0), (0.99, 99.0)]
    assert (summary.count, summary.total) == (100, 5050)


def test_large_values_are_within_the_cell_width() -> None:
    summary = SlidingSummary(((0.5, 0.05),), now_ns=0)
    values = [1_000_003 + 17 * i for i in range(1001)]
    for value in values:
        summary.observe(value, now_ns=0)
    ((_, median),) = summary.quantiles(0)
    true = sorted(values)[500]
    assert abs(median - true) / true < 1 / 128
    single = SlidingSummary(((0.5, 0.05),), now_ns=0)
    single.observe(123_457, now_ns=0)
    assert single.quantiles(0) == [(0.5, 123_457.0)]  # a lone value comes back exactly


def test_an_empty_window_gives_nan_and_keeps_count_and_sum() -> None:
    summary = SlidingSummary(QUANTILES, now_ns=0)
    assert all(math.isnan(v) for _, v in summary.quantiles(0))
    summary.observe(7, now_ns=0)
    later = summary.quantiles(MAX_AGE_NS + STEP)
    assert all(math.isnan(v) for _, v in later)
    assert (summary.count, summary.total) == (1, 7)  # _count/_sum never expire


def test_the_window_advances_in_age_buckets_steps() -> None:
    """An observation stays in the window until its step is the oldest of AGE_BUCKETS: it is
    seen 48 s later, and gone once the window moved past 60 s."""
    summary = SlidingSummary(((0.5, 0.05),), now_ns=0)
    summary.observe(10, now_ns=1 * S)  # step 0
    summary.observe(200, now_ns=STEP + S)  # step 1
    assert summary.quantiles(4 * STEP + S) == [(0.5, 10.0)]  # steps 0..4: both, rank 1 -> 10
    assert summary.quantiles(5 * STEP + S) == [(0.5, 200.0)]  # step 0 dropped
    assert math.isnan(summary.quantiles(6 * STEP + S)[0][1])


def test_a_clock_that_goes_back_stays_in_the_current_step() -> None:
    summary = SlidingSummary(((0.5, 0.05),), now_ns=10 * S)
    summary.observe(5, now_ns=3 * STEP)
    summary.observe(9, now_ns=S)  # earlier than the start: counted in the current step
    assert summary.quantiles(3 * STEP) == [(0.5, 5.0)]
    assert summary.count == 2


def test_histogram_buckets_are_upper_bounds() -> None:
    histogram = Histogram((100.0, 500.0))
    for value in (0, 100, 101, 500, 501, 10_000):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 2]  # <=100, <=500, +Inf
    assert (histogram.count, histogram.total) == (6, 11_202)
    no_bounds = Histogram(())
    no_bounds.observe(3)
    assert no_bounds.counts == [1]


# -- --metrics-config ---------------------------------------------------------------------


def test_defaults_are_tritons() -> None:
    settings = parse_metrics_config([])
    assert settings == MetricsSettings()
    assert settings.counter_latencies and not settings.summary_latencies
    assert not settings.histogram_latencies
    assert settings.summary_quantiles == DEFAULT_QUANTILES


def test_each_setting_and_the_last_one_wins() -> None:
    settings = parse_metrics_config(
        [
            "counter_latencies=false",
            "summary_latencies=true",
            "histogram_latencies=TRUE",
            "summary_quantiles=0.5:0.05,0.9:0.01",
            "summary_quantiles=0.25:0.1",
        ]
    )
    assert not settings.counter_latencies
    assert settings.summary_latencies and settings.histogram_latencies
    assert settings.summary_quantiles == ((0.25, 0.1),)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("summary_latencies", "--metrics-config option format is <setting>=<value>. Got "),
        ("=true", "--metrics-config option format is <setting>=<value>. Got =true"),
        ("summary_latencies=", "option format is <setting>=<value>. Got summary_latencies="),
        ("model,summary_latencies=true", "option format is <setting>=<value>. Got model,"),
        ("summary_latencies=on", "expected 'true' or 'false'"),
        ("summary_quantiles=0.5", "Invalid option: [0.5]. No ':' delimiter found."),
        ("summary_quantiles=0.5:x", "Invalid option: [0.5:x]."),
        ("summary_quantiles=1.5:0.01", "must be in [0, 1]"),
        ("summary_max_age=30", "unknown setting 'summary_max_age'"),
    ],
)
def test_what_tritium_cannot_honour_is_refused(arg: str, message: str) -> None:
    with pytest.raises(MetricsConfigError) as info:
        parse_metrics_config([arg])
    assert message in str(info.value)


def test_the_metrics_flags_reach_the_options() -> None:
    def options(*flags: str):  # type: ignore[no-untyped-def]
        args = build_parser().parse_args(["serve", "--model-repository", "r", *flags])
        return options_from_args(args)

    default = options()
    assert default.metrics.allow_cpu and default.metrics.interval_ms == 2000
    tuned = options(
        "--metrics-config=summary_latencies=true",
        "--allow-cpu-metrics=false",
        "--metrics-interval-ms",
        "500",
    )
    assert tuned.metrics.settings.summary_latencies and not tuned.metrics.allow_cpu
    assert tuned.metrics.interval_ms == 500
    assert not options("--allow-metrics=false").metrics.allow_cpu  # as Triton: ignored then
    with pytest.raises(SystemExit) as info:
        options("--metrics-config", "nope=1")
    assert "unknown setting 'nope'" in str(info.value.code)
    with pytest.raises(SystemExit):
        options("--metrics-interval-ms", "0")


def test_cpu_families_are_sampled_once_per_interval() -> None:
    now = [100.0]
    sampler = CpuSampler(2.0, clock=lambda: now[0])
    calls = []
    sampler.utilization = lambda: calls.append(now[0]) or 0.5  # type: ignore[method-assign]
    assert sampler.sample()[0] == 0.5
    now[0] += 1.0
    sampler.sample()
    assert len(calls) == 1  # within the interval: the previous sample
    now[0] += 1.5
    sampler.sample()
    assert len(calls) == 2
