"""Per model-version statistics, recorded in the core as plain integers.

Recording is a handful of additions per request (no locks: everything runs on the loop);
the statistics extension and the Prometheus endpoint render these counters on demand.
Durations are nanoseconds from ``time.perf_counter_ns``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any, Final

from .latency import Histogram, SlidingSummary
from .settings import MetricSpec, MetricsSettings


# Request-duration histogram buckets (µs), cheap enough to fill on every request; p50/p99
# can be read from them. Typed as a tuple of any length: a fixed-length tuple type would make
# compiled code keep it as 14 C integers and build a new tuple of 14 ints for every
# ``bisect_left`` (14 allocations per request).
DURATION_BUCKETS_US: Final[tuple[int, ...]] = (
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    5_000_000,
)


class Duration:
    __slots__ = ("count", "ns")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


class BatchStats:
    __slots__ = ("compute_input", "compute_infer", "compute_output")

    def __init__(self) -> None:
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()


class ModelStats:
    """Triton's ModelStatistics for one model version."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self.last_inference_ms = 0
        self.inference_count = 0  # batch elements of successful requests
        self.execution_count = 0
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()
        self.cache_miss = Duration()
        self.cache_enabled = False
        self.failures: dict[str, int] = {}  # reason (Triton's label) -> count
        self.batches: dict[int, BatchStats] = {}
        self.pending = 0  # accepted, not yet executing
        self.restarts: dict[str, int] = {}  # instance -> stub restarts (Python backend)
        # a sequence model's backlogged sequences, read when rendered (None: not one)
        self.sequence_backlog: Callable[[], int] | None = None
        self.histogram = [0] * (len(DURATION_BUCKETS_US) + 1)
        # Prometheus metrics (--metrics-config, the config's metric_tags and model_metrics):
        # set once by ``configure`` before the version takes requests.
        self.label_map = {"model": name, "version": version}
        self.labels = _label_text(self.label_map)
        self.counter_latencies = True
        self.summaries: LatencySummaries | None = None
        self.first_response: Histogram | None = None  # ms, observed by the ResponseSender
        self.load_seconds = 0.0

    def configure(
        self, settings: MetricsSettings, spec: MetricSpec, cache: bool, namespace: str = ""
    ) -> None:
        """The metric settings of this version (Triton's MetricModelReporter creation): the
        config's metric_tags become ``_<key>`` labels; ``cache``: this model uses the
        response cache (its cache families are served from the start); ``namespace``: its
        repository under --model-namespacing, a ``namespace`` label as Triton's."""
        labels = {"model": self.name, "version": self.version}
        if namespace:
            labels["namespace"] = namespace
        labels.update((f"_{key}", value) for key, value in spec.tags)
        self.label_map = labels
        self.labels = _label_text(labels)
        self.counter_latencies = settings.counter_latencies
        self.cache_enabled = self.cache_enabled or cache
        if settings.summary_latencies:
            self.summaries = LatencySummaries(settings, self.cache_enabled)
        if settings.histogram_latencies:
            self.first_response = Histogram(spec.first_response_buckets)

    def cache_lookup(self, hit: bool, ns: int) -> None:
        """A response cache lookup (and, on a miss, the later insertion is not timed)."""
        self.cache_enabled = True
        (self.cache_hit if hit else self.cache_miss).add(ns)
        if self.summaries is not None:
            self.summaries.cache(hit, ns)

    def executed(self, batch_size: int, timing: tuple[int, int, int]) -> None:
        """One model execution over ``batch_size`` elements."""
        self.execution_count += 1
        entry = self.batches.get(batch_size)
        if entry is None:
            entry = self.batches[batch_size] = BatchStats()
        entry.compute_input.add(timing[0])
        entry.compute_infer.add(timing[1])
        entry.compute_output.add(timing[2])

    # What a finished request records (``request.py:_record``), from plain values: the
    # statistics know no request.
    def failed(self, total_ns: int, reason: str = "BACKEND") -> None:
        """A request failed after ``total_ns`` (``reason``: Triton's label)."""
        self.fail.add(total_ns)
        self.failures[reason] = self.failures.get(reason, 0) + 1

    def succeeded(self, total_ns: int, now_ns: int, cached: bool) -> None:
        """A request succeeded after ``total_ns`` (``cached``: answered from the response
        cache, which counts as a success, not as an inference: Triton's)."""
        self.success.add(total_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.histogram[bisect_left(DURATION_BUCKETS_US, total_ns // 1000)] += 1
        summaries = self.summaries
        if summaries is not None:
            if cached:  # a cache hit waited in no queue
                summaries.queue.observe(0, now_ns)
            elif summaries.request is not None:
                summaries.request.observe(total_ns // 1000, now_ns)

    def inferred(
        self, batch_size: int, queue_ns: int, timing: tuple[int, int, int] | None, now_ns: int
    ) -> None:
        """A successful request that a model ran: ``batch_size`` elements, ``queue_ns`` in the
        queue (-1: it never reached an instance), the backend's ``timing``."""
        self.inference_count += batch_size
        if queue_ns >= 0:
            self.queue.add(queue_ns)
        if timing is not None:
            self.compute_input.add(timing[0])
            self.compute_infer.add(timing[1])
            self.compute_output.add(timing[2])
        if self.summaries is not None:
            self.summaries.inferred(queue_ns, timing, now_ns)

    def as_dict(self) -> dict[str, Any]:
        """Triton's ``ModelStatistics`` as JSON (the statistics extension's format)."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_dict(),
                "fail": self.fail.as_dict(),
                "queue": self.queue.as_dict(),
                "compute_input": self.compute_input.as_dict(),
                "compute_infer": self.compute_infer.as_dict(),
                "compute_output": self.compute_output.as_dict(),
                "cache_hit": self.cache_hit.as_dict(),
                "cache_miss": self.cache_miss.as_dict(),
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": entry.compute_input.as_dict(),
                    "compute_infer": entry.compute_infer.as_dict(),
                    "compute_output": entry.compute_output.as_dict(),
                }
                for size, entry in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }


def labels_with(stats: ModelStats, key: str, value: str) -> str:
    """The version's labels and one more, all sorted by name (Triton's failure ``reason``)."""
    return _label_text({**stats.label_map, key: value})


def _label_text(labels: dict[str, str]) -> str:
    """Prometheus labels in Triton's order (prometheus-cpp keeps them sorted by name), with
    the text format's escapes (a tag value is the operator's text)."""
    return ",".join(f'{k}="{escape_label(v)}"' for k, v in sorted(labels.items()))


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class LatencySummaries:
    """The ``*_summary_us`` families of one version (``--metrics-config
    summary_latencies=true``), observed as Triton's InferenceStatsAggregator does: on success,
    request (not for a model with the response cache: Triton leaves it out there), queue and
    compute times in µs; the cache's hit and miss times."""

    __slots__ = (
        "request",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    )

    def __init__(self, settings: MetricsSettings, cache_enabled: bool) -> None:
        now = time.perf_counter_ns()
        quantiles = settings.summary_quantiles
        self.queue = SlidingSummary(quantiles, now)
        self.compute_input = SlidingSummary(quantiles, now)
        self.compute_infer = SlidingSummary(quantiles, now)
        self.compute_output = SlidingSummary(quantiles, now)
        self.request = None if cache_enabled else SlidingSummary(quantiles, now)
        self.cache_hit = SlidingSummary(quantiles, now) if cache_enabled else None
        self.cache_miss = SlidingSummary(quantiles, now) if cache_enabled else None

    def inferred(self, queue_ns: int, timing: tuple[int, int, int] | None, now_ns: int) -> None:
        if queue_ns >= 0:
            self.queue.observe(queue_ns // 1000, now_ns)
        if timing is not None:
            self.compute_input.observe(timing[0] // 1000, now_ns)
            self.compute_infer.observe(timing[1] // 1000, now_ns)
            self.compute_output.observe(timing[2] // 1000, now_ns)

    def cache(self, hit: bool, ns: int) -> None:
        summary = self.cache_hit if hit else self.cache_miss
        if summary is not None:
            summary.observe(ns // 1000, time.perf_counter_ns())
