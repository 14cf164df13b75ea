"""Server CPU per inference, compiled build vs pure Python (issue 24: target ≤ 0.6×).

    python -m bench mypyc [--requests 5000] [--rounds 3] [--concurrency 16]
                                        [--models simple,add_sub_python] [--protocols http,grpc]

One install, two servers: the same ``python -m tritium serve`` started plainly (the compiled
modules, when the install has them: the server's first log line says which build runs) and
with ``TRITIUM_PURE_PYTHON=1`` (the same modules from their ``.py``, tritium/__init__.py). The
client is ``h2load`` (Debian's nghttp2-client, C, one core's fraction): unary requests over
HTTP/1.1 (``--h1``, keep-alive, JSON body) and over gRPC (``ModelInfer``, a length-prefixed
``ModelInferRequest`` with ``content-type: application/grpc``), ``--concurrency`` connections,
one request in flight on each (``--rps N``: at most N requests per second on each, so that both
builds serve the same rate). Both servers run at once; each (model, protocol) is measured on
one build right after the other, ``--rounds`` times, the order alternating (on a loaded
machine the load then changes least between the two); each measurement is ``--requests``
requests after a warm-up of a tenth of them, and reads the server's CPU time (utime+stime of
the server process, all threads, from /proc/<pid>/stat; the Python stubs are counted apart)
around it. The successes are counted by the server's own statistics (h2load sees HTTP status
200 on a gRPC error too), so a run whose requests failed is refused, not reported.

``--profile``: also samples each server with py-spy (``PY_SPY`` or ``py-spy`` on PATH) during
one extra measurement before the rounds and prints the share of samples per module (native
frames included): where the CPU goes that compiling did not remove (per function:
``bench/mypyc_profile.py``).

``--baseline-src DIR``: the same comparison between this install's compiled build and the
compiled build of another source tree (an A/B of two commits: ``git worktree add DIR
<commit>``, then ``python setup.py build_ext --inplace`` in DIR; its server runs with
``PYTHONPATH=DIR/src``); the ratio is then this tree ÷ that one.

Results: bench/results/mypyc.json, and the table printed (bench/results/mypyc.md is written
by hand from it, with the analysis).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench.common import RESULTS_DIR  # noqa: E402
from bench.proctree import children as children_of  # noqa: E402
from bench.proctree import cpu_seconds as proc_cpu_seconds  # noqa: E402
from bench.server import Server, model_subset  # noqa: E402

PURE_ENV = "TRITIUM_PURE_PYTHON"
BUILDS = ("pure", "compiled")


@dataclass
class Sample:
    model: str
    protocol: str
    build: str
    round: int
    requests: int
    server_cpu_us: float  # per inference
    stub_cpu_us: float
    wall_s: float


def _inputs() -> tuple[list[int], list[int]]:
    return list(range(16)), [1] * 16


def http_body(model: str) -> bytes:
    in0, in1 = _inputs()
    request = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": in0},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": in1},
        ]
    }
    return json.dumps(request).encode()


def grpc_body(model: str) -> bytes:
    """One gRPC message: flag byte, big-endian length, a ModelInferRequest (raw inputs)."""
    from tritonclient.grpc import service_pb2 as pb

    in0, in1 = _inputs()
    request = pb.ModelInferRequest(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32")
        tensor.shape.extend([1, 16])
    request.raw_input_contents.extend([struct.pack("<16i", *in0), struct.pack("<16i", *in1)])
    payload = request.SerializeToString()
    return b"\x00" + struct.pack(">I", len(payload)) + payload


def h2load_command(server: Server, protocol: str, model: str, body: Path, n: int, c: int) -> list:
    h2load = shutil.which("h2load") or "h2load"
    common = [h2load, "-n", str(n), "-c", str(c), "-m", "1", "-d", str(body)]
    if protocol == "http":
        url = f"http://{server.http_url}/v2/models/{model}/infer"
        return [*common, "--h1", "-H", "content-type: application/json", url]
    url = f"http://{server.grpc_url}/inference.GRPCInferenceService/ModelInfer"
    return [*common, "-H", "content-type: application/grpc", "-H", "te: trailers", url]


def success_count(server: Server, model: str) -> int:
    url = f"http://{server.http_url}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.load(response)["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def _stub_cpu(pid: int) -> float:
    return sum(proc_cpu_seconds(child) for child in children_of(pid))


def measure(server: Server, command: list, model: str) -> tuple[int, float, float, float]:
    """(successes, server CPU s, stub CPU s, wall s) of one h2load run."""
    before = success_count(server, model)
    cpu, stub, wall = proc_cpu_seconds(server.pid), _stub_cpu(server.pid), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - wall
    cpu, stub = proc_cpu_seconds(server.pid) - cpu, _stub_cpu(server.pid) - stub
    if done.returncode != 0:
        raise RuntimeError(f"h2load failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return success_count(server, model) - before, cpu, stub, wall


def start(
    build: str, repo: Path, workdir: Path, models: list[str], baseline: Path | None = None
) -> Server:
    """One server of ``build``: "pure" (TRITIUM_PURE_PYTHON=1), "compiled" (this install),
    or "baseline" (the tritium of another source tree, ``baseline``: its src/ first on
    PYTHONPATH, with the compiled modules built in place there)."""
    saved = {k: os.environ.get(k) for k in (PURE_ENV, "PYTHONPATH")}
    os.environ.pop(PURE_ENV, None)
    if build == "pure":
        os.environ[PURE_ENV] = "1"
    if build == "baseline" and baseline is not None:
        os.environ["PYTHONPATH"] = str(baseline / "src")
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        server = Server(repo, workdir)
        server.wait_ready(models, timeout=120.0)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return server


def build_line(server: Server) -> str:
    """The server's start-up line naming its build (runtime.py)."""
    for line in server.log_text().splitlines():
        if "tritium " in line and ("compiled with mypyc" in line or "pure Python" in line):
            return line.split("tritium ", 1)[1]
    return "(no build line in the log)"


