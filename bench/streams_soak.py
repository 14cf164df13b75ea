"""Stream soak: open and close many gRPC ModelStreamInfer streams; does anything stay behind?

    python -m bench streams [--streams 10000] [--workers 8] [--budget 170]

The example model repository is built into a temporary directory and the server started as a
child process, as the scenario suites do (bench/server.py: bench/process.py's ServerProcess). N
worker
threads, each with one tritonclient gRPC client (one channel), then open and close streams one
after the other:

* even streams: one ``simple`` request, wait for the answer, check it, close gracefully;
* odd streams are closed **mid-request** (``stop_stream(cancel_requests=True)``), alternating:
  - a ``repeat_int32`` request of 10 responses 1 s apart, closed after its first response;
  - a ``repeat_int32`` request like it plus a few ``simple`` requests, closed at once, without
    waiting for anything.

The server's RSS (``/proc/<pid>/status`` VmRSS), thread count and open file descriptors, and
the same for its Python-backend stubs (its child processes), are sampled before any stream, after
a warm-up of ``--warmup`` streams, at the half-way mark, at the end, and again after the server
has had ``--settle`` seconds to finish the cancelled work. A flat server shows the same threads
and fds after 10,000 streams as after the warm-up, and RSS within a few MiB.

The run stops early at ``--budget`` seconds and reports how many streams it managed. Results go
to ``bench/results/streams.json``; a table is printed.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
from bench.common import RESULTS_DIR  # noqa: E402
from bench import proctree  # noqa: E402
from bench.report import machine_info  # noqa: E402
from bench.server import Server, build_repository  # noqa: E402

RESULTS = RESULTS_DIR / "streams.json"
ANSWER_TIMEOUT_S = 30.0
STREAM_DEADLINE_S = 60.0
LONG_VALUES = list(range(10))
LONG_DELAYS_MS = [0] + [1000] * 9  # first response at once, then one a second


# ---------------------------------------------------------------------------------------------
# /proc sampling
# ---------------------------------------------------------------------------------------------
def proc_usage(pid: int) -> dict[str, float] | None:
    usage, fds = proctree.status(pid), proctree.open_fds(pid)
    if not usage or fds is None:
        return None
    return {"rss_mib": usage["VmRSS"] / 1024, "threads": usage["Threads"], "fds": fds}


def sample(label: str, server_pid: int, streams_done: int, started: float) -> dict[str, Any]:
    server = proc_usage(server_pid) or {}
    stubs = [u for u in (proc_usage(p) for p in proctree.children(server_pid)) if u]
    return {
        "label": label,
        "streams": streams_done,
        "t_s": round(time.monotonic() - started, 1),
        "server": server,
        "stubs": {
            "count": len(stubs),
            "rss_mib": sum(u["rss_mib"] for u in stubs),
            "threads": sum(u["threads"] for u in stubs),
            "fds": sum(u["fds"] for u in stubs),
        },
    }


# ---------------------------------------------------------------------------------------------
# Stream cycles
# ---------------------------------------------------------------------------------------------
@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: int = 0
    graceful: int = 0
    cancelled: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, kind: str, error: str | None = None) -> None:
        with self.lock:
            self.done += 1
            if kind == "graceful":
                self.graceful += 1
            else:
                self.cancelled += 1
            if error is not None:
                self.errors.append(error)


def _input(mod: Any, name: str, array: np.ndarray, datatype: str) -> Any:
    tensor = mod.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _simple(mod: Any, seed: int) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = (np.arange(16, dtype=np.int32) + seed).reshape(1, 16)
    b = np.full((1, 16), seed % 7, dtype=np.int32)
    return [_input(mod, "INPUT0", a, "INT32"), _input(mod, "INPUT1", b, "INT32")], a, b


def _repeat(mod: Any) -> list[Any]:
    return [
        _input(mod, "IN", np.array(LONG_VALUES, np.int32), "INT32"),
        _input(mod, "DELAY", np.array(LONG_DELAYS_MS, np.uint32), "UINT32"),
        _input(mod, "WAIT", np.array([0], np.uint32), "UINT32"),
    ]


def one_stream(client: Any, mod: Any, index: int) -> tuple[str, str | None]:
    """Open a stream, use it, close it; (kind, unexpected error or None)."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    # A deadline on every stream, so that a server that never ends one cannot hang the soak.
    client.start_stream(
        lambda result, error: answers.put((result, error)), stream_timeout=STREAM_DEADLINE_S
    )
    try:
        if index % 2 == 0:
            inputs, a, b = _simple(mod, index)
            client.async_stream_infer("simple", inputs, request_id=str(index))
            result, error = answers.get(timeout=ANSWER_TIMEOUT_S)
            if error is not None:
                return "graceful", f"stream {index}: {error}"
            if not np.array_equal(result.as_numpy("OUTPUT0"), a + b):
                return "graceful", f"stream {index}: wrong answer"
            client.stop_stream()
            return "graceful", None
        client.async_stream_infer("repeat_int32", _repeat(mod), request_id=f"long{index}")
        if index % 4 == 1:
            result, error = answers.get(timeout=ANSWER_TIMEOUT_S)
            if error is not None:
                return "cancelled", f"stream {index}: {error}"
        else:
            for k in range(3):
                client.async_stream_infer("simple", _simple(mod, k)[0], request_id=f"s{k}")
        client.stop_stream(cancel_requests=True)
        return "cancelled", None
    except queue.Empty:
        return ("graceful" if index % 2 == 0 else "cancelled"), f"stream {index}: no answer"
    finally:
        client.stop_stream(cancel_requests=True)


