"""The ONNX inline-or-thread decision on a fast and on a throttled CPU: the same rows with the
path forced inline, forced to the instance thread, and decided by the measured costs (auto),
(a) as the machine is, and (b) with the servers and a busy neighbour (a spinning Python loop)
pinned to CPU 0. tritium's Python-model ``simple`` (add_sub_python) runs the same rows on the
auto server: its ONNX ``simple`` should be at least as fast. The ``-dyn`` rows serve copies
of both with ``dynamic_batching { }`` (``simple_dyn``, ``add_sub_python_dyn``). Every cell
also gives the server CPU (with its stubs) per inference and the inferences per execution,
from the statistics extension.

    python -m bench onnx-inline [--rounds 1] [--interval 1000]
                                          [--load auto|perf_analyzer|h2load]
                                          [--switch-us 5000,200] [--log-verbose]
                                          [--conditions normal,throttled] [--rows KEY,...]

The servers run side by side (``TRITIUM_ONNX_EXECUTION`` set per server, and with
``--switch-us`` one set per GIL switch interval, ``TRITIUM_SWITCH_INTERVAL_US``; see
backends/inline_policy.py) and the rows alternate them. Load: the real perf_analyzer 2.60 from
../shared/triton/setup.sh (TRITON_DIR), or ``h2load`` (bench/h2load_infer.py: one prebuilt
request, closed loop; the default where perf_analyzer is not set up), which also gives each
side's server CPU per request. ``--log-verbose``: every server logs a debug line per request
(the same cost for all), so that auto's changes of path are listed; the log writer is then one
more Python thread that wants the GIL. Writes bench/results/onnx-inline.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from bench import h2load_infer  # noqa: E402
from bench.proctree import cpu_seconds as proc_cpu_seconds  # noqa: E402
from bench.server import Server, build_repository  # noqa: E402
from bench.vs_triton import Row, counts, perf_analyzer, shared_scripts  # noqa: E402
from bench.vs_triton import triton_installed  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ENV = "TRITIUM_ONNX_EXECUTION"
SWITCH_ENV = "TRITIUM_SWITCH_INTERVAL_US"
MODES = ("inline", "thread", "auto")
ROWS = (
    Row("http-c1", "http", 1),
    Row("http-c16", "http", 16),
    Row("grpc-c16", "grpc", 16),
    Row("http-c16-dyn", "http", 16, dynamic=True),
    Row("grpc-c16-dyn", "grpc", 16, dynamic=True),
)
H2LOAD_ROWS = (Row("grpc-c1", "grpc", 1), *ROWS)
MODELS = ("simple", "add_sub_python")
SPIN = "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"


@dataclass
class Measure:
    condition: str  # normal | throttled
    side: str  # inline | thread | auto | python
    row: str
    round: int
    throughput: float = 0.0
    p50_us: float = 0.0  # h2load: the mean latency
    error: str = ""
    switch_us: int = 0  # the server's GIL switch interval (0: the server's default)
    cpu_us: float = 0.0  # server CPU (and its stubs') per inference
    batch: float = 0.0  # inferences per model execution (statistics extension)


def repository(work: Path) -> Path:
    """``simple`` and ``add_sub_python``, and their ``_dyn`` copies with dynamic batching."""
    built, repo = work / "built", work / "repo"
    build_repository(built)
    repo.mkdir()
    for model in MODELS:
        (repo / model).symlink_to(built / model, target_is_directory=True)
        dyn = repo / f"{model}_dyn"
        shutil.copytree(built / model, dyn, symlinks=True)
        config = (dyn / "config.pbtxt").read_text().replace(f'"{model}"', f'"{model}_dyn"')
        (dyn / "config.pbtxt").write_text(config + "\ndynamic_batching { }\n")
    return repo


def start(  # noqa: PLR0913 - one server of the grid
    repo: Path, work: Path, mode: str, cpus: frozenset[int] | None, switch_us: int, verbose: bool
) -> Server:
    """A server whose ONNX instances take ``mode``; the auto one serves the Python model too."""
    saved = {name: os.environ.get(name) for name in (ENV, SWITCH_ENV)}
    os.environ[ENV] = mode
    if switch_us:
        os.environ[SWITCH_ENV] = str(switch_us)
    try:
        names = list(MODELS) if mode == "auto" else ["simple"]
        models = names + [f"{n}_dyn" for n in names]
        args = ["--model-control-mode", "explicit"] + (["--log-verbose", "1"] if verbose else [])
        for model in models:
            args += ["--load-model", model]
        directory = work / f"{mode}-{switch_us}"
        directory.mkdir(parents=True, exist_ok=True)
        server = Server(repo, directory, tuple(args), cpus=cpus)
        server.wait_ready(models)
        return server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def choices(server: Server) -> str:
    """What the auto server's instances chose, from their debug lines on each change."""
    lines = [line for line in server.log_text().splitlines() if " now runs " in line]
    if not lines:
        return "no change logged (or no --log-verbose)"
    order = [line.split(" now runs ", 1)[1].split(" ", 1)[0] for line in lines]
    return f"{len(order)} changes, {' → '.join(order[:6])}{' …' if len(order) > 6 else ''}, " + (
        f"last: {lines[-1].split(' now runs ', 1)[1]}"
    )


