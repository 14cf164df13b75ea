"""Tracing without a server: the trace extension's setting rules and errors (Triton's
``src/tracer.cc`` UpdateTraceSettingInternal / SampleTrace, ``src/http_server.cc``
HandleTrace, ``src/grpc/grpc_server.cc`` TraceSetting), the trace flags
(``src/command_line_parser.cc``), the trace file writer (log frequency, count, indexed files)
and the trace-file entries as Triton's trace summary reads them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.tracing import TraceConfig, TraceLevel, TraceManager, TraceMode, TraceValues
from tritium.tracing.flags import trace_config
from tritium.tracing.otel import otel_settings
from tritium.tracing.settings import parse_update
from tritium.tracing.trace import tensor_entry
from tritium.types import DataType, Tensor
from tests.support.trace_summary import summarize

NO_DEPRECATED = {"level": [], "file": None, "rate": None, "count": None, "log-frequency": None}


def _manager(tmp_path: Path, **values: object) -> TraceManager:
    fields = {"level": TraceLevel.TIMESTAMPS, "rate": 1, "file": str(tmp_path / "t.json")}
    fields.update(values)
    return TraceManager(TraceConfig(TraceValues(**fields)))  # type: ignore[arg-type]


def _shown(manager: TraceManager, model: str = "") -> dict[str, list[str]]:
    return manager.settings(model)


def _error(update: dict[str, list[str] | None]) -> ServerError:
    with pytest.raises(ServerError) as info:
        parse_update(update)
    return info.value


# -- the trace extension's settings ----------------------------------------------------------
def test_settings_shown_as_triton_lists_them(tmp_path: Path) -> None:
    shown = _shown(_manager(tmp_path))
    assert shown == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": ["1"],
        "trace_count": ["-1"],
        "log_frequency": ["0"],
        "trace_file": [str(tmp_path / "t.json")],
        "trace_mode": ["triton"],
    }


def test_model_setting_mirrors_global_until_it_specifies(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.update("m", parse_update({"log_frequency": ["2"]}))
    both = ["TIMESTAMPS", "TENSORS"]
    manager.update("", parse_update({"trace_rate": ["5"], "trace_level": both}))
    model = _shown(manager, "m")
    assert model["trace_rate"] == ["5"] and model["log_frequency"] == ["2"]
    assert model["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert _shown(manager, "other")["log_frequency"] == ["0"]  # no setting of its own
    # Clearing the one field it specified drops its setting: the global one applies again.
    manager.update("m", parse_update({"log_frequency": None}))
    assert "m" not in manager.models
    assert _shown(manager, "m") == _shown(manager)


def test_clearing_a_global_field_restores_the_flag_value(tmp_path: Path) -> None:
    manager = _manager(tmp_path, rate=6)
    manager.update("", parse_update({"trace_rate": ["1"]}))
    assert _shown(manager)["trace_rate"] == ["1"]
    manager.update("", parse_update({"trace_rate": []}))  # gRPC's clear: no values
    assert _shown(manager)["trace_rate"] == ["6"]


def test_model_off_while_global_traces(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.update("m", parse_update({"trace_level": ["OFF"]}))
    assert _shown(manager, "m")["trace_level"] == ["OFF"]
    assert manager.sample("m") is None
    assert manager.sample("other") is not None


@pytest.mark.parametrize(
    ("update", "kind", "message"),
    [
        (
            {"trace_file": ["x.json"]},
            ErrorKind.UNSUPPORTED,
            "trace file location can not be updated through network protocol",
        ),
        (
            {"trace_level": ["OFF", "TIMESTAMPS"]},
            ErrorKind.INVALID_ARG,
            "Expect only one trace level 'OFF' is specified",
        ),
        ({"trace_rate": ["abc"]}, ErrorKind.INVALID_ARG, "Unable to parse 'trace_rate', got: abc"),
        (
            {"trace_rate": ["10000000000"]},
            ErrorKind.INVALID_ARG,
            "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], "
            "got: 10000000000",
        ),
        (
            {"trace_count": ["-2"]},
            ErrorKind.INVALID_ARG,
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -2",
        ),
        (
            {"trace_count": ["10000000000"]},
            ErrorKind.INVALID_ARG,
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], "
            "got: 10000000000",
        ),
        (
            {"log_frequency": ["10000000000"]},
            ErrorKind.INVALID_ARG,
            "Unable to parse 'log_frequency', value is out of range [ 0, 4294967295 ], "
            "got: 10000000000",
        ),
        ({"trace_rate": ["1", "2"]}, ErrorKind.INVALID_ARG, "expect only 1 value for 'trace_rate'"),
    ],
)
def test_update_errors_are_tritons(
    update: dict[str, list[str] | None], kind: ErrorKind, message: str
) -> None:
    error = _error(update)
    assert error.kind is kind
    assert error.message == message


def test_invalid_resulting_setting_is_refused_unless_off(tmp_path: Path) -> None:
    manager = _manager(tmp_path, file="")
    with pytest.raises(ServerError, match="trace file name is not given"):
        manager.update("", parse_update({"trace_level": ["TIMESTAMPS"]}))
    with pytest.raises(ServerError, match="sample rate must be non-zero"):
        _manager(tmp_path).update("", parse_update({"trace_rate": ["0"]}))
    manager.update("", parse_update({"trace_level": ["OFF"], "trace_rate": ["0"]}))
    assert _shown(manager)["trace_rate"] == ["0"]


def test_unknown_levels_and_keys_change_nothing(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    manager.update("", parse_update({"trace_level": ["LOUD"], "colour": ["blue"]}))
    assert _shown(manager)["trace_level"] == ["TIMESTAMPS"]


# -- sampling ----------------------------------------------------------------------------------
def test_rate_samples_one_request_in_n_and_count_stops(tmp_path: Path) -> None:
    manager = _manager(tmp_path, rate=3, count=2)
    sampled = [manager.sample("m") is not None for _ in range(12)]
    assert sampled == [False, False, True, False, False, True] + [False] * 6
    assert _shown(manager)["trace_count"] == ["0"]
    assert manager.active  # a count update may bring it back: front-ends still ask


def test_off_is_not_active(tmp_path: Path) -> None:
    manager = _manager(tmp_path, level=TraceLevel.OFF)
    assert not manager.active
    manager.update("m", parse_update({"trace_level": ["TIMESTAMPS"]}))
    assert manager.active
    manager.update("m", parse_update({"trace_level": None}))
    assert not manager.active


# -- the trace file ------------------------------------------------------------------------------
def _one_trace(manager: TraceManager, model: str = "m") -> None:
    trace = manager.sample(model)
    assert trace is not None
    trace.model_name, trace.model_version = model, 1
    now = time.perf_counter_ns()
    for offset, name in enumerate(
        (
            "HTTP_RECV_START",
            "HTTP_RECV_END",
            "REQUEST_START",
            "QUEUE_START",
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END",
            "REQUEST_END",
            "HTTP_SEND_START",
            "HTTP_SEND_END",
        )
    ):
        trace.stamp(name, now + offset * 1000)
    child = trace.child()
    child.model_name, child.model_version = "step", 3
    trace.group.hold()
    child.stamp("REQUEST_START", now + 3000)
    child.stamp("REQUEST_END", now + 4000)
    trace.group.release()
    trace.end()


def test_file_written_at_close_is_summarized(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    for _ in range(3):
        _one_trace(manager)
    manager.close()
    entries = json.loads((tmp_path / "t.json").read_text())
    summary = summarize(entries, "http")
    assert summary[("m", 1)]["count"] == 3
    assert summary[("m", 1)]["QUEUE"] == 3 * 1000
    assert summary[("m", 1)]["COMPUTE_INFER"] == 3 * 1000
    assert summary[("step", 3)]["count"] == 3  # children kept through their parent
    parents = {e["id"]: e.get("parent_id") for e in entries if "model_name" in e}
    assert sorted(p for p in parents.values() if p) == sorted(
        i for i, p in parents.items() if p is None
    )


def test_log_frequency_writes_indexed_files(tmp_path: Path) -> None:
    manager = _manager(tmp_path, log_frequency=2)
    for _ in range(5):
        _one_trace(manager)
    assert (tmp_path / "t.json.0").exists() and (tmp_path / "t.json.1").exists()
    assert not (tmp_path / "t.json.2").exists()
    manager.close()  # the fifth goes to the next index, as Triton does at exit
    counts = [
        summarize(json.loads((tmp_path / f"t.json.{i}").read_text()), "http")[("m", 1)]["count"]
        for i in range(3)
    ]
    assert counts == [2, 2, 1]
    assert not (tmp_path / "t.json").exists()


def test_count_reached_writes_the_next_indexed_file(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    _one_trace(manager)  # unlimited: into the main file
    manager.update("", parse_update({"trace_count": ["2"]}))
    for _ in range(2):
        _one_trace(manager)
    assert manager.sample("m") is None
    entries = json.loads((tmp_path / "t.json.0").read_text())
    assert summarize(entries, "http")[("m", 1)]["count"] == 2
    manager.close()
    main = json.loads((tmp_path / "t.json").read_text())
    assert summarize(main, "http")[("m", 1)]["count"] == 1


def test_tensor_entries_as_triton_writes_them() -> None:
    floats = Tensor("F", DataType.FP32, (1, 3), np.array([[0.5, 1.0, 2.25]], np.float32))
    assert tensor_entry(floats) == {
        "name": "F",
        "data": "0.5,1,2.25",
        "shape": "1,3",
        "dtype": "FP32",
    }
    text = Tensor("S", DataType.BYTES, (2,), np.array([b"a", b"bc"], dtype=object))
    assert tensor_entry(text)["data"] == '"a","bc"'
    flags = Tensor("B", DataType.BOOL, (2,), np.array([True, False]))
    assert tensor_entry(flags)["data"] == "1,0"


# -- flags ---------------------------------------------------------------------------------------
def test_trace_config_flags() -> None:
    config = trace_config(
        [
            "triton,file=/tmp/t.json",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "rate=4",
            "count=6",
            "triton,log-frequency=50",
            "mode=triton",
        ],
        NO_DEPRECATED,
    )
    assert config.values == TraceValues(
        TraceLevel.TIMESTAMPS | TraceLevel.TENSORS, 4, 6, 50, "/tmp/t.json", TraceMode.TRITON
    )


def test_trace_config_over_deprecated_flags() -> None:
    deprecated = {
        "level": ["TIMESTAMPS"],
        "file": "old.json",
        "rate": 7,
        "count": 3,
        "log-frequency": 2,
    }
    config = trace_config(["rate=9", "triton,file=new.json"], deprecated)
    assert config.values == TraceValues(TraceLevel.TIMESTAMPS, 9, 3, 2, "new.json")
    off = trace_config(["level=OFF", "level=TIMESTAMPS"], NO_DEPRECATED)
    assert off.values.level == TraceLevel.OFF  # an explicit OFF wins, as Triton's parser


def test_opentelemetry_flags() -> None:
    config = trace_config(
        [
            "mode=opentelemetry",
            "opentelemetry,url=http://127.0.0.1:9/v1/traces",
            "opentelemetry,resource=service.name=x",
            "opentelemetry,bsp_schedule_delay=10",
        ],
        NO_DEPRECATED,
    )
    assert config.values.mode is TraceMode.OPENTELEMETRY
    assert dict(otel_settings(config.opentelemetry)) == {
        "url": "http://127.0.0.1:9/v1/traces",
        "resource": "service.name=x",
        "bsp_schedule_delay": "10",
        "bsp_max_queue_size": "2048",
        "bsp_max_export_batch_size": "512",
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (",level=OFF", "No trace mode specified"),
        ("jaeger,url=x", "invalid value for trace mode option: jaeger"),
        ("level", "option format is '<trace mode>,<setting>=<value>'"),
        ("level=LOUD", "invalid value for trace level option: LOUD"),
        ("rate=often", 'Bad option: "--trace-config rate"'),
        ("colour=blue", "unknown setting 'colour'"),
        ("triton,colour=blue", "unknown setting 'colour'"),
        ("opentelemetry,colour=blue", "unknown opentelemetry setting 'colour'"),
        ("opentelemetry,bsp_max_queue_size=-1", "bsp_max_queue_size"),
        ("count=-2", "count >= -1"),
    ],
)
def test_bad_trace_config_is_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        trace_config([value], NO_DEPRECATED)


def test_serve_flags_reach_server_options() -> None:
    from tritium.cli.main import build_parser, options_from_args

    args = build_parser().parse_args(
        [
            "serve",
            "--model-repository",
            "/m",
            "--trace-file",
            "/tmp/x.json",
            "--trace-level",
            "TIMESTAMPS",
            "--trace-rate",
            "3",
            "--trace-config",
            "count=5",
            "--trace-config",
            "triton,log-frequency=10",
        ]
    )
    assert options_from_args(args).tracing.values == TraceValues(
        TraceLevel.TIMESTAMPS, 3, 5, 10, "/tmp/x.json"
    )
    bad = build_parser().parse_args(["serve", "--model-repository", "/m", "--trace-config", "x"])
    with pytest.raises(SystemExit, match="trace-config option format"):
        options_from_args(bad)


def test_opentelemetry_mode_without_sdk_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(RuntimeError, match="needs the OpenTelemetry SDK"):
        TraceManager(TraceConfig(TraceValues(mode=TraceMode.OPENTELEMETRY)))
