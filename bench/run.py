#!/usr/bin/env python3
"""tritium benchmark: closed-loop load over HTTP/gRPC against the real server.

    .venv/bin/python bench/run.py [--quick] [--issue foundation] [--models simple]
                                  [--protocols http,grpc] [--concurrency 1,16] [--seconds 5]

The example model repository is built into a temporary directory, the server is started as
a child process (127.0.0.1, port 0, ``--ports-file``), and this process is the client:
N coroutines on tritonclient's asyncio clients each send the next request as soon as the
previous answer arrives. After a warm-up, a fixed window is measured: throughput, latency
percentiles and the server's CPU time per inference (server process and Python stub
processes separately, from /proc). An in-process baseline of the bare backend call is
measured in the same run, and each scenario is reported relative to it.

Results go to ``bench/results/<issue>.json`` and ``.md`` (``<issue>-quick.*`` with
``--quick``). See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
BUILD_MODELS = ROOT / "examples" / "build_models.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# Scenarios: one list per issue. A later issue adds a function and an ISSUES entry (and, for a
# new wire path, a Driver in PROTOCOLS; for a new model, a baseline in BASELINES).
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    model: str
    protocol: str  # a key of PROTOCOLS
    concurrency: int
    batch: int = 1  # rows per request (first dimension)

    @property
    def name(self) -> str:
        return f"{self.model}/{self.protocol}/c{self.concurrency}"


def foundation_scenarios() -> list[Scenario]:
    return [
        Scenario(model, protocol, concurrency)
        for model in ("simple", "add_sub_python")
        for protocol in ("http", "http-json", "grpc")
        for concurrency in (1, 16)
    ]


ISSUES: dict[str, Callable[[], list[Scenario]]] = {"foundation": foundation_scenarios}


@dataclass
class Settings:
    warmup: float = 1.0
    seconds: float = 5.0
    baseline_seconds: float = 3.0
    verify_every: int = 10
    quick: bool = False


# ---------------------------------------------------------------------------------------------
# Protocol drivers: build the request objects once per worker, send them, decode the answer.
# ---------------------------------------------------------------------------------------------
class HttpDriver:
    """``accept_encoding=None`` keeps aiohttp's default ``Accept-Encoding: gzip, deflate, br``
    (tritonclient's aio session sends it on every request, so the server may compress the
    response); the foundation scenarios send ``identity`` as perf_analyzer and the sync
    client do."""

    url_key = "http"

    def __init__(self, binary: bool, accept_encoding: str | None = "identity") -> None:
        import tritonclient.http.aio as httpclient

        self.mod, self.binary = httpclient, binary
        self.headers = {"Accept-Encoding": accept_encoding} if accept_encoding else None

    def client(self, url: str) -> Any:
        return self.mod.InferenceServerClient(url)

    def prepare(self, in0: np.ndarray, in1: np.ndarray) -> tuple[list, list]:
        inputs = []
        for name, array in (("INPUT0", in0), ("INPUT1", in1)):
            tensor = self.mod.InferInput(name, list(array.shape), "INT32")
            tensor.set_data_from_numpy(array, binary_data=self.binary)
            inputs.append(tensor)
        outputs = [
            self.mod.InferRequestedOutput(n, binary_data=self.binary)
            for n in ("OUTPUT0", "OUTPUT1")
        ]
        return inputs, outputs

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await client.infer(model, inputs, outputs=outputs, headers=self.headers)


class GrpcDriver:
    url_key = "grpc"

    def __init__(self) -> None:
        import tritonclient.grpc.aio as grpcclient

        self.mod = grpcclient

    def client(self, url: str) -> Any:
        return self.mod.InferenceServerClient(url)

    def prepare(self, in0: np.ndarray, in1: np.ndarray) -> tuple[list, list]:
        inputs = []
        for name, array in (("INPUT0", in0), ("INPUT1", in1)):
            tensor = self.mod.InferInput(name, list(array.shape), "INT32")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = [self.mod.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
        return inputs, outputs

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await client.infer(model, inputs, outputs=outputs)


PROTOCOLS: dict[str, Callable[[], Any]] = {
    "http": lambda: HttpDriver(binary=True),
    "http-json": lambda: HttpDriver(binary=False),
    "grpc": GrpcDriver,
    # Not in the foundation list; select it with --protocols (see select()).
    "http-aio-default": lambda: HttpDriver(binary=True, accept_encoding=None),
}


# ---------------------------------------------------------------------------------------------
# CPU accounting from /proc (no psutil): utime+stime of a process (all its threads) and of its
# live children (the Python-backend stubs).
# ---------------------------------------------------------------------------------------------
def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def proc_cpu_seconds(pid: int) -> float:
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:  # ppid (field 4)
                kids.append(int(entry))
    return kids


@dataclass
class CpuSnapshot:
    wall: float
    server: float
    stubs: dict[int, float]
    client: float

    @classmethod
    def take(cls, server_pid: int) -> CpuSnapshot:
        stubs = {pid: proc_cpu_seconds(pid) for pid in children_of(server_pid)}
        return cls(time.perf_counter(), proc_cpu_seconds(server_pid), stubs, time.process_time())

    def stub_delta(self, start: CpuSnapshot) -> float:
        return sum(t - start.stubs.get(pid, 0.0) for pid, t in self.stubs.items())


# ---------------------------------------------------------------------------------------------
# The server under test.
# ---------------------------------------------------------------------------------------------
class Server:
    def __init__(self, repository: Path, workdir: Path) -> None:
        self.ports_file, self.log_path = workdir / "ports.json", workdir / "server.log"
        command = [
            sys.executable,
            "-m",
            "tritium",
            "serve",
            "--model-repository",
            str(repository),
            "--http-address",
            "127.0.0.1",
            "--http-port",
            "0",
            "--grpc-address",
            "127.0.0.1",
            "--grpc-port",
            "0",
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            "0",
            "--ports-file",
            str(self.ports_file),
        ]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        self.ports: dict[str, int] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, key: str) -> str:
        return f"127.0.0.1:{self.ports[key]}"

    def log_tail(self, lines: int = 40) -> str:
        if not self._log.closed:
            self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, models: list[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        paths = ["/v2/health/ready"] + [f"/v2/models/{m}/ready" for m in models]
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.log_tail()}")
            if not self.ports and self.ports_file.exists():
                self.ports = json.loads(self.ports_file.read_text())
            if self.ports and all(self._http_ok(p) for p in paths):
                return
            time.sleep(0.1)
        raise RuntimeError(f"server not ready within {timeout}s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        return self.proc.poll() is None and self._http_ok("/v2/health/ready")

    def _http_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.url('http')}{path}", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# ---------------------------------------------------------------------------------------------
# Closed-loop load generator.
# ---------------------------------------------------------------------------------------------
@dataclass
class Window:
    """The measuring window, opened and closed by the sampler; workers read its flags."""

    start: CpuSnapshot | None = None
    end: CpuSnapshot | None = None
    latencies: list[float] = field(default_factory=list)  # seconds, completions in window
    verified: int = 0
    wrong: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def closed(self) -> bool:
        return self.end is not None or bool(self.errors)


def make_inputs(seed: int, batch: int, sets: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = (batch, 16)
    return [
        (
            rng.integers(-1000, 1000, shape, dtype=np.int32),
            rng.integers(-1000, 1000, shape, dtype=np.int32),
        )
        for _ in range(sets)
    ]


def check_answer(result: Any, in0: np.ndarray, in1: np.ndarray) -> str | None:
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    if out0 is None or out1 is None:
        return "missing output"
    if not (np.array_equal(out0, in0 + in1) and np.array_equal(out1, in0 - in1)):
        return f"wrong answer: OUTPUT0={out0.tolist()} for {in0.tolist()} + {in1.tolist()}"
    return None


async def worker(sc: Scenario, driver: Any, url: str, wid: int, win: Window, every: int) -> None:
    client = driver.client(url)
    data = make_inputs(wid, sc.batch)
    prepared = [driver.prepare(a, b) for a, b in data]
    try:
        i = 0
        while not win.closed():
            check = i % every == 0
            k = (i // every if check else i) % len(data)  # checked requests cycle the sets
            inputs, outputs = prepared[k]
            t0 = time.perf_counter()
            result = await driver.infer(client, sc.model, inputs, outputs)
            t1 = time.perf_counter()
            if win.start is not None and win.end is None:
                win.latencies.append(t1 - t0)
            if check:
                problem = check_answer(result, *data[k])
                win.verified += 1
                if problem:
                    win.wrong.append(problem)
            i += 1
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await client.close()


async def sampler(win: Window, server_pid: int, settings: Settings) -> None:
    await asyncio.sleep(settings.warmup)
    win.start = CpuSnapshot.take(server_pid)
    await asyncio.sleep(settings.seconds)
    win.end = CpuSnapshot.take(server_pid)


async def drive(sc: Scenario, server: Server, settings: Settings) -> Window:
    driver = PROTOCOLS[sc.protocol]()
    url = server.url(driver.url_key)
    win = Window()
    workers = [
        worker(sc, driver, url, w, win, settings.verify_every) for w in range(sc.concurrency)
    ]
    sample = asyncio.ensure_future(sampler(win, server.pid, settings))
    limit = settings.warmup + settings.seconds + 30.0
    try:
        await asyncio.wait_for(asyncio.gather(*workers), limit)
    except TimeoutError:
        win.errors.append(f"scenario did not finish within {limit:.0f} s (server hung?)")
    if win.errors:
        sample.cancel()
    else:
        await sample
    return win


def summarize(sc: Scenario, win: Window) -> dict[str, Any]:
    row: dict[str, Any] = {
        **asdict(sc),
        "name": sc.name,
        "verified": win.verified,
        "wrong_count": len(win.wrong),
        "wrong": win.wrong[:5],
        "errors": win.errors[:5],
    }
    if win.errors or win.start is None or win.end is None or not win.latencies:
        return row
    start, end = win.start, win.end
    n, seconds = len(win.latencies), end.wall - start.wall
    lat_ms = np.asarray(win.latencies) * 1e3
    row.update(
        requests=n,
        seconds=round(seconds, 3),
        infer_per_s=n * sc.batch / seconds,
        p50_ms=float(np.percentile(lat_ms, 50)),
        p99_ms=float(np.percentile(lat_ms, 99)),
        mean_ms=float(lat_ms.mean()),
        server_cpu_us=(end.server - start.server) * 1e6 / (n * sc.batch),
        stub_cpu_us=end.stub_delta(start) * 1e6 / (n * sc.batch),
        client_cpu_us=(end.client - start.client) * 1e6 / (n * sc.batch),
        server_cpu_util=(end.server - start.server) / seconds,
        stub_cpu_util=end.stub_delta(start) / seconds,
        client_cpu_util=(end.client - start.client) / seconds,
    )
    return row


# ---------------------------------------------------------------------------------------------
# Baselines: the bare backend call, in this process, before the server starts.
# ---------------------------------------------------------------------------------------------
def closed_loop(call: Callable[[int], None], seconds: float) -> dict[str, float]:
    for i in range(50):  # warm-up
        call(i)
    calls, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
    deadline = wall0 + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            call(calls)
            calls += 1
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {
        "calls": calls,
        "calls_per_s": calls / wall,
        "us_per_call": wall * 1e6 / calls,
        "cpu_us_per_call": cpu * 1e6 / calls,
    }


def load_config(model_dir: Path) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = model_config_pb2.ModelConfig()
    text_format.Parse((model_dir / "config.pbtxt").read_text(), config)
    return config


def onnx_session_options(config: Any) -> tuple[Any, str]:
    """The server's own session options when importable, else a copy of its defaults."""
    try:
        from tritium.backends.onnxruntime import _session_options

        return _session_options(config), "tritium.backends.onnxruntime._session_options"
    except ImportError:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return options, "bench copy (1 intra-op thread, no spinning)"


