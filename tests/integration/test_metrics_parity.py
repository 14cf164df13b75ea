"""Triton's metric families on /metrics after HTTP and gRPC requests: the latency summaries and
the first-response histogram of ``--metrics-config``, the load-duration gauge, the config's
``metric_tags`` labels and ``model_metrics`` buckets, ``counter_latencies=false`` and
``--allow-cpu-metrics=false``. Every scrape is parsed with prometheus_client's parser (and
checked by promtool where it is installed)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from tests.support import clients
from testkit.server_process import ServerProcess, server_command

TAGGED = "simple_tagged"
CACHED = "simple_cached"
TAGS = {"team": "search", "tier": 'gold "1"'}  # a value with a quote: escaped in the text
BUCKETS = (1, 10, 250)
QUANTILES = "0.5:0.05,0.99:0.001"
REQUESTS = {"http": 3, "grpc": 2}
STREAM_VALUES = [4, 5, 6]
SUMMARIES = (
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
)
DURATION_COUNTERS = (
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


@pytest.fixture(scope="module")
def repo(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("metrics") / "repo"
    for name in ("simple", "repeat_int32"):
        shutil.copytree(example_repo / name, root / name)
    shutil.copytree(example_repo / "simple", root / TAGGED)
    shutil.copytree(example_repo / "simple", root / CACHED)
    cached = root / CACHED / "config.pbtxt"
    cached.write_text(
        cached.read_text().replace('name: "simple"', f'name: "{CACHED}"')
        + "response_cache { enable: true }\n"
    )
    config = root / TAGGED / "config.pbtxt"
    tags = "".join(
        f'metric_tags {{ key: "{k}" value: "{v.replace(chr(34), chr(92) + chr(34))}" }}\n'
        for k, v in TAGS.items()
    )
    buckets = ", ".join(str(b) for b in BUCKETS)
    config.write_text(
        config.read_text().replace('name: "simple"', f'name: "{TAGGED}"')
        + tags
        + "model_metrics { metric_control [ { metric_identifier { family: "
        + '"nv_inference_first_response_histogram_ms" } '
        + f"histogram_options {{ buckets: [ {buckets} ] }} }} ] }}\n"
    )
    return root


def _drive(proc: ServerProcess) -> None:
    """Unary requests to simple and the tagged model over both protocols, and one gRPC stream
    to the decoupled repeat_int32 (one response per value)."""
    for protocol, count in REQUESTS.items():
        client = clients.client(protocol, proc.url(protocol))
        try:
            for model in ("simple", TAGGED):
                for _ in range(count):
                    inputs, a, b = clients.add_sub_inputs(protocol)
                    result = client.infer(model, inputs)
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        finally:
            client.close()
    _stream_repeat(proc)


def _stream_repeat(proc: ServerProcess) -> None:
    responses: list[Any] = []
    client = grpcclient.InferenceServerClient(proc.grpc_url)
    client.start_stream(callback=lambda result, error: responses.append((result, error)))
    try:
        values = np.array(STREAM_VALUES, dtype=np.int32)
        inputs = [
            grpcclient.InferInput("IN", [len(values)], "INT32"),
            grpcclient.InferInput("DELAY", [len(values)], "UINT32"),
            grpcclient.InferInput("WAIT", [1], "UINT32"),
        ]
        inputs[0].set_data_from_numpy(values)
        inputs[1].set_data_from_numpy(np.zeros(len(values), dtype=np.uint32))
        inputs[2].set_data_from_numpy(np.zeros(1, dtype=np.uint32))
        client.async_stream_infer("repeat_int32", inputs)
    finally:
        client.stop_stream()  # waits for the stream to end
        client.close()
    assert len(responses) == len(STREAM_VALUES), responses
    assert all(error is None for _, error in responses), responses


def scrape(proc: ServerProcess) -> str:
    url = f"http://127.0.0.1:{proc.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.read().decode()


def families(text: str) -> dict[str, Any]:
    """name -> family, from prometheus_client's parser (a malformed line raises)."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(family: Any, model: str, suffix: str = "") -> list[Any]:
    """A model's samples of ``family`` (the parser names a counter's samples ``_total``)."""
    if family.type == "counter":
        suffix = suffix or "_total"
    return [
        s
        for s in family.samples
        if s.labels.get("model") == model and s.name == family.name + suffix
    ]


