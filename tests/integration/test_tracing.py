"""The trace extension and trace flags end to end, driven by tritonclient over HTTP and gRPC
(``get_trace_settings`` / ``update_trace_settings``), as Triton's qa/L0_trace does: the
settings API and its errors, the trace file read back and summarized as Triton's trace
summary tool does (tests/support/trace_summary.py), rate / count / log-frequency, ensemble children,
TENSORS, and the OpenTelemetry mode's spans received by an in-test OTLP collector."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from tests.support import clients
from tests.support.ensemble_models import build_ensemble_repository
from tests.support.otlp_collector import OtlpCollector, Span
from testkit.server_process import ServerProcess
from tests.support.trace_summary import load, merged, summarize

PROTOCOLS = ["http", "grpc"]
MODELS = ("simple", "sum_diff", "add_sub_python")
CLIENT_TRACE = "0af7651916cd43dd8448eb211c12666c"
CLIENT_SPAN = "b7ad6b7169242424"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


def _propagated() -> dict[str, str]:
    """The W3C header of a client span (a new dict each time: tritonclient's HTTP client
    adds its own headers to the dict it is given)."""
    return {"traceparent": TRACEPARENT}


@pytest.fixture(scope="module")
def repos(example_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    ensembles = build_ensemble_repository(tmp_path_factory.mktemp("trace") / "ensembles")
    return [example_repo, ensembles]


def _server(repos: list[Path], *flags: str) -> ServerProcess:
    loads = [arg for name in MODELS for arg in ("--load-model", name)]
    return ServerProcess(repos, "--model-control-mode", "explicit", *loads, *flags)


def _settings(c: Any, protocol: str, model: str = "") -> dict[str, Any]:
    """A trace setting as one JSON shape: HTTP's (gRPC's lists of one value unwrapped)."""
    got = c.get_trace_settings(model_name=model or None)
    return got if protocol == "http" else _grpc_json(got)


def _update(c: Any, protocol: str, settings: dict[str, Any], model: str = "") -> dict[str, Any]:
    got = c.update_trace_settings(model_name=model or None, settings=settings)
    return got if protocol == "http" else _grpc_json(got)


def _grpc_json(response: Any) -> dict[str, Any]:
    settings = json_format.MessageToDict(response)["settings"]
    return {k: v["value"] if k == "trace_level" else v["value"][-1] for k, v in settings.items()}


def _infer_simple(c: Any, protocol: str, **kwargs: Any) -> None:
    inputs, a, b = clients.add_sub_inputs(protocol)
    result = c.infer("simple", inputs, **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def _infer_ensemble(c: Any, protocol: str, **kwargs: Any) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.int32)
    inputs = [
        clients.make_input(protocol, "A", a, "INT32"),
        clients.make_input(protocol, "B", b, "INT32"),
    ]
    result = c.infer("sum_diff", inputs, **kwargs)
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)


# -- the settings API ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def settings_server(repos: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    trace_file = tmp_path_factory.mktemp("settings") / "global.json"
    server = _server(
        repos,
        "--trace-config", f"triton,file={trace_file}",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=6",
    )  # fmt: skip
    yield server, str(trace_file)
    server.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_settings_api(settings_server: Any, protocol: str) -> None:
    server, trace_file = settings_server
    c = clients.client(protocol, server.url(protocol))
    initial = {
        "trace_file": trace_file,
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "6",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_mode": "triton",
    }
    assert _settings(c, protocol) == initial
    assert _settings(c, protocol, "simple") == initial
    try:
        # A model's own field; the others keep mirroring the global setting.
        model = _update(c, protocol, {"trace_rate": "1"}, "simple")
        assert model == {**initial, "trace_rate": "1"}
        assert _settings(c, protocol) == initial
        changed = _update(c, protocol, {"trace_level": ["TIMESTAMPS", "TENSORS"]})
        assert changed["trace_level"] == ["TIMESTAMPS", "TENSORS"]
        assert _settings(c, protocol, "simple") == {
            **initial, "trace_rate": "1", "trace_level": ["TIMESTAMPS", "TENSORS"]
        }  # fmt: skip
        # null clears the model's own value: the global setting applies again.
        assert _update(c, protocol, {"trace_rate": None}, "simple") == changed
    finally:
        clear = dict.fromkeys(("trace_level", "trace_rate", "trace_count", "log_frequency"))
        c.update_trace_settings(model_name="simple", settings=clear)
        c.update_trace_settings(settings=clear)
    assert _settings(c, protocol) == initial


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("model", "settings", "message"),
    [
        ("simple", {"trace_file": "x.json"}, "trace file location can not be updated"),
        ("", {"trace_count": "10000000000"}, "Unable to parse 'trace_count', value is out of"),
        ("", {"trace_rate": "often"}, "Unable to parse 'trace_rate', got: often"),
        ("", {"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF'"),
        ("", {"trace_rate": "0"}, "Attempting to set invalid trace setting :sample rate"),
        ("does-not-exist", {"log_frequency": "1"}, "Request for unknown model : does-not-exist"),
    ],
)
def test_settings_errors(
    settings_server: Any, protocol: str, model: str, settings: dict[str, Any], message: str
) -> None:
    server, _ = settings_server
    c = clients.client(protocol, server.url(protocol))
    with pytest.raises(InferenceServerException) as info:
        c.update_trace_settings(model_name=model or None, settings=settings)
    assert message in info.value.message()
    assert _settings(c, protocol)["trace_rate"] == "6"  # nothing changed


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unknown_model_get_is_refused(settings_server: Any, protocol: str) -> None:
    server, _ = settings_server
    c = clients.client(protocol, server.url(protocol))
    with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
        c.get_trace_settings(model_name="nope")


def test_versioned_trace_path_is_not_found(settings_server: Any) -> None:
    server, _ = settings_server
    url = f"http://{server.http_url}/v2/models/simple/versions/1/trace/setting"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=10)
    info.value.close()
    assert info.value.code == 404


def test_server_metadata_lists_trace(settings_server: Any) -> None:
    server, _ = settings_server
    for protocol in PROTOCOLS:
        meta = clients.client(protocol, server.url(protocol)).get_server_metadata()
        extensions = meta["extensions"] if protocol == "http" else list(meta.extensions)
        assert extensions[extensions.index("statistics") + 1] == "trace"


# -- the trace file ------------------------------------------------------------------------
def test_trace_file_summarized(repos: list[Path], tmp_path: Path) -> None:
    """Every request traced (rate 1) over HTTP, gRPC and a gRPC stream; the file read back
    after shutdown gives Triton's summary: per-model counts, every span ordered, ensemble
    steps under their ensemble, TENSORS entries where that model's level asks for them."""
    trace_file = tmp_path / "trace.json"
    server = _server(
        repos,
        "--trace-config", f"triton,file={trace_file}",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1",
    )  # fmt: skip
    try:
        for protocol in PROTOCOLS:
            c = clients.client(protocol, server.url(protocol))
            for _ in range(3):
                _infer_simple(c, protocol)
            _infer_ensemble(c, protocol)
        http = clients.client("http", server.url("http"))
        http.update_trace_settings("sum_diff", {"trace_level": ["TIMESTAMPS", "TENSORS"]})
        _infer_ensemble(http, "http")
        _stream_simple(server)
    finally:
        assert server.stop() == 0
    entries = load(trace_file)
    http_summary = summarize(entries, "http")
    grpc_summary = summarize(entries, "grpc")
    assert http_summary[("simple", 1)]["count"] == 3
    assert grpc_summary[("simple", 1)]["count"] == 3 + 2  # two in the stream
    assert http_summary[("sum_diff", 1)]["count"] == 2
    assert http_summary[("add_sub_python", 1)]["count"] == 2  # the steps, kept by parent
    simple = http_summary[("simple", 1)]
    for span in ("HTTP_INFER", "HTTP_RECV", "HTTP_SEND", "QUEUE", "COMPUTE", "COMPUTE_INFER"):
        assert span in simple, span
    assert "GRPC_SEND" in grpc_summary[("simple", 1)]
    assert "COMPUTE" not in http_summary[("sum_diff", 1)]  # an ensemble does not compute
    traces = merged(entries)
    steps = [t for t in traces.values() if t.get("model_name") == "add_sub_python"]
    for step in steps:
        parent = traces[step["parent_id"]]
        assert parent["model_name"] == "sum_diff"
        assert parent["timestamps"]["REQUEST_START"] <= step["timestamps"]["REQUEST_START"]
        assert step["timestamps"]["REQUEST_END"] <= parent["timestamps"]["REQUEST_END"]
    tensors = [t for t in traces.values() if t["tensors"]]
    assert {t["model_name"] for t in tensors} == {"sum_diff", "add_sub_python"}
    ensemble = next(t for t in tensors if t["model_name"] == "sum_diff")
    activities = ensemble["tensors"]
    inputs = {tensor["name"]: tensor for kind, tensor in activities if kind == "QUEUE_INPUT"}
    twos = ",".join(["2"] * 16)
    assert inputs["B"] == {"name": "B", "data": twos, "shape": "1,16", "dtype": "INT32"}
    outputs = [tensor["name"] for kind, tensor in activities if kind == "BACKEND_OUTPUT"]
    assert sorted(outputs) == ["DIFF", "SUM"]


