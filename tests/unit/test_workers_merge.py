"""--workers: the totals over the workers (workers/merge.py), the control channel's framing
(workers/channel.py), the flag, and the worker flags refused without workers
(workers/refusals.py)."""

from __future__ import annotations

import asyncio
import json
import math
import socket
from pathlib import Path

import pytest

from tritium.cli.main import build_parser, options_from_args
from tritium.errors import ErrorKind, ServerError
from tritium.metrics.latency import SlidingSummary
from tritium.metrics.stats import BatchStats, ModelStats
from tritium.options import ServerOptions
from tritium.workers.channel import Channel, ChannelClosed, Peer
from tritium.workers.merge import merge_metrics, merge_statistics
from tritium.workers.refusals import single_refusal


def _stats(count: int, last: int, batches: dict[int, int]) -> dict[str, object]:
    stats = ModelStats("m", "1")
    stats.inference_count = count
    stats.execution_count = count
    stats.success.count = count
    stats.success.ns = 10 * count
    stats.last_inference_ms = last
    for size, n in batches.items():
        stats.batches[size] = BatchStats()
        stats.batches[size].compute_infer.count = n
    return stats.as_dict()


def test_statistics_are_summed_per_version() -> None:
    a = {"model_stats": [_stats(3, 100, {1: 3})]}
    b = {"model_stats": [_stats(5, 250, {1: 4, 4: 1})]}
    (merged,) = merge_statistics([a, b])["model_stats"]
    assert merged["name"] == "m" and merged["version"] == "1"
    assert merged["inference_count"] == 8
    assert merged["execution_count"] == 8
    assert merged["inference_stats"]["success"] == {"count": 8, "ns": 80}
    assert merged["last_inference"] == 250
    sizes = {e["batch_size"]: e["compute_infer"]["count"] for e in merged["batch_stats"]}
    assert sizes == {1: 7, 4: 1}


def test_statistics_keep_versions_apart() -> None:
    one = _stats(1, 1, {})
    two = {**_stats(2, 2, {}), "version": "2"}
    merged = merge_statistics([{"model_stats": [one]}, {"model_stats": [two]}])
    assert sorted((e["version"], e["inference_count"]) for e in merged["model_stats"]) == [
        ("1", 1),
        ("2", 2),
    ]


_WORKER_TEXT = """\
# HELP nv_inference_count Number of inferences
# TYPE nv_inference_count counter
nv_inference_count{{model="m",version="1"}} {count}
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization {cpu}
# TYPE nv_inference_request_duration_us_hist histogram
nv_inference_request_duration_us_hist_bucket{{model="m",version="1",le="100"}} {low}
nv_inference_request_duration_us_hist_bucket{{model="m",version="1",le="+Inf"}} {count}
nv_inference_request_duration_us_hist_sum{{model="m",version="1"}} {total}
nv_inference_request_duration_us_hist_count{{model="m",version="1"}} {count}
# TYPE tritium_model_ready gauge
tritium_model_ready{{model="m",version="1"}} {ready}
"""


def _text(count: int, low: int, total: int, cpu: float = 0.5, ready: int = 1) -> str:
    return _WORKER_TEXT.format(count=count, low=low, total=total, cpu=cpu, ready=ready)


