"""Hostile HTTP/2 clients on the gRPC port: what does one flooding connection cost the others?

    python -m bench h2-floods [--cases settings_unread,empty_messages]
        [--case-seconds 15] [--label after] [--server-arg=--flag=value]

Issue 22, findings 1 and 2. Each case starts a fresh server over the example ``simple`` model
and runs one flood from testkit/h2_floods.py (SETTINGS never read, SETTINGS read, PING + empty
DATA, WINDOW_UPDATE + PRIORITY bursts, 1 MiB DATA frames of empty ModelStreamInfer messages)
for ``--case-seconds`` while two victims repeat their request on connections of their own: an
HTTP ``simple`` infer and a gRPC ServerLive (60 s timeouts). Reported: the victims' p50/p99/max
latency and failures during the flood, the server's RSS (idle, at the flood's end, peak) and
what the flooding client saw (GOAWAY code, stalls while the server stopped reading it).
Results: a markdown table on stdout and ``bench/results/h2-floods.json`` by ``--label``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "h2-floods.json"


def run_case(name: str, repo: Path, workdir: Path, seconds: float, args: list[str]) -> dict:
    from bench.flood_victims import Victim, flood
    from bench.probes import MemoryWatch, proc_status
    from bench.raw_http import serves_after
    from bench.server import start_ready

    server = start_ready(repo, workdir / name, args)
    pid = server.pid
    idle = proc_status(pid).get("VmRSS", 0)
    memory = MemoryWatch(pid, 4096)
    victims = [
        Victim("http_infer", server.ports["http"]),
        Victim("grpc_live", server.ports["grpc"]),
    ]
    memory.start()
    for victim in victims:
        victim.start()
    time.sleep(1.0)  # the victims' first requests (connections, channels) before the flood
    started = time.monotonic()
    try:
        client = flood(name, server.ports["grpc"], started + seconds)
    except Exception as exc:  # noqa: BLE001 - a failing client is a result
        client = {"error": f"{type(exc).__name__}: {exc}"}
    end_rss = proc_status(pid).get("VmRSS", 0)
    for victim in victims:
        victim.stop_event.set()
    for victim in victims:
        victim.join(70)
    memory.stop_event.set()
    memory.join(5)
    result = {
        "case": name,
        "seconds": round(time.monotonic() - started, 1),
        "client": client,
        "idle_rss_mib": round(idle / 1024, 1),
        "end_rss_mib": round(end_rss / 1024, 1),
        "peak_rss_mib": round(memory.peak_kib / 1024, 1),
        "victims": {v.name: v.summary() for v in victims},
        "serves_after": serves_after(server.ports["http"])
        if server.proc.poll() is None
        else "exited",
    }
    server.stop(10.0)
    return result


def outcome(client: dict[str, Any]) -> str:
    if "error" in client:
        return client["error"]
    parts = [f"{client['connections']} connections, {client['ended_by_server']} ended by server"]
    parts += [f"GOAWAY {what} ×{n}" for what, n in client["goaways"].items()]
    if client["stalled_s"]:
        parts.append(f"not read for {client['stalled_s']} s")
    parts.append(f"sent {client['sent_mib']} MiB")
    if "messages" in client:
        parts.append(f"{client['messages']} messages, {client['answers']} answered")
    return "; ".join(parts)


def markdown(results: list[dict[str, Any]]) -> str:
    rows = [
        "| case | flooding client | RSS idle → end (peak) MiB | HTTP infer p50/p99/max ms (failed)"
        " | gRPC ServerLive p50/p99/max ms (failed) | serves after |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        cells = []
        for name in ("http_infer", "grpc_live"):
            v = r["victims"][name]
            cells.append(f"{v['p50_ms']}/{v['p99_ms']}/{v['max_ms']} ({v['failed']})")
        rss = f"{r['idle_rss_mib']:.0f} → {r['end_rss_mib']:.0f} ({r['peak_rss_mib']:.0f})"
        rows.append(f"| {r['case']} | {outcome(r['client'])} | {rss} | {cells[0]} | {cells[1]} "
                    f"| {r['serves_after']} |")  # fmt: skip
    return "\n".join(rows)


def save(label: str, results: list[dict[str, Any]], seconds: float, path: Path) -> None:
    from bench.report import git_describe

    data = json.loads(path.read_text()) if path.exists() else {}
    ran = {r["case"] for r in results}
    kept = [r for r in data.get(label, {}).get("results", []) if r["case"] not in ran]
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_describe(),
        "server_pythonpath": os.environ.get("PYTHONPATH", ""),  # an older src, if measured
        "case_seconds": seconds,
        "results": kept + results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    from bench.flood_victims import FLOODS
    from bench.raw_http import MODEL
    from bench.server import model_subset

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", default="", help="comma-separated (default: all)")
    parser.add_argument("--case-seconds", type=float, default=15.0)
    parser.add_argument("--label", default="run")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--server-arg", action="append", default=[])
    args = parser.parse_args(argv)
    names = args.cases.split(",") if args.cases else list(FLOODS)
    results = []
    with tempfile.TemporaryDirectory(prefix="tritium-floods-") as tmp:
        repo = model_subset(Path(tmp), [MODEL])
        for name in names:
            print(f"{name} ...", flush=True)
            results.append(
                run_case(name, repo, Path(tmp) / "servers", args.case_seconds, args.server_arg)
            )
            print("  " + json.dumps(results[-1]), flush=True)
    print(markdown(results))
    save(args.label, results, args.case_seconds, args.output)
    return 0
