"""tritium against real Triton 2.51 serving the very same Python-backend ``model.py``, measured
with the real perf_analyzer 2.60, rows alternating the two servers, repeated.

    python -m bench vs-triton [--rounds 3] [--interval 2000] [--only ROW,...]

Both servers run side by side for the whole run (one idles while the other is measured) and
serve the same repository: ``simple_py`` (examples/model_repository/add_sub_python's model.py,
the ``simple`` add/sub contract) and ``simple_py_dyn`` (the same with ``dynamic_batching {}``),
one CPU instance each. Three rounds by default: Triton's own HTTP c16 figure moved from 9.3k to
5.8k/s between the two rounds of one run here (vs_triton_run7.json), and with two rounds one
outlier is half of a row's ratio. tritium also serves its ONNX ``simple`` (``simple_onnx``,
``simple_onnx_dyn``): Triton here has no ONNX Runtime backend, so those rows are compared with
tritium's own Python rows of the same round.

Server CPU per inference: utime+stime of the server process and of its children (the Python
stubs, Triton's and tritium's alike) from /proc over the perf_analyzer run, divided by the
model's success count from the statistics extension over the same run.

``--baseline-src DIR``: also serves the same repositories with the tritium of another source
tree (``git worktree add DIR <commit>``, then ``python setup.py build_ext --inplace`` in DIR for
its compiled build; it runs with ``PYTHONPATH=DIR/src``) as a third side, ``tritium-base``,
alternated with the others in every round: the report's ``÷ base`` column is this tree's
throughput over that tree's, per round (an A/B of two commits against the same Triton).

Triton and perf_analyzer come from ../shared/triton/setup.sh (``TRITON_DIR``, default
/tmp/triton-ref); without them the bench says so and exits 0. Writes
bench/results/vs-triton.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from bench import proctree  # noqa: E402
from bench.common import CpuSnapshot  # noqa: E402
from bench.server import build_repository, start_ready  # noqa: E402

RESULTS = ROOT / "bench" / "results"
EXAMPLES = ROOT / "examples" / "model_repository"
TRITON_DIR = Path(os.environ.get("TRITON_DIR", "/tmp/triton-ref"))
SHARED_CANDIDATES = (ROOT.parent / "shared" / "triton", ROOT.parent.parent / "shared" / "triton")


from bench.vs_triton_report import ROWS, Measure, Report, Row, markdown  # noqa: E402


# ---------------------------------------------------------------------------------------------
# The repository both servers load.
# ---------------------------------------------------------------------------------------------
INSTANCE = "\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"


def _python_model(repo: Path, name: str, dynamic: bool) -> None:
    source = EXAMPLES / "add_sub_python"
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(source / "1" / "model.py", repo / name / "1" / "model.py")
    config = (source / "config.pbtxt").read_text().replace('"add_sub_python"', f'"{name}"')
    config += INSTANCE + ("dynamic_batching { }\n" if dynamic else "")
    (repo / name / "config.pbtxt").write_text(config)


def _onnx_model(built: Path, repo: Path, name: str, dynamic: bool) -> None:
    shutil.copytree(built / "simple", repo / name)
    config = (repo / name / "config.pbtxt").read_text().replace('"simple"', f'"{name}"')
    config += INSTANCE + ("dynamic_batching { }\n" if dynamic else "")
    (repo / name / "config.pbtxt").write_text(config)


def repositories(work: Path) -> tuple[Path, Path]:
    """(the shared Python-model repository, tritium's ONNX one)."""
    python_repo, onnx_repo, built = work / "python", work / "onnx", work / "built"
    python_repo.mkdir()
    onnx_repo.mkdir()
    build_repository(built)
    for dynamic in (False, True):
        suffix = "_dyn" if dynamic else ""
        _python_model(python_repo, "simple_py" + suffix, dynamic)
        _onnx_model(built, onnx_repo, "simple_onnx" + suffix, dynamic)
    return python_repo, onnx_repo


# ---------------------------------------------------------------------------------------------
# Triton and perf_analyzer (../shared/triton).
# ---------------------------------------------------------------------------------------------
def shared_scripts() -> Path | None:
    for candidate in (Path(os.environ.get("TRITON_SHARED", "/nonexistent")), *SHARED_CANDIDATES):
        if (candidate / "serve.sh").is_file() and (candidate / "perf_analyzer.sh").is_file():
            return candidate
    return None


def triton_installed() -> bool:
    return (TRITON_DIR / "pa_wheel" / "perf_analyzer" / "bin" / "perf_analyzer").is_file() and (
        TRITON_DIR / "backends" / "python" / "triton_python_backend_stub"
    ).is_file()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Triton:
    def __init__(self, scripts: Path, repo: Path, log: Path) -> None:
        self.http, self.grpc, metrics = _free_port(), _free_port(), _free_port()
        env = {**os.environ, "TRITON_DIR": str(TRITON_DIR)}
        command = [
            "bash", str(scripts / "serve.sh"), str(repo),
            "--http-port", str(self.http), "--grpc-port", str(self.grpc),
            "--metrics-port", str(metrics), "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1",
        ]  # fmt: skip
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid  # serve.sh execs tritonserver

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.http if protocol == 'http' else self.grpc}"

    def wait_ready(self, models: list[str], timeout: float = 120.0) -> None:
        paths = ["/v2/health/ready"] + [f"/v2/models/{m}/ready" for m in models]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver exited ({self.proc.returncode})")
            if all(_http_ok(self.url("http"), p) for p in paths):
                return
            time.sleep(0.2)
        raise RuntimeError("tritonserver not ready in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _http_ok(url: str, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}{path}", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def success_count(http_url: str, model: str) -> int:
    return counts(http_url, model)[0]


def counts(http_url: str, model: str) -> tuple[int, int]:
    """(successful requests, model executions) of ``model`` so far."""
    with urllib.request.urlopen(f"http://{http_url}/v2/models/{model}/stats", timeout=10) as r:
        stats = json.loads(r.read())["model_stats"]
    return (
        sum(int(m["inference_stats"]["success"]["count"]) for m in stats),
        sum(int(m["execution_count"]) for m in stats),
    )


def perf_analyzer(scripts: Path, row: Row, model: str, url: str, interval: int) -> dict[str, float]:
    """One perf_analyzer run: its client figures (throughput /s, p50 and p99 µs), read from its
    report. A run that printed its report but does not exit within EXIT_GRACE seconds (it
    waits for the server to end a stream) is stopped and its figures kept, with a note."""
    command = [
        "bash", str(scripts / "perf_analyzer.sh"), "-m", model, "-u", url,
        "-i", row.protocol, "--concurrency-range", str(row.concurrency),
        "--measurement-interval", str(interval), "--max-trials", "4",
        "--stability-percentage", "1000",
    ] + (["--streaming"] if row.streaming else [])  # fmt: skip
    env = {**os.environ, "TRITON_DIR": str(TRITON_DIR)}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        hung = _wait_report(proc, out, deadline=time.monotonic() + 8 * interval / 1000 + 40)
        out.seek(0)
        text = out.read().decode(errors="replace")
    figures = _parse_report(text)
    if not figures:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise RuntimeError(f"perf_analyzer rc {proc.returncode}: {tail}")
    figures["hung"] = float(hung)
    return figures


EXIT_GRACE = 5.0
_REPORT_END = b"Inferences/Second vs. Client"


def _wait_report(proc: subprocess.Popen[bytes], out: Any, deadline: float) -> bool:
    """Wait for perf_analyzer to exit; True if it had to be stopped after its report."""
    reported_at = None
    while proc.poll() is None:
        now = time.monotonic()
        if reported_at is None:
            out.seek(0)
            if _REPORT_END in out.read():
                reported_at = now
        if now > deadline or (reported_at is not None and now - reported_at > EXIT_GRACE):
            proc.kill()
            proc.wait()
            return reported_at is not None
        time.sleep(0.2)
    return False


def _parse_report(text: str) -> dict[str, float]:
    """Throughput and latencies from the ``Client:`` part of perf_analyzer's report."""
    client = text.split("Client:", 1)[-1].split("Server:", 1)[0] if "Client:" in text else ""
    found = {}
    for key, pattern in (("throughput", r"Throughput: ([0-9.]+) infer/sec"),
                         ("p50_us", r"p50 latency: ([0-9]+) usec"),
                         ("p99_us", r"p99 latency: ([0-9]+) usec")):  # fmt: skip
        match = re.search(pattern, client)
        if match:
            found[key] = float(match.group(1))
    return found if "throughput" in found else {}


# ---------------------------------------------------------------------------------------------
# One measurement: perf_analyzer against one server, with its CPU and success count around it.
# ---------------------------------------------------------------------------------------------
@dataclass
class Side:
    name: str
    pid: int
    http_url: str
    grpc_url: str
    prefix: str  # model name prefix: simple_py | simple_onnx

    def url(self, protocol: str) -> str:
        return self.http_url if protocol == "http" else self.grpc_url

    def model(self, row: Row) -> str:
        return self.prefix + ("_dyn" if row.dynamic else "")


def measure(scripts: Path, side: Side, row: Row, round_: int, interval: int) -> Measure:
    result = Measure(side.name, row.key, round_)
    model = side.model(row)
    try:
        (count0, runs0), cpu0 = counts(side.http_url, model), CpuSnapshot.take(side.pid)
        figures = perf_analyzer(scripts, row, model, side.url(row.protocol), interval)
        cpu1, (count1, runs1) = CpuSnapshot.take(side.pid), counts(side.http_url, model)
    except (RuntimeError, OSError, subprocess.TimeoutExpired, KeyError, ValueError) as exc:
        gone = "" if proctree.running(side.pid) else " (the server process is gone)"
        result.error = str(exc)[:300] + gone
        return result
    result.inferences = count1 - count0
    if runs1 > runs0:  # requests of batch size 1: inferences per execution = requests per batch
        result.batch_mean = result.inferences / (runs1 - runs0)
    result.throughput = figures["throughput"]
    result.p50_us = figures.get("p50_us", 0.0)
    result.p99_us = figures.get("p99_us", 0.0)
    if figures["hung"]:
        result.note = "perf_analyzer did not exit after its report: stopped"
    if result.inferences > 0:
        stubs = cpu1.stub_delta(cpu0)
        total = cpu1.server - cpu0.server + stubs
        result.cpu_us_per_inf = total / result.inferences * 1e6
        result.stub_us_per_inf = stubs / result.inferences * 1e6
    return result


def run_rounds(scripts: Path, sides: list[Side], rows: list[Row], args: argparse.Namespace,
               report: Report) -> None:  # fmt: skip
    for round_ in range(1, args.rounds + 1):
        for row in rows:
            # Rotate which server goes first from one round to the next.
            shift = (round_ - 1) % len(sides)
            order = sides[shift:] + sides[:shift]
            for side in order:
                m = measure(scripts, side, row, round_, args.interval)
                report.measures.append(m)
                print(
                    f"  r{round_} {row.key:15} {side.name:13} {m.throughput:9.1f}/s "
                    f"p50 {m.p50_us:7.0f} µs cpu {m.cpu_us_per_inf:5.0f} µs/inf "
                    f"batch {m.batch_mean:4.2f}",
                    m.error,
                    m.note,
                    flush=True,
                )


def _versions() -> dict[str, str]:
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {"git": git, "nproc": str(os.cpu_count()), "Python": sys.version.split()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=int, default=2000, help="ms per perf_analyzer window")
    parser.add_argument("--only", default="", help="comma-separated row keys")
    parser.add_argument("--no-onnx", action="store_true", help="skip tritium's ONNX rows")
    parser.add_argument("--out", default=str(RESULTS / "vs-triton"), help="results path stem")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="another tritium source tree, a third side (A/B)")  # fmt: skip
    args = parser.parse_args(argv)
    scripts = shared_scripts()
    if scripts is None or not triton_installed():
        print(f"vs_triton: skipped: Triton 2.51 / perf_analyzer 2.60 not set up under {TRITON_DIR} "
              "(run `bash ../shared/triton/setup.sh`, or set TRITON_DIR)")  # fmt: skip
        return 0
    rows = [r for r in ROWS if not args.only or r.key in args.only.split(",")]
    report = Report(" ".join(sys.argv), time.strftime("%Y-%m-%d %H:%M UTC",
                    time.gmtime()), os.getloadavg(), interval_ms=args.interval,
                    versions=_versions())  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="vs-triton-") as tmp:
        work = Path(tmp)
        run_servers(scripts, work, rows, args, report)
    report.load_after = os.getloadavg()
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(asdict(report), indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report, rows))
    print(markdown(report, rows))
    return 0


