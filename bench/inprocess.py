"""In-process inference (``tritium.tritonserver``, docs/inprocess.md) against the same
request over HTTP and gRPC on loopback: the examples' ONNX ``simple`` and Python
``add_sub_python`` (INT32 [1, 16] add/sub), each door at concurrency 1 (latency: p50, p99)
and 16 (throughput).

    python -m bench inprocess [--requests 2000] [--seconds 5] [--concurrency 16]

The in-process rows call ``Model.infer`` from plain threads of this process (``-async``:
16 ``async_infer`` requests at once on one asyncio loop of this process). The HTTP and gRPC
rows drive a ``tritium serve`` process over the same repository with tritonclient, one
client per thread, from this process. Closed loops; every answer is checked. The machine's
load moves the figures: read them side by side, from one run. Writes
bench/results/inprocess.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench.report import machine_info  # noqa: E402
from bench.server import model_subset, start_ready  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MODELS = ("simple", "add_sub_python")
IN0 = np.arange(16, dtype=np.int32).reshape(1, 16)
IN1 = np.full((1, 16), 2, dtype=np.int32)
SUM = IN0 + IN1
Call = Callable[[], None]


def _check(total: np.ndarray) -> None:
    if not np.array_equal(total, SUM):
        raise AssertionError(f"wrong answer: {total}")


def _inprocess_call(server: Any, model: str) -> Call:
    handle = server.model(model)
    inputs = {"INPUT0": IN0, "INPUT1": IN1}

    def call() -> None:
        for response in handle.infer(inputs=inputs):
            _check(np.from_dlpack(response.outputs["OUTPUT0"]))

    return call


def _wire_call(module: Any, url: str, model: str) -> Call:
    client = module.InferenceServerClient(url)
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(IN0)
    inputs[1].set_data_from_numpy(IN1)

    def call() -> None:
        _check(client.infer(model, inputs).as_numpy("OUTPUT0"))

    return call


def latency(call: Call, requests: int) -> dict[str, float]:
    """c1: ``requests`` calls one after the other (after a warm-up)."""
    for _ in range(min(200, requests)):
        call()
    times = []
    began = time.perf_counter()
    for _ in range(requests):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    elapsed = time.perf_counter() - began
    times.sort()
    return {
        "infer_per_s": requests / elapsed,
        "p50_us": times[len(times) // 2] / 1000,
        "p99_us": times[int(len(times) * 0.99)] / 1000,
        "mean_us": statistics.fmean(times) / 1000,
    }


def throughput(make_call: Callable[[], Call], threads: int, seconds: float) -> dict[str, float]:
    """c``threads``: each thread its own caller, a closed loop for ``seconds``."""
    calls = [make_call() for _ in range(threads)]
    counts = [0] * threads
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(k: int) -> None:
        try:
            while not stop.is_set():
                calls[k]()
                counts[k] += 1
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            failures.append(exc)

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return {"infer_per_s": sum(counts) / (time.perf_counter() - began)}


def async_throughput(server: Any, model: str, concurrency: int, seconds: float) -> dict[str, float]:
    """c``concurrency``: that many ``async_infer`` loops on one asyncio loop."""
    handle = server.model(model)
    inputs = {"INPUT0": IN0, "INPUT1": IN1}

    async def one(deadline: float) -> int:
        done = 0
        while time.perf_counter() < deadline:
            async for response in handle.async_infer(inputs=inputs):
                _check(np.from_dlpack(response.outputs["OUTPUT0"]))
            done += 1
        return done

    async def main() -> dict[str, float]:
        began = time.perf_counter()
        counts = await asyncio.gather(*(one(began + seconds) for _ in range(concurrency)))
        return {"infer_per_s": sum(counts) / (time.perf_counter() - began)}

    return asyncio.run(main())


def measure(args: argparse.Namespace, repo: Path, work: Path) -> list[dict[str, Any]]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    import tritium.tritonserver as ts

    rows: list[dict[str, Any]] = []
    server = ts.Server(model_repository=str(repo)).start(wait_until_ready=True)
    try:
        for model in MODELS:
            row = {"model": model, "door": "in-process"}
            row["c1"] = latency(_inprocess_call(server, model), args.requests)
            make = lambda m=model: _inprocess_call(server, m)  # noqa: E731
            row["c16"] = throughput(make, args.concurrency, args.seconds)
            rows.append(row)
            async_row = {"model": model, "door": "in-process async"}
            async_row["c16"] = async_throughput(server, model, args.concurrency, args.seconds)
            rows.append(async_row)
    finally:
        server.stop()
    wire = start_ready(repo, work / "server", models=MODELS)
    try:
        for model in MODELS:
            for door, module, url in (
                ("HTTP", httpclient, wire.http_url),
                ("gRPC", grpcclient, wire.grpc_url),
            ):
                row = {"model": model, "door": door}
                row["c1"] = latency(_wire_call(module, url, model), args.requests)
                make = lambda mod=module, u=url, m=model: _wire_call(mod, u, m)  # noqa: E731
                row["c16"] = throughput(make, args.concurrency, args.seconds)
                rows.append(row)
    finally:
        wire.stop()
    return rows


def _cell(row: dict[str, Any], key: str, field: str, digits: int = 0) -> str:
    value = row.get(key, {}).get(field)
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    machine = report["machine"]
    lines = [
        "# inprocess: the in-process API vs HTTP and gRPC on loopback",
        "",
        f"`{report['command']}` — {machine['date']}, {machine['cpu']} ({machine['nproc']} CPUs), "
        f"Python {machine['python']}, git {machine['git']}.",
        "",
        "INT32 [1, 16] add/sub; closed loops from this process (the wire rows against a "
        "`tritium serve` process, tritonclient one client per thread). c1: one request at a "
        f"time ({report['settings']['requests']} requests); c{report['settings']['concurrency']}: "
        f"threads (async: coroutines on one loop) for {report['settings']['seconds']} s.",
        "",
        "| model | door | c1 infer/s | c1 p50 µs | c1 p99 µs | c16 infer/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['model']} | {row['door']} | {_cell(row, 'c1', 'infer_per_s')} | "
            f"{_cell(row, 'c1', 'p50_us')} | {_cell(row, 'c1', 'p99_us')} | "
            f"{_cell(row, 'c16', 'infer_per_s')} |"
        )
    lines += ["", report.get("note", ""), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=sys.argv[0], description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="c1 requests per cell")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per c16 cell")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as scratch:
        work = Path(scratch)
        repo = model_subset(work, MODELS)
        rows = measure(args, repo, work)
    report = {
        "suite": "inprocess",
        "command": " ".join(sys.argv),
        "settings": vars(args) | {"out": str(args.out)},
        "machine": machine_info(),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "inprocess.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "inprocess.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
