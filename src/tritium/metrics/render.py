"""Prometheus text exposition of the server's statistics, under Triton's metric names.

Nothing is recorded here: the counters live in ``stats.ModelStats`` (plain integers updated on
the request path) and are rendered when ``/metrics`` is scraped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping

from .custom import HISTOGRAM, TYPE_NAMES, CustomMetrics, Family
from .render_latency import number as _number
from .render_latency import render_first_response as _first_response
from .render_latency import render_summaries as _summaries
from .openai import NAMES as OPENAI_NAMES
from .openai import OpenAIMetrics
from .stats import DURATION_BUCKETS_US, ModelStats, labels_with

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

_COUNTERS = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
        lambda s: s.success.count,
    ),
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
        lambda s: s.inference_count,
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
        lambda s: s.execution_count,
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda s: s.success.ns // 1000,
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        lambda s: s.queue.ns // 1000,
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda s: s.compute_input.ns // 1000,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda s: s.compute_infer.ns // 1000,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
        lambda s: s.compute_output.ns // 1000,
    ),
)
_CACHE = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        lambda s: s.cache_miss.count,
    ),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda s: s.cache_hit.ns // 1000,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        lambda s: s.cache_miss.ns // 1000,
    ),
)
_FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
_HISTOGRAM = "nv_inference_request_duration_histogram_us"
_RESTARTS = "tritium_model_instance_restarts_total"
_BACKLOG = "tritium_sequence_backlog"
_CPU = ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes")
_LATENCY_KINDS = ("request", "queue", "compute_input", "compute_infer", "compute_output")
# Every family the server renders itself: a model's custom family cannot take these names.
FAMILY_NAMES = frozenset(
    [name for name, _, _ in _COUNTERS + _CACHE]
    + ["nv_inference_request_failure", "nv_inference_pending_request_count", _HISTOGRAM]
    + [_RESTARTS, _BACKLOG, "tritium_model_ready", *_CPU, "nv_model_load_duration_secs"]
    + list(OPENAI_NAMES)
    + [
        "nv_inference_first_response_histogram_ms",
        *(f"nv_inference_{k}_summary_us" for k in _LATENCY_KINDS),
        "nv_cache_hit_summary_per_model",
        "nv_cache_miss_summary_per_model",
    ]
)


def _labels(stats: ModelStats) -> str:
    return stats.labels  # model, version and the config's metric_tags, sorted by name


def render(
    models: Iterable[ModelStats],
    cpu: CpuSampler | None = None,
    custom: CustomMetrics | None = None,
    index: Iterable[Mapping[str, str]] = (),
    openai: OpenAIMetrics | None = None,
) -> bytes:
    """The exposition, in Triton's family order (the order its registry has them), then
    tritium's own families, then the models' custom ones (pb_utils.MetricFamily). A family
    with no series is left out, as prometheus-cpp does. ``index``: the repository index rows
    (``InferenceServer.repository_index``), for ``tritium_model_ready``. ``openai``: the
    OpenAI-compatible API's families (metrics/openai.py)."""
    models = list(models)
    lines: list[str] = []
    _counters(lines, models)
    _gauges(lines, models)
    _cache_counters(lines, models)
    _first_response(lines, models)
    _summaries(lines, models)
    _histogram(lines, models)
    _restarts(lines, models)
    _backlog(lines, models)
    _readiness(lines, index)
    if openai is not None:
        openai.render(lines)
    if cpu is not None:
        cpu.render(lines)
    if custom is not None:
        for family in custom.families():
            _custom_family(lines, family)
    return ("\n".join(lines) + "\n").encode()


