"""tritium benchmark: closed-loop load over HTTP/gRPC against the real server.

The command line of the scenario suites (``python -m bench scenarios``, ``python -m bench
foundation`` ...; see bench/README.md): choose the scenarios, build the
repository, measure the baselines, run every scenario (bench/runner.py: the run's tritium
server, and the servers of their own some lists name), write one report per scenario list.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.catalog import (
    BINARY_ONLY_MODELS,
    DEFAULT_ISSUES,
    ISSUES,
    TARGETS,
    precompute_references,
    run_baselines,
)
from bench.common import RESULTS_DIR, Scenario, Settings
from bench.drivers import PROTOCOLS, UNARY_PROTOCOLS
from bench.report import machine_info, markdown, write_report
from bench.runner import run_scenarios
from bench.scenarios.shm import SHM_PROTOCOLS
from bench.server import build_repository


def _csv(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        "--issue",
        dest="issue",
        metavar="LIST",
        nargs="+",
        default=list(DEFAULT_ISSUES),
        help=f"scenario lists among {', '.join(ISSUES)} (default: {' '.join(DEFAULT_ISSUES)}; "
        "one report per list)",
    )
    p.add_argument("--quick", action="store_true", help="short windows, a smoke test")
    p.add_argument("--seconds", type=float, help="measuring window per scenario (default 5)")
    p.add_argument("--warmup", type=float, help="warm-up per scenario (default 1)")
    p.add_argument("--models", nargs="+", help="only these models (comma or space separated)")
    p.add_argument("--protocols", nargs="+", help=f"only these of {', '.join(PROTOCOLS)}")
    p.add_argument("--concurrency", nargs="+", help="only these concurrency levels")
    p.add_argument("--verify-every", type=int, default=10, help="check every Nth answer")
    p.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    return p.parse_args(argv)


def make_settings(args: argparse.Namespace) -> Settings:
    settings = (
        Settings(warmup=0.5, seconds=1.0, baseline_seconds=0.5, quick=True)
        if args.quick
        else Settings()
    )
    if args.seconds is not None:
        settings.seconds = args.seconds
    if args.warmup is not None:
        settings.warmup = args.warmup
    settings.verify_every = max(1, args.verify_every)
    return settings


def select(args: argparse.Namespace) -> dict[str, list[Scenario]]:
    """The chosen scenarios of each selected issue (issues with none left out). A protocol
    asked for with ``--protocols`` that no selected list has (e.g. ``http-aio-default``) is
    added in place of the unary protocols of the non-decoupled scenarios."""
    issues = _csv(args.issue) or list(DEFAULT_ISSUES)
    unknown = [i for i in issues if i not in ISSUES]
    if unknown:
        raise SystemExit(f"unknown scenario list(s) {unknown}; known: {', '.join(ISSUES)}")
    models, protocols = _csv(args.models), _csv(args.protocols)
    unknown = [p for p in protocols or [] if p not in PROTOCOLS]
    if unknown:
        raise SystemExit(f"unknown protocol(s) {unknown}; known: {', '.join(PROTOCOLS)}")
    conc = [int(c) for c in _csv(args.concurrency) or []]
    lists = {issue: ISSUES[issue].scenarios() for issue in dict.fromkeys(issues)}
    known = {s.protocol for scenarios in lists.values() for s in scenarios}
    # The shm drivers serve only the identity model of the shm list.
    extra = [p for p in protocols or [] if p not in known and p not in SHM_PROTOCOLS]
    chosen: dict[str, list[Scenario]] = {}
    for issue, scenarios in lists.items():
        unary = [s for s in scenarios if s.protocol in UNARY_PROTOCOLS and not s.responses]
        unary = [s for s in unary if not (s.target and TARGETS[s.target].grpc_only)]
        variants = (
            replace(s, protocol=p)
            for p in extra
            for s in unary
            if not (p == "http-json" and s.model in BINARY_ONLY_MODELS)
        )
        scenarios += list(dict.fromkeys(variants))
        kept = [
            s
            for s in scenarios
            if (not models or s.model in models)
            and (not protocols or s.protocol in protocols)
            and (not conc or s.concurrency in conc)
        ]
        if kept:
            chosen[issue] = kept
    if not chosen:
        raise SystemExit("no scenario matches the filters")
    return chosen


RUN_SERVER_KEYS = ("server_idle", "server_log_tail")


def used_info(info: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a list's report keeps of the run's ``info``: the baselines of its models, and of
    the servers (the run's own, ``targets``) those its rows ran on."""
    models, targets = {row["model"] for row in rows}, {row["target"] for row in rows}
    used = {k: v for k, v in info.items() if k != "targets" and k not in RUN_SERVER_KEYS}
    used["baselines"] = {m: b for m, b in info["baselines"].items() if m in models}
    if "" in targets:
        used.update((k, info[k]) for k in RUN_SERVER_KEYS if k in info)
    own = {t: r for t, r in info.get("targets", {}).items() if t in targets}
    return {**used, **({"targets": own} if own else {})}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings, chosen = make_settings(args), select(args)
    # Each scenario measured once even when several lists hold it (bench/runner.py).
    scenarios = list(dict.fromkeys(s for issue in chosen.values() for s in issue))
    server_args = tuple(a for issue in chosen for a in ISSUES[issue].server_args)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tritium-bench-") as tmp:
        repo, work = Path(tmp) / "models", Path(tmp)
        build_repository(repo, [x for i in chosen if (x := ISSUES[i].repository_extra)])
        info: dict[str, Any] = {"server_args": list(server_args)}
        info["baselines"] = run_baselines(repo, sorted({s.model for s in scenarios}), settings)
        precompute_references(repo, scenarios)
        rows = run_scenarios(repo, work, scenarios, settings, info, server_args)
    machine = {**machine_info(), "loadavg_1min": [load_before, os.getloadavg()[0]]}
    by_name = {row["name"]: row for row in rows}
    for issue, issue_scenarios in chosen.items():
        issue_rows = [by_name[s.name] for s in issue_scenarios if s.name in by_name]
        row_ratios = ISSUES[issue].row_ratios
        if row_ratios is not None:
            row_ratios(issue_rows)
        report = {
            "issue": issue,
            "settings": asdict(settings),
            "machine": machine,
            **used_info(info, issue_rows),
            "scenarios": issue_rows,
        }
        path = write_report(report, ISSUES[issue], args.output_dir)
        print("\n" + markdown(report, ISSUES[issue]))
        print(f"wrote {path} and {path.with_suffix('.json')}")
    failed = [r["name"] for r in rows if r["errors"] or r["wrong"] or "infer_per_s" not in r]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
