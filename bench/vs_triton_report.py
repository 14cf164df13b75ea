"""The records of bench/vs_triton.py (rows, measures, the run) and the markdown table it writes."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Row:
    key: str
    protocol: str  # grpc | http
    concurrency: int
    dynamic: bool = False
    streaming: bool = False

    @property
    def title(self) -> str:
        kind = "stream" if self.streaming else ("unary" if self.protocol == "grpc" else "")
        name = " ".join(p for p in ("gRPC" if self.protocol == "grpc" else "HTTP", kind) if p)
        extra = ", dynamic batching" if self.dynamic else ""
        return f"{name} c{self.concurrency}{extra}"


ROWS = (
    Row("grpc-c1", "grpc", 1),
    Row("grpc-c16", "grpc", 16),
    Row("http-c1", "http", 1),
    Row("http-c16", "http", 16),
    Row("grpc-c16-dyn", "grpc", 16, dynamic=True),
    Row("http-c16-dyn", "http", 16, dynamic=True),
    Row("stream-c16", "grpc", 16, streaming=True),
    Row("stream-c16-dyn", "grpc", 16, dynamic=True, streaming=True),
)


@dataclass
class Measure:
    side: str  # triton | tritium | tritium-onnx
    row: str
    round: int
    throughput: float = 0.0
    p50_us: float = 0.0
    p99_us: float = 0.0
    cpu_us_per_inf: float = 0.0  # server + stubs
    stub_us_per_inf: float = 0.0
    inferences: int = 0
    batch_mean: float = 0.0  # inferences per model execution (statistics extension)
    error: str = ""
    note: str = ""


@dataclass
class Report:
    command: str
    started: str
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    interval_ms: int = 2000
    versions: dict[str, str] = field(default_factory=dict)
    measures: list[Measure] = field(default_factory=list)
    server_logs: dict[str, str] = field(default_factory=dict)  # tails, of servers that died


# ---------------------------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------------------------
def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _cell(ms: list[Measure], p50: bool) -> str:
    ok = [m for m in ms if not m.error]
    if not ok:
        return "error" if ms else "–"  # "–": not measured (--no-onnx)
    text = f"{_mean([m.throughput for m in ok]):,.0f}/s"
    return text + (f", {_mean([m.p50_us for m in ok]):,.0f} µs" if p50 else "")


def _ratio(ours: list[Measure], theirs: list[Measure]) -> str:
    """Mean over rounds of the per-round throughput ratio (each round alternates the sides)."""
    ratios = []
    for m in ours:
        other = [t for t in theirs if t.round == m.round and not t.error]
        if other and not m.error and other[0].throughput:
            ratios.append(m.throughput / other[0].throughput)
    if not ratios:
        return "–"
    spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
    return f"{_mean(ratios):.2f}×{spread}"


def _p50_ratio(ours: list[Measure], theirs: list[Measure]) -> str:
    a = _mean([m.p50_us for m in ours if not m.error])
    b = _mean([m.p50_us for m in theirs if not m.error])
    return f"{a / b:.2f}×" if a and b else "–"


def _cpu(ms: list[Measure]) -> str:
    ok = [m for m in ms if not m.error and m.cpu_us_per_inf]
    if not ok:
        return "–"
    total = _mean([m.cpu_us_per_inf for m in ok])
    return f"{total:.0f} ({_mean([m.stub_us_per_inf for m in ok]):.0f})"


def _ab_table(by: dict[tuple[str, str], list[Measure]], rows: list[Row]) -> list[str]:
    """With ``--baseline-src``: this tree against the other, per row (throughput ratio per
    round, p50 ratio, server CPU per inference of each), for the Python and the ONNX models."""
    if not any(side == "tritium-base" for side, _ in by):
        return []
    lines = [
        "",
        "A/B against the baseline tree (`tritium-base`, same rounds): throughput ÷ base per "
        "round (range), p50 ÷ base, CPU µs/inf this tree / base.",
        "",
        "| row | Python ÷ base | p50 ÷ base | CPU this / base | ONNX ÷ base "
        "| ONNX CPU this / base |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        p, b = by.get(("tritium", row.key), []), by.get(("tritium-base", row.key), [])
        o, ob = by.get(("tritium-onnx", row.key), []), by.get(("tritium-base-onnx", row.key), [])
        lines.append(
            f"| {row.title} | {_ratio(p, b)} | {_p50_ratio(p, b)} | {_cpu(p)} / {_cpu(b)} | "
            f"{_ratio(o, ob)} | {_cpu(o)} / {_cpu(ob)} |"
        )
    return lines


def _batches(theirs: list[Measure], ours: list[Measure]) -> str:
    a = _mean([m.batch_mean for m in theirs if not m.error and m.batch_mean])
    b = _mean([m.batch_mean for m in ours if not m.error and m.batch_mean])
    return f"{a:.1f} / {b:.1f}" if a and b else "–"


def markdown(report: Report, rows: list[Row]) -> str:
    by = {}
    for m in report.measures:
        by.setdefault((m.side, m.row), []).append(m)
    lines = [
        "# tritium vs Triton 2.51 (same model.py, perf_analyzer 2.60)",
        "",
        f"{report.started} · `{report.command}` · "
        + " · ".join(f"{k} {v}" for k, v in report.versions.items()),
        "",
        f"Load average (1/5/15 min) before: {'/'.join(f'{x:.2f}' for x in report.load_before)}, "
        f"after: {'/'.join(f'{x:.2f}' for x in report.load_after)}. "
        f"perf_analyzer: --measurement-interval {report.interval_ms} ms, --max-trials 4, "
        "--stability-percentage 1000 (every window counts: it terminates); rows alternate the "
        "servers, the order flips each round; "
        "figures are means over rounds, ratio = mean of the per-round tritium/Triton throughput "
        "ratios (range in brackets). CPU: server + children (stubs) µs per inference, stub part "
        "in brackets. Batch: requests per model execution (statistics extension), Triton / "
        "tritium. ONNX ratio: tritium's ONNX `simple` ÷ tritium's Python `simple` of the "
        "same round (target ≥ 1.0).",
        "",
        "| row (perf_analyzer) | Triton 2.51 | tritium | ratio | p50 ratio | CPU µs/inf Triton | "
        "CPU µs/inf tritium | batch | tritium ONNX | ONNX ÷ Python | CPU µs/inf ONNX |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        t, p, o = (by.get((s, row.key), []) for s in ("triton", "tritium", "tritium-onnx"))
        c1 = row.concurrency == 1
        lines.append(
            f"| {row.title} | {_cell(t, c1)} | {_cell(p, c1)} | {_ratio(p, t)} | "
            f"{_p50_ratio(p, t) if c1 else '–'} | {_cpu(t)} | {_cpu(p)} | {_batches(t, p)} | "
            f"{_cell(o, c1)} | "
            f"{_ratio(o, p)} | {_cpu(o)} |"
        )
    lines += _ab_table(by, rows)
    notes = [m for m in report.measures if m.note]
    if notes:
        lines += ["", "Notes:", *(f"- {m.side} {m.row} r{m.round}: {m.note}" for m in notes)]
    errors = [m for m in report.measures if m.error]
    if errors:
        lines += ["", "Errors:", *(f"- {m.side} {m.row} r{m.round}: {m.error}" for m in errors)]
    for name, tail in report.server_logs.items():
        lines += ["", f"{name} exited during the run; its log ends:", "", "```", tail, "```"]
    return "\n".join(lines) + "\n"
