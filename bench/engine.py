"""The closed loop's frame: the sampler that opens and closes a scenario's window around its
workers (the workers themselves are in catalog.py and bench/scenarios/), and the summary of a
window as one report row."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import numpy as np

from bench.common import CpuSnapshot, Scenario, Settings, Window
from bench.server import Server, models_stats


async def sampler(win: Window, server: Server, models: tuple[str, ...], settings: Settings):
    """Opens and closes the window; the models' statistics are read just outside it."""
    await asyncio.sleep(settings.warmup)
    stats_start = await asyncio.to_thread(models_stats, server, models)
    win.start = CpuSnapshot.take(server.pid)
    await asyncio.sleep(settings.seconds)
    win.end = CpuSnapshot.take(server.pid)
    win.stats = [stats_start, await asyncio.to_thread(models_stats, server, models)]


async def run_window(
    sc: Scenario, server: Server, settings: Settings, win: Window, workers: list[Any]
) -> None:
    """Runs the workers while the sampler opens and closes the window."""
    sample = asyncio.ensure_future(sampler(win, server, sc.models, settings))
    limit = settings.warmup + settings.seconds + 30.0
    try:
        await asyncio.wait_for(asyncio.gather(*workers), limit)
    except TimeoutError:
        win.errors.append(f"scenario did not finish within {limit:.0f} s (server hung?)")
    if win.errors:
        sample.cancel()
    else:
        await sample


def summarize(sc: Scenario, win: Window, payload_bytes: int | None = None) -> dict[str, Any]:
    """One report row; ``payload_bytes`` (input + output bytes of one inference, see
    catalog.PAYLOAD_BYTES) adds MB/s."""
    row: dict[str, Any] = {
        **asdict(sc),
        "name": sc.name,
        "verified": win.verified,
        "wrong_count": len(win.wrong),
        "wrong": win.wrong[:5],
        "errors": win.errors[:5],
    }
    if win.errors or win.start is None or win.end is None or not win.latencies:
        return row
    start, end = win.start, win.end
    n, seconds = len(win.latencies), end.wall - start.wall
    lat_ms = np.asarray(win.latencies) * 1e3
    row.update(
        requests=n,
        seconds=round(seconds, 3),
        infer_per_s=n * sc.batch / seconds,
        p50_ms=float(np.percentile(lat_ms, 50)),
        p99_ms=float(np.percentile(lat_ms, 99)),
        mean_ms=float(lat_ms.mean()),
        server_cpu_us=(end.server - start.server) * 1e6 / (n * sc.batch),
        stub_cpu_us=end.stub_delta(start) * 1e6 / (n * sc.batch),
        client_cpu_us=(end.client - start.client) * 1e6 / (n * sc.batch),
        server_cpu_util=(end.server - start.server) / seconds,
        stub_cpu_util=end.stub_delta(start) / seconds,
        client_cpu_util=(end.client - start.client) / seconds,
        # other processes busy on the machine during the window (cores): noise when > ~0.1
        other_cpu_util=end.other_delta(start) / seconds,
    )
    row.update(win.extras)
    if payload_bytes:
        row["bytes_per_inference"] = payload_bytes
        row["mb_per_s"] = row["infer_per_s"] * payload_bytes / 1e6
    if sc.responses:
        add_decoupled(row, win, seconds)
    if len(win.stats) == 2:
        counts = {m: stats_delta(win.stats[0][m], win.stats[1][m]) for m in sc.models}
        if counts[sc.model]:
            row.update(counts[sc.model])
        composing = {m: c for m, c in counts.items() if m != sc.model and c}
        if composing:
            row["composing_stats"] = composing
    return row


def stats_delta(start: dict[str, int] | None, end: dict[str, int] | None) -> dict[str, Any]:
    """A model's inferences, executions and average batch over the window ({} if unknown)."""
    if start is None or end is None:
        return {}
    inferences, executions = (end[k] - start[k] for k in ("inference_count", "execution_count"))
    delta = {
        "server_inferences": inferences,
        "server_executions": executions,
        "avg_batch": inferences / executions if executions else None,
    }
    if "batch_rows" in start and "batch_rows" in end:
        # rows the executions computed (batch_stats), padding such as the sequence batcher's
        # READY = false fillers included: above avg_batch when some rows were not requests
        rows = end["batch_rows"] - start["batch_rows"]
        delta["avg_exec_batch"] = rows / executions if executions else None
    if "compute_infer" in start and "compute_infer" in end and inferences:
        # the server's time per request around the backend (Python: the stub round trip;
        # inference_stats sum each request's compute durations, as Triton's)
        delta["compute_us"] = {
            k.removeprefix("compute_"): (end[k] - start[k]) / inferences / 1e3
            for k in ("compute_input", "compute_infer", "compute_output")
        }
        # their sum: the model's own compute time per inference (the BLS list's child)
        delta["compute_total_us"] = sum(delta["compute_us"].values())
    return delta


def add_decoupled(row: dict[str, Any], win: Window, seconds: float) -> None:
    """Per request: time to first response and to the final one; per response: rate and CPU
    (the per-inference CPU columns stay per request)."""
    first_ms = np.asarray(win.first_latencies or [np.nan]) * 1e3
    per = max(win.responses, 1)
    start, end = win.start, win.end
    row.update(
        responses_in_window=win.responses,
        responses_per_s=win.responses / seconds,
        first_p50_ms=float(np.percentile(first_ms, 50)),
        first_p99_ms=float(np.percentile(first_ms, 99)),
        server_cpu_us_per_response=(end.server - start.server) * 1e6 / per,
        stub_cpu_us_per_response=end.stub_delta(start) * 1e6 / per,
        client_cpu_us_per_response=(end.client - start.client) * 1e6 / per,
    )
