"""Python model observability, piece by piece: the server's custom metrics registry and its
Prometheus rendering, the stub's outbox and inbox, the server's observer, the log flags."""

from __future__ import annotations

import logging
import math
import re
import socket
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tritium.backends.python import ipc
from tritium.backends.python.bls_client import FrameMux
from tritium.backends.python.observer import ModelLogLevels, Observability, StubObserver
from tritium.backends.python.stub_observe import MAX_LOGS, Outbox, ServerCalls
from tritium.cli.main import build_parser, options_from_args
from tritium.logs.settings import LevelFilter, TritonFormatter
from tritium.metrics.custom import COUNTER, GAUGE, HISTOGRAM, CustomMetrics, MetricError
from tritium.metrics.render import FAMILY_NAMES, escape_help, escape_label, format_value, render

A, B = "stub-a", "stub-b"  # two owners: two stub processes


def _custom_text(registry: CustomMetrics) -> str:
    text = render([], None, registry).decode()
    return text


def _parsed(registry: CustomMetrics) -> dict[str, dict[tuple, float]]:
    families = text_string_to_metric_families(_custom_text(registry))
    return {
        f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
        for f in families
    }


# ----------------------------------------------------------------------------- registry


def test_families_are_shared_by_name_and_kind_across_owners() -> None:
    registry = CustomMetrics()
    registry.new_family(A, 1, "reqs", "first help", COUNTER)
    registry.new_family(B, 1, "reqs", "second help", COUNTER)  # merged, as prometheus-cpp
    with pytest.raises(MetricError, match="Family name already exists with different type"):
        registry.new_family(B, 2, "reqs", "x", GAUGE)
    registry.new_metric(A, 10, 1, {"m": "x"})
    registry.new_metric(B, 10, 1, {"m": "x"})  # the same child
    registry.update(A, (10, None, 2.0))
    registry.update(B, (10, None, 3.0))
    assert registry.value(A, 10) == registry.value(B, 10) == 5.0
    (family,) = registry.families()
    assert family.description == "first help"
    registry.release(A)
    assert registry.value(B, 10) == 5.0  # B still refers to it
    registry.release(B)
    assert list(registry.families()) == []
    registry.new_family(A, 3, "reqs", "now a gauge", GAUGE)  # the name is free again


def test_names_labels_and_updates_are_checked() -> None:
    registry = CustomMetrics(reserved=FAMILY_NAMES)
    for name in ("1abc", "a-b", ""):
        with pytest.raises(MetricError, match="Invalid metric name"):
            registry.new_family(A, 1, name, "d", COUNTER)
    with pytest.raises(MetricError, match="different type"):
        registry.new_family(A, 1, "nv_inference_count", "d", COUNTER)  # the server's own
    with pytest.raises(MetricError, match="Unsupported kind"):
        registry.new_family(A, 1, "x", "d", 3)
    registry.new_family(A, 1, "h", "d", HISTOGRAM)
    for labels in ({"le": "1"}, {"__x": "1"}, {"a b": "1"}, {"a": 1}):
        with pytest.raises(MetricError):
            registry.new_metric(A, 2, 1, labels, [1.0])  # type: ignore[arg-type]
    with pytest.raises(MetricError, match="strictly sorted"):
        registry.new_metric(A, 2, 1, {}, [2.0, 1.0])
    registry.new_metric(A, 2, 1, {}, [1.0, 2.0])
    assert registry.bounds(A, 2) == [1.0, 2.0]
    registry.new_metric(A, 3, 1, {}, [5.0])  # the same labels: the existing buckets stay
    assert registry.bounds(A, 3) == [1.0, 2.0]
    for bad in ((2, [1, 1], 1.0, 2), (2, [1, -1, 0], 1.0, 0), (2, None, 0.0)):
        with pytest.raises(MetricError):
            registry.update(A, bad)  # type: ignore[arg-type]
    with pytest.raises(MetricError, match="does not support Value"):
        registry.value(A, 2)
    registry.new_family(A, 4, "c", "d", COUNTER)
    registry.new_metric(A, 5, 4, {})
    with pytest.raises(MetricError, match="monotonically"):
        registry.update(A, (5, None, -1.0))
    with pytest.raises(MetricError):
        registry.update(A, (5, 3.0, 0.0))  # a counter cannot be set
    with pytest.raises(MetricError, match="unknown metric handle"):
        registry.update(B, (5, None, 1.0))  # another owner's handle


def test_dropping_a_family_handle_drops_the_metrics_made_through_it() -> None:
    registry = CustomMetrics()
    registry.new_family(A, 1, "g", "d", GAUGE)
    registry.new_family(A, 2, "g", "d", GAUGE)
    registry.new_metric(A, 10, 1, {"via": "one"})
    registry.new_metric(A, 11, 2, {"via": "two"})
    registry.drop_family(A, 1)
    (family,) = registry.families()
    assert list(family.children) == [(("via", "two"),)]
    registry.drop_metric(A, 11)
    assert list(registry.families()) == []  # no child: not rendered
    registry.drop_family(A, 2)
    registry.drop_family(A, 2)  # twice (a late finalizer): harmless


