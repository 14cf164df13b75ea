"""bench/backends.py's lines and tables: one line a scenario, the results' table, and each
network and backend's best cell (the lowest ratio to the in-process loop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TARGET = 1.15


def ratio(row: dict[str, Any]) -> float:
    """The server's CPU per sample over the in-process loop's at the larger of the request's
    batch and the batch the server mostly ran (the dynamic batcher may join requests: the
    loop is then also measured at that batch, so the join is no advantage of the server's)."""
    return max(row["cpu_ratio"], row.get("cpu_ratio_executed") or 0.0)


def line(row: dict[str, Any]) -> str:
    executed = row.get("executed_batch", row["batch"])
    also = (
        f" | at the executed batch {executed}: in-process {row['inprocess_cpu_executed']:.1f} µs,"
        f" ratio {row['cpu_ratio_executed']:.2f}"
        if executed != row["batch"]
        else ""
    )
    return (
        f"{row['protocol']:4} {row['network']:5} {row['backend']:8} batch {row['batch']:4} "
        f"c{row['concurrency']:<2} server {row['server_samples_per_s']:9.0f}/s "
        f"{row['server_cpu_us_per_sample']:8.1f} µs CPU/sample (per request: loop "
        f"{row['server_loop_us_per_request']:.0f} µs, other threads "
        f"{row['server_others_us_per_request']:.0f} µs) | in-process "
        f"{row['inprocess_samples_per_s']:9.0f}/s {row['inprocess_cpu_us_per_sample']:8.1f} µs "
        f"({row['inprocess_us_per_batch']:.0f} µs per batch) | ratio {row['cpu_ratio']:.2f} "
        f"(target <= {TARGET}){also} | executions {row['executions_by_batch_size']}"
    )


def best(rows: list[dict[str, Any]]) -> list[str]:
    """Each network and backend's cell with the lowest ``ratio`` (batch >= 8)."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["network"], r["backend"])
        if r["batch"] >= 8 and (key not in cells or ratio(r) < ratio(cells[key])):
            cells[key] = r
    out = [
        "| network | backend | best batch | c | server samples/s | in-process samples/s "
        "| server CPU µs/sample | in-process CPU µs/sample | **ratio** | met (<= 1.15) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for (network, backend), r in cells.items():
        out.append(
            f"| {network} | {backend} | {r['batch']} | {r['concurrency']} | "
            f"{r['server_samples_per_s']:.0f} | {r['inprocess_samples_per_s']:.0f} | "
            f"{r['server_cpu_us_per_sample']:.1f} | {r['server_cpu_us_per_sample'] / ratio(r):.1f} "
            f"| **{ratio(r):.2f}** | {'yes' if ratio(r) <= TARGET else 'no'} |"
        )
    return out


def report(rows: list[dict[str, Any]], header: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "backends.json").write_text(
        json.dumps({"header": header, "rows": rows}, indent=2) + "\n"
    )
    lines = [
        header,
        "",
        "Best cell of each network and backend (ratio: against the in-process loop at the "
        "larger of the request's batch and the batch the server executed):",
        "",
        *best(rows),
        "",
        "| protocol | network | backend | batch | c | server samples/s | in-process samples/s "
        "| server CPU µs/sample | in-process CPU µs/sample | ratio | executed batch "
        "| in-process CPU µs/sample at it | ratio at it | server loop µs/request "
        "| server other threads µs/request | in-process µs/batch | executions by batch size |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        executed = r.get("executed_batch", r["batch"])
        at = r.get("inprocess_cpu_executed") or r["inprocess_cpu_us_per_sample"]
        lines.append(
            f"| {r['protocol']} | {r['network']} | {r['backend']} | {r['batch']} | "
            f"{r['concurrency']} | {r['server_samples_per_s']:.0f} | "
            f"{r['inprocess_samples_per_s']:.0f} | {r['server_cpu_us_per_sample']:.1f} | "
            f"{r['inprocess_cpu_us_per_sample']:.1f} | {r['cpu_ratio']:.2f} | {executed} | "
            f"{at:.1f} | {r['server_cpu_us_per_sample'] / at:.2f} | "
            f"{r['server_loop_us_per_request']:.0f} | {r['server_others_us_per_request']:.0f} | "
            f"{r['inprocess_us_per_batch']:.0f} | {r['executions_by_batch_size']} |"
        )
    (out / "backends.md").write_text("\n".join(lines) + "\n")