def check_builds(lines: dict[str, str]) -> None:
    for build, line in lines.items():
        if build != "pure" and "compiled with mypyc" not in line:
            raise SystemExit(f"the {build} server runs no compiled modules: {line}")
    if "pure" in lines and "pure Python" not in lines["pure"]:
        raise SystemExit(f"the pure server is not pure: {lines['pure']}")


def py_spy_raw(pid: int, command: list, seconds: float, rate: int = 200) -> str | None:
    """py-spy's raw samples of ``pid`` while ``command`` (an h2load run) is repeated for
    ``seconds``: ``--native`` (C frames too, mypyc's functions among them) and ``--gil`` (only
    while the GIL is held: CPU, not waits). None without py-spy (``PY_SPY`` or on PATH)."""
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if spy is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        spy_proc = subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--rate",
                str(rate),
                "--duration",
                str(int(seconds)),
                "--native",
                "--gil",
                "-o",
                out.name,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            subprocess.run(command, capture_output=True, check=False)
        spy_proc.wait()
        return Path(out.name).read_text()


def profile(server: Server, command: list, seconds: float = 8.0) -> dict[str, float]:
    """py-spy's samples per owner (``_owner``) during one h2load run."""
    raw = py_spy_raw(server.pid, command, seconds)
    return {} if raw is None else _module_shares(raw)


# CPython's own C code (the interpreter, builtin objects): its time belongs to the module it runs.
_INTERPRETER = ("Python/", "Objects/", "Modules/", "Include/", "Parser/", "libpython", "python3")


def _owner(frames: list[str]) -> str:
    """Who a sample's time belongs to: the innermost tritium/Python module (a ``.py`` frame, or a
    mypyc-compiled function: ``compiled tritium/x``), or the innermost other C library (``C:
    uvloop``...) it was in, skipping the interpreter's own frames."""
    for frame in reversed(frames):
        where = frame[frame.rfind("(") + 1 : frame.rfind(")")] if "(" in frame else frame
        where = where.rsplit(":", 1)[0]
        name = where.rsplit("/", 1)[-1]
        if where.endswith(".py"):
            return where.split("site-packages/", 1)[-1].split("/src/", 1)[-1]
        if name.startswith("__native_tritium___"):
            return "compiled " + name[len("__native_") : -2].replace("___", "/")
        if name.startswith(("__native_tritium", "CPy")) or "mypyc" in where or name.endswith(".h"):
            continue  # mypyc's runtime library, inline functions of headers: the caller's
        if not any(marker in where for marker in _INTERPRETER) and where:
            return "C: " + name
    return "other"


def _module_shares(raw: str) -> dict[str, float]:
    """Samples per owner (``_owner``), as a share of all samples."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        owner = _owner(stack.split(";"))
        counts[owner] = counts.get(owner, 0) + int(count)
        total += int(count)
    return {k: v / total for k, v in sorted(counts.items(), key=lambda kv: -kv[1])} if total else {}


@dataclass
class Plan:
    """What each server is measured on: (model, protocol) → the request body's file."""

    args: argparse.Namespace
    bodies: dict[tuple[str, str], Path]

    def command(self, server: Server, model: str, protocol: str, requests: int) -> list:
        body = self.bodies[model, protocol]
        command = h2load_command(server, protocol, model, body, requests, self.args.concurrency)
        rps = getattr(self.args, "rps", 0)
        return [command[0], f"--rps={rps}", *command[1:]] if rps else command