def _samples(text: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            found[key] = float(value)
    return found


def test_counters_and_histograms_are_summed_machine_gauges_taken_once() -> None:
    merged = merge_metrics([{"text": _text(3, 2, 250)}, {"text": _text(5, 1, 900, ready=0)}])
    samples = _samples(merged)
    assert samples['nv_inference_count{model="m",version="1"}'] == 8
    hist = 'nv_inference_request_duration_us_hist_{}{{model="m",version="1"{}}}'
    assert samples[hist.format("bucket", ',le="100"')] == 3
    assert samples[hist.format("bucket", ',le="+Inf"')] == 8
    assert samples[hist.format("sum", "")] == 1150
    assert samples["nv_cpu_utilization"] == 0.5
    assert samples['tritium_model_ready{model="m",version="1"}'] == 0  # not ready everywhere
    assert merged.count("# TYPE nv_inference_count counter") == 1


def _sketch(summary: SlidingSummary, now: int) -> dict[str, object]:
    cells = [[k, c, t] for k, (c, t) in summary.window(now).items()]
    return {"quantiles": list(summary.quantile_points), "cells": cells}


def test_summary_quantiles_are_those_of_all_observations() -> None:
    quantiles = ((0.5, 0.05), (0.9, 0.01))
    a, b, together = (SlidingSummary(quantiles, 0) for _ in range(3))
    for value in range(1, 101):
        (a if value <= 50 else b).observe(value, 1)
        together.observe(value, 1)
    series = 'nv_inference_request_summary_us{model="m",version="1"'

    def text(s: SlidingSummary) -> str:
        lines = [f'{series},quantile="{q}"}} {v}' for q, v in s.quantiles(2)]
        return "\n".join([*lines, f"{series}}}_sum {s.total}"])

    merged = merge_metrics(
        [
            {"text": text(a), "sketches": {series: _sketch(a, 2)}},
            {"text": text(b), "sketches": {series: _sketch(b, 2)}},
        ]
    )
    samples = _samples(merged)
    for q, value in together.quantiles(2):
        assert math.isclose(samples[f'{series},quantile="{q}"}}'], value)
    assert samples[f'{series},quantile="0.5"}}'] == 50  # neither worker's own median


def test_channel_carries_calls_replies_errors_and_notes() -> None:
    async def scenario() -> None:
        left, right = socket.socketpair()
        notes: list[dict[str, object]] = []

        async def on_call(action: str, args: dict[str, object]) -> object:
            if action == "fail":
                raise ServerError(ErrorKind.NOT_FOUND, "no such model")
            return {"echo": args}

        a = Peer(await Channel.open(left), on_call, notes.append)
        b = Peer(await Channel.open(right), on_call, notes.append)
        serving = [asyncio.ensure_future(p.serve()) for p in (a, b)]
        assert await a.call("echo", {"x": 1}) == {"echo": {"x": 1}}
        with pytest.raises(ServerError) as raised:
            await b.call("fail", {})
        assert raised.value.kind is ErrorKind.NOT_FOUND
        assert raised.value.message == "no such model"
        a.note("beat", ready=True)
        await asyncio.sleep(0.05)
        assert notes == [{"op": "beat", "ready": True}]
        b.channel.close()
        waiting = asyncio.ensure_future(a.call("echo", {}))
        with pytest.raises(ChannelClosed):
            await waiting
        for task in serving:
            task.cancel()

    asyncio.run(scenario())


def test_a_reply_over_the_message_bound_comes_back_as_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Never dropped: the caller (a worker asking for its sync) would wait forever."""
    from tritium.workers import channel

    monkeypatch.setattr(channel, "MAX_MESSAGE", 1000)

    async def scenario() -> None:
        left, right = socket.socketpair()

        async def on_call(action: str, args: dict[str, object]) -> object:
            return "x" * 5000

        a = Peer(await Channel.open(left), on_call, lambda note: None)
        b = Peer(await Channel.open(right), on_call, lambda note: None)
        serving = [asyncio.ensure_future(p.serve()) for p in (a, b)]
        with pytest.raises(ServerError) as raised:
            await asyncio.wait_for(a.call("big", {}), 10)
        assert raised.value.kind is ErrorKind.INTERNAL
        assert "over 1000" in raised.value.message
        for task in serving:
            task.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        a.channel.close()
        b.channel.close()
        await asyncio.sleep(0)

    asyncio.run(scenario())


def _options(*args: str) -> ServerOptions:
    argv = ["serve", "--model-repository", "/r", *args]
    return options_from_args(build_parser().parse_args(argv))


def test_workers_flag() -> None:
    assert _options().workers == 1
    assert _options("--workers", "3").workers == 3
    assert _options("--workers", "auto").workers >= 1
    with pytest.raises(SystemExit):
        _options("--workers", "0")


def test_worker_flags_without_workers_are_refused() -> None:
    assert single_refusal(_options()) == ""
    assert "--worker-sockets" in single_refusal(_options("--worker-sockets", "reuseport"))
    assert "--worker-heartbeat-secs" in single_refusal(_options("--worker-heartbeat-secs", "3"))


def test_sequence_owner_is_the_same_in_every_worker() -> None:
    from tritium.workers.forward import owner_of

    assert [owner_of(i, 3) for i in (3, 4, 5)] == [0, 1, 2]
    assert owner_of("seq-a", 3) == owner_of("seq-a", 3)
    assert {owner_of(f"s{i}", 3) for i in range(50)} == {0, 1, 2}


def test_replayed_settings_are_compacted() -> None:
    from tritium.workers.history import _remember

    history: dict[str, dict[str, object]] = {}

    def change(action: str, **args: object) -> dict[str, object]:
        return {"action": action, "args": args}

    _remember(history, change("log", update={"log_verbose_level": 1}))
    _remember(history, change("log", update={"log_info": False}))
    _remember(history, change("shm_register", name="a", key="/a", offset=0, size=8))
    _remember(history, change("shm_register", name="b", key="/b", offset=0, size=8))
    _remember(history, change("trace", model="m", update={"trace_rate": ["5"]}))
    _remember(history, change("trace", model="m", update={"trace_level": None}))
    _remember(history, change("shm_unregister", name="a"))
    assert list(history) == ["log", "shm:b", "trace:m"]
    assert history["log"]["args"] == {
        "action": "log",
        "args": {"update": {"log_verbose_level": 1, "log_info": False}},
    }
    assert history["trace:m"]["args"] == {
        "action": "trace",
        "args": {"model": "m", "update": {"trace_rate": ["5"], "trace_level": None}},
    }
    _remember(history, change("shm_unregister", name=""))  # every region
    assert list(history) == ["log", "trace:m"]


def test_a_loads_files_go_through_the_uploads_directory(tmp_path: Path) -> None:
    """What ``Member.load`` writes and every worker reads back: one file per override,
    named by its place (a key never becomes a path), the message only names them."""
    from tritium.workers.member import _spool, _unspool

    files = {"file:1/model.py": b"x = 1\n", "file:../../escape": b"\0" * 1000}
    upload = _spool(tmp_path, files)
    assert len(json.dumps(upload)) < 200
    (holder,) = tmp_path.iterdir()
    assert sorted(p.name for p in holder.iterdir()) == ["0", "1"]
    assert _unspool(upload) == files


def test_the_history_keeps_one_load_per_model_and_names_the_uploads_to_remove(
    tmp_path: Path,
) -> None:
    from tritium.workers.history import History

    history = History(tmp_path)
    first, second = tmp_path / "load-a", tmp_path / "load-b"
    load = {"name": "m", "config": None, "upload": {"dir": str(first), "keys": ["k"]}}
    assert history.upload(load) == first
    assert history.model_action("load", load, 1.5) is None
    again = {**load, "upload": {"dir": str(second), "keys": ["k"]}}
    assert history.model_action("load", again, 0.5) == first  # replaced: its files go
    assert history.model_action("unload", {"name": "m", "dependents": False}, 0.1) == second
    assert [(e["action"], took) for e, took in history.snapshot()] == [("unload", 0.1)]
    for outside in ("/etc", str(tmp_path / "x" / "load-c"), str(tmp_path / "other")):
        with pytest.raises(ServerError):
            history.upload({"name": "m", "upload": {"dir": outside, "keys": []}})
    assert History(None).upload({"name": "m", "upload": None}) is None