def worker(url: str, indices: range, tally: Tally, stop: threading.Event) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        for index in indices:
            if stop.is_set():
                return
            kind, error = one_stream(client, grpcclient, index)
            tally.add(kind, error)
            if len(tally.errors) > 50:  # the server is not answering: no point going on
                stop.set()
    finally:
        client.close()


def run_streams(
    url: str, start: int, count: int, workers: int, stop: threading.Event, tally: Tally
) -> None:
    per = -(-count // workers)
    threads = [
        threading.Thread(
            target=worker,
            args=(
                url,
                range(start + w * per, min(start + (w + 1) * per, start + count)),
                tally,
                stop,
            ),
            daemon=True,
        )
        for w in range(workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def table(samples: list[dict[str, Any]]) -> str:
    head = (
        f"{'sample':<10} {'streams':>8} {'t s':>6} | {'RSS MiB':>8} {'threads':>8} {'fds':>5} |"
        f" {'stubs':>5} {'stub RSS':>9} {'stub thr':>8} {'stub fds':>8}"
    )
    lines = [head, "-" * len(head)]
    for s in samples:
        srv, stubs = s["server"], s["stubs"]
        lines.append(
            f"{s['label']:<10} {s['streams']:>8} {s['t_s']:>6} | {srv.get('rss_mib', 0):>8.1f}"
            f" {srv.get('threads', 0):>8} {srv.get('fds', 0):>5} | {stubs['count']:>5}"
            f" {stubs['rss_mib']:>9.1f} {stubs['threads']:>8} {stubs['fds']:>8}"
        )
    return "\n".join(lines)


def deltas(samples: list[dict[str, Any]]) -> dict[str, float]:
    by = {s["label"]: s for s in samples}
    base, end = by.get("warm"), by.get("settled") or samples[-1]
    if not base or not base["server"] or not end["server"]:
        return {}
    return {
        "server_rss_mib": round(end["server"]["rss_mib"] - base["server"]["rss_mib"], 1),
        "server_threads": end["server"]["threads"] - base["server"]["threads"],
        "server_fds": end["server"]["fds"] - base["server"]["fds"],
        "stub_rss_mib": round(end["stubs"]["rss_mib"] - base["stubs"]["rss_mib"], 1),
        "stub_threads": end["stubs"]["threads"] - base["stubs"]["threads"],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=8, help="threads, one gRPC channel each")
    p.add_argument("--warmup", type=int, default=200, help="streams before the baseline sample")
    p.add_argument("--budget", type=float, default=170.0, help="stop opening streams after this")
    p.add_argument("--settle", type=float, default=12.0, help="idle seconds before the last sample")
    p.add_argument("--output", type=Path, default=RESULTS)
    return p.parse_args(argv)


def soak(url: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    tally, stop = Tally(), threading.Event()
    timer = threading.Timer(args.budget, stop.set)
    timer.daemon = True
    timer.start()
    samples = [sample("start", pid, 0, started)]
    run_streams(url, 0, args.warmup, args.workers, stop, tally)
    samples.append(sample("warm", pid, tally.done, started))
    half = args.streams // 2
    run_streams(url, args.warmup, half - args.warmup, args.workers, stop, tally)
    samples.append(sample("half", pid, tally.done, started))
    run_streams(url, half, args.streams - half, args.workers, stop, tally)
    elapsed = time.monotonic() - started
    timer.cancel()
    samples.append(sample("end", pid, tally.done, started))
    time.sleep(args.settle)  # cancelled repeat_int32 requests would run up to 9 s more
    samples.append(sample("settled", pid, tally.done, started))
    return {
        "streams_requested": args.streams,
        "streams_done": tally.done,
        "graceful": tally.graceful,
        "closed_mid_request": tally.cancelled,
        "budget_hit": stop.is_set() and tally.done < args.streams,
        "elapsed_s": round(elapsed, 1),
        "streams_per_s": round(tally.done / elapsed, 1) if elapsed else 0.0,
        "errors": len(tally.errors),
        "first_errors": tally.errors[:10],
        "samples": samples,
        "growth_warm_to_settled": deltas(samples),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tritium-soak-") as tmp:
        repo, work = Path(tmp) / "models", Path(tmp)
        build_repository(repo)
        server = Server(repo, work)
        try:
            server.wait_ready(["simple", "repeat_int32"])
            result = soak(server.url("grpc"), server.pid, args)
            result["healthy_after"] = server.healthy()
            if result["errors"]:
                result["server_log_tail"] = server.log_tail()
        finally:
            server.stop()
    report = {"benchmark": "streams_soak", "machine": machine_info(), **result}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(table(result["samples"]))
    print(
        f"\n{result['streams_done']} streams ({result['closed_mid_request']} closed mid-request)"
        f" in {result['elapsed_s']} s = {result['streams_per_s']} streams/s;"
        f" errors: {result['errors']}; healthy after: {result['healthy_after']}"
    )
    print(f"growth warm -> settled: {result['growth_warm_to_settled']}")
    for line in result["first_errors"]:
        print(f"  error: {line}", file=sys.stderr)
    print(f"wrote {args.output}")
    ok = not result["errors"] and result["healthy_after"] and not result["budget_hit"]
    return 0 if ok else 1
