"""The Grafana dashboard (deploy/grafana/tritium.json) and the alert rules
(deploy/prometheus/alerts.yml) checked with Prometheus's own tools: ``promtool check rules``,
``promtool test rules`` with unit-test series, and a real Prometheus on 127.0.0.1 scraping a
running tritium while clients send successful and failing requests over HTTP and gRPC; every
panel's query and every alert expression then runs over Prometheus's HTTP API.

The structural checks of the dashboard need nothing; the rest skip, saying so, where the
``promtool`` / ``prometheus`` binaries are absent (``make test-ops`` installs them).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.support import clients
from tests.support.models import build_test_repository
from tests.support.prometheus_process import INSTALL_HINT, PrometheusProcess, binary
from testkit.server_process import ServerProcess

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "tritium.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
EXAMPLE_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
# What Grafana puts in place of its built-in variables, at the 1 s scrape interval used here
# ($__rate_interval is max($__interval + scrape interval, 4 * scrape interval); a minute
# covers the whole test's traffic).
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
PER_PROTOCOL = {"successes": 5, "batch": 4, "failures": 3}

needs_promtool = pytest.mark.skipif(
    binary("promtool") is None, reason=f"promtool is not installed: {INSTALL_HINT}"
)
needs_prometheus = pytest.mark.skipif(
    binary("prometheus") is None or binary("promtool") is None,
    reason=f"prometheus is not installed: {INSTALL_HINT}",
)


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _targets() -> list[tuple[str, dict[str, Any]]]:
    return [(p["title"], t) for p in _dashboard()["panels"] for t in p["targets"]]


def _variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in _dashboard()["templating"]["list"]}


def substitute(expr: str, values: dict[str, str]) -> str:
    """The query as Grafana sends it: ``$name`` / ``${name}`` replaced (an unknown variable is
    a KeyError, so a typo fails the test)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)


def _all_values(model: str = ".*") -> dict[str, str]:
    """Every query variable at "All" (its allValue, ``.*``), or one model selected."""
    return {**BUILTINS, "job": ".*", "instance": ".*", "model": model}


# -- structure (no binaries needed) ---------------------------------------------------------
def test_dashboard_structure() -> None:
    dash = _dashboard()
    assert dash["schemaVersion"] >= 39 and dash["uid"] and dash["title"]
    variables = _variables()
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("job", "instance", "model"):
        assert variables[name]["type"] == "query"
        assert variables[name]["query"].startswith("label_values(")
        assert variables[name]["allValue"] == ".*" and variables[name]["includeAll"]
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels), "panel ids must be unique"
    for panel in panels:
        assert panel["title"] and panel["description"], panel["id"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "xywh") and grid["x"] + grid["w"] <= 24
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip()


