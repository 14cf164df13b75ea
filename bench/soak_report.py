"""The report of the soak suite: the summary printed on stdout (``markdown``) and the entry saved
in ``bench/results/soak.json`` (``save``)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from typing import Any

from bench.report import git_describe


def markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    verdict = f"FAILED: {report['failure']}" if report["failure"] else "OK"
    return "\n".join(
        [
            f"soak {report['seconds']} s, target {args.rate:g} req/s on {args.workers} client "
            f"coroutines, server workers {report['server_workers']}, "
            f"{report['answers_per_s']} answers/s; hostile {report['hostile_launched']} of "
            f"{report['request_slots']} slots (skipped {report['hostile_skipped']}, unfinished "
            f"{report['hostile_unfinished']}); health polls {report['health_polls']}; {verdict}",
            "",
            f"worker restarts (tritium_worker_restarts_total at the end): "
            f"{report.get('worker_restarts')}",
            "",
            f"normal requests: answered {report['answered_total']}, wrong "
            f"{sum(report['wrong'].values())}, lost {sum(report['lost'].values())}, error "
            f"answers {sum(report['errors'].values())}",
            "",
            *load_rows(report),
            "",
            "| hostile kind | runs | longest s | outcomes (runs) | streams/sockets (summed) |",
            "|---|---|---|---|---|",
            *kind_rows(report),
            "",
            *finding_rows(report),
            *sample_rows(report),
            "",
            *process_rows(report),
        ]
    )


def load_rows(report: dict[str, Any]) -> list[str]:
    examples = report["error_examples"]
    return [
        "| protocol/model | answered | wrong |",
        "|---|---|---|",
        *(
            f"| {k} | {n} | {report['wrong'].get(k, 0)} |"
            for k, n in sorted(report["answered"].items())
        ),
        "",
        "| normal requests: error answer / lost | count | example |",
        "|---|---|---|",
        *(
            f"| {k} | {n} | {examples.get(k, '')[:100]} |"
            for k, n in sorted(report["errors"].items())
        ),
        *(
            f"| {k} (lost) | {n} | {examples.get(f'{k} (lost)', '')[:100]} |"
            for k, n in sorted(report["lost"].items())
        ),
    ]


def kind_rows(report: dict[str, Any]) -> list[str]:
    rows = []
    for kind, runs in report["hostile_runs"].items():
        outcomes = "; ".join(
            f"{k.split(': ', 1)[1]} ×{n}" for k, n in report["hostile"].items()
            if k.split(": ", 1)[0] == kind
        )  # fmt: skip
        items = "; ".join(
            f"{k.split(': ', 1)[1]} {n}"
            for k, n in [*report["hostile_items"].items(), *report["hostile_peaks"].items()]
            if k.split(": ", 1)[0] == kind
        )  # fmt: skip
        rows.append(f"| {kind} | {runs} | {report['hostile_max_s'][kind]} | {outcomes} "
                    f"| {items} |")  # fmt: skip
    return rows


def finding_rows(report: dict[str, Any]) -> list[str]:
    """The hostile kinds' findings, and the message of each hostile client's own failure."""
    failures = {k: v for k, v in report["error_examples"].items() if ": client " in k}
    lines = []
    if report["findings"]:
        lines += [
            "| finding (hostile: `!` / WRONG) | count |",
            "|---|---|",
            *(f"| {k} | {n} |" for k, n in sorted(report["findings"].items())),
            "",
        ]
    if failures:
        lines += [
            "| hostile client failure | message |",
            "|---|---|",
            *(f"| {k} | {v[:100]} |" for k, v in sorted(failures.items())),
            "",
        ]
    return lines


def sample_rows(report: dict[str, Any]) -> list[str]:
    lines = [
        "| sample | t s | answered | server RSS MiB | fds | threads | workers | worker RSS MiB "
        "| worker fds | stubs | stub RSS MiB | all RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["samples"]:
        if s["label"] != "run":
            lines.append(
                f"| {s['label']} | {s['t_s']} | {s['answered']} | {s['rss_mib']} | {s['fds']} "
                f"| {s['threads']} | {s['workers']} | {s['worker_rss_mib']} | {s['worker_fds']} "
                f"| {s['stubs']} | {s['stub_rss_mib']} | {s['total_rss_mib']} |"
            )
    top = report["max"]
    lines.append(
        f"| max | | | {top['rss_mib']} | {top['fds']} | {top['threads']} | {top['workers']} "
        f"| {top['worker_rss_mib']} | {top['worker_fds']} | {top['stubs']} "
        f"| {top['stub_rss_mib']} | {top['total_rss_mib']} |"
    )
    return lines


def process_rows(report: dict[str, Any]) -> list[str]:
    """Each server process at the start and at the end (and settled): the supervisor and each
    worker, and under each worker (or the server) its stubs and what those started (counted
    and summed)."""
    lines = [
        "| sample | process | pid | count | RSS MiB | fds | threads |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in report["samples"]:
        if s["label"] in ("start", "end", "settled"):
            lines += [f"| {s['label']} | {row} |" for row in _grouped(s["processes"])]
    return lines


def _grouped(processes: list[dict[str, Any]]) -> list[str]:
    """One row per server or worker process, then one per (owner, role) of the others."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for p in processes:
        key = (p["pid"], p["role"]) if p["role"] in OWN_ROWS else (p["owner"], p["role"])
        groups.setdefault(key, []).append(p)
    rows = []
    for (pid, role), members in groups.items():
        rss = round(sum(m["rss_mib"] for m in members), 1)
        fds = sum(m["fds"] or 0 for m in members)
        threads = sum(m["threads"] or 0 for m in members)
        name = role if role in OWN_ROWS else f"{role}s of {pid}"
        shown = pid if role in OWN_ROWS else ""
        rows.append(f"{name} | {shown} | {len(members)} | {rss} | {fds} | {threads}")
    return rows


OWN_ROWS = ("server", "supervisor", "worker")


def save(label: str, report: dict[str, Any], args: argparse.Namespace) -> None:
    data = json.loads(args.output.read_text()) if args.output.exists() else {}
    settings = {k: v for k, v in vars(args).items() if k not in ("output", "label")}
    data[label] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_describe(),
        "nproc": os.cpu_count(),
        "settings": settings,
        **report,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