def condition(
    name: str, repo: Path, work: Path, args: argparse.Namespace, notes: dict[str, str]
) -> list[Measure]:
    cpus = frozenset({0}) if name == "throttled" else None
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if cpus else None
    servers: dict[tuple[str, int], Server] = {}
    try:
        for switch in args.switch_us:
            for mode in MODES:
                servers[mode, switch] = start(
                    repo, work / name, mode, cpus, switch, args.log_verbose
                )
        time.sleep(1.0)
        measures = rounds(name, servers, args)
        for switch in args.switch_us:
            notes[f"{name}, switch {switch or 'default'} µs"] = choices(servers["auto", switch])
        return measures
    finally:
        for server in servers.values():
            server.stop()
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def rounds(
    name: str, servers: dict[tuple[str, int], Server], args: argparse.Namespace
) -> list[Measure]:
    sides = []
    for switch in args.switch_us:
        sides += [(mode, switch, servers[mode, switch], "simple") for mode in MODES]
        sides.append(("python", switch, servers["auto", switch], "add_sub_python"))
    measures = []
    for round_ in range(1, args.rounds + 1):
        for row in rows_of(args):
            order = sides if round_ % 2 else sides[::-1]
            for side, switch, server, model in order:
                m = Measure(name, side, row.key, round_, switch_us=switch)
                try:
                    measure(m, row, server, model, args)
                except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
                    m.error = str(exc)[:200]
                print(f"  {name:9} r{round_} switch {switch:4} {row.key:12} {side:7} "
                      f"{m.throughput:8.0f}/s p50 {m.p50_us:6.0f} µs CPU {m.cpu_us:5.0f} µs "
                      f"batch {m.batch:4.2f} {m.error}", flush=True)  # fmt: skip
                measures.append(m)
    return measures


def rows_of(args: argparse.Namespace) -> list[Row]:
    rows = H2LOAD_ROWS if args.load == "h2load" else ROWS
    return [r for r in rows if not args.rows or r.key in args.rows]


def measure(m: Measure, row: Row, server: Server, model: str, args: argparse.Namespace) -> None:
    """One window of ``row`` against ``model`` on ``server``, into ``m``: throughput, latency,
    server CPU per inference and inferences per execution (statistics extension)."""
    model += "_dyn" if row.dynamic else ""
    (count0, runs0), cpu0 = counts(server.http_url, model), proc_cpu_seconds(server.pid)
    cpu0 += stub_cpu(server)
    _load(m, row, server, model, args)
    cpu = proc_cpu_seconds(server.pid) + stub_cpu(server) - cpu0
    count1, runs1 = counts(server.http_url, model)
    count, runs = count1 - count0, runs1 - runs0
    m.cpu_us, m.batch = 1e6 * cpu / max(count, 1), count / max(runs, 1)


def _load(m: Measure, row: Row, server: Server, model: str, args: argparse.Namespace) -> None:
    if args.load == "perf_analyzer":
        scripts = shared_scripts()
        assert scripts is not None
        got = perf_analyzer(scripts, row, model, server.url(row.protocol), args.interval)
        m.throughput, m.p50_us = got["throughput"], got.get("p50_us", 0.0)
        return
    inputs = {
        "INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16),
        "INPUT1": np.ones((1, 16), dtype=np.int32),
    }
    seconds = args.interval / 1000
    if row.protocol == "grpc":
        url = f"http://{server.grpc_url}{h2load_infer.GRPC_PATH}"
        body = h2load_infer.grpc_body(model, inputs)
        streams = 4 if row.concurrency > 1 else 1
        load = h2load_infer.h2load(
            url, body, h2load_infer.grpc_headers(), seconds, row.concurrency // streams, streams
        )
    else:
        url = f"http://{server.http_url}/v2/models/{model}/infer"
        body, header = h2load_infer.http_body(inputs)
        headers = h2load_infer.http_headers(header)
        load = h2load_infer.h2load(url, body, headers, seconds, row.concurrency, h1=True)
    m.throughput, m.p50_us = load.requests / load.seconds, load.mean_latency_us


