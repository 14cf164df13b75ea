"""``--workers N``: throughput, server CPU per inference, p50/p99 with 1, 2 and 3 workers.

h2load (Debian's nghttp2-client) drives the server, so the client costs little next to the
server: ``h2load --h1`` for HTTP/1.1 (JSON ``/v2/models/{m}/infer``), plain h2load for gRPC
(``ModelInfer``, one length-prefixed protobuf message, ``-m 1``: one call at a time per
connection). c16/c64: 16/64 connections, each one request in flight.

Every configuration's server runs for the whole bench (an idle server costs no CPU) and the
runs are alternated (w1, w2, w3, w3, w2, w1, ...): this machine is shared, so only ratios
measured side by side mean anything. Server CPU is the utime+stime of the supervisor, every
worker and every stub (the whole process tree, /proc). Latencies come from h2load's per-request log.
Every answer is checked afterwards: the server's statistics must count as many successes as
h2load's 2xx answers, and no failure.

    python -m bench workers [--seconds 2] [--rounds 5] [--out bench/results/workers]

Each round runs every case (model x protocol x c) once per worker count, the counts
alternated (the order reversed every other round); the report gives each count's median
throughput over the rounds with its range, and the w2/w1 and w3/w1 ratios taken within
each round (median and range).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench import proctree
from bench.proctree import children as _children
from bench.proctree import cmdline_has, memory_mib, tree
from bench.proctree import cpu_seconds as proc_cpu_seconds
from bench.proctree import load_average as _load
from bench.proctree import tree_cpu as _tree_cpu
from bench.process import ServerProcess
from bench.server import model_subset

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("simple", "add_sub_python")
WORKERS = (1, 2, 3)
PROTOCOLS = ("http", "grpc")
CONCURRENCY = (16, 64)


@dataclass
class Run:
    model: str
    protocol: str
    concurrency: int
    workers: int
    round: int
    seconds: float
    requests: int
    throughput: float
    cpu_us_per_inference: float
    p50_ms: float
    p99_ms: float
    spread: list[int]  # CPU ms per worker in the run, the accept spread
    load: float = 0.0  # the machine's 1-minute load average after the run
    connections: list[int] | None = None  # h2load's connections each worker held, mid-run
    client_us_per_inference: float = 0.0  # h2load's own CPU per answer


def _memory(pid: int) -> dict[str, dict[str, float]]:
    """PSS and RSS in MiB of every process of the tree (smaps_rollup)."""
    found = {}
    for p in tree(pid):
        usage = memory_mib(p)
        if usage is not None:
            kind = "stub" if cmdline_has(p, b"stub") else "tritium"
            found[f"{p} {kind}"] = usage
    return found


def _bodies(model: str, workdir: Path) -> dict[str, Path]:
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 3, dtype=np.int32)
    http = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a.tolist()},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": b.tolist()},
        ]
    }
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, "INT32"
        tensor.shape.extend([1, 16])
    request.raw_input_contents.extend([a.tobytes(), b.tobytes()])
    message = request.SerializeToString()
    paths = {"http": workdir / f"{model}.json", "grpc": workdir / f"{model}.grpc"}
    paths["http"].write_text(json.dumps(http))
    paths["grpc"].write_bytes(b"\0" + struct.pack(">I", len(message)) + message)
    return paths


@dataclass(frozen=True)
class Case:
    model: str
    protocol: str
    clients: int
    seconds: int
    body: Path
    round: int


@dataclass
class Answers:
    ok: int  # 2xx answers
    latencies: list[float]  # ms
    client_cpu: float  # h2load's CPU seconds
    held: list[int]  # the connections each worker held mid-run


def _h2load(server: ServerProcess, workers: int, case: Case, log: Path) -> Answers:
    model, protocol, clients, seconds, body = (
        case.model,
        case.protocol,
        case.clients,
        case.seconds,
        case.body,
    )
    if protocol == "http":
        url = f"http://{server.http_url}/v2/models/{model}/infer"
        extra = ["--h1", "-H", "content-type: application/json"]
    else:
        url = f"http://{server.grpc_url}/inference.GRPCInferenceService/ModelInfer"
        extra = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    command = [
        "h2load",
        "-c",
        str(clients),
        "-m",
        "1",
        "-t",
        "1",
        "-D",
        str(int(seconds)),
        "--warm-up-time",
        "1",
        "-d",
        str(body),
        "--log-file",
        str(log),
        *extra,
        url,
    ]
    log.unlink(missing_ok=True)  # h2load appends to its log file
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the reaped ones: h2load's alone
    h2load = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(1 + seconds / 2)  # past the warm-up: every connection is open
    held = _held(server, workers, server.ports[protocol])
    output, _ = h2load.communicate(timeout=seconds + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if h2load.returncode != 0:
        raise RuntimeError(output.decode(errors="replace"))
    client = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    latencies, ok = [], 0
    for line in log.read_text().splitlines():
        _, status, elapsed = line.split("\t")
        if status.startswith("2"):
            ok += 1
            latencies.append(int(elapsed) / 1000)
    return Answers(ok, latencies, client, held)


def _held(server: ServerProcess, workers: int, port: int) -> list[int]:
    """The TCP connections to ``port`` each worker holds (the process itself with one)."""
    pids = sorted(_children(server.proc.pid)) if workers > 1 else [server.proc.pid]
    held = [proctree.established(pid, port) for pid in pids]
    return [n for n in held if n is not None]


def _successes(server: ServerProcess, model: str) -> tuple[int, int]:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=30) as response:
        entry = json.load(response)["model_stats"][0]["inference_stats"]
    return int(entry["success"]["count"]), int(entry["fail"]["count"])


def _spread(server: ServerProcess, before: dict[int, float]) -> list[int]:
    """CPU seconds (ms) each worker spent in the run: how evenly the connections spread."""
    workers = _children(server.proc.pid)
    return [int(1000 * (proc_cpu_seconds(p) - before.get(p, 0.0))) for p in sorted(workers)]


def _run(server: ServerProcess, workers: int, case: Case, workdir: Path) -> Run:
    model, protocol, clients, seconds = case.model, case.protocol, case.clients, case.seconds
    ok_before, fail_before = _successes(server, model)
    cpu_before = _tree_cpu(server.proc.pid)
    answers = _h2load(server, workers, case, workdir / "h2load.log")
    ok, latencies = answers.ok, answers.latencies
    cpu_after = _tree_cpu(server.proc.pid)
    ok_after, fail_after = _successes(server, model)
    # h2load ends its connections at the deadline: the requests then in flight are cancelled
    # (at most one per connection), and counted as failures
    if fail_after - fail_before > clients or ok_after - ok_before < ok:
        raise RuntimeError(
            f"{model} {protocol} w{workers}: h2load counted {ok} answers, the server "
            f"{ok_after - ok_before} successes and {fail_after - fail_before} failures"
        )
    served = ok_after - ok_before  # warm-up requests included: CPU covers them too
    cpu = sum(t - cpu_before.get(p, 0.0) for p, t in cpu_after.items())
    latencies.sort()
    return Run(
        model,
        protocol,
        clients,
        workers,
        case.round,
        seconds,
        ok,
        ok / seconds,
        1e6 * cpu / max(served, 1),
        latencies[len(latencies) // 2],
        latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        _spread(server, cpu_before),
        0.0,
        answers.held,
        1e6 * answers.client_cpu / max(ok, 1),
    )


def _start(repo: Path, workers: int, sockets: str, affinity: str) -> ServerProcess:
    pinning = ("--worker-affinity", affinity) if workers > 1 else ()  # refused with 1
    return ServerProcess(
        [repo], "--workers", str(workers), "--worker-sockets", sockets, *pinning,
        "--model-control-mode", "explicit",
        *(arg for m in MODELS for arg in ("--load-model", m)),
        "--log-info", "false", start_timeout=180,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds; each runs every case once per worker count, alternated",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "workers"))
    parser.add_argument(
        "--workers",
        default=",".join(map(str, WORKERS)),
        help="worker counts, alternated (default 1,2,3)",
    )
    parser.add_argument("--worker-sockets", default="shared", choices=("shared", "reuseport"))
    parser.add_argument("--worker-affinity", default="auto", choices=("auto", "cpu", "none"))
    parser.add_argument(
        "--matrix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every model, protocol and c in each round (else ONNX only)",
    )
    parser.add_argument(
        "--clients",
        type=lambda s: tuple(int(c) for c in s.split(",")),
        default=(16,),
        help="the c of --no-matrix (default 16; e.g. 16,64)",
    )
    args = parser.parse_args(argv)
    if shutil.which("h2load") is None:
        print("h2load not found: apt-get install nghttp2-client (make bench-deps)")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="tritium-bench-workers-"))
    repo = model_subset(workdir, MODELS)  # the examples built here (no `make models` needed)
    counts = tuple(int(n) for n in args.workers.split(","))
    servers = {n: _start(repo, n, args.worker_sockets, args.worker_affinity) for n in counts}
    runs: list[Run] = []
    memory = {}
    try:
        for n, server in servers.items():
            server.wait_live(120, "ready")
            memory[n] = _memory(server.proc.pid)
        bodies = {m: _bodies(m, workdir) for m in MODELS}
        for round_ in range(args.rounds):
            for model, protocol, clients in _cases(args.matrix, args.clients):
                # alternated: every worker count once per case per round, the order
                # reversed every other round (a drift in the machine's load evens out)
                order = counts if round_ % 2 == 0 else counts[::-1]
                for n in order:
                    case = Case(
                        model, protocol, clients, args.seconds, bodies[model][protocol], round_
                    )
                    run = _run(servers[n], n, case, workdir)
                    run.load = _load()
                    runs.append(run)
                    print(
                        f"{model:15} {protocol:4} c{clients:<3} w{n} r{round_}: "
                        f"{run.throughput:8.0f}/s  {run.cpu_us_per_inference:6.0f} us "
                        f"CPU/inf  p50 {run.p50_ms:6.2f} ms  p99 {run.p99_ms:6.2f} ms  "
                        f"worker CPU ms {run.spread}  connections {run.connections}  "
                        f"h2load {run.client_us_per_inference:.0f} us/inf  "
                        f"load {run.load:.1f}",
                        flush=True,
                    )
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    _report(runs, memory, Path(args.out))
    return 0


def _cases(matrix: bool, clients: tuple[int, ...] = (16,)) -> list[tuple[str, str, int]]:
    if not matrix:
        return [("simple", p, c) for p in PROTOCOLS for c in clients]
    return [(m, p, c) for m in MODELS for p in PROTOCOLS for c in CONCURRENCY]


def _ratios(
    runs: list[Run], model: str, protocol: str, clients: int, workers: int = 2
) -> list[float]:
    """w<workers>/w1 per round (each pair measured side by side)."""
    by_round: dict[int, dict[int, float]] = {}
    for run in runs:
        if (run.model, run.protocol, run.concurrency) == (model, protocol, clients):
            by_round.setdefault(run.round, {})[run.workers] = run.throughput
    return [r[workers] / r[1] for r in by_round.values() if 1 in r and workers in r]


def _spread_of(values: list[float]) -> str:
    """The median and the range: ``1.52 (1.31-1.70)``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _summary(runs: list[Run]) -> list[str]:
    """Per case: each worker count's median throughput (range), and w2/w1, w3/w1 per round."""
    lines = [
        "| model | protocol | c | inf/s w1 | inf/s w2 | inf/s w3 | w2/w1 | w3/w1 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model in MODELS:
        for protocol in PROTOCOLS:
            for clients in CONCURRENCY:
                cells = []
                for n in WORKERS:
                    values = [
                        r.throughput
                        for r in runs
                        if (r.model, r.protocol, r.concurrency, r.workers)
                        == (model, protocol, clients, n)
                    ]
                    cells.append(
                        f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"
                        if values
                        else "-"
                    )
                for n in (2, 3):
                    ratios = _ratios(runs, model, protocol, clients, n)
                    cells.append(_spread_of(ratios) if ratios else "-")
                if any(c != "-" for c in cells):
                    lines.append(
                        f"| {model} | {protocol} | {clients} | " + " | ".join(cells) + " |"
                    )
    return lines


def _report(runs: list[Run], memory: dict[int, object], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "runs": [asdict(r) for r in runs],
        "memory": memory,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    counts = ", ".join(str(n) for n in sorted({r.workers for r in runs}))
    lines = [
        f"# --workers: {counts} workers (bench/workers.py)",
        "",
        "| model | protocol | c | workers | round | inf/s | server CPU µs/inf | p50 ms | "
        "p99 ms | CPU ms per worker | connections per worker | h2load CPU µs/inf | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.model} | {r.protocol} | {r.concurrency} | {r.workers} | {r.round} | "
            f"{r.throughput:.0f} | {r.cpu_us_per_inference:.0f} | {r.p50_ms:.2f} | "
            f"{r.p99_ms:.2f} | {r.spread} | {r.connections} | "
            f"{r.client_us_per_inference:.0f} | {r.load:.1f} |"
        )
    rounds = len({r.round for r in runs})
    lines = (
        lines[:2]
        + [
            f"{rounds} rounds; in each, every case ran once per worker count, side by side "
            "(the order reversed every other round). Medians over the rounds, (min-max); a "
            "ratio is taken within one round. The machine's load average over the runs: "
            f"{min(r.load for r in runs):.1f}-{max(r.load for r in runs):.1f} (2 cores).",
            "",
            *_summary(runs),
            "",
            "Every run:",
            "",
        ]
        + lines[2:]
    )
    lines += ["", "Memory after start (MiB, PSS / RSS) per process:", ""]
    for n, procs in memory.items():
        lines.append(
            f"- {n} worker(s): "
            + "; ".join(
                f"{name}: {v['pss_mib']:.0f} / {v['rss_mib']:.0f}"  # type: ignore[index]
                for name, v in procs.items()  # type: ignore[attr-defined]
            )
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(_summary(runs)))
