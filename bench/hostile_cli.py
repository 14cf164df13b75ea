"""Hostile HTTP clients against the real server: what does one bad client cost everyone else?

The command line of the hostile-http suite (issue 10, items 3 and 4). Each case starts a
**fresh** server (bench/server.py ``start_ready``: bench/process.py ``ServerProcess``,
127.0.0.1, port 0) over a repository holding only the example ``simple``
model, then runs one hostile client on raw sockets (bench/hostile_clients.py ``cases``) while
two watchers run next to it (bench/probes.py):

* the server's memory, from ``/proc/<pid>/status``: ``VmHWM`` (peak RSS; monotonic, hence a
  fresh server per case) and ``VmRSS``, every 20 ms. Above ``--rss-cap-mib`` the server is
  killed (SIGKILL) and the case says so, so that no case can take the machine's memory;
* a health poller: ``GET /v2/health/ready`` on a **new** connection every ~10 ms (the next poll
  10 ms after the previous answer). The longest latency is reported; a poll still unanswered
  when the case ends counts with the time it has waited and is reported as unanswered.

Every case is bounded by ``--case-seconds`` (the hostile client gives up, then the server is
checked and stopped). Afterwards, with the hostile sockets closed, the server must answer
``/v2/health/ready`` and a ``simple`` inference within 10 s ("serves after"). The server is
then stopped (SIGTERM, SIGKILL if it does not exit).

Results: a markdown table on stdout and ``bench/results/hostile-http.json`` (one entry per
``--label``; other labels already in the file are kept).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR
from bench.hostile_clients import Case, cases
from bench.probes import HealthPoller, MemoryWatch, proc_status, raise_own_nofile
from bench.raw_http import MODEL, serves_after
from bench.report import git_describe
from bench.server import model_subset, start_ready

RESULTS = RESULTS_DIR / "hostile-http.json"


@dataclass
class Settings:
    case_seconds: float = 30.0
    rss_cap_mib: int = 4096
    server_args: list[str] = field(default_factory=list)


def run_case(case: Case, repo: Path, settings: Settings, workdir: Path) -> dict[str, Any]:
    if case.prepare is not None:
        case.prepare()
    server = start_ready(repo, workdir / case.name, settings.server_args, nofile=case.nofile)
    pid, port = server.pid, server.ports["http"]
    idle, load_before = proc_status(pid), os.getloadavg()[0]
    memory, health = MemoryWatch(pid, settings.rss_cap_mib), HealthPoller(port)
    memory.start()
    health.start()
    started = time.monotonic()
    try:
        client = case.run(port, started + settings.case_seconds)
    except Exception as exc:  # noqa: BLE001 - a failing client is a result, not a crash
        client = {"error": f"{type(exc).__name__}: {exc}"}
    elapsed = time.monotonic() - started
    polls = health.finish()
    memory.stop_event.set()
    memory.join(5)
    alive = server.proc.poll() is None
    after = serves_after(port) if alive else f"no: server exited ({server.proc.returncode})"
    peak = max(memory.peak_kib, proc_status(pid).get("VmHWM", 0))
    result = {
        "case": case.name,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "item": case.item,
        "what": case.what,
        "seconds": round(elapsed, 1),
        "loadavg_1m": [load_before, os.getloadavg()[0]],
        "client": client,
        "idle_rss_mib": round(idle.get("VmRSS", 0) / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "max_fds": memory.max_fds,
        "killed_at_rss_cap": memory.killed,
        "health": polls,
        "serves_after": after,
    }
    result["server_log_tail"] = server.log_tail(8).splitlines()
    result["exit_code"] = server.stop(10.0)  # SIGTERM, SIGKILL after 10 s
    return result


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
def client_outcome(client: dict[str, Any]) -> str:
    if "error" in client:
        return client["error"]
    if "connected" in client:
        return (
            f"{client['connected']} connected, {client['connect_failed']} failed, "
            f"{client['closed_by_server']} closed by server"
        )
    statuses = client["statuses"]
    if client["expected"] > 1:
        kinds = ", ".join(sorted({str(s) for s in statuses})) or "-"
        text = f"{len(statuses)}/{client['expected']} answered ({kinds})"
    elif statuses:
        text = f"{statuses[0]} after {client['first_answer_s']} s"
    else:
        text = "closed, no answer" if client["closed_by_server"] else "no answer"
    if client.get("send_error"):
        text += f"; send {client['send_error']} after {client['sent_mib']} MiB"
    return text


def health_outcome(health: dict[str, Any]) -> str:
    text = f"{health['answered']}/{health['polls']}"
    if health["failed"]:
        why = ", ".join(f"{n} {k}" for k, n in health["failures"].items())
        text += f" ({why})"
    if health["unanswered"]:
        text += ", last unanswered"
    return text


def markdown(results: list[dict[str, Any]]) -> str:
    rows = [
        "| case | item | hostile client got | idle → peak RSS MiB | longest health ms |"
        " health answered | serves after | load 1m |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        peak = f"{r['idle_rss_mib']:.0f} → {r['peak_rss_mib']:.0f}"
        if r["killed_at_rss_cap"]:
            peak += " (killed at cap)"
        rows.append(
            f"| {r['case']}: {r['what']} | {r['item']} | {client_outcome(r['client'])} | {peak} "
            f"| {r['health']['longest_ms']:.0f} | {health_outcome(r['health'])} "
            f"| {r['serves_after']} | {r['loadavg_1m'][0]:.1f} |"
        )
    return "\n".join(rows)


def save(label: str, results: list[dict[str, Any]], settings: Settings, path: Path) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    ran = {r["case"] for r in results}  # a run of some cases replaces only those of the label
    kept = [r for r in data.get(label, {}).get("results", []) if r["case"] not in ran]
    order = [c.name for c in cases(1)]
    results = sorted(kept + results, key=lambda r: order.index(r["case"]))
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_describe(),
        "nproc": os.cpu_count(),
        "case_seconds": settings.case_seconds,
        "rss_cap_mib": settings.rss_cap_mib,
        "server_args": settings.server_args,
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--case-seconds", type=float, default=30.0)
    parser.add_argument("--rss-cap-mib", type=int, default=4096)
    parser.add_argument("--bomb-mib", type=int, default=1280, help="inflated size of the bombs")
    parser.add_argument("--label", default="run", help="the key of this run in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra server flag (repeatable)"
    )
    return parser.parse_args(argv)


SUMMARY = ("client", "peak_rss_mib", "killed_at_rss_cap", "health", "serves_after")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings(args.case_seconds, args.rss_cap_mib, args.server_arg)
    wanted = args.cases.split(",") if args.cases else []
    selected = [c for c in cases(args.bomb_mib) if not wanted or c.name in wanted]
    raise_own_nofile()
    results = []
    with tempfile.TemporaryDirectory(prefix="tritium-hostile-") as tmp:
        repo = model_subset(Path(tmp), [MODEL])
        for case in selected:
            print(f"{case.name}: {case.what} ...", flush=True)
            results.append(run_case(case, repo, settings, Path(tmp) / "servers"))
            print("  " + json.dumps({k: results[-1][k] for k in SUMMARY}), flush=True)
    table = markdown(results)
    print(table)
    save(args.label, results, settings, args.output)
    return 0 if all(r["serves_after"] == "yes" for r in results) else 1