def run_servers(
    scripts: Path, work: Path, rows: list[Row], args: argparse.Namespace, report: Report
) -> None:
    python_repo, onnx_repo = repositories(work)
    triton = Triton(scripts, python_repo, work / "triton.log")
    ours = base = None
    models = ["simple_py", "simple_py_dyn", "simple_onnx"]
    onnx = ["--model-repository", str(onnx_repo)]
    try:
        ours = start_ready(python_repo, work / "tritium", onnx, models=models)
        if args.baseline_src is not None:
            env = {"PYTHONPATH": str(args.baseline_src.resolve() / "src")}
            base = start_ready(python_repo, work / "base", onnx, models=models, env=env)
        triton.wait_ready(["simple_py", "simple_py_dyn"])
        sides = [
            Side("triton", triton.pid, triton.url("http"), triton.url("grpc"), "simple_py"),
            Side("tritium", ours.pid, ours.http_url, ours.grpc_url, "simple_py"),
        ]
        if base is not None:
            sides.append(Side("tritium-base", base.pid, base.http_url, base.grpc_url,
                              "simple_py"))  # fmt: skip
        if not args.no_onnx:
            sides.append(Side("tritium-onnx", ours.pid, ours.http_url, ours.grpc_url,
                              "simple_onnx"))  # fmt: skip
            if base is not None:
                sides.append(Side("tritium-base-onnx", base.pid, base.http_url, base.grpc_url,
                                  "simple_onnx"))  # fmt: skip
        run_rounds(scripts, sides, rows, args, report)
    finally:
        if triton.proc.poll() is not None:
            report.server_logs["triton"] = _tail(work / "triton.log")
        if ours is not None and ours.proc.poll() is not None:
            report.server_logs["tritium"] = ours.log_tail(15)
        triton.stop()
        for server in (ours, base):
            if server is not None:
                server.stop()


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
