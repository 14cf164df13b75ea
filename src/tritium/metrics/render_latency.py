"""Rendering of the latency distributions (``--metrics-config summary_latencies=true`` and
``histogram_latencies=true``) under Triton's names and HELP texts; ``metrics.render`` calls
these in Triton's family order. Nothing is recorded here (see ``latency.py``)."""

from __future__ import annotations

import math
import time

from .latency import SlidingSummary
from .stats import ModelStats

FIRST_RESPONSE = (
    "nv_inference_first_response_histogram_ms",
    "Duration from request to first response in milliseconds",
)
# (LatencySummaries attribute, family, HELP) as Triton core's Metrics registers them (the
# compute ones say "Cumulative": Triton's text).
SUMMARIES = (
    (
        "request",
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        "queue",
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "compute_input",
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "compute_infer",
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "compute_output",
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
    ),
    (
        "cache_hit",
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds.",
    ),
    (
        "cache_miss",
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds.",
    ),
)


def number(value: float) -> str:
    """A sample value or bound as the text format writes it: integers without a fraction,
    NaN and infinities by their names."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def render_first_response(lines: list[str], models: list[ModelStats]) -> None:
    """Time to the first response, in whole ms, per version (every model, decoupled or not,
    as in Triton); buckets from the config's model_metrics (default 100, 500, 2000, 5000)."""
    observed = [s for s in models if s.first_response is not None]
    if not observed:
        return
    name, help_text = FIRST_RESPONSE
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} histogram")
    for stats in observed:
        histogram = stats.first_response
        assert histogram is not None
        labels = stats.labels
        count = histogram.count
        lines.append(f"{name}_count{{{labels}}} {count}")
        lines.append(f"{name}_sum{{{labels}}} {number(histogram.total)}")
        running = 0
        for bound, seen in zip(histogram.bounds, histogram.counts, strict=False):
            running += seen
            lines.append(f'{name}_bucket{{{labels},le="{number(bound)}"}} {running}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {count}')


def render_summaries(lines: list[str], models: list[ModelStats]) -> None:
    """The ``*_summary_us`` families: quantiles over the last minute, ``_sum``/``_count``
    since the version loaded."""
    now = time.perf_counter_ns()
    with_summaries = [s for s in models if s.summaries is not None]
    for attribute, name, help_text in SUMMARIES:
        series = [(s, getattr(s.summaries, attribute)) for s in with_summaries]
        series = [(s, summary) for s, summary in series if summary is not None]
        if not series:
            continue
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} summary")
        for stats, summary in series:
            _summary(lines, name, stats.labels, summary, now)


def _summary(lines: list[str], name: str, labels: str, summary: SlidingSummary, now: int) -> None:
    for quantile, value in summary.quantiles(now):
        lines.append(f'{name}{{{labels},quantile="{number(quantile)}"}} {number(value)}')
    lines.append(f"{name}_sum{{{labels}}} {summary.total}")
    lines.append(f"{name}_count{{{labels}}} {summary.count}")