def test_dashboard_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in _dashboard()["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_dashboard_covers_the_issue() -> None:
    """Request rate, error rate, p50/p95/p99, queue time, batch size, pending requests, CPU,
    memory: each read from the families tritium serves."""
    exprs = "\n".join(t["expr"] for _, t in _targets())
    for needle in (
        "rate(nv_inference_request_success",
        "rate(nv_inference_request_failure",
        "histogram_quantile(0.5,",
        "histogram_quantile(0.95,",
        "histogram_quantile(0.99,",
        "nv_inference_queue_duration_us",
        "rate(nv_inference_count",
        "rate(nv_inference_exec_count",
        "nv_inference_pending_request_count",
        "nv_cpu_utilization",
        "nv_cpu_memory_used_bytes",
        "tritium_model_ready",
    ):
        assert needle in exprs, needle


def test_every_variable_is_defined() -> None:
    defined = {**BUILTINS, **{name: name for name in _variables()}}
    for title, target in _targets():
        for name in re.findall(r"\$\{?(\w+)\}?", target["expr"]):
            assert name in defined, f"{title}: ${name} is not a dashboard variable"


# -- promtool ------------------------------------------------------------------------------
def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(binary("promtool")), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _check_exprs(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` over the expressions as recording rules: promtool 2.42 has no
    offline "parse this query" command, and a rule file's expressions are parsed by the same
    PromQL parser Prometheus uses for queries."""
    rules = [{"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard_exprs.yml"  # JSON is YAML
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    return _promtool("check", "rules", str(path))


def _variable_selectors() -> list[str]:
    """The series selector inside each ``label_values(<selector>, <label>)`` variable query."""
    selectors = []
    for variable in _variables().values():
        match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable["query"])
        if variable["type"] == "query":
            assert match, variable["query"]
            selectors.append(match.group(1))
    return selectors


@needs_promtool
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    exprs = [substitute(t["expr"], _all_values()) for _, t in _targets()]
    exprs += [substitute(s, _all_values()) for s in _variable_selectors()]
    result = _check_exprs(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


@needs_promtool
def test_the_parse_check_rejects_a_bad_query(tmp_path: Path) -> None:
    result = _check_exprs(["sum by (model) (rate(nv_inference_count[1m])"], tmp_path)
    assert result.returncode != 0 and "parse error" in result.stdout + result.stderr


@needs_promtool
def test_alert_rules_check() -> None:
    result = _promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


@needs_promtool
def test_example_prometheus_config_checks() -> None:
    """The scrape configuration deploy/README.md shows, with the rules it loads."""
    result = _promtool("check", "config", str(EXAMPLE_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


@needs_promtool
def test_alert_rules_unit_tests() -> None:
    """Each alert fires on its series and stays quiet on those just below its threshold."""
    result = _promtool("test", "rules", str(ALERT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# -- a real Prometheus scraping a running tritium ------------------------------------------
def _send_traffic(server: ServerProcess) -> None:
    """Per protocol: successful ``simple`` requests (one of them a batch) and requests to
    ``raises``, whose model fails every execution."""
    for protocol in ("http", "grpc"):
        client = clients.client(protocol, server.url(protocol))
        for batch in [1] * (PER_PROTOCOL["successes"] - 1) + [PER_PROTOCOL["batch"]]:
            inputs, a, b = clients.add_sub_inputs(protocol, batch=batch)
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        x = np.ones(3, dtype=np.float32)
        for _ in range(PER_PROTOCOL["failures"]):
            with pytest.raises(InferenceServerException):
                client.infer("raises", [clients.make_input(protocol, "INPUT0", x, "FP32")])


@pytest.fixture(scope="module")
def scraped(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, PrometheusProcess]]:
    """tritium (with ``bad_config``, which fails to load) scraped by Prometheus every second,
    the alert rules loaded; traffic is sent once Prometheus holds the zero counters, and the
    fixture yields once it holds the counters after the traffic (so rates are above zero)."""
    if binary("prometheus") is None:
        pytest.skip(f"prometheus is not installed: {INSTALL_HINT}")
    repo = build_test_repository(tmp_path_factory.mktemp("ops") / "repo", ["raises", "bad_config"])
    server = ServerProcess(
        [example_repo, repo], "--exit-on-error=false", "--strict-readiness=false"
    )
    try:
        prometheus = PrometheusProcess([f"127.0.0.1:{server.ports['metrics']}"], [ALERTS])
    except BaseException:
        server.stop()
        raise
    try:
        prometheus.wait_for('nv_inference_request_success{job="tritium",model="simple"} == 0')
        _send_traffic(server)
        successes = 2 * PER_PROTOCOL["successes"]
        failures = 2 * PER_PROTOCOL["failures"]
        prometheus.wait_for(f'nv_inference_request_success{{model="simple"}} == {successes}')
        prometheus.wait_for(f'sum(nv_inference_request_failure{{model="raises"}}) == {failures}')
        yield server, prometheus
    finally:
        prometheus.stop()
        server.stop()


@needs_prometheus
@pytest.mark.parametrize("model", [".*", "simple"])
def test_every_dashboard_query_returns_series(
    scraped: tuple[ServerProcess, PrometheusProcess], model: str
) -> None:
    """All models, then one model selected: each target answers with at least one series."""
    _, prometheus = scraped
    for title, target in _targets():
        expr = substitute(target["expr"], _all_values(model))
        answer = prometheus.query(expr)
        assert answer["status"] == "success", f"{title}: {expr}: {answer}"
        assert answer["data"]["result"], f"{title} returned no series: {expr}"


def _values(prometheus: PrometheusProcess, expr: str) -> dict[str, float]:
    answer = prometheus.query(expr)
    assert answer["status"] == "success", answer
    return {s["metric"].get("model", ""): float(s["value"][1]) for s in answer["data"]["result"]}


@needs_prometheus
def test_dashboard_values_match_the_traffic(
    scraped: tuple[ServerProcess, PrometheusProcess],
) -> None:
    """The panels read what was sent: requests and failures per second above zero, all of
    ``raises`` failing, batch size above 1 for ``simple`` (one batch of 4), a READY and a
    failed model, memory in use."""
    _, prometheus = scraped
    by_title = {p["title"]: p["targets"] for p in _dashboard()["panels"]}

    def panel(title: str, ref: str = "A") -> dict[str, float]:
        (target,) = [t for t in by_title[title] if t["refId"] == ref]
        return _values(prometheus, substitute(target["expr"], _all_values()))

    assert panel("Request rate")["simple"] > 0
    assert panel("Request rate", "B")["raises"] > 0
    errors = panel("Error rate")
    assert errors["raises"] == 1.0 and errors["simple"] == 0.0
    assert panel("Average batch size")["simple"] > 1.0
    assert panel("Pending (in-flight, queued) requests")["simple"] == 0
    ready = panel("Model readiness")
    assert (ready["simple"], ready["raises"], ready["bad_config"]) == (1.0, 1.0, 0.0)
    p99 = panel("Request latency p50 / p95 / p99", "C")["simple"]
    assert 0 < p99 <= 5_000, p99  # milliseconds: at most the largest finite bucket (5 s)
    assert panel("Memory")[""] > 0


@needs_prometheus
def test_variable_queries_return_values(
    scraped: tuple[ServerProcess, PrometheusProcess],
) -> None:
    """Each ``label_values(selector, label)`` variable, as Grafana runs it (the label values
    API with the selector as ``match[]``)."""
    _, prometheus = scraped
    found = {}
    for variable in _variables().values():
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable["query"])
        assert match, variable["query"]
        selector = substitute(match.group(1), _all_values())
        answer = prometheus.api(f"label/{match.group(2)}/values", **{"match[]": selector})
        assert answer["status"] == "success", answer
        found[variable["name"]] = set(answer["data"])
    assert found["job"] == {"tritium"}
    assert {"simple", "raises"} <= found["model"]
    assert len(found["instance"]) == 1


def _rules(prometheus: PrometheusProcess) -> list[dict[str, Any]]:
    answer = prometheus.api("rules")
    assert answer["status"] == "success", answer
    return [rule for group in answer["data"]["groups"] for rule in group["rules"]]


@needs_prometheus
def test_alert_rules_load_and_evaluate(
    scraped: tuple[ServerProcess, PrometheusProcess],
) -> None:
    """Prometheus loaded alerts.yml and evaluates every rule without error; run by hand, the
    expressions find the failing model and the model that did not load, and nothing else."""
    _, prometheus = scraped
    rules = _rules(prometheus)
    assert {r["name"] for r in rules} == {
        "TritiumDown",
        "TritiumHighP99Latency",
        "TritiumHighErrorRate",
        "TritiumPendingRequestsGrowing",
        "TritiumModelNotReady",
    }
    fired = {}
    for rule in rules:
        answer = prometheus.query(rule["query"])
        assert answer["status"] == "success", f"{rule['name']}: {answer}"
        fired[rule["name"]] = {s["metric"].get("model") for s in answer["data"]["result"]}
    assert fired["TritiumDown"] == set()
    assert fired["TritiumPendingRequestsGrowing"] == set()
    assert fired["TritiumHighErrorRate"] == {"raises"}
    assert fired["TritiumModelNotReady"] == {"bad_config"}
    prometheus.wait_for('ALERTS{alertname="TritiumModelNotReady",model="bad_config"}')
    for rule in _rules(prometheus):
        assert rule["health"] == "ok", rule