def _counters(lines: list[str], models: list[ModelStats]) -> None:
    """Request counts always; the ``*_duration_us`` counters unless
    ``--metrics-config counter_latencies=false``."""
    for name, help_text, value in _COUNTERS[:1]:
        _family(lines, name, help_text, "counter", models, value)
    _failures(lines, models)
    for name, help_text, value in _COUNTERS[1:3]:
        _family(lines, name, help_text, "counter", models, value)
    timed = [s for s in models if s.counter_latencies]
    for name, help_text, value in _COUNTERS[3:]:
        _family(lines, name, help_text, "counter", timed, value)


def _failures(lines: list[str], models: list[ModelStats]) -> None:
    if not models:
        return
    name = "nv_inference_request_failure"
    lines.append(f"# HELP {name} Number of failed inference requests, all batch sizes")
    lines.append(f"# TYPE {name} counter")
    for stats in models:
        for reason in _FAILURE_REASONS:
            count = stats.failures.get(reason, 0)
            lines.append(f"{name}{{{labels_with(stats, 'reason', reason)}}} {count}")


def _gauges(lines: list[str], models: list[ModelStats]) -> None:
    _family(
        lines,
        "nv_inference_pending_request_count",
        "Instantaneous number of pending requests awaiting execution per-model.",
        "gauge",
        models,
        lambda s: max(s.pending, 0),
    )
    _family(
        lines,
        "nv_model_load_duration_secs",
        "Model load time in seconds",
        "gauge",
        models,
        lambda s: _number(s.load_seconds),
    )


def _cache_counters(lines: list[str], models: list[ModelStats]) -> None:
    """Only for the models that use the response cache (and with the latency counters on),
    as Triton."""
    cached = [s for s in models if s.cache_enabled and s.counter_latencies]
    for name, help_text, value in _CACHE:
        _family(lines, name, help_text, "counter", cached, value)


def _family(
    lines: list[str], name: str, help_text: str, kind: str, models: list[ModelStats], value: object
) -> None:
    if not models:
        return
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for stats in models:
        lines.append(f"{name}{{{_labels(stats)}}} {value(stats)}")  # type: ignore[operator]


def _histogram(lines: list[str], models: list[ModelStats]) -> None:
    """tritium's own request-duration histogram (always on; Triton has none)."""
    if not models:
        return
    name = _HISTOGRAM
    lines.append(
        f"# HELP {name} Histogram of successful inference request durations in "
        "microseconds (read p50/p99 with histogram_quantile)"
    )
    lines.append(f"# TYPE {name} histogram")
    for stats in models:
        labels = _labels(stats)
        running = 0
        for bound, count in zip(DURATION_BUCKETS_US, stats.histogram, strict=False):
            running += count
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {stats.success.count}')
        lines.append(f"{name}_sum{{{labels}}} {stats.success.ns // 1000}")
        lines.append(f"{name}_count{{{labels}}} {stats.success.count}")


def _restarts(lines: list[str], models: list[ModelStats]) -> None:
    """tritium's own: how often each Python model instance's stub process was restarted
    after it crashed (or was killed for running past its execution timeout)."""
    restartable = [s for s in models if s.restarts]
    if not restartable:
        return
    name = _RESTARTS
    lines.append(
        f"# HELP {name} Number of times a model instance's stub process was restarted after it died"
    )
    lines.append(f"# TYPE {name} counter")
    for stats in restartable:
        for instance, count in sorted(stats.restarts.items()):
            lines.append(f"{name}{{{labels_with(stats, 'instance', instance)}}} {count}")


def _backlog(lines: list[str], models: list[ModelStats]) -> None:
    """tritium's own: the sequences each sequence model's backlog holds (waiting for a
    slot; bounded by --sequence-backlog-limit)."""
    sequence = [s for s in models if s.sequence_backlog is not None]
    _family(
        lines,
        _BACKLOG,
        "Number of sequences waiting in the sequence batcher's backlog for a slot",
        "gauge",
        sequence,
        lambda s: s.sequence_backlog(),
    )