def run(args: argparse.Namespace) -> list[Sample]:
    models, protocols = args.models.split(","), args.protocols.split(",")
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="tritium-mypyc-") as tmp:
        tmpdir = Path(tmp)
        repo = model_subset(tmpdir / "models", models)
        plan = Plan(args, {})
        for model in models:
            for protocol in protocols:
                make = http_body if protocol == "http" else grpc_body
                plan.bodies[model, protocol] = tmpdir / f"{model}.{protocol}.body"
                plan.bodies[model, protocol].write_bytes(make(model))
        servers: dict[str, Server] = {}
        builds = builds_of(args)
        try:
            for build in builds:
                servers[build] = start(build, repo, tmpdir / build, models, args.baseline_src)
            lines = {build: build_line(server) for build, server in servers.items()}
            check_builds(lines)
            if args.profile:
                for build, server in servers.items():
                    _print_profiles(server, build, plan)
            for rnd in range(args.rounds):
                for model, protocol in plan.bodies:
                    # Both servers run throughout; each workload is measured on one build
                    # right after the other (the order alternating by round), so that the
                    # machine's load changes as little as possible between the two.
                    for build in builds if rnd % 2 == 0 else builds[::-1]:
                        samples.append(
                            _measure_one(servers[build], build, rnd, plan, model, protocol)
                        )
        finally:
            for server in servers.values():
                server.stop()
        print("builds:", json.dumps(lines, indent=1))
    return samples


def _measure_one(
    server: Server, build: str, rnd: int, plan: Plan, model: str, protocol: str
) -> Sample:
    n = plan.args.requests
    measure(server, plan.command(server, model, protocol, max(n // 10, 100)), model)
    ok, cpu, stub, wall = measure(server, plan.command(server, model, protocol, n), model)
    if ok != n:
        raise SystemExit(f"{build} {model} {protocol}: {ok} of {n} succeeded")
    sample = Sample(model, protocol, build, rnd, ok, cpu / ok * 1e6, stub / ok * 1e6, wall)
    print(
        f"{build:9s} {model:15s} {protocol:5s} round {rnd}: "
        f"{sample.server_cpu_us:7.1f} µs server CPU/inf, {ok / wall:7.0f} inf/s",
        flush=True,
    )
    return sample


def _print_profiles(server: Server, build: str, plan: Plan) -> None:
    for model, protocol in plan.bodies:
        shares = profile(server, plan.command(server, model, protocol, plan.args.requests // 4))
        top = ", ".join(f"{k} {v:.1%}" for k, v in list(shares.items())[:25])
        print(f"profile {build} {model} {protocol}: {top}", flush=True)


def builds_of(args: argparse.Namespace) -> tuple[str, str]:
    """The two builds compared: (the reference, "compiled")."""
    return ("baseline", "compiled") if args.baseline_src else BUILDS


def summary(samples: list[Sample], builds: tuple[str, str] = BUILDS) -> list[dict]:
    """Per (model, protocol): each build's median server CPU per inference, and the ratio
    compiled ÷ reference (pure, or the baseline tree) per round."""
    ref, new = builds
    rows = []
    keys = sorted({(s.model, s.protocol) for s in samples})
    for model, protocol in keys:
        per = {
            b: [s for s in samples if (s.model, s.protocol, s.build) == (model, protocol, b)]
            for b in builds
        }
        pairs = zip(per[ref], per[new], strict=True)
        ratios = [c.server_cpu_us / p.server_cpu_us for p, c in pairs]
        row: dict = {"model": model, "protocol": protocol}
        for b in builds:
            row[f"{b}_server_cpu_us"] = round(statistics.median(s.server_cpu_us for s in per[b]), 1)
            row[f"{b}_inf_per_s"] = round(statistics.median(s.requests / s.wall_s for s in per[b]))
        row["ratio_median"] = round(statistics.median(ratios), 3)
        row["ratios"] = [round(r, 3) for r in ratios]
        for b in builds:
            row[f"{b}_stub_cpu_us"] = round(statistics.median(s.stub_cpu_us for s in per[b]), 1)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--models", default="simple,add_sub_python")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument(
        "--rps",
        type=int,
        default=0,
        help="requests per second per connection (h2load --rps; 0: as fast as the server answers)",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="compare this install's compiled build with the tritium of another "
        "source tree (e.g. a git worktree of an older commit, compiled in place "
        "with `python setup.py build_ext --inplace`) instead of the pure build",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "mypyc.json")
    args = parser.parse_args(argv)
    if shutil.which("h2load") is None:
        raise SystemExit("h2load not found: apt-get install nghttp2-client")
    samples = run(args)
    ref, new = builds_of(args)
    rows = summary(samples, (ref, new))
    print(
        f"{'model':15s} {'proto':5s} {ref + ' µs':>12s} {new + ' µs':>12s} {'ratio':>6s}  "
        f"{ref + ' inf/s':>14s} {new + ' inf/s':>14s}  rounds"
    )
    for r in rows:
        print(
            f"{r['model']:15s} {r['protocol']:5s} {r[f'{ref}_server_cpu_us']:12.1f} "
            f"{r[f'{new}_server_cpu_us']:12.1f} {r['ratio_median']:6.3f}  "
            f"{r[f'{ref}_inf_per_s']:14d} {r[f'{new}_inf_per_s']:14d}  {r['ratios']}"
        )
    args.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "rows": rows,
                "samples": [asdict(s) for s in samples],
            },
            indent=1,
        )
        + "\n"
    )
    return 0
