"""Hostile gRPC clients against the real server: the command line of the hostile-grpc suite
(issue 22, findings 3 and 4).

Each case starts a **fresh** server (bench/server.py ``start_ready``) over ``simple`` and the
``big_output`` Python model, then runs one hostile client (bench/hostile_grpc_clients.py)
while the server's RSS is sampled (bench/probes.py ``MemoryWatch``: peak RSS, a kill above
``--rss-cap-mib``) and other clients are timed: a fresh HTTP connection asking
``/v2/health/ready`` and a fresh gRPC connection running a ``simple`` inference, one after the
other every ~20 ms (p50, p99, max, failures; a failure counts with the time it took, up to 5 s).
Results: a markdown table on stdout and ``bench/results/hostile-grpc.json`` (one entry per
``--label``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR
from bench.hostile_grpc_clients import BIG_OUTPUT, CASES, Case, LatencyPoller, write_big_output
from bench.probes import MemoryWatch, proc_status, raise_own_nofile
from bench.raw_http import MODEL, serves_after
from bench.report import git_describe
from bench.server import model_subset, start_ready

RESULTS = RESULTS_DIR / "hostile-grpc.json"


def run_case(case: Case, repo: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    server = start_ready(
        repo, workdir / case.name, args.server_arg, (MODEL, BIG_OUTPUT), nofile=case.nofile
    )
    pid = server.pid
    time.sleep(1.0)  # settle after loading
    idle = proc_status(pid)
    memory, others = MemoryWatch(pid, args.rss_cap_mib), LatencyPoller(server.ports)
    memory.start()
    others.start()
    started = time.monotonic()
    try:
        client = case.run(server.ports, started + args.case_seconds)
    except Exception as exc:  # noqa: BLE001 - a failing client is a result, not a crash
        client = {"error": f"{type(exc).__name__}: {exc}"}
    latency = others.finish()
    memory.stop_event.set()
    memory.join(5)
    status = proc_status(pid)
    alive = server.proc.poll() is None
    after = serves_after(server.ports["http"]) if alive else "no: server exited"
    peak = max(memory.peak_kib, status.get("VmHWM", 0))
    result = {
        "case": case.name,
        "finding": case.finding,
        "what": case.what,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "client": client,
        "idle_rss_mib": round(idle.get("VmRSS", 0) / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "end_rss_mib": round(status.get("VmRSS", 0) / 1024, 1),
        "killed_at_rss_cap": memory.killed,
        "others": latency,
        "serves_after": after,
        "server_log_tail": server.log_tail(6).splitlines(),
    }
    result["exit_code"] = server.stop(10.0)
    return result


def _latency(entry: dict[str, Any]) -> str:
    return f"{entry['p50_ms']:.0f} / {entry['p99_ms']:.0f} / {entry['max_ms']:.0f}"


def markdown(results: list[dict[str, Any]]) -> str:
    rows = [
        "| case | hostile client got | idle → peak RSS MiB (growth) | HTTP p50/p99/max ms "
        "(failed/polls) | gRPC p50/p99/max ms (failed/polls) | serves after |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        growth = r["peak_rss_mib"] - r["idle_rss_mib"]
        memory = f"{r['idle_rss_mib']:.0f} → {r['peak_rss_mib']:.0f} (+{growth:.0f})"
        if r["killed_at_rss_cap"]:
            memory += " killed at cap"
        others = r["others"]
        cells = [
            f"{name} {_latency(others[name])} ({others[name]['failed']}/{others[name]['polls']})"
            for name in ("http", "grpc")
        ]
        client = json.dumps(r["client"]).replace("|", "/")
        rows.append(
            f"| {r['case']}: {r['what']} | {client} | {memory} | {cells[0]} | {cells[1]} "
            f"| {r['serves_after']} |"
        )
    return "\n".join(rows)


def save(label: str, results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    path: Path = args.output
    data = json.loads(path.read_text()) if path.exists() else {}
    ran = {r["case"] for r in results}
    kept = [r for r in data.get(label, {}).get("results", []) if r["case"] not in ran]
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_describe(),
        "case_seconds": args.case_seconds,
        "server_args": args.server_arg,
        "results": kept + results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--case-seconds", type=float, default=20.0)
    parser.add_argument("--rss-cap-mib", type=int, default=4096)
    parser.add_argument("--label", default="run", help="the key of this run in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra server flag (repeatable)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = args.cases.split(",") if args.cases else []
    selected = [c for c in CASES if not wanted or c.name in wanted]
    raise_own_nofile()
    results = []
    with tempfile.TemporaryDirectory(prefix="tritium-hostile-grpc-") as tmp:
        repo = model_subset(Path(tmp), [MODEL])
        write_big_output(repo)
        for case in selected:
            print(f"{case.name}: {case.what} ...", flush=True)
            results.append(run_case(case, repo, args, Path(tmp) / "servers"))
            summary = {k: results[-1][k] for k in ("client", "peak_rss_mib", "others")}
            print("  " + json.dumps(summary), flush=True)
    print(markdown(results))
    save(args.label, results, args)
    return 0 if all(r["serves_after"] == "yes" for r in results) else 1
