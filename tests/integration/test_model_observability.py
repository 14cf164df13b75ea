"""Python model observability (issue 14 item 3), over HTTP and gRPC with the official clients.

``pb_utils.Logger`` records reach the server's log in Triton's format with the model's
file:line, only at the levels the server's flags turn on; ``pb_utils.MetricFamily`` values
appear on ``/metrics`` (checked with prometheus_client's parser of the text format) with the
values the requests sent imply, are shared by name across instances and models, and vanish
when the model unloads.
"""

from __future__ import annotations

import re
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from prometheus_client.parser import text_string_to_metric_families
from testkit.server_process import ServerProcess
from tests.support.stub_procs import wait_until
from tritonclient.utils import InferenceServerException

PROTOCOLS = ("http", "grpc")
MODEL = "obs_model"
TIMEOUT_S = 30.0

MODEL_PY = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            name = args["model_name"]
            requests = pb_utils.MetricFamily(
                "obs_requests_total", "Requests the model saw", pb_utils.MetricFamily.COUNTER
            )
            last = pb_utils.MetricFamily(
                "obs_last_sum", "Sum of the last request's input", pb_utils.MetricFamily.GAUGE
            )
            sums = pb_utils.MetricFamily(
                "obs_input_sum", "Sums of the inputs\\nper request", pb_utils.MetricFamily.HISTOGRAM
            )
            instances = pb_utils.MetricFamily(
                "obs_instances", "Instances initialized", pb_utils.MetricFamily.GAUGE
            )
            self.families = (requests, last, sums, instances)
            labels = {"model": name, "note": 'a "quoted" back\\\\slash'}
            self.counter = requests.Metric(labels=labels)
            self.gauge = last.Metric(labels={"model": name})
            self.hist = sums.Metric(labels={"model": name}, buckets=[1.0, 10.0, 100.0])
            self.instances = instances.Metric(labels={"model": name})
            self.instances.increment(1)

        def execute(self, requests):
            logger = pb_utils.Logger
            responses = []
            for request in requests:
                data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                tag = f"tag{int(data[0])}"
                logger.log_info(f"obs info {tag}")  # LINE_INFO
                logger.log_warn(f"obs warn {tag}")  # LINE_WARN
                logger.log_error(f"obs error {tag}")  # LINE_ERROR
                logger.log_verbose(f"obs verbose {tag}")  # LINE_VERBOSE
                logger.log(f"obs level {tag}", logger.WARNING)  # LINE_LEVEL
                total = float(data.sum())
                self.counter.increment(1)
                self.gauge.set(total)
                self.hist.observe(total)
                count = self.counter.value()
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", np.array([count], np.float32))]
                ))
            return responses
""")

FLOOD_PY = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                n = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
                for i in range(n):
                    pb_utils.Logger.log_info(f"flood {i}")
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", np.array([n], np.float32))]
                ))
            return responses
""")

CONFLICT_PY = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            pb_utils.MetricFamily("obs_requests_total", "another", pb_utils.MetricFamily.GAUGE)

        def execute(self, requests):
            return []
""")


def _line_of(marker: str) -> int:
    return next(n for n, line in enumerate(MODEL_PY.splitlines(), 1) if f"# {marker}" in line)


def _config(name: str, count: int = 1) -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 0
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        instance_group [ {{ count: {count} kind: KIND_CPU }} ]
    """)


def _model(repo: Path, name: str, source: str, count: int = 1) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(_config(name, count))
    (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("observability")
    _model(root, MODEL, MODEL_PY, count=2)
    _model(root, "obs_flood", FLOOD_PY)
    _model(root, "obs_conflict", CONFLICT_PY)
    return root


def _server(repo: Path, *flags: str) -> ServerProcess:
    return ServerProcess([repo], "--model-control-mode=explicit", *flags)


@pytest.fixture(scope="module")
def verbose_server(repo: Path) -> Iterator[ServerProcess]:
    proc = _server(repo, "--log-verbose=1")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def quiet_server(repo: Path) -> Iterator[ServerProcess]:
    """Verbose off (the default) and warnings off: INFO and ERROR records only."""
    proc = _server(repo, "--log-warning=false")
    yield proc
    proc.stop()


@pytest.fixture
def loaded(request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, str]]:
    """(server, protocol) with obs_model loaded through that protocol, unloaded afterwards."""
    server, protocol = request.param
    server = request.getfixturevalue(server)
    c = client(protocol, server.url(protocol))
    c.load_model(MODEL)
    yield server, protocol
    c.unload_model(MODEL)
    c.close()
    assert wait_until(lambda: not _custom(scrape(server)), TIMEOUT_S), scrape(server)


