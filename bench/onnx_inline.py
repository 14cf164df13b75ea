"""The ONNX inline-or-thread decision on a fast and on a throttled CPU: the same rows with the
path forced inline, forced to the instance thread, and decided by the measured costs (auto),
(a) as the machine is, and (b) with the servers and a busy neighbour (a spinning Python loop)
pinned to CPU 0. tritium's Python-model ``simple`` (add_sub_python) runs the same rows on the
auto server: its ONNX ``simple`` should be at least as fast.

    .venv/bin/python bench/onnx_inline.py [--rounds 1] [--interval 1000]

The three servers run side by side (``TRITIUM_ONNX_EXECUTION`` set per server, see
backends/inline_policy.py) and the rows alternate them. Load: the real perf_analyzer 2.60 from
../shared/triton/setup.sh (TRITON_DIR); without it the bench says so and exits 0. Writes
bench/results/onnx_inline.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.server import Server, build_repository  # noqa: E402
from bench.vs_triton import Row, perf_analyzer, shared_scripts, triton_installed  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ENV = "TRITIUM_ONNX_EXECUTION"
MODES = ("inline", "thread", "auto")
ROWS = (Row("http-c1", "http", 1), Row("http-c16", "http", 16), Row("grpc-c16", "grpc", 16))
SPIN = "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"


@dataclass
class Measure:
    condition: str  # normal | throttled
    side: str  # inline | thread | auto | python
    row: str
    round: int
    throughput: float = 0.0
    p50_us: float = 0.0
    error: str = ""


def repository(work: Path) -> Path:
    built, repo = work / "built", work / "repo"
    build_repository(built)
    repo.mkdir()
    for model in ("simple", "add_sub_python"):
        (repo / model).symlink_to(built / model, target_is_directory=True)
    return repo


def start(repo: Path, work: Path, mode: str, cpus: frozenset[int] | None) -> Server:
    """A server whose ONNX instances take ``mode``; the auto one serves the Python model too."""
    saved = os.environ.get(ENV)
    os.environ[ENV] = mode
    try:
        models = ["simple", "add_sub_python"] if mode == "auto" else ["simple"]
        args = ["--model-control-mode", "explicit", "--log-verbose", "1"]
        for model in models:
            args += ["--load-model", model]
        (work / mode).mkdir(parents=True, exist_ok=True)
        server = Server(repo, work / mode, tuple(args), cpus=cpus)
        server.wait_ready(models)
        return server
    finally:
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved


def choices(server: Server) -> str:
    """What the auto server's instances chose, from their debug lines on each change."""
    lines = [line for line in server.log_text().splitlines() if " now runs " in line]
    if not lines:
        return "no change logged"
    order = [line.split(" now runs ", 1)[1].split(" ", 1)[0] for line in lines]
    return f"{len(order)} changes, {' → '.join(order[:6])}{' …' if len(order) > 6 else ''}, " + (
        f"last: {lines[-1].split(' now runs ', 1)[1]}"
    )


def condition(
    name: str, repo: Path, work: Path, args: argparse.Namespace, notes: dict[str, str]
) -> list[Measure]:
    cpus = frozenset({0}) if name == "throttled" else None
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if cpus else None
    servers: dict[str, Server] = {}
    try:
        for mode in MODES:
            servers[mode] = start(repo, work / name, mode, cpus)
        time.sleep(1.0)
        measures = rounds(name, servers, args)
        notes[name] = choices(servers["auto"])
        return measures
    finally:
        for server in servers.values():
            server.stop()
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def rounds(name: str, servers: dict[str, Server], args: argparse.Namespace) -> list[Measure]:
    scripts = shared_scripts()
    assert scripts is not None
    sides = [(mode, servers[mode], "simple") for mode in MODES]
    sides.append(("python", servers["auto"], "add_sub_python"))
    measures = []
    for round_ in range(1, args.rounds + 1):
        for row in ROWS:
            order = sides if round_ % 2 else sides[::-1]
            for side, server, model in order:
                m = Measure(name, side, row.key, round_)
                try:
                    got = perf_analyzer(
                        scripts, row, model, server.url(row.protocol), args.interval
                    )
                    m.throughput, m.p50_us = got["throughput"], got.get("p50_us", 0.0)
                except (RuntimeError, OSError) as exc:
                    m.error = str(exc)[:200]
                print(f"  {name:9} r{round_} {row.key:9} {side:7} {m.throughput:8.0f}/s "
                      f"p50 {m.p50_us:6.0f} µs {m.error}", flush=True)  # fmt: skip
                measures.append(m)
    return measures


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def markdown(measures: list[Measure], header: str) -> str:
    lines = [
        "# ONNX `simple`: inline, thread, auto (measured costs), fast and throttled CPU",
        "",
        header,
        "",
        "throttled: the three servers (and the Python stub) and a spinning Python loop pinned to "
        "CPU 0; perf_analyzer unpinned. Figures: mean throughput over rounds (p50 for c1). "
        "auto ÷ best: auto against the better of inline and thread in the same condition; "
        "ONNX ÷ Python: auto's ONNX `simple` against the Python-model `simple` (add_sub_python) "
        "on the same server. Every server runs with --log-verbose 1 (a debug line per request: "
        "the same cost for all three) so that auto's changes of path are logged (listed below).",
        "",
        "| condition | row | inline | thread | auto | Python model | auto ÷ best | ONNX ÷ Python |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name in ("normal", "throttled"):
        for row in ROWS:
            cells = {}
            for side in (*MODES, "python"):
                ok = [m for m in measures if (m.condition, m.row, m.side) == (name, row.key, side)]
                ok = [m for m in ok if not m.error]
                cells[side] = (_mean([m.throughput for m in ok]), _mean([m.p50_us for m in ok]))
            best = max(cells["inline"][0], cells["thread"][0])
            text = {s: f"{t:,.0f}/s" + (f", {p:,.0f} µs" if row.concurrency == 1 else "")
                    for s, (t, p) in cells.items()}  # fmt: skip
            auto, python = cells["auto"][0], cells["python"][0]
            lines.append(
                f"| {name} | {row.title} | {text['inline']} | {text['thread']} | {text['auto']} | "
                f"{text['python']} | {auto / best if best else 0:.2f}× | "
                f"{auto / python if python else 0:.2f}× |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--interval", type=int, default=1000, help="ms per perf_analyzer window")
    parser.add_argument("--out", default=str(RESULTS / "onnx_inline"), help="results path stem")
    args = parser.parse_args()
    if shared_scripts() is None or not triton_installed():
        print("onnx_inline: skipped: perf_analyzer 2.60 not set up (../shared/triton/setup.sh, "
              "TRITON_DIR)")  # fmt: skip
        return 0
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    measures: list[Measure] = []
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="onnx-inline-") as tmp:
        repo = repository(Path(tmp))
        for name in ("normal", "throttled"):
            measures += condition(name, repo, Path(tmp), args, notes)
    load1 = os.getloadavg()
    header = (
        f"{started} · `python {' '.join(sys.argv)}` · nproc {os.cpu_count()} · load average "
        f"(1/5/15 min) before {'/'.join(f'{x:.1f}' for x in load0)}, after "
        f"{'/'.join(f'{x:.1f}' for x in load1)} · perf_analyzer windows {args.interval} ms"
    )
    out = Path(args.out)
    out.with_suffix(".json").write_text(
        json.dumps(
            {"header": header, "auto": notes, "measures": [asdict(m) for m in measures]}, indent=1
        )
        + "\n"
    )
    text = markdown(measures, header) + "".join(
        f"\n- auto's `simple` instance, {name}: {note}" for name, note in notes.items()
    )
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