def _custom_family(lines: list[str], family: Family) -> None:
    """A model's family (pb_utils.MetricFamily), as prometheus-cpp writes it."""
    name = family.name
    lines.append(f"# HELP {name} {escape_help(family.description)}")
    lines.append(f"# TYPE {name} {TYPE_NAMES[family.kind]}")
    for child in family.children.values():
        pairs = [f'{k}="{escape_label(v)}"' for k, v in child.labels]
        labels = "{" + ",".join(pairs) + "}" if pairs else ""
        if family.kind != HISTOGRAM:
            lines.append(f"{name}{labels} {format_value(child.value)}")
            continue
        running = 0
        for bound, count in zip((*child.bounds, math.inf), child.counts, strict=True):
            running += count
            le = ",".join([*pairs, f'le="{format_value(bound)}"'])
            lines.append(f"{name}_bucket{{{le}}} {running}")
        lines.append(f"{name}_sum{labels} {format_value(child.sum)}")
        lines.append(f"{name}_count{labels} {child.count}")


def escape_label(value: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text: backslash and newline escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value or bucket bound: integers without a fraction, the shortest exact
    form otherwise, and the text format's spellings of NaN and the infinities."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _readiness(lines: list[str], index: Iterable[Mapping[str, str]]) -> None:
    """tritium's own (Triton has no readiness metric): 1 per READY model version, 0 per version
    the server tried to serve that is not (failed, loading, unloading), so an alert can say
    which model is down. Models never loaded (explicit mode) and models unloaded on purpose
    are left out: nobody asked for them to be serving."""
    rows = [r for r in index if "state" in r and r.get("reason") != "unloaded"]
    if not rows:
        return
    name = "tritium_model_ready"
    lines.append(f"# HELP {name} Whether the model version is READY (1) or not (0)")
    lines.append(f"# TYPE {name} gauge")
    for row in rows:
        labels = (
            f'model="{escape_label(row["name"])}",version="{escape_label(row.get("version", ""))}"'
        )
        lines.append(f"{name}{{{labels}}} {1 if row['state'] == 'READY' else 0}")


class CpuSampler:
    """nv_cpu_utilization and nv_cpu_memory_* from /proc, sampled at most once per
    ``--metrics-interval-ms`` (Triton polls them on that interval): a scrape within the
    interval gets the last sample, and the utilisation is over the time between samples."""

    def __init__(
        self, interval_s: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = interval_s
        self._clock = clock
        self._last = self._read_stat()
        self._sampled_at = clock()
        self._values: tuple[float, int, int] | None = None

    def sample(self) -> tuple[float, int, int]:
        """(utilisation 0-1, total bytes, used bytes), refreshed once the interval passed."""
        now = self._clock()
        if self._values is None or now - self._sampled_at >= self._interval:
            self._sampled_at = now
            self._values = (self.utilization(), *self.memory())
        return self._values

    @staticmethod
    def _read_stat() -> tuple[int, int]:
        try:
            with open("/proc/stat", encoding="ascii") as handle:
                fields = [int(v) for v in handle.readline().split()[1:]]
        except (OSError, ValueError):
            return (0, 0)
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields), idle)

    def utilization(self) -> float:
        total, idle = self._read_stat()
        last_total, last_idle = self._last
        self._last = (total, idle)
        busy = (total - last_total) - (idle - last_idle)
        return busy / (total - last_total) if total > last_total else 0.0

    @staticmethod
    def memory() -> tuple[int, int]:
        info: dict[str, int] = {}
        try:
            with open("/proc/meminfo", encoding="ascii") as handle:
                for line in handle:
                    key, value = line.split(":", 1)
                    info[key] = int(value.split()[0]) * 1024
        except (OSError, ValueError):
            return (0, 0)
        total = info.get("MemTotal", 0)
        return total, total - info.get("MemAvailable", total)

    def render(self, lines: list[str]) -> None:
        utilization, total, used = self.sample()
        for name, help_text, value in (
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", utilization),
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", total),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", used),
        ):
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {value}")
