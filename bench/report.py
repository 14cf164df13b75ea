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
from collections.abc import Callable
from dataclasses import dataclass
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
    server = f" | {row['target']}" if row.get("target") else ""
    return (
        f"| {row['model']} | {row['protocol']} | {row['concurrency']}{server} | FAILED: {problem} |"
    )


@dataclass(frozen=True)
class Column:
    """A table column: its header, and its cell from a row, by key (``"a.b"`` reaches into a
    nested dict) or by function, floats shown with ``digits`` decimals."""

    header: str
    value: str | Callable[[dict[str, Any]], Any]
    digits: int = 0
    left: bool = False  # aligned left (names) rather than right (numbers)


def _value(row: dict[str, Any], value: str | Callable[[dict[str, Any]], Any]) -> Any:
    if callable(value):
        return value(row)
    head, _, rest = value.partition(".")
    return (row.get(head) or {}).get(rest) if rest else row.get(head)


def row_line(columns: list[Column], row: dict[str, Any]) -> str:
    """One scenario's row (a failed scenario says why instead)."""
    if "infer_per_s" not in row:
        return failed_line(row)
    return table_row(row, [_fmt(_value(row, c.value), c.digits) for c in columns])


def rows_table(columns: list[Column], rows: list[dict[str, Any]], intro: str = "") -> list[str]:
    """A markdown table of ``rows`` (nothing when there are none), after ``intro``."""
    if not rows:
        return []
    head = "| " + " | ".join(c.header for c in columns) + " |"
    align = "|" + "".join("---|" if c.left else "--:|" for c in columns)
    return ["", *([intro, ""] if intro else []), head, align, *[row_line(columns, r) for r in rows]]


MODEL, PROTOCOL = Column("model", "model", left=True), Column("protocol", "protocol", left=True)
CONC = Column("conc", "concurrency")
# What every closed-loop row measures: throughput and latency, then CPU per inference.
RATE = [
    Column("infer/s", "infer_per_s"),
    Column("p50 ms", "p50_ms", 3),
    Column("p99 ms", "p99_ms", 3),
]
CPU = [
    Column("server CPU µs/inf", "server_cpu_us"),
    Column("stub CPU µs/inf", "stub_cpu_us"),
    Column("client CPU µs/inf", "client_cpu_us"),
]
REGULAR = [
    MODEL,
    PROTOCOL,
    CONC,
    *RATE,
    *CPU,
    Column("thr ÷ base", "throughput_ratio", 3),
    Column("CPU × base", "cpu_ratio", 1),
]
DECOUPLED = [
    MODEL,
    PROTOCOL,
    CONC,
    Column("N", "responses"),
    Column("requests/s", "infer_per_s", 1),
    Column("responses/s", "responses_per_s"),
    Column("first p50 ms", "first_p50_ms", 3),
    Column("first p99 ms", "first_p99_ms", 3),
    Column("final p50 ms", "p50_ms", 2),
    Column("final p99 ms", "p99_ms", 2),
    Column("server CPU µs/resp", "server_cpu_us_per_response", 1),
    Column("stub CPU µs/resp", "stub_cpu_us_per_response", 1),
    Column("client CPU µs/resp", "client_cpu_us_per_response", 1),
]


def scenario_line(row: dict[str, Any]) -> str:
    return row_line(REGULAR, row)


def regular_table(rows: list[dict[str, Any]]) -> list[str]:
    return rows_table(REGULAR, rows)


def decoupled_table(rows: list[dict[str, Any]]) -> list[str]:
    return rows_table(
        DECOUPLED,
        rows,
        "Decoupled model, N responses per request on one ModelStreamInfer stream, `conc` "
        "requests in flight (the next is sent when one's empty final response arrives); "
        "first = send → first response, final = send → final response; CPU in µs per "
        "response.",
    )


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