def _promtool_ok(text: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    # promtool lints names too (rc 3, e.g. "counter metrics should have _total suffix" for
    # Triton's own names); a parse error (rc 1) fails the exposition.
    assert result.returncode in (0, 3), result.stderr
    assert b"error while linting" not in result.stderr, result.stderr


@pytest.fixture(scope="module")
def full(repo: Path) -> Iterator[tuple[ServerProcess, str]]:
    proc = ServerProcess(
        [repo],
        "--metrics-config=summary_latencies=true",
        "--metrics-config",
        "histogram_latencies=true",
        "--metrics-config",
        f"summary_quantiles={QUANTILES}",
        "--cache-config",
        "local,size=1048576",
    )
    try:
        _drive(proc)
        client = clients.client("http", proc.url("http"))
        inputs, _, _ = clients.add_sub_inputs("http")
        for _ in range(2):  # a miss, then a hit
            client.infer(CACHED, inputs)
        client.close()
        yield proc, scrape(proc)
    finally:
        proc.stop()


def test_summaries_have_the_configured_quantiles_and_count_every_success(
    full: tuple[ServerProcess, str],
) -> None:
    _, text = full
    _promtool_ok(text)
    parsed = families(text)
    successes = sum(REQUESTS.values())
    for name in SUMMARIES:
        family = parsed[name]
        assert family.type == "summary", name
        quantiles = samples(family, "simple")
        assert [s.labels["quantile"] for s in quantiles] == ["0.5", "0.99"], name
        assert all(s.value >= 0 for s in quantiles), (name, quantiles)
        assert samples(family, "simple", "_count")[0].value == successes, name
        assert samples(family, "simple", "_sum")[0].value >= 0, name
    request = parsed["nv_inference_request_summary_us"]
    p50 = samples(request, "simple")[0].value
    total = samples(request, "simple", "_sum")[0].value
    assert 0 < p50 <= total, (p50, total)


def test_a_cached_model_has_cache_summaries_and_no_request_summary(
    full: tuple[ServerProcess, str],
) -> None:
    _, text = full
    parsed = families(text)
    for name in ("nv_cache_hit_summary_per_model", "nv_cache_miss_summary_per_model"):
        assert samples(parsed[name], CACHED, "_count")[0].value == 1, name
        assert not samples(parsed[name], "simple", "_count"), name
    assert not samples(parsed["nv_inference_request_summary_us"], CACHED, "_count")
    assert samples(parsed["nv_inference_queue_summary_us"], CACHED, "_count")[0].value == 2
    assert samples(parsed["nv_cache_num_hits_per_model"], CACHED)[0].value == 1


def test_first_response_histogram_counts_each_request_once(
    full: tuple[ServerProcess, str],
) -> None:
    _, text = full
    family = families(text)["nv_inference_first_response_histogram_ms"]
    assert family.type == "histogram"
    buckets = samples(family, "repeat_int32", "_bucket")
    assert [b.labels["le"] for b in buckets] == ["100", "500", "2000", "5000", "+Inf"]
    # A decoupled request with three responses is one observation: its first response.
    assert buckets[-1].value == 1
    assert samples(family, "repeat_int32", "_count")[0].value == 1
    assert samples(family, "simple", "_count")[0].value == sum(REQUESTS.values())


def test_metric_tags_label_every_series_of_the_model_and_model_metrics_sets_its_buckets(
    full: tuple[ServerProcess, str],
) -> None:
    _, text = full
    parsed = families(text)
    # Every series Triton would label (tritium_model_ready comes from the repository index,
    # which also lists versions that never loaded: it carries model and version only).
    tagged = [
        s
        for f in parsed.values()
        for s in f.samples
        if s.labels.get("model") == TAGGED and f.name != "tritium_model_ready"
    ]
    assert tagged
    for sample in tagged:
        assert sample.labels["_team"] == TAGS["team"], sample
        assert sample.labels["_tier"] == TAGS["tier"], sample
    untagged = [s for f in parsed.values() for s in f.samples if s.labels.get("model") == "simple"]
    assert all("_team" not in s.labels for s in untagged)
    histogram = parsed["nv_inference_first_response_histogram_ms"]
    bounds = [b.labels["le"] for b in samples(histogram, TAGGED, "_bucket")]
    assert bounds == [*(str(b) for b in BUCKETS), "+Inf"]


def test_load_duration_and_pending_gauges_per_model(full: tuple[ServerProcess, str]) -> None:
    _, text = full
    parsed = families(text)
    load = parsed["nv_model_load_duration_secs"]
    assert load.type == "gauge"
    for model in ("simple", TAGGED, "repeat_int32"):
        assert samples(load, model)[0].value > 0, model
        assert samples(parsed["nv_inference_pending_request_count"], model)[0].value == 0


@pytest.fixture(scope="module")
def lean(repo: Path) -> Iterator[tuple[ServerProcess, str]]:
    proc = ServerProcess(
        [repo], "--metrics-config=counter_latencies=false", "--allow-cpu-metrics=false"
    )
    try:
        _drive(proc)
        yield proc, scrape(proc)
    finally:
        proc.stop()


def test_counter_latencies_false_drops_the_duration_counters_only(
    lean: tuple[ServerProcess, str],
) -> None:
    _, text = lean
    parsed = families(text)
    for name in DURATION_COUNTERS:
        assert name not in parsed, name
    for name in SUMMARIES:  # off by default
        assert name not in parsed, name
    assert "nv_inference_first_response_histogram_ms" not in parsed
    success = parsed["nv_inference_request_success"]
    assert samples(success, "simple")[0].value == sum(REQUESTS.values())
    assert "nv_cpu_utilization" not in parsed  # --allow-cpu-metrics=false


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("bogus", "--metrics-config option format is <setting>=<value>. Got bogus"),
        ("summary_latencies=yes", "expected 'true' or 'false'"),
        ("summary_quantiles=0.5", "No ':' delimiter found"),
        ("sumary_latencies=true", "unknown setting 'sumary_latencies'"),
    ],
)
def test_a_bad_metrics_config_stops_the_server_with_a_clear_message(
    repo: Path, flag: str, message: str
) -> None:
    command = [*server_command([repo]), "--metrics-config", flag]
    result = subprocess.run(command, capture_output=True, timeout=60)
    assert result.returncode != 0
    assert message in result.stderr.decode(), result.stderr