def _stream_simple(server: ServerProcess) -> None:
    results: list[Any] = []
    c = clients.client("grpc", server.url("grpc"))
    c.start_stream(callback=lambda result, error: results.append(error or result))
    try:
        for _ in range(2):
            inputs, _, _ = clients.add_sub_inputs("grpc")
            c.async_stream_infer("simple", inputs)
    finally:
        c.stop_stream()
    assert len(results) == 2 and not any(isinstance(r, Exception) for r in results)


def test_rate_count_and_log_frequency(repos: list[Path], tmp_path: Path) -> None:
    """rate 2 samples every other request; log-frequency 2 writes every two traces to the
    next indexed file while the server runs; a count, once reached, writes what it
    collected to the next index and stops tracing (GET shows the count left)."""
    trace_file = tmp_path / "t.json"
    server = _server(
        repos,
        "--trace-config", f"triton,file={trace_file}",
        "--trace-config", "triton,log-frequency=2",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=2",
    )  # fmt: skip
    try:
        c = clients.client("http", server.url("http"))
        for _ in range(8):
            _infer_simple(c, "http")
        # A trace is complete just after its response is written: wait for the file.
        assert [_count(_written(Path(f"{trace_file}.{i}"))) for i in (0, 1)] == [2, 2]
        assert not Path(f"{trace_file}.2").exists()
        c.update_trace_settings(settings={"trace_count": "1", "trace_rate": "1"})
        for _ in range(3):
            _infer_simple(c, "http")
        assert _count(_written(Path(f"{trace_file}.2"))) == 1
        assert c.get_trace_settings()["trace_count"] == "0"
    finally:
        assert server.stop() == 0
    assert not Path(f"{trace_file}.3").exists()


