"""tritium's /metrics rendering against the reference tables of docs/metrics.md (built from
Triton's source): every family rendered has the documented type, HELP text and labels; every
family documented as served is rendered when its settings are on; the others never are."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tritium.metrics import render as prometheus
from tritium.config.model_config import ConfigProblem, parse_config_text
from tritium.config.model_metrics import MetricSpec, metric_spec
from tritium.errors import ServerError, internal
from tritium.metrics.openai import OpenAIMetrics
from tritium.metrics.settings import MetricsSettings
from tritium.metrics.stats import ModelStats
from tritium.request import InferenceRequest, RequestState
from tritium.types import ClientRequest

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
TAGS = (("team", "search"), ("tier", 'gold "1"\\x'))


def reference() -> dict[str, dict[str, Any]]:
    """The rows of every table in docs/metrics.md whose first cell is a `family`."""
    rows: dict[str, dict[str, Any]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        name, kind, labels, help_text, served = cells
        name = name.strip("`")
        if kind == "counter":  # the parser names a counter family without its _total
            name = name.removesuffix("_total")
        rows[name] = {
            "type": kind,
            "labels": set() if labels == "none" else {x.strip() for x in labels.split(",")},
            "help": help_text,
            "served": served,
        }
    return rows


def _finished_request(name: str, cached: bool = False) -> InferenceRequest:
    """A request as the statistics see it once it ran: queued 1 µs, then computed."""
    request = InferenceRequest(ClientRequest(name))
    request.arrival_ns = 0
    request.start_ns = 1_000
    request.timing = (2_000, 30_000, 4_000)
    request.cached = cached
    return request


def _finish(stats: ModelStats, request: InferenceRequest, error: Exception | None) -> None:
    """The request's statistics recorded as it ends (``InferenceRequest.finish``)."""
    request.stats = stats
    request.state = RequestState.EXECUTING
    request.finish(error)


def _stats(name: str, settings: MetricsSettings, cache: bool) -> ModelStats:
    stats = ModelStats(name, "1")
    stats.configure(settings, MetricSpec(tags=TAGS), cache)
    stats.load_seconds = 0.25
    _finish(stats, _finished_request(name), None)
    _finish(stats, _finished_request(name), internal("the model failed"))  # reason BACKEND
    assert stats.first_response is None or stats.first_response.observe(3) is None
    if cache:
        stats.cache_lookup(True, 5_000)
        stats.cache_lookup(False, 6_000)
    stats.restarts["m_0"] = 1
    stats.sequence_backlog = lambda: 3  # a sequence model's backlog gauge
    return stats


def _openai() -> OpenAIMetrics:
    """The OpenAI routes' families with a request and two tokens of a stream recorded."""
    metrics = OpenAIMetrics()
    metrics.answered("chat_completions", 200)
    metrics.token("plain", 0.012, True)
    metrics.token("plain", 0.01, False)
    return metrics


def render(settings: MetricsSettings, cpu: bool = True) -> dict[str, Any]:
    models = [_stats("plain", settings, False), _stats("cached", settings, True)]
    sampler = prometheus.CpuSampler() if cpu else None
    text = prometheus.render(models, sampler, openai=_openai()).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


ALL_ON = MetricsSettings(summary_latencies=True, histogram_latencies=True)


def test_every_rendered_family_has_the_documented_type_help_and_labels() -> None:
    rows = reference()
    families = render(ALL_ON)
    for name, family in families.items():
        assert name in rows, f"{name} is served but not in docs/metrics.md"
        row = rows[name]
        assert family.type == row["type"], name
        assert family.documentation == row["help"], name
        for sample in family.samples:
            labels = set(sample.labels)
            if {"model", "version"} <= labels:  # the tags ride on every per-version series
                assert {"_team", "_tier"} <= labels, sample
                labels -= {"_team", "_tier"}
            extra = {"le"} if sample.name.endswith("_bucket") else set()
            if family.type == "summary" and sample.name == name:
                extra = {"quantile"}
            assert labels == (row["labels"] - {"le", "quantile"}) | extra, (name, sample)


def test_every_family_documented_as_served_is_rendered_and_no_other() -> None:
    families = render(ALL_ON)
    for name, row in reference().items():
        if row["served"] == "not served":
            assert name not in families, name
        else:
            assert name in families, name


def test_label_values_are_escaped_and_sorted_by_name() -> None:
    text = prometheus.render([_stats("plain", MetricsSettings(), False)]).decode()
    line = next(x for x in text.splitlines() if x.startswith("nv_inference_count{"))
    assert line == (
        'nv_inference_count{_team="search",_tier="gold \\"1\\"\\\\x",model="plain",version="1"} 1'
    )
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed["nv_inference_count"].samples[0].labels["_tier"] == TAGS[1][1]