# ----------------------------------------------------------------------------- rendering


def test_rendering_is_valid_exposition_text_with_escaped_labels() -> None:
    registry = CustomMetrics()
    registry.new_family(A, 1, "reqs_total", 'help with \\ and\nnewline "q"', COUNTER)
    registry.new_metric(A, 2, 1, {"path": 'C:\\dir "x"\nnext', "a": "1"})
    registry.update(A, (2, None, 3.0))
    registry.new_family(A, 3, "temp", "g", GAUGE)
    registry.new_metric(A, 4, 3, {})
    registry.update(A, (4, 1.0, 0.25))
    registry.new_family(A, 5, "lat", "h", HISTOGRAM)
    registry.new_metric(A, 6, 5, {"m": "x"}, [0.1, 1.0])
    registry.update(A, (6, [1, 0, 2], 20.05, 3))
    text = _custom_text(registry)
    assert '# HELP reqs_total help with \\\\ and\\nnewline "q"\n' in text
    assert "# TYPE lat histogram\n" in text
    assert "\ntemp 1.25\n" in text  # no labels: no braces
    assert 'lat_bucket{m="x",le="0.1"} 1\nlat_bucket{m="x",le="1"} 1\n' in text
    assert 'lat_bucket{m="x",le="+Inf"} 3\nlat_sum{m="x"} 20.05\nlat_count{m="x"} 3\n' in text
    parsed = _parsed(registry)
    assert parsed["reqs"] == {("reqs_total", (("a", "1"), ("path", 'C:\\dir "x"\nnext'))): 3.0}
    assert parsed["temp"] == {("temp", ()): 1.25}
    assert parsed["lat"][("lat_count", (("m", "x"),))] == 3


def test_text_helpers() -> None:
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert escape_help('a\\b"c\nd') == 'a\\\\b"c\\nd'
    assert [format_value(v) for v in (3.0, -2.0, 0.1, math.nan, math.inf, -math.inf)] == [
        "3",
        "-2",
        "0.1",
        "NaN",
        "+Inf",
        "-Inf",
    ]
    assert format_value(1e300) == "1e+300"


def test_the_server_families_are_reserved() -> None:
    text = render([], None).decode()
    rendered = set(re.findall(r"^# TYPE (\S+)", text, re.MULTILINE))
    assert rendered <= FAMILY_NAMES


# ----------------------------------------------------------------------------- stub outbox


def test_outbox_coalesces_metric_updates() -> None:
    box = Outbox()
    assert box.take() is None
    for _ in range(1000):
        box.add(1, COUNTER, 1.0)
    box.add(2, GAUGE, 5.0)
    box.set(2, 1.0)
    box.add(2, GAUGE, -0.5)
    for value in (0.5, 1.0, 3.0, math.nan, 99.0):
        box.observe(3, (1.0, 10.0), value)
    logs, dropped, updates, drops = box.take()
    assert (logs, dropped, drops) == ([], 0, [])
    assert sorted(updates, key=lambda u: u[0]) == [
        (1, None, 1000.0),
        (2, 1.0, -0.5),
        (3, [2, 1, 2], pytest.approx(math.nan, nan_ok=True), 5),
    ]
    assert box.take() is None


def test_outbox_keeps_at_most_max_logs_and_counts_the_rest() -> None:
    box = Outbox()
    box.enabled = [True, True, True, False]  # verbose off
    box.log("VERBOSE", "not sent", "model.py:1")
    for i in range(MAX_LOGS + 5):
        box.log("INFO", f"m{i}", "model.py:2")
    box.drop(7, False)
    box.drop(8, True)
    logs, dropped, _updates, drops = box.take()
    assert len(logs) == MAX_LOGS and dropped == 5
    assert logs[0] == (0, "model.py:2", "m0")
    assert drops == [(7, False), (8, True)]