def _written(path: Path, timeout: float = 30.0) -> Path:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path


def _count(path: Path) -> int:
    return summarize(load(path), "http")[("simple", 1)]["count"]


# -- OpenTelemetry -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def otel(repos: list[Path]) -> Iterator[tuple[ServerProcess, OtlpCollector]]:
    with OtlpCollector() as collector:
        server = _server(
            repos,
            "--trace-config", "mode=opentelemetry",
            "--trace-config", f"opentelemetry,url={collector.url}",
            "--trace-config", "opentelemetry,resource=test.key=test.value",
            "--trace-config", "opentelemetry,resource=service.name=test_triton",
            "--trace-config", "opentelemetry,bsp_schedule_delay=50",
            "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1",
        )  # fmt: skip
        yield server, collector
        server.stop()


def _tree(spans: list[Span]) -> dict[str, list[str]]:
    names = {s.span_id: s.name for s in spans}
    tree: dict[str, list[str]] = {}
    for span in spans:
        if span.parent_span_id in names:
            tree.setdefault(names[span.parent_span_id], []).append(span.name)
    return {k: sorted(v) for k, v in tree.items()}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_opentelemetry_spans(otel: Any, protocol: str) -> None:
    server, collector = otel
    collector.clear()
    c = clients.client(protocol, server.url(protocol))
    _infer_simple(c, protocol, headers=_propagated())
    spans = collector.wait_for(lambda got: len(got) >= 3)
    assert _tree(spans) == {"InferRequest": ["simple"], "simple": ["compute"]}
    root = next(s for s in spans if s.name == "InferRequest")
    assert root.trace_id == CLIENT_TRACE and root.parent_span_id == CLIENT_SPAN
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    prefix = "HTTP" if protocol == "http" else "GRPC"
    first, last = ("RECV", "SEND") if protocol == "http" else ("WAITREAD", "SEND")
    assert [e for e, _ in root.events] == [
        f"{prefix}_{first}_START",
        f"{prefix}_{first}_END",
        "INFER_RESPONSE_COMPLETE",
        f"{prefix}_{last}_START",
        f"{prefix}_{last}_END",
    ]
    model = next(s for s in spans if s.name == "simple")
    assert [e for e, _ in model.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert model.attributes["triton.model_name"] == "simple"
    assert model.attributes["triton.model_version"] == 1
    assert model.attributes["triton.trace_parent_id"] == 0
    compute = next(s for s in spans if s.name == "compute")
    assert [e for e, _ in compute.events] == [
        "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"
    ]  # fmt: skip
    assert root.start_ns <= model.start_ns <= compute.start_ns <= compute.end_ns <= root.end_ns
    assert root.resource["service.name"] == "test_triton"
    assert root.resource["test.key"] == "test.value"


def test_opentelemetry_ensemble_steps_are_children(otel: Any) -> None:
    server, collector = otel
    collector.clear()
    _infer_ensemble(clients.client("http", server.url("http")), "http")
    spans = collector.wait_for(lambda got: len(got) >= 4)
    assert _tree(spans) == {
        "InferRequest": ["sum_diff"],
        "sum_diff": ["add_sub_python"],
        "add_sub_python": ["compute"],
    }
    root = next(s for s in spans if s.name == "InferRequest")
    assert root.parent_span_id == ""  # no context from the client: a trace of its own
    step = next(s for s in spans if s.name == "add_sub_python")
    ensemble = next(s for s in spans if s.name == "sum_diff")
    assert step.attributes["triton.trace_parent_id"] == ensemble.attributes["triton.trace_id"]


def test_opentelemetry_settings_and_forced_propagation(otel: Any) -> None:
    """A request whose client propagated a context is traced even when the count is spent
    (Triton forces those); a malformed traceparent is no context."""
    server, collector = otel
    c = clients.client("http", server.url("http"))
    shown = c.get_trace_settings()
    assert shown["trace_mode"] == "opentelemetry" and "trace_file" not in shown
    assert shown["url"] == collector.url and shown["bsp_schedule_delay"] == "50"
    assert shown["resource"] == "service.name=test_triton"
    c.update_trace_settings(settings={"trace_count": "1"})
    try:
        collector.clear()
        _infer_simple(c, "http")  # the last one the count allows
        _infer_simple(c, "http")
        _infer_simple(c, "http", headers={"traceparent": "00-garbage"})
        assert c.get_trace_settings()["trace_count"] == "0"
        _infer_simple(c, "http", headers=_propagated())
        spans = collector.wait_for(lambda got: len(got) >= 6)
        roots = [s for s in spans if s.name == "InferRequest"]
        assert len(roots) == 2
        assert sorted(r.parent_span_id for r in roots) == ["", CLIENT_SPAN]
    finally:
        c.update_trace_settings(settings={"trace_count": None})
    assert c.get_trace_settings()["trace_count"] == "-1"


def test_opentelemetry_bls_calls_are_children(example_repo: Path, tmp_path: Path) -> None:
    """A BLS model's calls (``bls_pipeline`` → ``simple``, then ``bls_double``) hang under the
    traced request that made them, as ensemble steps do."""
    from tests.support.models import build_test_repository

    repo = build_test_repository(tmp_path / "bls", ["bls_pipeline", "bls_double"])
    with OtlpCollector() as collector:
        server = ServerProcess(
            [repo, example_repo],
            "--model-control-mode", "explicit",
            "--load-model", "bls_pipeline", "--load-model", "bls_double", "--load-model", "simple",
            "--trace-config", "mode=opentelemetry",
            "--trace-config", f"opentelemetry,url={collector.url}",
            "--trace-config", "opentelemetry,bsp_schedule_delay=50",
            "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1",
        )  # fmt: skip
        try:
            c = clients.client("http", server.url("http"))
            a = np.arange(16, dtype=np.int32)
            inputs = [
                clients.make_input("http", "INPUT0", a, "INT32"),
                clients.make_input("http", "INPUT1", a, "INT32"),
            ]
            c.infer("bls_pipeline", inputs)
            spans = collector.wait_for(lambda got: len(got) >= 7)
        finally:
            server.stop()
    tree = _tree(spans)
    assert tree["InferRequest"] == ["bls_pipeline"]
    assert tree["bls_pipeline"] == ["bls_double", "compute", "simple"]
    assert {s.trace_id for s in spans} == {spans[0].trace_id}