def infer(server: ServerProcess, protocol: str, model: str, values: list[float]) -> float:
    c = client(protocol, server.url(protocol))
    try:
        data = np.array(values, dtype=np.float32)
        result = c.infer(model, [make_input(protocol, "INPUT0", data, "FP32")])
        return float(result.as_numpy("OUTPUT0")[0])
    finally:
        c.close()


def scrape(server: ServerProcess) -> str:
    url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return response.read().decode()


def _custom(text: str) -> dict[str, Any]:
    """The obs_* families of a scrape, parsed by prometheus_client (which refuses text that
    is not valid exposition format)."""
    return {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("obs_")}


def _samples(family: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def _log_lines(server: ServerProcess, pattern: str) -> list[str]:
    return [line for line in server.log_text().splitlines() if re.search(pattern, line)]


# ----------------------------------------------------------------------------- logging

TRITON_LINE = r"^{letter}\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} \d+ model\.py:{line}\] {text}$"


def _expect_line(server: ServerProcess, letter: str, marker: str, text: str) -> None:
    pattern = TRITON_LINE.format(letter=letter, line=_line_of(marker), text=re.escape(text))
    assert wait_until(lambda: len(_log_lines(server, pattern)) == 1, TIMEOUT_S), (
        pattern,
        server.log_text()[-3000:],
    )


@pytest.mark.parametrize(
    "loaded", [("verbose_server", p) for p in PROTOCOLS], indirect=True, ids=PROTOCOLS
)
def test_every_level_logs_in_triton_format(loaded: tuple[ServerProcess, str]) -> None:
    server, protocol = loaded
    tag = f"tag{11 if protocol == 'http' else 12}"
    infer(server, protocol, MODEL, [11.0 if protocol == "http" else 12.0])
    _expect_line(server, "I", "LINE_INFO", f"obs info {tag}")
    _expect_line(server, "W", "LINE_WARN", f"obs warn {tag}")
    _expect_line(server, "E", "LINE_ERROR", f"obs error {tag}")
    _expect_line(server, "I", "LINE_VERBOSE", f"obs verbose {tag}")  # Triton: verbose is "I"
    _expect_line(server, "W", "LINE_LEVEL", f"obs level {tag}")


@pytest.mark.parametrize(
    "loaded", [("quiet_server", p) for p in PROTOCOLS], indirect=True, ids=PROTOCOLS
)
def test_disabled_levels_stay_out_of_the_log(loaded: tuple[ServerProcess, str]) -> None:
    server, protocol = loaded
    value = 21.0 if protocol == "http" else 22.0
    tag = f"tag{int(value)}"
    infer(server, protocol, MODEL, [value])
    _expect_line(server, "I", "LINE_INFO", f"obs info {tag}")
    _expect_line(server, "E", "LINE_ERROR", f"obs error {tag}")
    # The error record came after the others: what is not there by now never comes.
    assert not _log_lines(server, f"obs (warn|verbose|level) {tag}$"), server.log_text()
    assert not _log_lines(server, r"^W\d{4} "), "--log-warning=false: no warning at all"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_flood_of_logs_is_bounded_and_accounted_for(
    verbose_server: ServerProcess, protocol: str
) -> None:
    """Every record is either in the log or counted in a 'dropped' warning; the model's
    execute never waits for the log, and the server serves on."""
    c = client(protocol, verbose_server.url(protocol))
    c.load_model("obs_flood")
    try:
        before = len(_log_lines(verbose_server, r"\] flood \d+$"))
        dropped_before = _dropped(verbose_server)
        n = 20_000
        assert infer(verbose_server, protocol, "obs_flood", [float(n)]) == n

        def accounted() -> bool:
            logged = len(_log_lines(verbose_server, r"\] flood \d+$")) - before
            return logged + _dropped(verbose_server) - dropped_before == n

        assert wait_until(accounted, TIMEOUT_S), (
            len(_log_lines(verbose_server, r"\] flood \d+$")) - before,
            _dropped(verbose_server) - dropped_before,
            _log_lines(verbose_server, "dropped"),
        )
        assert infer(verbose_server, protocol, "obs_flood", [1.0]) == 1
    finally:
        c.unload_model("obs_flood")
        c.close()


def _dropped(server: ServerProcess) -> int:
    found = _log_lines(server, r"'obs_flood_0_0': (\d+) log messages were dropped")
    return sum(int(re.search(r": (\d+) log messages", line).group(1)) for line in found)


# ----------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(
    "loaded", [("verbose_server", p) for p in PROTOCOLS], indirect=True, ids=PROTOCOLS
)
def test_metrics_of_each_kind_match_the_requests(loaded: tuple[ServerProcess, str]) -> None:
    server, protocol = loaded
    values = [[0.5], [2.0, 3.0], [50.0], [400.0, 100.0]]
    counts = [infer(server, protocol, MODEL, v) for v in values]
    assert counts == [1, 2, 3, 4]  # Metric.value(): the server's value, after this increment
    families = _custom(scrape(server))
    assert set(families) == {"obs_requests", "obs_last_sum", "obs_input_sum", "obs_instances"}
    counter = families["obs_requests"]  # prometheus_client names a counter without _total
    assert counter.type == "counter" and counter.documentation == "Requests the model saw"
    labels = (("model", MODEL), ("note", 'a "quoted" back\\slash'))
    assert _samples(counter) == {("obs_requests_total", labels): 4.0}
    model = (("model", MODEL),)
    assert families["obs_last_sum"].type == "gauge"
    assert _samples(families["obs_last_sum"]) == {("obs_last_sum", model): 500.0}
    # Both instances (stub processes) added 1 to the one shared metric.
    assert _samples(families["obs_instances"]) == {("obs_instances", model): 2.0}
    hist = families["obs_input_sum"]
    assert hist.type == "histogram" and hist.documentation == "Sums of the inputs\nper request"
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in _samples(hist).items()
        if name.endswith("_bucket")
    }
    assert buckets == {"1": 1, "10": 2, "100": 3, "+Inf": 4}  # bounds as prometheus-cpp writes
    assert _samples(hist)[("obs_input_sum_sum", model)] == 555.5
    assert _samples(hist)[("obs_input_sum_count", model)] == 4


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_metrics_vanish_on_unload_and_restart_from_zero(
    verbose_server: ServerProcess, protocol: str
) -> None:
    c = client(protocol, verbose_server.url(protocol))
    try:
        for _ in range(2):
            c.load_model(MODEL)
            assert infer(verbose_server, protocol, MODEL, [1.0]) == 1  # from zero each load
            assert "obs_requests_total{" in scrape(verbose_server)
            c.unload_model(MODEL)
            assert wait_until(lambda: "obs_" not in scrape(verbose_server), TIMEOUT_S)
    finally:
        c.close()


@pytest.mark.parametrize(
    "loaded", [("verbose_server", p) for p in PROTOCOLS], indirect=True, ids=PROTOCOLS
)
def test_a_family_name_of_another_kind_fails_like_triton(
    loaded: tuple[ServerProcess, str],
) -> None:
    server, protocol = loaded
    c = client(protocol, server.url(protocol))
    try:
        with pytest.raises(InferenceServerException) as info:
            c.load_model("obs_conflict")
        assert (
            "Error when creating MetricFamily: Family name already exists with different type"
            in str(info.value)
        )
        assert infer(server, protocol, MODEL, [1.0]) == 1  # obs_model serves on
    finally:
        c.close()