def test_counter_latencies_false_drops_the_duration_and_cache_counters() -> None:
    families = render(MetricsSettings(counter_latencies=False), cpu=False)
    rows = reference()
    for name in families:
        assert rows[name]["served"] == "served" or name in (
            "nv_inference_request_duration_histogram_us",
            "tritium_model_instance_restarts",
        ), name
    assert "nv_inference_request_success" in families
    assert not any(name.startswith("nv_cpu_") for name in families)


def test_default_settings_have_no_summaries_or_first_response_histogram() -> None:
    families = render(MetricsSettings())
    assert not [n for n in families if n.endswith("_summary_us") or "summary_per" in n]
    assert "nv_inference_first_response_histogram_ms" not in families
    assert "nv_inference_request_duration_us" in families


def test_summaries_follow_tritons_observations() -> None:
    """Compute and queue times in µs; a cache model has cache summaries and no request
    summary (Triton's FIXME), a model without the cache the opposite."""
    families = render(ALL_ON)

    def value(family: str, model: str, suffix: str, quantile: str = "") -> float:
        for sample in families[family].samples:
            if sample.labels["model"] == model and sample.name == family + suffix:
                if not quantile or sample.labels.get("quantile") == quantile:
                    return float(sample.value)
        raise AssertionError((family, model, suffix))

    assert value("nv_inference_compute_infer_summary_us", "plain", "", "0.5") == 30
    assert value("nv_inference_compute_input_summary_us", "plain", "_sum") == 2
    assert value("nv_inference_queue_summary_us", "plain", "", "0.99") == 1
    assert value("nv_inference_request_summary_us", "plain", "_count") == 1
    with pytest.raises(AssertionError):
        value("nv_inference_request_summary_us", "cached", "_count")
    assert value("nv_cache_hit_summary_per_model", "cached", "", "0.5") == 5
    assert value("nv_cache_miss_summary_per_model", "cached", "_sum") == 6
    assert value("nv_cache_num_hits_per_model", "cached", "_total") == 1
    hist = "nv_inference_first_response_histogram_ms"
    assert value(hist, "plain", "_count") == 1 and value(hist, "plain", "_sum") == 3
    load = value("nv_model_load_duration_secs", "plain", "")
    assert math.isclose(load, 0.25)


# -- the model's own settings: metric_tags and model_metrics -------------------------------

_FAMILY = "nv_inference_first_response_histogram_ms"


def _spec(extra: str) -> MetricSpec:
    text = f'name: "m"\nbackend: "python"\n{extra}\n'
    path = Path("/repo/m/config.pbtxt")
    return metric_spec(parse_config_text(text, path), ConfigProblem("m", path, text))


def test_metric_tags_and_buckets_from_the_config() -> None:
    spec = _spec(
        'metric_tags { key: "tier" value: "gold" }\nmetric_tags { key: "team" value: "a" }\n'
        f'model_metrics {{ metric_control [ {{ metric_identifier {{ family: "{_FAMILY}" }} '
        "histogram_options { buckets: [ 1, 2.5, 10 ] } } ] }"
    )
    assert spec.tags == (("team", "a"), ("tier", "gold"))
    assert spec.first_response_buckets == (1.0, 2.5, 10.0)
    assert _spec("").first_response_buckets == (100.0, 500.0, 2000.0, 5000.0)
    only_inf = _spec(
        f'model_metrics {{ metric_control [ {{ metric_identifier {{ family: "{_FAMILY}" }} }} ] }}'
    )
    assert only_inf.first_response_buckets == ()  # Triton: no buckets given, only +Inf


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('metric_tags { key: "my-team" value: "a" }', "cannot be a Prometheus label name"),
        (
            'model_metrics { metric_control [ { metric_identifier { family: "nv_x" } } ] }',
            "metric family 'nv_x' is not a customizable metric",
        ),
        (
            f'model_metrics {{ metric_control [ {{ metric_identifier {{ family: "{_FAMILY}" }} '
            "histogram_options { buckets: [ 10, 5 ] } } ] }",
            "must be finite and strictly increasing",
        ),
    ],
)
def test_a_metric_setting_tritium_cannot_honour_fails_the_load(extra: str, message: str) -> None:
    with pytest.raises(ServerError) as info:
        _spec(extra)
    assert message in info.value.message
    assert "config.pbtxt:" in info.value.message  # names the file and line


def test_the_sequence_backlog_gauge_is_only_for_sequence_models() -> None:
    plain, sequence = ModelStats("plain", "1"), ModelStats("seq", "2")
    sequence.sequence_backlog = lambda: 7
    text = prometheus.render([plain, sequence]).decode()
    family = {f.name: f for f in text_string_to_metric_families(text)}["tritium_sequence_backlog"]
    assert [(s.labels["model"], s.labels["version"], s.value) for s in family.samples] == [
        ("seq", "2", 7)
    ]
    assert "tritium_sequence_backlog" not in prometheus.render([plain]).decode()
