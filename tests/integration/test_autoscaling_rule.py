"""The autoscaling signal (deploy/prometheus/autoscaling.yml, the chart's PrometheusRule and
HPA): ``promtool check rules`` and ``promtool test rules`` over series named and labelled as a
running tritium exports them (read from its /metrics after real requests, HTTP and gRPC), with
the ``namespace``/``pod`` labels a Kubernetes scrape adds."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support import clients
from tests.support.prometheus_process import INSTALL_HINT, binary
from testkit.server_process import ServerProcess

yaml = pytest.importorskip("yaml")
parser = pytest.importorskip("prometheus_client.parser")

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "autoscaling.yml"
pytestmark = pytest.mark.skipif(
    binary("promtool") is None, reason=f"promtool is not installed: {INSTALL_HINT}"
)
_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""
_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""
_QUEUE = "nv_inference_queue_duration_us"
_COMPUTE = "nv_inference_compute_infer_duration_us"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, str]]]:
    """The label sets of the queue and compute counters for the model, from /metrics."""
    repo = tmp_path_factory.mktemp("autoscale") / "repo"
    (repo / "scaled" / "1").mkdir(parents=True)
    (repo / "scaled" / "config.pbtxt").write_text(_CONFIG)
    (repo / "scaled" / "1" / "model.py").write_text(_MODEL)
    server = ServerProcess([repo])
    try:
        x = np.array([1.0], dtype=np.float32)
        for protocol in ("http", "grpc"):
            client = clients.client(protocol, server.url(protocol))
            for _ in range(3):
                client.infer("scaled", [clients.make_input(protocol, "INPUT0", x, "FP32")])
        url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.stop()
    found: dict[str, dict[str, str]] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:  # the parser names a counter's samples <family>_total
            if family.name in (_QUEUE, _COMPUTE) and sample.labels.get("model") == "scaled":
                assert f"\n{family.name}{{" in text  # served under the family's own name
                assert sample.value > 0, sample  # real requests were counted
                found[family.name] = dict(sample.labels)
    yield found


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{text}}}", "values": values}


def test_tritium_exports_the_counters_the_rule_reads(exported: dict[str, dict[str, str]]) -> None:
    assert set(exported) == {_QUEUE, _COMPUTE}
    expr = yaml.safe_load(RULES.read_text())["groups"][0]["rules"][0]["expr"]
    assert _QUEUE in expr and _COMPUTE in expr


def test_promtool_checks_the_rule() -> None:
    done = subprocess.run(
        [str(binary("promtool")), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_ratio_per_pod(exported: dict[str, dict[str, str]], tmp_path: Path) -> None:
    """Pod a queues 500 µs/s for 1000 µs/s of compute (0.5), pod b 2000 for 1000 (2.0), pod c
    is idle (0, not NaN); samples every 15 s, as a ServiceMonitor would scrape."""
    pods = {
        "a": ("0+7500x40", "0+15000x40"),
        "b": ("0+30000x40", "0+15000x40"),
        "c": ("0x40", "0x40"),
    }
    inputs = []
    for pod, (queue, compute) in pods.items():
        where = {"namespace": "ml", "pod": f"tritium-{pod}", "job": "tritium"}
        inputs.append(_series(_QUEUE, {**exported[_QUEUE], **where}, queue))
        inputs.append(_series(_COMPUTE, {**exported[_COMPUTE], **where}, compute))
    expected = [
        {
            "labels": f'tritium:queue_compute_ratio{{namespace="ml",pod="tritium-{pod}"}}',
            "value": value,
        }
        for pod, value in (("a", 0.5), ("b", 2.0), ("c", 0))
    ]
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": inputs,
                "promql_expr_test": [
                    {
                        "expr": "tritium:queue_compute_ratio",
                        "eval_time": "5m",
                        "exp_samples": expected,
                    },
                ],
            }
        ],
    }
    path = tmp_path / "autoscaling_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run(
        [str(binary("promtool")), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