def test_a_caller_waiting_for_a_reply_leaves_other_frames_to_the_serve_loop() -> None:
    server, stub = socket.socketpair()
    cancels: list[object] = []
    sent: list[tuple[int, object]] = []
    try:
        mux = FrameMux(ipc.BlockingChannel(stub), cancels.append)
        calls = ServerCalls(lambda kind, body: sent.append((kind, body)), mux)
        for kind, body in (
            (ipc.EXECUTE, "first"),
            (ipc.CANCEL, (1, 0)),
            (ipc.CALL_REPLY, (-1, True, 2.5)),
        ):
            for part in ipc.encode(kind, body):
                server.sendall(part)
        assert calls("value", 3) == 2.5  # read by the caller itself (no serve loop)
        assert sent == [(ipc.CALL, (-1, "value", 3))]
        assert mux.next_command()[:2] == (ipc.EXECUTE, "first")
        assert cancels == [(1, 0)]
        # A model thread waits while the serve loop reads: the loop routes the reply.
        got: list[BaseException] = []

        def wait() -> None:
            try:
                calls("family", (1, "f", "", 0))
            except MetricError as exc:
                got.append(exc)

        frames: list[tuple] = []
        loop = threading.Thread(target=lambda: frames.append(mux.next_command()))
        waiter = threading.Thread(target=wait)
        loop.start()
        waiter.start()
        for kind, body in ((ipc.CALL_REPLY, (-2, False, "refused")), (ipc.IS_READY, None)):
            for part in ipc.encode(kind, body):
                server.sendall(part)
        waiter.join(10)
        loop.join(10)
        assert [str(e) for e in got] == ["refused"]
        assert frames[0][:2] == (ipc.IS_READY, None)
    finally:
        server.close()
        stub.close()


# ----------------------------------------------------------------------------- observer


def test_observer_logs_with_the_models_call_site(caplog: pytest.LogCaptureFixture) -> None:
    observer = StubObserver(
        Observability(CustomMetrics(), ModelLogLevels((True, False, True, True))), "m_0"
    )
    caplog.set_level(logging.DEBUG, logger="tritium")
    observer.observe(
        ([(0, "model.py:42", "hello %s"), (1, "model.py:43", "w"), (3, "m.py:7", "v")], 3, [], [])
    )
    records = [(r.levelno, r.filename, r.lineno, r.getMessage()) for r in caplog.records]
    assert records[:2] == [
        (logging.INFO, "model.py", 42, "hello %s"),
        (logging.DEBUG, "m.py", 7, "v"),
    ]
    assert "'m_0': 3 log messages were dropped" in records[2][3]
    caplog.clear()
    observer.observe(("not", "a", "frame"))
    assert "malformed" in caplog.records[0].getMessage()


def test_observer_calls_answer_with_tritons_texts() -> None:
    registry = CustomMetrics()
    observer = StubObserver(Observability(registry), "m_0")
    assert observer.call((1, "family", (1, "c", "d", COUNTER))) == (1, True, None)
    assert observer.call((2, "metric", (2, 1, {"a": "b"}, None))) == (2, True, None)
    observer.observe(([], 0, [(2, None, 4.0)], []))
    assert observer.call((3, "value", 2)) == (3, True, 4.0)
    assert observer.call((4, "family", (3, "c", "d", GAUGE))) == (
        4,
        False,
        "Family name already exists with different type",
    )
    assert observer.call((5, "nope", None))[1] is False
    observer.observe(([], 0, [], [(2, False)]))  # the Metric object was collected
    assert list(registry.families()) == []
    assert observer.call((6, "metric", (4, 1, {}, None)))[1] is True
    observer.observe(([], 0, [], [(1, True)]))  # the family object: its metrics go too
    assert list(registry.families()) == []
    assert observer.call((7, "value", 4)) == (
        7,
        False,
        "Could not get metric value. Metric has been invalidated.",
    )
    assert observer.call(None)[1] is False
    observer.close()
    assert list(registry.families()) == []


# ----------------------------------------------------------------------------- log flags


def _options(*flags: str):  # type: ignore[no-untyped-def]
    return options_from_args(
        build_parser().parse_args(["serve", "--model-repository", "r", *flags])
    )


def test_log_flags_default_on_and_take_triton_spellings() -> None:
    log = _options().logging
    assert (log.info, log.warning, log.error) == (True, True, True)
    assert log.verbose == 0
    log = _options(
        "--log-info=false", "--log-warning", "0", "--log-error=off", "--log-verbose=2"
    ).logging
    assert (log.info, log.warning, log.error) == (False, False, False)
    assert log.verbose == 2


def _record(level: int, message: str = "msg") -> logging.LogRecord:
    return logging.LogRecord("tritium", level, "/x/server.py", 12, message, (), None)


def test_triton_format_and_level_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", raising=False)
    formatter = TritonFormatter()
    for level, letter in ((logging.DEBUG, "I"), (logging.INFO, "I"), (logging.WARNING, "W")):
        line = formatter.format(_record(level))
        assert re.fullmatch(
            rf'{letter}\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} \d+ server\.py:12\] "msg"', line
        )
    assert formatter.format(_record(logging.CRITICAL)).startswith("E")
    only_errors = LevelFilter(info=False, warning=False, error=True)
    kept = [lvl for lvl in (10, 20, 30, 40, 50) if only_errors.filter(_record(lvl))]
    assert kept == [10, 40, 50]  # DEBUG is --log-verbose's to decide (the logger's level)