def stub_cpu(server: Server) -> float:
    """The CPU of the server's Python stubs (the Python model's side)."""
    from bench.proctree import children as children_of

    return sum(proc_cpu_seconds(child) for child in children_of(server.pid))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def markdown(measures: list[Measure], header: str, args: argparse.Namespace) -> str:
    h2 = args.load == "h2load"
    lines = [
        "# ONNX `simple`: inline, thread, auto (measured costs), fast and throttled CPU",
        "",
        header,
        "",
        "throttled: the servers (and the Python stub) and a spinning Python loop pinned to CPU 0; "
        "the load generator unpinned. Figures: mean throughput over rounds (and, c1, the "
        + ("mean latency" if h2 else "p50")
        + "); "
        + "server CPU (with its stubs) µs per inference in brackets, inferences per execution "
        "after ×; "
        + "auto ÷ best: auto's throughput against the better of inline and thread in the same "
        "condition and switch interval; ONNX ÷ Python: auto's ONNX `simple` against the "
        "Python-model `simple` (add_sub_python) on the same server. switch: the servers' GIL "
        "switch interval (TRITIUM_SWITCH_INTERVAL_US). "
        + (
            "Every server logs a debug line per request (--log-verbose 1)."
            if args.log_verbose
            else "No debug logging (no log-writer thread busy)."
        ),
        "",
        "| condition | switch | row | inline | thread | auto | Python model | auto ÷ best "
        "| ONNX ÷ Python |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name in args.conditions:
        for switch in args.switch_us:
            for row in rows_of(args):
                lines.append(_line(measures, name, switch, row))
    return "\n".join(lines) + "\n"


def _line(measures: list[Measure], name: str, switch: int, row: Row) -> str:
    cells = {}
    for side in (*MODES, "python"):
        ok = [
            m
            for m in measures
            if (m.condition, m.switch_us, m.row, m.side) == (name, switch, row.key, side)
            and not m.error
        ]
        cells[side] = tuple(
            _mean([getattr(m, k) for m in ok]) for k in ("throughput", "p50_us", "cpu_us", "batch")
        )
    best = max(cells["inline"][0], cells["thread"][0])
    text = {}
    for side, (rate, latency, cpu, batch) in cells.items():
        text[side] = f"{rate:,.0f}/s" + (f", {latency:,.0f} µs" if row.concurrency == 1 else "")
        text[side] += f" [{cpu:,.0f}]" + (f" ×{batch:.1f}" if row.dynamic else "")
    auto, python = cells["auto"][0], cells["python"][0]
    return (
        f"| {name} | {switch or 'default'} | {row.title} | {text['inline']} | {text['thread']} | "
        f"{text['auto']} | {text['python']} | {auto / best if best else 0:.2f}× | "
        f"{auto / python if python else 0:.2f}× |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--interval", type=int, default=1000, help="ms per perf_analyzer window")
    parser.add_argument("--out", default=str(RESULTS / "onnx-inline"), help="results path stem")
    parser.add_argument("--load", choices=("auto", "perf_analyzer", "h2load"), default="auto")
    parser.add_argument(
        "--switch-us",
        type=lambda t: [int(v) for v in t.split(",")],
        default=[0],
        help="GIL switch intervals to compare (µs; 0: the server's default)",
    )
    parser.add_argument("--log-verbose", action="store_true", help="a debug line per request")
    parser.add_argument("--rows", type=lambda t: t.split(","), default=[], help="row keys")
    parser.add_argument(
        "--conditions",
        type=lambda t: t.split(","),
        default=["normal", "throttled"],
        help="normal, throttled or both",
    )
    args = parser.parse_args(argv)
    perf_analyzer_ready = shared_scripts() is not None and triton_installed()
    if args.load == "auto":
        args.load = "perf_analyzer" if perf_analyzer_ready else "h2load"
    if args.load == "perf_analyzer" and not perf_analyzer_ready:
        print("onnx_inline: skipped: perf_analyzer 2.60 not set up (../shared/triton/setup.sh, "
              "TRITON_DIR)")  # fmt: skip
        return 0
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    measures: list[Measure] = []
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="onnx-inline-") as tmp:
        repo = repository(Path(tmp))
        for name in args.conditions:
            measures += condition(name, repo, Path(tmp), args, notes)
    load1 = os.getloadavg()
    header = (
        f"{started} · `{' '.join(sys.argv)}` · nproc {os.cpu_count()} · load average "
        f"(1/5/15 min) before {'/'.join(f'{x:.1f}' for x in load0)}, after "
        f"{'/'.join(f'{x:.1f}' for x in load1)} · {args.load} windows {args.interval} ms"
    )
    out = Path(args.out)
    out.with_suffix(".json").write_text(
        json.dumps(
            {"header": header, "auto": notes, "measures": [asdict(m) for m in measures]}, indent=1
        )
        + "\n"
    )
    text = markdown(measures, header, args) + "".join(
        f"\n- auto's `simple` instance, {name}: {note}" for name, note in notes.items()
    )
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0
