"""The loop's spin (``tritium/loop_spin.py``) on and off, against Triton 2.51, in one run:
two tritium servers side by side, one started with ``TRITIUM_LOOP_SPIN_US=0``, and Triton,
all serving the same Python-backend ``simple`` (``simple_py``, as bench/vs_triton.py); the
real perf_analyzer 2.60 measures each in turn, the order rotating from round to round.

    python -m bench loop-spin [--rounds 3] [--only http-c1,grpc-c1,...]

Writes bench/results/loop-spin.md and .json: per row, throughput, p50 and server + stub CPU
per inference of each side (means over rounds), and the spin's effect as per-round ratios
(spin ÷ no spin) and against Triton (p50 ratio: tritium ÷ Triton, lower is better).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench.server import start_ready  # noqa: E402
from bench.vs_triton import (  # noqa: E402
    RESULTS,
    TRITON_DIR,
    Side,
    Triton,
    measure,
    repositories,
    shared_scripts,
    triton_installed,
)
from bench.vs_triton_report import ROWS, Measure, Row  # noqa: E402

DEFAULT_ROWS = "http-c1,grpc-c1,http-c16,grpc-c16,http-c16-dyn"
SIDES = ("triton", "spin", "no-spin")


def _mean(measures: list[Measure], side: str, field: str) -> float:
    values = [getattr(m, field) for m in measures if m.side == side and not m.error]
    return statistics.fmean(values) if values else 0.0


def _ratios(measures: list[Measure], top: str, bottom: str, field: str) -> list[float]:
    by_round: dict[int, dict[str, float]] = {}
    for m in measures:
        if not m.error:
            by_round.setdefault(m.round, {})[m.side] = getattr(m, field)
    return [r[top] / r[bottom] for r in by_round.values() if r.get(top) and r.get(bottom)]


def _span(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.fmean(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def markdown(header: dict[str, object], rows: list[Row], measures: list[Measure]) -> str:
    lines = [
        "# The loop's spin on and off (tritium/loop_spin.py), against Triton 2.51",
        "",
        f"{header['started']} · `{header['command']}` · git {header['git']} · "
        f"load before {header['load_before']}, after {header['load_after']}",
        "",
        "Same `model.py` (add/sub `simple`, Python backend) on three servers measured in turn "
        "by perf_analyzer 2.60 (the order rotates each round); figures are means over rounds; "
        "ratios are per round (mean, range). CPU: server + stub µs per inference.",
        "",
        "| row | Triton | tritium, spin | tritium, no spin | p50 spin ÷ no spin | "
        "p50 ÷ Triton, spin | p50 ÷ Triton, no spin | CPU µs/inf Triton / spin / no spin |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        ms = [m for m in measures if m.row == row.key]
        cells = []
        for side in SIDES:
            cells.append(
                f"{_mean(ms, side, 'throughput'):,.0f}/s, {_mean(ms, side, 'p50_us'):,.0f} µs"
            )
        cpu = " / ".join(f"{_mean(ms, side, 'cpu_us_per_inf'):.0f}" for side in SIDES)
        ratios = [
            _span(_ratios(ms, top, bottom, "p50_us"))
            for top, bottom in (("spin", "no-spin"), ("spin", "triton"), ("no-spin", "triton"))
        ]
        lines.append(f"| {row.title} | {' | '.join(cells)} | {' | '.join(ratios)} | {cpu} |")
    errors = [m for m in measures if m.error]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {m.side} {m.row} r{m.round}: {m.error}" for m in errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=int, default=2000, help="ms per perf_analyzer window")
    parser.add_argument("--only", default=DEFAULT_ROWS, help="comma-separated row keys")
    parser.add_argument("--out", default=str(RESULTS / "loop-spin"), help="results path stem")
    args = parser.parse_args(argv)
    scripts = shared_scripts()
    if scripts is None or not triton_installed():
        print(f"loop_spin: skipped: Triton 2.51 / perf_analyzer 2.60 not set up under {TRITON_DIR}")
        return 0
    rows = [r for r in ROWS if r.key in args.only.split(",")]
    header: dict[str, object] = {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": tuple(round(x, 2) for x in os.getloadavg()),
        "git": os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip(),
    }
    measures: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="loop-spin-") as tmp:
        work = Path(tmp)
        python_repo, _onnx = repositories(work)
        triton = Triton(scripts, python_repo, work / "triton.log")
        servers = []
        try:
            servers.append(start_ready(python_repo, work / "spin", models=["simple_py"]))
            os.environ["TRITIUM_LOOP_SPIN_US"] = "0"  # inherited by the next server only
            try:
                servers.append(start_ready(python_repo, work / "nospin", models=["simple_py"]))
            finally:
                del os.environ["TRITIUM_LOOP_SPIN_US"]
            triton.wait_ready(["simple_py", "simple_py_dyn"])
            urls = triton.url("http"), triton.url("grpc")
            sides = [Side("triton", triton.pid, *urls, "simple_py")]
            for name, server in zip(SIDES[1:], servers, strict=True):
                sides.append(Side(name, server.pid, server.http_url, server.grpc_url, "simple_py"))
            for round_ in range(1, args.rounds + 1):
                for row in rows:
                    shift = round_ % len(sides)
                    for side in sides[shift:] + sides[:shift]:
                        m = measure(scripts, side, row, round_, args.interval)
                        measures.append(m)
                        print(f"  r{round_} {row.key:14} {side.name:8} {m.throughput:9.1f}/s "
                              f"p50 {m.p50_us:6.0f} µs cpu {m.cpu_us_per_inf:5.0f} µs/inf",
                              m.error, flush=True)  # fmt: skip
        finally:
            triton.stop()
            for server in servers:
                server.stop()
    header["load_after"] = tuple(round(x, 2) for x in os.getloadavg())
    out = Path(args.out)
    report = {**header, "measures": [asdict(m) for m in measures]}
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(header, rows, measures)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0
