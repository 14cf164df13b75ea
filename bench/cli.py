"""tritium benchmark: closed-loop load over HTTP/gRPC against the real server.

The command line of bench/run.py (see bench/README.md): choose the scenarios, build the
repository, measure the baselines, run every scenario against one server, write one report
per scenario list.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.baselines import add_ratios
from bench.catalog import (
    BINARY_ONLY_MODELS,
    DEFAULT_ISSUES,
    ISSUES,
    PAYLOAD_BYTES,
    TARGETS,
    drive,
    precompute_references,
    run_baselines,
)
from bench.common import RESULTS_DIR, Scenario, Settings, Window
from bench.drivers import PROTOCOLS, UNARY_PROTOCOLS
from bench.engine import summarize
from bench.report import machine_info, markdown, scenario_line, write_report
from bench.scenarios.shm import SHM_PROTOCOLS
from bench.server import Server, build_repository, idle_cpu


def _csv(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--issue",
        nargs="+",
        default=list(DEFAULT_ISSUES),
        help=f"scenario lists among {', '.join(ISSUES)} (default: all, one server, one "
        "report per list)",
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
        raise SystemExit(f"unknown issue(s) {unknown}; known: {', '.join(ISSUES)}")
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


def start_server(
    target: str, repo: Path, work: Path, server_args: tuple[str, ...], models: list[str]
) -> Any:
    """The run's tritium server (target ""), or a server of its own (TARGETS) in
    ``work/<target>``; returned ready with ``models``."""
    if not target:
        server = Server(repo, work, server_args)
    else:
        (work / target).mkdir(exist_ok=True)
        server = TARGETS[target].start(repo, work / target, server_args, models)
    try:
        server.wait_ready(models)
    except BaseException:
        server.stop()
        raise
    return server


def run_on(
    server: Any, scenarios: list[Scenario], settings: Settings, baselines: dict[str, Any]
) -> list[dict[str, Any]]:
    """Runs ``scenarios`` against ``server``, one row each; stops at the first scenario after
    which the server is not healthy."""
    rows = []
    for sc in scenarios:
        print(f"scenario {sc.name} ...", flush=True)
        window = asyncio.run(drive(sc, server, settings))
        row = summarize(sc, window, PAYLOAD_BYTES.get(sc.model))
        add_ratios(row, baselines.get(sc.model))
        rows.append(row)
        print("  " + scenario_line(row), flush=True)
        if not server.healthy():
            print(
                f"server not healthy after {sc.name}; stopping. Log tail:\n{server.log_tail()}",
                file=sys.stderr,
            )
            break
    return rows


def not_started(scenarios: list[Scenario], problem: str) -> list[dict[str, Any]]:
    """Failed rows for the scenarios of a server that did not start."""
    rows = []
    for sc in scenarios:
        window = Window()
        window.errors.append(problem)
        rows.append(summarize(sc, window))
    return rows


def run_scenarios(
    repo: Path,
    work: Path,
    scenarios: list[Scenario],
    settings: Settings,
    info: dict[str, Any],
    server_args: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Every scenario, grouped by server (``Scenario.target``): each server is started for
    its scenarios and stopped after them. The run's own server's idle CPU and log tail go to
    ``info``, another's to ``info["targets"][name]``."""
    groups: dict[str, list[Scenario]] = {}
    for sc in scenarios:
        groups.setdefault(sc.target, []).append(sc)
    rows: list[dict[str, Any]] = []
    for target, group in groups.items():
        record = info
        if target:
            record = info.setdefault("targets", {}).setdefault(target, {})
            record["what"] = TARGETS[target].what
        models = sorted({m for s in group for m in s.models})
        try:
            server = start_server(target, repo, work, server_args, models)
        except (RuntimeError, OSError) as exc:
            print(f"server {target or 'tritium'} did not start: {exc}", file=sys.stderr)
            rows += not_started(group, f"server {target or 'tritium'} did not start: {exc}")
            continue
        try:
            record["server_idle"] = idle_cpu(server, 0.5 if settings.quick else 2.0)
            group_rows = run_on(server, group, settings, info["baselines"])
            healthy = server.healthy()
        finally:
            server.stop()
        rows += group_rows
        if not healthy or any(r["errors"] or r["wrong"] for r in group_rows):
            record["server_log_tail"] = server.log_tail()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings, chosen = make_settings(args), select(args)
    # One server, each scenario measured once even when several lists hold it.
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
        models = {row["model"] for row in issue_rows}
        report = {
            "issue": issue,
            "settings": asdict(settings),
            "machine": machine,
            **info,
            "baselines": {m: b for m, b in info["baselines"].items() if m in models},
            "scenarios": issue_rows,
        }
        path = write_report(report, ISSUES[issue], args.output_dir)
        print("\n" + markdown(report, ISSUES[issue]))
        print(f"wrote {path} and {path.with_suffix('.json')}")
    failed = [r["name"] for r in rows if r["errors"] or r["wrong"] or "infer_per_s" not in r]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
