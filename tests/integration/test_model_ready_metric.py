"""``tritium_model_ready`` on the metrics endpoint follows the repository: 1 for a loaded model,
0 for one that failed to load, no series for a model never loaded or unloaded on purpose
(the alert rule TritiumModelNotReady in deploy/prometheus/alerts.yml reads it)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from tests.support import clients
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess


@pytest.fixture(scope="module")
def explicit_server(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("ready") / "repo", ["bad_config"])
    proc = ServerProcess([example_repo, repo], "--model-control-mode=explicit")
    yield proc
    proc.stop()


def _ready(proc: ServerProcess) -> dict[str, float]:
    url = f"http://127.0.0.1:{proc.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    prefix = "tritium_model_ready{"
    return {
        line[len(prefix) :].rsplit("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_ready_metric_follows_loads_and_unloads(explicit_server: ServerProcess) -> None:
    assert _ready(explicit_server) == {}  # nothing loaded yet: nothing to alert on
    http = clients.client("http", explicit_server.http_url)
    grpc = clients.client("grpc", explicit_server.grpc_url)
    http.load_model("simple")
    with pytest.raises(InferenceServerException):
        grpc.load_model("bad_config")
    assert _ready(explicit_server) == {
        'model="simple",version="1"': 1.0,
        'model="bad_config",version=""': 0.0,
    }
    grpc.unload_model("simple")
    assert _ready(explicit_server) == {'model="bad_config",version=""': 0.0}
    http.load_model("simple")
    assert _ready(explicit_server)['model="simple",version="1"'] == 1.0