def baseline_onnx(model_dir: Path, seconds: float) -> dict[str, Any]:
    import onnxruntime as ort

    options, source = onnx_session_options(load_config(model_dir))
    session = ort.InferenceSession(
        str(model_dir / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    data = make_inputs(0, 1)
    feeds = [{"INPUT0": a, "INPUT1": b} for a, b in data]
    out0, _ = session.run(None, feeds[0])
    assert np.array_equal(out0, data[0][0] + data[0][1]), "baseline: wrong answer"
    result = closed_loop(lambda i: session.run(None, feeds[i % len(feeds)]), seconds)
    return {"what": f"onnxruntime InferenceSession.run, options from {source}", **result}


def load_python_model(model_dir: Path) -> tuple[Any, Any]:
    from google.protobuf import json_format
    from tritium.backends.python import pb_utils

    sys.modules["triton_python_backend_utils"] = pb_utils
    spec = importlib.util.spec_from_file_location(
        f"bench_{model_dir.name}", model_dir / "1" / "model.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config_json = json_format.MessageToJson(
        load_config(model_dir), preserving_proto_field_name=True
    )
    model = module.TritonPythonModel()
    model.initialize(
        {
            "model_config": config_json,
            "model_instance_kind": "CPU",
            "model_instance_name": f"{model_dir.name}_0",
            "model_instance_device_id": "0",
            "model_repository": str(model_dir),
            "model_version": "1",
            "model_name": model_dir.name,
        }
    )
    return model, pb_utils


def baseline_python(model_dir: Path, seconds: float) -> dict[str, Any]:
    model, pb = load_python_model(model_dir)
    data = make_inputs(0, 1)

    def call(i: int) -> np.ndarray:
        a, b = data[i % len(data)]
        request = pb.InferenceRequest(
            inputs=[pb.Tensor("INPUT0", a), pb.Tensor("INPUT1", b)],
            requested_output_names=["OUTPUT0", "OUTPUT1"],
            model_name=model_dir.name,
        )
        (response,) = model.execute([request])
        return pb.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()

    assert np.array_equal(call(0), data[0][0] + data[0][1]), "baseline: wrong answer"
    result = closed_loop(call, seconds)
    return {"what": "model.py execute() in-process (request built per call, pb_utils)", **result}


BASELINES: dict[str, Callable[[Path, float], dict[str, Any]]] = {
    "simple": baseline_onnx,
    "add_sub_python": baseline_python,
}


def add_ratios(row: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    if not baseline or "infer_per_s" not in row:
        return
    row["throughput_ratio"] = row["infer_per_s"] / baseline["calls_per_s"]
    row["cpu_ratio"] = (row["server_cpu_us"] + row["stub_cpu_us"]) / baseline["cpu_us_per_call"]


# ---------------------------------------------------------------------------------------------
# Reporting.
# ---------------------------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def scenario_line(row: dict[str, Any]) -> str:
    if "infer_per_s" not in row:
        problem = (row["errors"] or row["wrong"] or ["no completions"])[0]
        return f"| {row['model']} | {row['protocol']} | {row['concurrency']} | FAILED: {problem} |"
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
    wrong = f" ⚠ {row['wrong_count']} wrong" if row["wrong"] else ""
    return "| " + " | ".join(map(str, cells)) + f"{wrong} |"


def markdown(report: dict[str, Any]) -> str:
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
        "inference; ratios: throughput ÷ baseline calls/s, (server+stub CPU) ÷ baseline "
        "CPU per call.",
        "",
        "| model | protocol | conc | infer/s | p50 ms | p99 ms | server CPU µs/inf | "
        "stub CPU µs/inf | client CPU µs/inf | thr ÷ base | CPU × base |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += [scenario_line(row) for row in report["scenarios"]]
    idle = report.get("server_idle")
    if idle:
        lines += [
            "",
            f"Idle server before the scenarios: server {idle['server_cpu_util']:.1%} "
            f"CPU, {idle['stub_processes']} stub processes {idle['stub_cpu_util']:.1%} CPU.",
        ]
    lines += [
        "",
        "Baselines (in-process, one thread, closed loop):",
        "",
        "| model | calls/s | µs/call | CPU µs/call | what |",
        "|---|--:|--:|--:|---|",
    ]
    for model, b in report["baselines"].items():
        lines.append(
            f"| {model} | {_fmt(b['calls_per_s'], 0)} | {_fmt(b['us_per_call'], 2)} | "
            f"{_fmt(b['cpu_us_per_call'], 2)} | {b['what']} |"
        )
    return "\n".join(lines) + "\n"


def _git_describe() -> str:
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
        "git": _git_describe(),
    }


# ---------------------------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------------------------
def _csv(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--issue", default="foundation", choices=sorted(ISSUES))
    p.add_argument("--quick", action="store_true", help="short windows, a smoke test")
    p.add_argument("--seconds", type=float, help="measuring window per scenario (default 5)")
    p.add_argument("--warmup", type=float, help="warm-up per scenario (default 1)")
    p.add_argument("--models", nargs="+", help="only these models (comma or space separated)")
    p.add_argument("--protocols", nargs="+", help=f"only these of {', '.join(PROTOCOLS)}")
    p.add_argument("--concurrency", nargs="+", help="only these concurrency levels")
    p.add_argument("--verify-every", type=int, default=10, help="check every Nth answer")
    p.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    return p.parse_args(argv)


def make_settings(args: argparse.Namespace) -> Settings:
    settings = (
        Settings(warmup=0.5, seconds=1.0, baseline_seconds=0.5, quick=True)
        if args.quick
        else Settings()
    )
    if args.seconds is not None:
        settings.seconds = args.seconds
    if args.warmup is not None:
        settings.warmup = args.warmup
    settings.verify_every = max(1, args.verify_every)
    return settings


def select(args: argparse.Namespace) -> list[Scenario]:
    models, protocols = _csv(args.models), _csv(args.protocols)
    unknown = [p for p in protocols or [] if p not in PROTOCOLS]
    if unknown:
        raise SystemExit(f"unknown protocol(s) {unknown}; known: {', '.join(PROTOCOLS)}")
    conc = [int(c) for c in _csv(args.concurrency) or []]
    scenarios = ISSUES[args.issue]()
    known = {s.protocol for s in scenarios}
    extra = [p for p in protocols or [] if p not in known]  # e.g. http-aio-default
    scenarios += list(dict.fromkeys(replace(s, protocol=p) for p in extra for s in scenarios))
    chosen = [
        s
        for s in scenarios
        if (not models or s.model in models)
        and (not protocols or s.protocol in protocols)
        and (not conc or s.concurrency in conc)
    ]
    if not chosen:
        raise SystemExit("no scenario matches the filters")
    return chosen


def build_repository(target: Path) -> None:
    subprocess.run(
        [sys.executable, str(BUILD_MODELS), "--repository", str(target)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def run_baselines(repo: Path, models: list[str], settings: Settings) -> dict[str, Any]:
    results = {}
    for model in models:
        if model in BASELINES:
            print(f"baseline {model} ...", flush=True)
            results[model] = BASELINES[model](repo / model, settings.baseline_seconds)
    return results


def idle_cpu(server: Server, seconds: float = 1.0) -> dict[str, float]:
    """Server CPU use while nothing is sent: should be ~0 (no spinning pools, no polling)."""
    start = CpuSnapshot.take(server.pid)
    time.sleep(seconds)
    end = CpuSnapshot.take(server.pid)
    wall = end.wall - start.wall
    return {
        "server_cpu_util": (end.server - start.server) / wall,
        "stub_cpu_util": end.stub_delta(start) / wall,
        "stub_processes": len(end.stubs),
    }


def run_scenarios(
    repo: Path, work: Path, scenarios: list[Scenario], settings: Settings, info: dict[str, Any]
) -> list[dict[str, Any]]:
    server, rows = Server(repo, work), []
    try:
        server.wait_ready(sorted({s.model for s in scenarios}))
        info["server_idle"] = idle_cpu(server, 0.5 if settings.quick else 2.0)
        for sc in scenarios:
            print(f"scenario {sc.name} ...", flush=True)
            row = summarize(sc, asyncio.run(drive(sc, server, settings)))
            add_ratios(row, info["baselines"].get(sc.model))
            rows.append(row)
            print("  " + scenario_line(row), flush=True)
            if not server.healthy():
                info["server_log_tail"] = server.log_tail()
                print(
                    f"server not healthy after {sc.name}; stopping. Log tail:\n"
                    f"{info['server_log_tail']}",
                    file=sys.stderr,
                )
                break
    finally:
        server.stop()
        if any(r["errors"] or r["wrong"] for r in rows):
            info.setdefault("server_log_tail", server.log_tail())
    return rows


def write_report(report: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report["issue"] + ("-quick" if report["settings"]["quick"] else "")
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    path = out_dir / f"{stem}.md"
    path.write_text(markdown(report))
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings, scenarios = make_settings(args), select(args)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tritium-bench-") as tmp:
        repo, work = Path(tmp) / "models", Path(tmp)
        build_repository(repo)
        info = {"baselines": run_baselines(repo, sorted({s.model for s in scenarios}), settings)}
        rows = run_scenarios(repo, work, scenarios, settings, info)
    machine = {**machine_info(), "loadavg_1min": [load_before, os.getloadavg()[0]]}
    report = {
        "issue": args.issue,
        "settings": asdict(settings),
        "machine": machine,
        **info,
        "scenarios": rows,
    }
    path = write_report(report, args.output_dir)
    print("\n" + markdown(report))
    print(f"wrote {path} and {path.with_suffix('.json')}")
    failed = [r["name"] for r in rows if r["errors"] or r["wrong"] or "infer_per_s" not in r]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
