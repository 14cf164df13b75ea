"""The one report renderer: ``markdown`` (the table printed at the end of a run and written to
``<issue>.md``) and ``write_report`` (that and ``<issue>.json``), the table cells the scenario
lists' own tables are made of, the regular and decoupled tables, and the machine's
description."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bench.common import ROOT, Issue


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table_row(row: dict[str, Any], cells: list[Any]) -> str:
    """One markdown row of a scenario, flagged when some answers were wrong."""
    wrong = f" ⚠ {row['wrong_count']} wrong" if row["wrong"] else ""
    return "| " + " | ".join(map(str, cells)) + f"{wrong} |"


def failed_line(row: dict[str, Any]) -> str:
    problem = (row["errors"] or row["wrong"] or ["no completions"])[0]
    return f"| {row['model']} | {row['protocol']} | {row['concurrency']} | FAILED: {problem} |"


def scenario_line(row: dict[str, Any]) -> str:
    if "infer_per_s" not in row:
        return failed_line(row)
    cells = [
        row["model"],
        row["protocol"],
        row["concurrency"],
        _fmt(row["infer_per_s"], 0),
        _fmt(row["p50_ms"], 3),
        _fmt(row["p99_ms"], 3),
        _fmt(row["server_cpu_us"], 0),
        _fmt(row["stub_cpu_us"], 0),
        _fmt(row["client_cpu_us"], 0),
        _fmt(row.get("throughput_ratio"), 3),
        _fmt(row.get("cpu_ratio"), 1),
    ]
    return table_row(row, cells)


def regular_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "| model | protocol | conc | infer/s | p50 ms | p99 ms | server CPU µs/inf | "
        "stub CPU µs/inf | client CPU µs/inf | thr ÷ base | CPU × base |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        *[scenario_line(row) for row in rows],
    ]


def decoupled_line(row: dict[str, Any]) -> str:
    if "infer_per_s" not in row:
        return failed_line(row)
    cells = [
        row["model"],
        row["protocol"],
        row["concurrency"],
        row["responses"],
        _fmt(row["infer_per_s"], 1),
        _fmt(row["responses_per_s"], 0),
        _fmt(row["first_p50_ms"], 3),
        _fmt(row["first_p99_ms"], 3),
        _fmt(row["p50_ms"], 2),
        _fmt(row["p99_ms"], 2),
        _fmt(row["server_cpu_us_per_response"], 1),
        _fmt(row["stub_cpu_us_per_response"], 1),
        _fmt(row["client_cpu_us_per_response"], 1),
    ]
    return table_row(row, cells)


def decoupled_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "Decoupled model, N responses per request on one ModelStreamInfer stream, `conc` "
        "requests in flight (the next is sent when one's empty final response arrives); "
        "first = send → first response, final = send → final response; CPU in µs per "
        "response.",
        "",
        "| model | protocol | conc | N | requests/s | responses/s | first p50 ms | "
        "first p99 ms | final p50 ms | final p99 ms | server CPU µs/resp | "
        "stub CPU µs/resp | client CPU µs/resp |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        *[decoupled_line(row) for row in rows],
    ]


def ceiling_table(baselines: dict[str, Any]) -> list[str]:
    """The per-batch-size onnxruntime numbers behind each ceiling (models sharing one are
    listed together)."""
    lines: list[str] = []
    for model, b in baselines.items():
        if "per_batch" not in b or "same_as" in b:
            continue
        sharing = [model] + [m for m, o in baselines.items() if o.get("same_as") == model]
        lines += [
            "",
            f"Ceiling of {', '.join(f'`{m}`' for m in sharing)} (same `model.onnx`): {b['what']}; "
            f"best batch {b['best_batch']} → **{_fmt(b['calls_per_s'], 0)} samples/s**.",
            "",
            "| batch | calls/s | samples/s | ms/call | µs/sample | CPU µs/sample | CPU cores |",
            "|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in b["per_batch"].values():
            best = " (best)" if r["batch"] == b["best_batch"] else ""
            lines.append(
                f"| {r['batch']}{best} | {_fmt(r['calls_per_s'], 0)} | "
                f"{_fmt(r['samples_per_s'], 0)} | {_fmt(r['us_per_call'] / 1e3, 3)} | "
                f"{_fmt(r['us_per_sample'], 1)} | {_fmt(r['cpu_us_per_sample'], 1)} | "
                f"{_fmt(r['cpu_us_per_call'] / r['us_per_call'], 2)} |"
            )
    return lines


def markdown(report: dict[str, Any], issue: Issue) -> str:
    m = report["machine"]
    lines = [
        f"# Benchmark: {report['issue']}",
        "",
        f"{m['date']} · nproc {m['nproc']} · Python {m['python']} · "
        f"onnxruntime {m['onnxruntime']} · tritonclient {m['tritonclient']} · "
        f"git {m['git']} · {m['cpu']} · load average (1 min) "
        f"{m['loadavg_1min'][0]:.1f} before, {m['loadavg_1min'][1]:.1f} after",
        "",
        f"Window {report['settings']['seconds']} s after {report['settings']['warmup']} s "
        f"warm-up{' (--quick)' if report['settings']['quick'] else ''}; CPU in µs per "
        "inference; " + issue.ratios,
    ]
    if issue.note:
        lines += ["", issue.note]
    regular = [row for row in report["scenarios"] if not row.get("responses")]
    lines += (issue.table or regular_table)(regular)
    lines += decoupled_table([row for row in report["scenarios"] if row.get("responses")])
    idle = report.get("server_idle")
    if idle:
        lines += [
            "",
            f"Idle server before the scenarios: server {idle['server_cpu_util']:.1%} "
            f"CPU, {idle['stub_processes']} stub processes {idle['stub_cpu_util']:.1%} CPU.",
        ]
    lines += ceiling_table(report["baselines"])
    plain = {m: b for m, b in report["baselines"].items() if "per_batch" not in b}
    if plain:
        lines += [
            "",
            "Baselines (in-process, one thread, closed loop):",
            "",
            "| model | calls/s | µs/call | CPU µs/call | what |",
            "|---|--:|--:|--:|---|",
        ]
    for model, b in plain.items():
        lines.append(
            f"| {model} | {_fmt(b['calls_per_s'], 0)} | {_fmt(b['us_per_call'], 2)} | "
            f"{_fmt(b['cpu_us_per_call'], 2)} | {b['what']} |"
        )
    return "\n".join(lines) + "\n"


def git_describe() -> str:
    """The short commit, ``+dirty`` when the tree has changes; ``unknown`` without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, text=True, capture_output=True, check=True
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def machine_info() -> dict[str, Any]:
    import onnxruntime

    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "onnxruntime": onnxruntime.__version__,
        "tritonclient": _version("tritonclient"),
        "git": git_describe(),
    }


def write_report(report: dict[str, Any], issue: Issue, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report["issue"] + ("-quick" if report["settings"]["quick"] else "")
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    path = out_dir / f"{stem}.md"
    path.write_text(markdown(report, issue))
    return path
