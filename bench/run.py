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
import functools
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
import uuid
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
BUILD_MODELS = ROOT / "examples" / "build_models.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# bench/ensembles.py (the ensembles list) imports this module as ``run``: let it find this
# module object when this file is the script, not load a second copy.
sys.modules.setdefault("run", sys.modules[__name__])
import ensembles  # noqa: E402 - after the alias above


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
    responses: int = 0  # decoupled square_int32: N, the responses asked for per request
    # ensembles: the client calls the ensemble's composing models one after another instead
    chained: bool = False

    @property
    def name(self) -> str:
        suffix = f"/n{self.responses}" if self.responses else ""
        suffix += "/chained" if self.chained else ""
        return f"{self.model}/{self.protocol}/c{self.concurrency}{suffix}"

    @property
    def models(self) -> tuple[str, ...]:
        """The model and, for an ensemble, its composing models (waited for, statistics)."""
        return (self.model, *ensembles.composing(self.model))


def foundation_scenarios() -> list[Scenario]:
    return [
        Scenario(model, protocol, concurrency)
        for model in ("simple", "add_sub_python")
        for protocol in ("http", "http-json", "grpc")
        for concurrency in (1, 16)
    ]


def streaming_scenarios() -> list[Scenario]:
    """Issue 3: ``simple`` on one ModelStreamInfer stream (N requests in flight) and on N
    streams (one each) next to unary gRPC; the decoupled ``square_int32`` (N = 100 responses
    per request) with 1 and 8 requests in flight on one stream."""
    simple = [
        Scenario("simple", protocol, concurrency)
        for concurrency in (1, 16)
        for protocol in ("grpc", "grpc-stream", "grpc-streams")
        if not (protocol == "grpc-streams" and concurrency == 1)  # the same as grpc-stream c1
    ]
    return simple + [Scenario("square_int32", "grpc-stream", c, responses=100) for c in (1, 8)]


def batching_scenarios() -> list[Scenario]:
    """Issue 4: the ``mlp`` example (dynamic batching) and ``mlp_nobatch`` (the same
    ``model.onnx``, no dynamic batching) over binary HTTP and unary gRPC at concurrency 1, 8
    and 32, next to the in-process onnxruntime ceiling (best batch size, BASELINES)."""
    return [
        Scenario(model, protocol, concurrency)
        for model in ("mlp", "mlp_nobatch")
        for protocol in ("http", "grpc")
        for concurrency in (1, 8, 32)
    ]


# Issue 6: a 16 MiB FP32 tensor through the bench's own ``identity_fp32`` (ONNX Identity).
IDENTITY_MODEL = "identity_fp32"
SHM_TENSOR_BYTES = 16 << 20
SHM_ELEMENTS = SHM_TENSOR_BYTES // 4
SHM_SETS = 2  # input sets per worker (the requests alternate between them)
SHM_REFERENCE = "shm-http"  # the row the others of the shm list are compared with
SHM_PROTOCOLS = ("shm-http", "shm-grpc")
# input + output bytes of one inference, for MB/s
PAYLOAD_BYTES = {IDENTITY_MODEL: 2 * SHM_TENSOR_BYTES}


def shm_scenarios() -> list[Scenario]:
    """Issue 6: a 16 MiB FP32 round trip through ``identity_fp32`` with the input and the
    output in system shared memory (the request over HTTP or gRPC) next to the binary HTTP
    body and gRPC, at concurrency 1 and 4."""
    return [
        Scenario(IDENTITY_MODEL, protocol, concurrency)
        for concurrency in (1, 4)
        for protocol in (*SHM_PROTOCOLS, "http", "grpc")
    ]


ISSUES: dict[str, Callable[[], list[Scenario]]] = {
    "foundation": foundation_scenarios,
    "streaming": streaming_scenarios,
    "batching": batching_scenarios,
    "shm": shm_scenarios,
    "ensembles": ensembles.scenarios,
}
# batching is not in the default list yet (the dynamic batcher is being written); shm neither.
DEFAULT_ISSUES = ("foundation", "streaming", "ensembles")
UNARY_PROTOCOLS = ("http", "http-json", "grpc", "http-aio-default")
# Models whose inputs JSON cannot carry (JPEG bytes are not UTF-8; tritonclient refuses them):
# --protocols http-json adds no variant of their scenarios.
BINARY_ONLY_MODELS = (ensembles.ENSEMBLE,)
# Server flags a list needs (the one server of a run gets those of every selected list).
SERVER_ARGS: dict[str, tuple[str, ...]] = {
    "shm": ("--allow-client-shm=true", "--http-max-input-size", str(64 << 20)),
}


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
def triton_dtype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


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
        return self.prepare_tensors({"INPUT0": in0, "INPUT1": in1}, ("OUTPUT0", "OUTPUT1"))

    def prepare_tensors(
        self, arrays: dict[str, np.ndarray], output_names: tuple[str, ...]
    ) -> tuple[list, list]:
        inputs = []
        for name, array in arrays.items():
            tensor = self.mod.InferInput(name, list(array.shape), triton_dtype(array))
            tensor.set_data_from_numpy(array, binary_data=self.binary)
            inputs.append(tensor)
        outputs = [self.mod.InferRequestedOutput(n, binary_data=self.binary) for n in output_names]
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
        return self.prepare_tensors({"INPUT0": in0, "INPUT1": in1}, ("OUTPUT0", "OUTPUT1"))

    def prepare_tensors(
        self, arrays: dict[str, np.ndarray], output_names: tuple[str, ...]
    ) -> tuple[list, list]:
        inputs = []
        for name, array in arrays.items():
            tensor = self.mod.InferInput(name, list(array.shape), triton_dtype(array))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = [self.mod.InferRequestedOutput(n) for n in output_names]
        return inputs, outputs

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await client.infer(model, inputs, outputs=outputs)


class GrpcStreamDriver:
    """gRPC ``ModelStreamInfer``: ``one_stream`` keeps N requests in flight on one stream
    (``grpc-stream``), otherwise N streams each keep one (``grpc-streams``). One client (one
    channel, one connection) per stream. The sessions are ``stream_session`` (the ``simple``
    contract, through tritonclient's ``stream_infer``) and ``decoupled_session``."""

    url_key = "grpc"

    def __init__(self, one_stream: bool) -> None:
        self.one_stream = one_stream

    def depths(self, concurrency: int) -> list[int]:
        """Requests in flight on each stream."""
        return [concurrency] if self.one_stream else [1] * concurrency


class ShmDriver:
    """System shared memory for inputs and outputs (``shm_worker``): the request goes over
    ``control`` (binary HTTP or gRPC) and carries only the region references."""

    def __init__(self, control: str) -> None:
        self.url_key = control
        self.inner = HttpDriver(binary=True) if control == "http" else GrpcDriver()
        self.mod = self.inner.mod

    def client(self, url: str) -> Any:
        return self.inner.client(url)

    async def infer(self, client: Any, model: str, inputs: list, outputs: list) -> Any:
        return await self.inner.infer(client, model, inputs, outputs)


PROTOCOLS: dict[str, Callable[[], Any]] = {
    "http": lambda: HttpDriver(binary=True),
    "http-json": lambda: HttpDriver(binary=False),
    "grpc": GrpcDriver,
    "grpc-stream": lambda: GrpcStreamDriver(one_stream=True),
    "grpc-streams": lambda: GrpcStreamDriver(one_stream=False),
    "shm-http": lambda: ShmDriver("http"),
    "shm-grpc": lambda: ShmDriver("grpc"),
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
    machine: float = 0.0  # busy CPU seconds of the whole machine (all processes)

    @classmethod
    def take(cls, server_pid: int) -> CpuSnapshot:
        stubs = {pid: proc_cpu_seconds(pid) for pid in children_of(server_pid)}
        return cls(
            time.perf_counter(),
            proc_cpu_seconds(server_pid),
            stubs,
            time.process_time(),
            machine_busy_seconds(),
        )

    def stub_delta(self, start: CpuSnapshot) -> float:
        return sum(t - start.stubs.get(pid, 0.0) for pid, t in self.stubs.items())

    def other_delta(self, start: CpuSnapshot) -> float:
        """CPU time of the machine's other processes (neither server, stubs nor client)."""
        ours = self.server - start.server + self.stub_delta(start) + self.client - start.client
        return max(0.0, self.machine - start.machine - ours)


def machine_busy_seconds() -> float:
    """user + nice + system + irq + softirq + steal of all CPUs, from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


# ---------------------------------------------------------------------------------------------
# The server under test.
# ---------------------------------------------------------------------------------------------
class Server:
    def __init__(self, repository: Path, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
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
            *extra_args,
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
    first_latencies: list[float] = field(default_factory=list)  # decoupled: send → 1st answer
    responses: int = 0  # decoupled: data responses received inside the window
    # statistics of the scenario's models (Scenario.models), read at the start and the end
    stats: list[dict[str, dict[str, int] | None]] = field(default_factory=list)
    verified: int = 0
    wrong: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def closed(self) -> bool:
        return self.end is not None or bool(self.errors)

    def open(self) -> bool:
        return self.start is not None and self.end is None


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


@dataclass(frozen=True)
class Contract:
    """A model's request/answer contract for the unary workers: ``make_inputs(seed, batch)``
    gives the input sets (name -> array) a worker cycles through, ``check(result, inputs)``
    says what is wrong with an answer (None when right)."""

    outputs: tuple[str, ...]
    make_inputs: Callable[[int, int], list[dict[str, np.ndarray]]]
    check: Callable[[Any, dict[str, np.ndarray]], str | None]


def simple_inputs(seed: int, batch: int) -> list[dict[str, np.ndarray]]:
    return [{"INPUT0": a, "INPUT1": b} for a, b in make_inputs(seed, batch)]


SIMPLE_CONTRACT = Contract(
    ("OUTPUT0", "OUTPUT1"),
    simple_inputs,
    lambda result, d: check_answer(result, d["INPUT0"], d["INPUT1"]),
)


class OnnxReference:
    """Expected answers of an ONNX model from an in-process onnxruntime session on the same
    ``model.onnx`` (the server's session options). ``expected`` is computed before the server
    starts (``precompute``), so checking an answer during a scenario is a dict look-up."""

    def __init__(self) -> None:
        self.repo: Path | None = None
        self.sessions: dict[str, Any] = {}
        self.answers: dict[tuple[str, bytes], np.ndarray] = {}

    def expected(self, model: str, x: np.ndarray) -> np.ndarray:
        key = (model, x.tobytes())
        if key not in self.answers:
            session = self.sessions.get(model)
            if session is None:
                session = self.sessions[model] = onnx_session(self.repo / model)[0]
            self.answers[key] = session.run(None, {"INPUT0": x})[0]
        return self.answers[key]


REFERENCE = OnnxReference()
MLP_FEATURES, MLP_CLASSES = 256, 10


def mlp_inputs(seed: int, batch: int, sets: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1000 + seed)
    return [
        {"INPUT0": rng.standard_normal((batch, MLP_FEATURES), dtype=np.float32)}
        for _ in range(sets)
    ]


def mlp_checker(model: str) -> Callable[[Any, dict[str, np.ndarray]], str | None]:
    def check(result: Any, inputs: dict[str, np.ndarray]) -> str | None:
        got = result.as_numpy("OUTPUT0")
        if got is None:
            return "missing OUTPUT0"
        x = inputs["INPUT0"]
        want = REFERENCE.expected(model, x)
        if got.dtype != np.float32 or got.shape != want.shape:
            return f"OUTPUT0 {got.dtype} {list(got.shape)}, FP32 {list(want.shape)} expected"
        # A batched execution may round differently from the batch-1 reference (other GEMM
        # kernels): compare with a tolerance far below any real mistake.
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            return f"OUTPUT0 off by up to {float(np.abs(got - want).max()):.3g} from onnxruntime"
        return None

    return check


@functools.cache
def identity_sets() -> tuple[np.ndarray, ...]:
    """The SHM_SETS 16 MiB FP32 inputs, shared by every worker (made once per run)."""
    rng = np.random.default_rng(16)
    return tuple(rng.standard_normal(SHM_ELEMENTS, dtype=np.float32) for _ in range(SHM_SETS))


def identity_inputs(seed: int, batch: int) -> list[dict[str, np.ndarray]]:
    return [{"INPUT0": x} for x in identity_sets()]


def identity_problem(got: np.ndarray | None, want: np.ndarray) -> str | None:
    if got is None:
        return "missing OUTPUT0"
    if got.dtype != np.float32 or got.shape != want.shape:
        return f"OUTPUT0 {got.dtype} {list(got.shape)}, FP32 {list(want.shape)} expected"
    if not np.array_equal(got, want):
        wrong = int(np.count_nonzero(got != want))
        return f"OUTPUT0 differs from INPUT0 in {wrong} of {want.size} elements"
    return None


ONNX_REFERENCE_MODELS = ("mlp", "mlp_nobatch")  # checked against in-process onnxruntime
CONTRACTS: dict[str, Contract] = {
    **{
        model: Contract(("OUTPUT0",), mlp_inputs, mlp_checker(model))
        for model in ONNX_REFERENCE_MODELS
    },
    IDENTITY_MODEL: Contract(
        ("OUTPUT0",),
        identity_inputs,
        lambda result, d: identity_problem(result.as_numpy("OUTPUT0"), d["INPUT0"]),
    ),
    ensembles.ENSEMBLE: ensembles.contract(),
}


def contract_of(model: str) -> Contract:
    return CONTRACTS.get(model, SIMPLE_CONTRACT)


def precompute_references(repo: Path, scenarios: list[Scenario]) -> None:
    """The reference answers of every input set the unary workers will send."""
    REFERENCE.repo = repo
    for sc in scenarios:
        if sc.model in ONNX_REFERENCE_MODELS and sc.protocol in UNARY_PROTOCOLS:
            for wid in range(sc.concurrency):
                for inputs in CONTRACTS[sc.model].make_inputs(wid, sc.batch):
                    REFERENCE.expected(sc.model, inputs["INPUT0"])
    if any(sc.model in ensembles.CHAINS for sc in scenarios):
        ensembles.precompute(repo)


async def worker(sc: Scenario, driver: Any, url: str, wid: int, win: Window, every: int) -> None:
    client = driver.client(url)
    contract = contract_of(sc.model)
    data = contract.make_inputs(wid, sc.batch)
    try:
        prepared = [driver.prepare_tensors(d, contract.outputs) for d in data]
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
                problem = contract.check(result, data[k])
                win.verified += 1
                if problem:
                    win.wrong.append(problem)
            i += 1
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await client.close()


class ShmSlot:
    """One shm worker's system shared memory: an input region holding the SHM_SETS inputs back
    to back (written once, before the window) and an output region for one output, made with
    tritonclient's ``shared_memory`` utilities, registered with the worker's own client before
    the warm-up and unregistered after the window; and the prepared requests that reference
    them (input set k at offset k × 16 MiB, the output at offset 0)."""

    def __init__(self, wid: int) -> None:
        import tritonclient.utils.shared_memory as shm

        self.shm = shm
        tag = f"tritium_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}_{wid}"
        self.in_name, self.out_name = f"{tag}_in", f"{tag}_out"
        self.sizes = {self.in_name: SHM_SETS * SHM_TENSOR_BYTES, self.out_name: SHM_TENSOR_BYTES}
        self.handles: list[Any] = []
        self.registered: list[str] = []
        self.prepared: list[tuple[list, list]] = []
        self.data: list[dict[str, np.ndarray]] = []
        self.output: Any = None

    def create(self, driver: ShmDriver, data: list[dict[str, np.ndarray]]) -> None:
        for name, size in self.sizes.items():
            self.handles.append(
                self.shm.create_shared_memory_region(name, "/" + name, size, create_only=True)
            )
        source, self.output = self.handles
        self.data = data
        for k, inputs in enumerate(data):
            offset = k * SHM_TENSOR_BYTES
            self.shm.set_shared_memory_region(source, [inputs["INPUT0"]], offset=offset)
            tensor = driver.mod.InferInput("INPUT0", [SHM_ELEMENTS], "FP32")
            tensor.set_shared_memory(self.in_name, SHM_TENSOR_BYTES, offset)
            output = driver.mod.InferRequestedOutput("OUTPUT0")
            output.set_shared_memory(self.out_name, SHM_TENSOR_BYTES)
            self.prepared.append(([tensor], [output]))

    async def register(self, client: Any) -> None:
        for name, size in self.sizes.items():
            await client.register_system_shared_memory(name, "/" + name, size)
            self.registered.append(name)

    async def unregister(self, client: Any) -> None:
        while self.registered:
            await client.unregister_system_shared_memory(self.registered[-1])
            self.registered.pop()

    def output_view(self) -> np.ndarray:
        """A numpy view of the output region (drop it before ``destroy``)."""
        return self.shm.get_contents_as_numpy(self.output, np.float32, [SHM_ELEMENTS])

    def poison(self) -> None:
        """NaN into one element of every 4 KiB page of the output region, so that an answer
        left over from an earlier request (or a page the server did not write) fails the
        check."""
        view = self.output_view()
        view[::1024] = np.nan
        del view

    def answer_problem(self, result: Any, want: np.ndarray) -> str | None:
        meta = result.get_output("OUTPUT0")  # a dict over HTTP, an InferOutputTensor over gRPC
        if meta is None:
            return "no OUTPUT0 in the answer"
        if isinstance(meta, dict):
            datatype, shape = meta.get("datatype"), list(meta.get("shape", []))
        else:
            datatype, shape = meta.datatype, list(meta.shape)
        if datatype != "FP32" or shape != [SHM_ELEMENTS]:
            return f"OUTPUT0 {datatype} {shape} in the answer, FP32 [{SHM_ELEMENTS}] expected"
        got = self.output_view()
        try:
            return identity_problem(got, want)
        finally:
            del got

    def destroy(self) -> None:
        """Unmaps and unlinks the regions (the client made them; the server never unlinks)."""
        self.output, self.prepared, self.data = None, [], []
        while self.handles:
            self.shm.destroy_shared_memory_region(self.handles.pop())


async def shm_worker(
    sc: Scenario,
    driver: ShmDriver,
    client: Any,
    slot: ShmSlot,
    win: Window,
    every: int,
) -> None:
    """The closed loop with inputs and outputs in ``slot``'s regions (registered already).
    Requests alternate between the input sets; each checked request poisons the output region
    first and reads the answer back from it after."""
    data = slot.data
    try:
        i = 0
        while not win.closed():
            check = i % every == 0
            k = (i + i // every) % len(data)  # the checked requests alternate the sets too
            if check:
                slot.poison()
            inputs, outputs = slot.prepared[k]
            t0 = time.perf_counter()
            result = await driver.infer(client, sc.model, inputs, outputs)
            t1 = time.perf_counter()
            if win.open():
                win.latencies.append(t1 - t0)
            if check:
                problem = slot.answer_problem(result, data[k]["INPUT0"])
                win.verified += 1
                if problem:
                    win.wrong.append(problem)
            i += 1
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")


class StreamCredit:
    """The closed loop on one stream: ``depth`` requests in flight, each answer (each final
    answer for a decoupled model) lets the next request go. The request generator stops when
    the window closes, which half-closes the stream; the server then answers what is still in
    flight and ends the stream."""

    def __init__(self, depth: int, win: Window) -> None:
        self.credit, self.win = asyncio.Semaphore(depth), win

    async def next_index(self) -> Any:
        """Yields 0, 1, 2 ... as credit allows, until the window closes."""
        i = 0
        while True:
            await self.credit.acquire()
            if self.win.closed():
                return
            yield i
            i += 1

    def done(self) -> None:
        self.credit.release()


async def stream_session(sc: Scenario, url: str, wid: int, depth: int, win: Window, every: int):
    """``simple`` over ModelStreamInfer with tritonclient's ``stream_infer``: ``depth``
    requests in flight, answers matched by request id and required in send order."""
    driver = GrpcDriver()
    client = driver.client(url)
    data = make_inputs(wid, sc.batch)
    prepared = [driver.prepare(a, b) for a, b in data]
    loop = StreamCredit(depth, win)
    in_flight: dict[str, tuple[float, int, bool]] = {}  # id -> (sent at, data set, check)
    order: deque[str] = deque()  # ids in send order

    async def requests() -> Any:
        async for i in loop.next_index():
            check = i % every == 0
            k = (i // every if check else i) % len(data)
            rid = f"{wid}-{i}"
            in_flight[rid] = (time.perf_counter(), k, check)
            order.append(rid)
            inputs, outputs = prepared[k]
            yield {"model_name": sc.model, "inputs": inputs, "outputs": outputs, "request_id": rid}

    stream = client.stream_infer(requests())
    try:
        async for result, error in stream:
            t1 = time.perf_counter()
            if error is not None:
                raise error
            rid, expected = result.get_response().id, order.popleft() if order else None
            if rid != expected:
                raise RuntimeError(f"answer for id {rid!r} when {expected!r} was the oldest")
            t0, k, check = in_flight.pop(rid)
            if win.open():
                win.latencies.append(t1 - t0)
            if check:
                win.verified += 1
                problem = check_answer(result, *data[k]) or final_flag_problem(
                    result.get_response(), True
                )
                if problem:
                    win.wrong.append(f"{rid}: {problem}")
            loop.done()
        if in_flight:
            raise RuntimeError(f"stream ended with {len(in_flight)} requests unanswered")
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        stream.cancel()
        await client.close()


def final_flag_problem(response: Any, expected: bool) -> str | None:
    """Triton sets ``triton_final_response`` on every response of a stream."""
    if "triton_final_response" not in response.parameters:
        return "no triton_final_response parameter"
    if response.parameters["triton_final_response"].bool_param != expected:
        return f"triton_final_response is not {expected}"
    return None


def square_request(sc: Scenario, rid: str) -> Any:
    """What tritonclient's ``async_stream_infer(..., enable_empty_final_response=True)`` sends:
    the aio client's ``stream_infer`` cannot ask for the empty final response (it forwards no
    such key, and rejects ``triton_`` parameters), so the decoupled session sends the protos
    itself on the aio client's own stub."""
    import tritonclient.grpc.aio as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([sc.responses], np.int32))
    request = _get_inference_request(
        model_name=sc.model,
        inputs=[tensor],
        model_version="",
        request_id=rid,
        outputs=None,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        parameters=None,
    )
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


@dataclass
class Decoupled:
    """One square_int32 request in flight: N data responses (OUT == [N], final flag false),
    then an empty response with ``triton_final_response`` true."""

    sent: float
    check: bool
    first: float | None = None
    count: int = 0

    def answer(self, sc: Scenario, response: Any) -> str | None:
        from tritonclient.grpc import InferResult

        if not response.outputs:  # the final response
            if self.count != sc.responses:
                return f"final after {self.count} responses, {sc.responses} expected"
            return final_flag_problem(response, True)
        self.count += 1
        if self.count > sc.responses:
            return f"more than {sc.responses} responses"
        if self.check:
            out = InferResult(response).as_numpy("OUT")
            if out is None or out.tolist() != [sc.responses]:
                return f"OUT={out if out is None else out.tolist()}, [{sc.responses}] expected"
            return final_flag_problem(response, False)
        return None


def decoupled_message(
    sc: Scenario, in_flight: dict[str, Decoupled], win: Window, message: Any, t1: float
) -> bool:
    """Accounts one ModelStreamInferResponse; True when it completes its request."""
    if message.error_message:
        raise RuntimeError(f"in-stream error: {message.error_message}")
    response = message.infer_response
    state = in_flight.get(response.id)
    if state is None:
        raise RuntimeError(f"response for id {response.id!r}, not in flight")
    if state.first is None:
        state.first = t1
        if win.open():
            win.first_latencies.append(t1 - state.sent)
    problem = state.answer(sc, response)
    if problem:
        win.wrong.append(f"{response.id}: {problem}")
    if response.outputs:
        win.responses += win.open()
        return False
    del in_flight[response.id]
    win.verified += state.check
    if win.open():
        win.latencies.append(t1 - state.sent)
    return True


async def decoupled_session(
    sc: Scenario, url: str, wid: int, depth: int, win: Window, every: int
) -> None:
    """square_int32 over ModelStreamInfer: ``depth`` requests in flight, each answered by
    ``sc.responses`` responses interleaved across requests and matched by id; a request's
    final response lets the next one go."""
    client = GrpcDriver().client(url)
    loop = StreamCredit(depth, win)
    in_flight: dict[str, Decoupled] = {}

    async def requests() -> Any:
        async for i in loop.next_index():
            rid = f"{wid}-{i}"
            request = square_request(sc, rid)
            in_flight[rid] = Decoupled(time.perf_counter(), i % every == 0)
            yield request

    call = client._client_stub.ModelStreamInfer(requests(), metadata=client._get_metadata(None))
    try:
        async for message in call:
            if decoupled_message(sc, in_flight, win, message, time.perf_counter()):
                loop.done()
        if in_flight:
            raise RuntimeError(f"stream ended with {len(in_flight)} requests unfinished")
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        call.cancel()
        await client.close()


def model_stats(server: Server, model: str) -> dict[str, int] | None:
    """The model's inference and execution counts (statistics extension), None if absent."""
    try:
        url = f"http://{server.url('http')}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=5) as r:
            stats = json.loads(r.read())["model_stats"]
        return {
            "inference_count": sum(int(s.get("inference_count", 0)) for s in stats),
            "execution_count": sum(int(s.get("execution_count", 0)) for s in stats),
        }
    except (urllib.error.URLError, ConnectionError, ValueError, KeyError, TypeError):
        return None


def models_stats(server: Server, models: tuple[str, ...]) -> dict[str, dict[str, int] | None]:
    return {model: model_stats(server, model) for model in models}


async def sampler(win: Window, server: Server, models: tuple[str, ...], settings: Settings):
    """Opens and closes the window; the models' statistics are read just outside it."""
    await asyncio.sleep(settings.warmup)
    stats_start = await asyncio.to_thread(models_stats, server, models)
    win.start = CpuSnapshot.take(server.pid)
    await asyncio.sleep(settings.seconds)
    win.end = CpuSnapshot.take(server.pid)
    win.stats = [stats_start, await asyncio.to_thread(models_stats, server, models)]


async def drive(sc: Scenario, server: Server, settings: Settings) -> Window:
    driver = PROTOCOLS[sc.protocol]()
    url = server.url(driver.url_key)
    win, every = Window(), settings.verify_every
    if isinstance(driver, ShmDriver):
        return await drive_shm(sc, driver, url, server, settings, win)
    if isinstance(driver, GrpcStreamDriver):
        session = decoupled_session if sc.responses else stream_session
        depths = driver.depths(sc.concurrency)
        workers = [session(sc, url, w, depth, win, every) for w, depth in enumerate(depths)]
    else:
        if sc.chained:
            driver = ensembles.chain_driver(driver, sc.model)
        workers = [worker(sc, driver, url, w, win, every) for w in range(sc.concurrency)]
    await run_window(sc, server, settings, win, workers)
    return win


async def drive_shm(
    sc: Scenario, driver: ShmDriver, url: str, server: Server, settings: Settings, win: Window
) -> Window:
    """Each worker gets its own client and regions, created, filled and registered before the
    warm-up starts; after the window every region is unregistered (an error there fails the
    scenario) and destroyed."""
    data = contract_of(sc.model).make_inputs(0, sc.batch)
    clients: list[Any] = []
    slots: list[ShmSlot] = []
    try:
        for wid in range(sc.concurrency):
            clients.append(driver.client(url))
            slots.append(ShmSlot(wid))
            slots[-1].create(driver, data)
            await asyncio.wait_for(slots[-1].register(clients[-1]), 30.0)
        workers = [
            shm_worker(sc, driver, client, slot, win, settings.verify_every)
            for client, slot in zip(clients, slots, strict=True)
        ]
        await run_window(sc, server, settings, win, workers)
    except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
        win.errors.append(f"shared memory: {type(exc).__name__}: {exc}")
    finally:
        for client, slot in zip(clients, slots, strict=False):
            try:
                await asyncio.wait_for(slot.unregister(client), 10.0)
            except Exception as exc:  # noqa: BLE001
                win.errors.append(f"unregister {slot.registered}: {type(exc).__name__}: {exc}")
        for slot in slots:
            slot.destroy()
        for client in clients:
            await client.close()
    return win


async def run_window(
    sc: Scenario, server: Server, settings: Settings, win: Window, workers: list[Any]
) -> None:
    """Runs the workers while the sampler opens and closes the window."""
    sample = asyncio.ensure_future(sampler(win, server, sc.models, settings))
    limit = settings.warmup + settings.seconds + 30.0
    try:
        await asyncio.wait_for(asyncio.gather(*workers), limit)
    except TimeoutError:
        win.errors.append(f"scenario did not finish within {limit:.0f} s (server hung?)")
    if win.errors:
        sample.cancel()
    else:
        await sample


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
        # other processes busy on the machine during the window (cores): noise when > ~0.1
        other_cpu_util=end.other_delta(start) / seconds,
    )
    if sc.model in PAYLOAD_BYTES:
        row["bytes_per_inference"] = PAYLOAD_BYTES[sc.model]
        row["mb_per_s"] = row["infer_per_s"] * PAYLOAD_BYTES[sc.model] / 1e6
    if sc.responses:
        add_decoupled(row, win, seconds)
    if len(win.stats) == 2:
        counts = {m: stats_delta(win.stats[0][m], win.stats[1][m]) for m in sc.models}
        if counts[sc.model]:
            row.update(counts[sc.model])
        composing = {m: c for m, c in counts.items() if m != sc.model and c}
        if composing:
            row["composing_stats"] = composing
    return row


def stats_delta(start: dict[str, int] | None, end: dict[str, int] | None) -> dict[str, Any]:
    """A model's inferences, executions and average batch over the window ({} if unknown)."""
    if start is None or end is None:
        return {}
    inferences, executions = (end[k] - start[k] for k in ("inference_count", "execution_count"))
    return {
        "server_inferences": inferences,
        "server_executions": executions,
        "avg_batch": inferences / executions if executions else None,
    }


def add_decoupled(row: dict[str, Any], win: Window, seconds: float) -> None:
    """Per request: time to first response and to the final one; per response: rate and CPU
    (the per-inference CPU columns stay per request)."""
    first_ms = np.asarray(win.first_latencies or [np.nan]) * 1e3
    per = max(win.responses, 1)
    start, end = win.start, win.end
    row.update(
        responses_in_window=win.responses,
        responses_per_s=win.responses / seconds,
        first_p50_ms=float(np.percentile(first_ms, 50)),
        first_p99_ms=float(np.percentile(first_ms, 99)),
        server_cpu_us_per_response=(end.server - start.server) * 1e6 / per,
        stub_cpu_us_per_response=end.stub_delta(start) * 1e6 / per,
        client_cpu_us_per_response=(end.client - start.client) * 1e6 / per,
    )


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


def onnx_session(model_dir: Path) -> tuple[Any, str]:
    """An onnxruntime session on the model's ``1/model.onnx`` with the server's options."""
    import onnxruntime as ort

    options, source = onnx_session_options(load_config(model_dir))
    session = ort.InferenceSession(
        str(model_dir / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return session, source


def baseline_onnx(model_dir: Path, seconds: float) -> dict[str, Any]:
    session, source = onnx_session(model_dir)
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
    if hasattr(model, "initialize"):  # optional, as in Triton's Python backend
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


CEILING_BATCH_SIZES = (1, 8, 16, 32, 64)


def baseline_onnx_ceiling(model_dir: Path, seconds: float) -> dict[str, Any]:
    """The ceiling of a batching model: ``session.run`` in a closed loop at each batch size of
    CEILING_BATCH_SIZES (up to max_batch_size), ``seconds`` each, with the server's session
    options (for ``mlp``: 2 intra-op threads, from the config's parameters); the best
    samples/s is the ceiling. Rates and CPU are per sample (``calls_per_s`` = samples/s)."""
    session, source = onnx_session(model_dir)
    max_batch = load_config(model_dir).max_batch_size or 1
    per_batch: dict[str, dict[str, float]] = {}
    for batch in (b for b in CEILING_BATCH_SIZES if b <= max_batch):
        feeds = [{"INPUT0": d["INPUT0"]} for d in mlp_inputs(0, batch)]
        result = closed_loop(lambda i, f=feeds: session.run(None, f[i % len(f)]), seconds)
        per_batch[str(batch)] = {
            "batch": batch,
            **result,
            "samples_per_s": result["calls_per_s"] * batch,
            "us_per_sample": result["us_per_call"] / batch,
            "cpu_us_per_sample": result["cpu_us_per_call"] / batch,
        }
    best = max(per_batch.values(), key=lambda r: r["samples_per_s"])
    return {
        "what": f"onnxruntime InferenceSession.run at the best batch size of "
        f"{', '.join(per_batch)} (per sample), options from {source}",
        "unit": "sample",
        "best_batch": best["batch"],
        "calls_per_s": best["samples_per_s"],
        "us_per_call": best["us_per_sample"],
        "cpu_us_per_call": best["cpu_us_per_sample"],
        "per_batch": per_batch,
    }


def baseline_identity(model_dir: Path, seconds: float) -> dict[str, Any]:
    """``identity_fp32``: the 16 MiB Identity in onnxruntime (one allocation and copy)."""
    session, source = onnx_session(model_dir)
    feeds = [{"INPUT0": x} for x in identity_sets()]
    (out,) = session.run(None, feeds[0])
    assert np.array_equal(out, feeds[0]["INPUT0"]), "baseline: wrong answer"
    result = closed_loop(lambda i: session.run(None, feeds[i % len(feeds)]), seconds)
    return {
        "what": f"onnxruntime InferenceSession.run of the 16 MiB Identity, options from {source}",
        **result,
    }


BASELINES: dict[str, Callable[[Path, float], dict[str, Any]]] = {
    "simple": baseline_onnx,
    "add_sub_python": baseline_python,
    "mlp": baseline_onnx_ceiling,
    IDENTITY_MODEL: baseline_identity,
    ensembles.ENSEMBLE: ensembles.baseline,
}
# Models whose baseline is another's (the same model.onnx and session options): measured once.
BASELINE_SAME_AS = {"mlp_nobatch": "mlp"}


def add_ratios(row: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    if not baseline or "infer_per_s" not in row:
        return
    row["throughput_ratio"] = row["infer_per_s"] / baseline["calls_per_s"]
    row["cpu_ratio"] = (row["server_cpu_us"] + row["stub_cpu_us"]) / baseline["cpu_us_per_call"]


SHM_RATIO_KEYS = ("infer_per_s", "p50_ms", "p99_ms", "mb_per_s", "server_cpu_us", "client_cpu_us")


def add_shm_ratios(rows: list[dict[str, Any]]) -> None:
    """``vs_shm``: each figure of a row ÷ the same figure of the SHM_REFERENCE row of the same
    model and concurrency."""
    refs = {
        (r["model"], r["concurrency"]): r
        for r in rows
        if r["protocol"] == SHM_REFERENCE and "infer_per_s" in r
    }
    for row in rows:
        ref = refs.get((row["model"], row["concurrency"]))
        if ref is not None and "infer_per_s" in row:
            row["vs_shm"] = {k: row[k] / ref[k] if ref[k] else None for k in SHM_RATIO_KEYS}


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


def batching_line(row: dict[str, Any]) -> str:
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
        _fmt(row["client_cpu_us"], 0),
        _fmt(row["server_cpu_util"], 2),
        _fmt(row.get("avg_batch"), 2),
        _fmt(row.get("throughput_ratio"), 3),
        _fmt(row.get("cpu_ratio"), 2),
    ]
    return table_row(row, cells)


def batching_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "| model | protocol | conc | infer/s | p50 ms | p99 ms | server CPU µs/inf | "
        "client CPU µs/inf | server cores | avg batch | thr ÷ ceiling | CPU × ceiling |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        *[batching_line(row) for row in rows],
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


BATCHING_GOAL = 0.8  # issue 4: with batching, >= 80% of the ceiling at concurrency 32


def batching_goal(rows: list[dict[str, Any]]) -> list[str]:
    hits = [
        r
        for r in rows
        if r["model"] == "mlp" and r["concurrency"] == 32 and "throughput_ratio" in r
    ]
    # mlp_nobatch must execute one request at a time; a server that autofills a default
    # dynamic batcher for it (Triton does so under auto-complete in some cases) shows here.
    batched = [
        r for r in rows if r["model"] == "mlp_nobatch" and (r.get("avg_batch") or 1.0) > 1.05
    ]
    warning = (
        [
            "",
            "⚠ `mlp_nobatch` executed batches (avg batch "
            + ", ".join(f"{r['avg_batch']:.2f}" for r in batched)
            + "): the server batched a model without `dynamic_batching`; the comparison is void.",
        ]
        if batched
        else []
    )
    if not hits:
        return warning
    parts = [
        f"{r['protocol']} {r['throughput_ratio']:.2f} "
        f"({'met' if r['throughput_ratio'] >= BATCHING_GOAL else 'not met'})"
        for r in hits
    ]
    return [
        "",
        f"Goal (issue 4): `mlp` at concurrency 32 ≥ {BATCHING_GOAL:.2f} × ceiling: "
        + "; ".join(parts)
        + ".",
    ] + warning


def shm_line(row: dict[str, Any]) -> str:
    if "infer_per_s" not in row:
        return failed_line(row)
    vs = row.get("vs_shm") or {}
    cells = [
        row["model"],
        row["protocol"],
        row["concurrency"],
        _fmt(row["infer_per_s"], 1),
        _fmt(row["p50_ms"], 2),
        _fmt(row["p99_ms"], 2),
        _fmt(row["mb_per_s"], 0),
        _fmt(row["server_cpu_us"], 0),
        _fmt(row["client_cpu_us"], 0),
        _fmt(row["server_cpu_util"], 2),
        _fmt(vs.get("infer_per_s"), 2),
        _fmt(vs.get("p50_ms"), 2),
        _fmt(vs.get("p99_ms"), 2),
        _fmt(vs.get("server_cpu_us"), 2),
    ]
    return table_row(row, cells)


def shm_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "| model | protocol | conc | infer/s | p50 ms | p99 ms | MB/s | server CPU µs/inf | "
        "client CPU µs/inf | server cores | thr ÷ shm | p50 ÷ shm | p99 ÷ shm | CPU ÷ shm |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        *[shm_line(row) for row in rows],
    ]


def shm_verdict(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 6: shared memory must win clearly: the reference row against the best socket
    path (binary HTTP body or gRPC) at each concurrency."""
    parts = []
    for conc in sorted({r["concurrency"] for r in rows}):
        at = {r["protocol"]: r for r in rows if r["concurrency"] == conc and "infer_per_s" in r}
        sockets = [at[p] for p in ("http", "grpc") if p in at]
        if SHM_REFERENCE not in at or not sockets:
            continue
        ref, best = at[SHM_REFERENCE], max(sockets, key=lambda r: r["infer_per_s"])
        parts.append(
            f"at concurrency {conc}, `{SHM_REFERENCE}` {ref['infer_per_s']:,.1f} infer/s "
            f"({ref['mb_per_s']:,.0f} MB/s) = {ref['infer_per_s'] / best['infer_per_s']:.2f}× "
            f"the best socket path (`{best['protocol']}`, {best['infer_per_s']:,.1f} infer/s), "
            f"p50 {ref['p50_ms'] / best['p50_ms']:.2f}× its p50, server CPU per inference "
            f"{ref['server_cpu_us'] / best['server_cpu_us']:.2f}× its"
        )
    if not parts:
        return []
    return ["", "Shared memory vs the socket (issue 6): " + "; ".join(parts) + "."]


def table_row(row: dict[str, Any], cells: list[Any]) -> str:
    """One markdown row of a scenario, flagged when some answers were wrong."""
    wrong = f" ⚠ {row['wrong_count']} wrong" if row["wrong"] else ""
    return "| " + " | ".join(map(str, cells)) + f"{wrong} |"


def failed_line(row: dict[str, Any]) -> str:
    problem = (row["errors"] or row["wrong"] or ["no completions"])[0]
    return f"| {row['model']} | {row['protocol']} | {row['concurrency']} | FAILED: {problem} |"


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


ISSUE_NOTES = {
    "ensembles": ensembles.NOTE,
    "shm": f"`{IDENTITY_MODEL}` is the bench's own ONNX Identity (FP32 dims [-1], "
    "max_batch_size 0, 2 CPU instances, built into the bench repository); each request "
    f"sends one FP32 [{SHM_ELEMENTS}] tensor (16 MiB) and gets it back. `shm-http` / "
    "`shm-grpc`: input and output in system shared memory (each worker its own input region, "
    "holding two input sets, and output region, registered before the warm-up and "
    "unregistered after the window), the request over binary HTTP / gRPC; `http`: binary "
    "HTTP body; `grpc`: unary `ModelInfer`. One client per in-flight request. MB/s counts "
    "input + output bytes (2 × 16 MiB per inference, 1 MB = 10⁶ B); the ÷ shm columns divide "
    f"by the `{SHM_REFERENCE}` row of the same concurrency (MB/s ÷ shm = thr ÷ shm). Every "
    "Nth answer is checked to equal the input, read back from the output region for shm "
    "(poisoned with NaN before the request). The shm rows' client writes the inputs into its "
    "region once, before the window, as perf_analyzer does. Server flags: "
    + f"`{' '.join(SERVER_ARGS['shm'])}`"
    + ".",
    "batching": "`mlp` has `dynamic_batching { max_queue_delay_microseconds: 500 }`, "
    "`mlp_nobatch` is the same `model.onnx` without it (one request per execution); both "
    "`max_batch_size: 64`, one CPU instance, 2 intra-op threads. Each request is one sample "
    "(`INPUT0` FP32 [1, 256]). `http` is binary HTTP, `grpc` unary `ModelInfer`, one client "
    "per in-flight request. The ceiling is in-process `InferenceSession.run` at the best batch "
    "size (table below); thr ÷ ceiling = infer/s ÷ ceiling samples/s, CPU × ceiling = server "
    "CPU per inference ÷ ceiling CPU per sample. server cores = server CPU time ÷ window; avg "
    "batch = inferences ÷ model executions over the window (statistics extension). Every "
    "Nth answer is compared with in-process onnxruntime on the same input (tolerance 1e-4).",
    "streaming": "`grpc` is unary `ModelInfer` (one client per in-flight request, as in the "
    "foundation rows; measured once in a run that covers both lists); `grpc-stream` is ONE "
    "`ModelStreamInfer` stream (one client) with `conc` requests in flight, answers matched by "
    "request id and checked to come back in send order; `grpc-streams` is `conc` streams (one "
    "client each) with one request in flight each.",
}


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
        "inference; "
        + {
            "batching": "ratios to the in-process onnxruntime ceiling (see below).",
            "shm": f"ratios to the `{SHM_REFERENCE}` row of the same concurrency.",
            "ensembles": "ens ÷ chained = the ensemble row ÷ the chained row of the same "
            "protocol and concurrency.",
        }.get(
            report["issue"],
            "ratios: throughput ÷ baseline calls/s, (server+stub CPU) ÷ baseline CPU per call.",
        ),
    ]
    if report["issue"] in ISSUE_NOTES:
        lines += ["", ISSUE_NOTES[report["issue"]]]
    regular = [row for row in report["scenarios"] if not row.get("responses")]
    if report["issue"] == "batching":
        lines += batching_table(regular) + batching_goal(regular)
    elif report["issue"] == "shm":
        lines += shm_table(regular) + shm_verdict(regular)
    elif report["issue"] == "ensembles":
        lines += ensembles.table(regular)
    else:
        lines += regular_table(regular)
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
    p.add_argument(
        "--issue",
        nargs="+",
        default=list(DEFAULT_ISSUES),
        help=f"scenario lists among {', '.join(ISSUES)} (default: all, one server, one "
        "report per list)",
    )
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


def select(args: argparse.Namespace) -> dict[str, list[Scenario]]:
    """The chosen scenarios of each selected issue (issues with none left out). A protocol
    asked for with ``--protocols`` that no selected list has (e.g. ``http-aio-default``) is
    added in place of the unary protocols of the non-decoupled scenarios."""
    issues = _csv(args.issue) or list(DEFAULT_ISSUES)
    unknown = [i for i in issues if i not in ISSUES]
    if unknown:
        raise SystemExit(f"unknown issue(s) {unknown}; known: {', '.join(ISSUES)}")
    models, protocols = _csv(args.models), _csv(args.protocols)
    unknown = [p for p in protocols or [] if p not in PROTOCOLS]
    if unknown:
        raise SystemExit(f"unknown protocol(s) {unknown}; known: {', '.join(PROTOCOLS)}")
    conc = [int(c) for c in _csv(args.concurrency) or []]
    lists = {issue: ISSUES[issue]() for issue in dict.fromkeys(issues)}
    known = {s.protocol for scenarios in lists.values() for s in scenarios}
    # The shm drivers serve only the identity model of the shm list.
    extra = [p for p in protocols or [] if p not in known and p not in SHM_PROTOCOLS]
    chosen: dict[str, list[Scenario]] = {}
    for issue, scenarios in lists.items():
        unary = [s for s in scenarios if s.protocol in UNARY_PROTOCOLS and not s.responses]
        variants = (
            replace(s, protocol=p)
            for p in extra
            for s in unary
            if not (p == "http-json" and s.model in BINARY_ONLY_MODELS)
        )
        scenarios += list(dict.fromkeys(variants))
        kept = [
            s
            for s in scenarios
            if (not models or s.model in models)
            and (not protocols or s.protocol in protocols)
            and (not conc or s.concurrency in conc)
        ]
        if kept:
            chosen[issue] = kept
    if not chosen:
        raise SystemExit("no scenario matches the filters")
    return chosen


IDENTITY_CONFIG = f"""name: "{IDENTITY_MODEL}"
backend: "onnxruntime"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
"""


def build_identity_model(repo: Path) -> None:
    """The shm list's ``identity_fp32``: ONNX Identity, FP32 [n] → [n] (opset 17, IR 8 as
    examples/build_models.py), in the bench's repository only."""
    from onnx import TensorProto, checker, helper, save_model

    model_dir = repo / IDENTITY_MODEL
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        IDENTITY_MODEL,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    checker.check_model(model)
    save_model(model, str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(IDENTITY_CONFIG)


# Models a list adds to the bench's copy of the example repository.
REPOSITORY_EXTRAS: dict[str, Callable[[Path], None]] = {"shm": build_identity_model}


def build_repository(target: Path, issues: list[str]) -> None:
    subprocess.run(
        [sys.executable, str(BUILD_MODELS), "--repository", str(target)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for issue in issues:
        if issue in REPOSITORY_EXTRAS:
            REPOSITORY_EXTRAS[issue](target)


def run_baselines(repo: Path, models: list[str], settings: Settings) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for model in models:
        source = BASELINE_SAME_AS.get(model, model)
        if source not in BASELINES:
            continue
        if source not in results:
            print(f"baseline {source} ...", flush=True)
            results[source] = BASELINES[source](repo / source, settings.baseline_seconds)
        if model != source:
            results[model] = {**results[source], "same_as": source}
    return {m: results[m] for m in models if m in results}


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
    repo: Path,
    work: Path,
    scenarios: list[Scenario],
    settings: Settings,
    info: dict[str, Any],
    server_args: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    server, rows = Server(repo, work, server_args), []
    try:
        server.wait_ready(sorted({m for s in scenarios for m in s.models}))
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


# Ratios between the rows of one list, added before its report is written.
ROW_RATIOS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "shm": add_shm_ratios,
    "ensembles": ensembles.add_ratios,
}


def write_report(report: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report["issue"] + ("-quick" if report["settings"]["quick"] else "")
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    path = out_dir / f"{stem}.md"
    path.write_text(markdown(report))
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings, chosen = make_settings(args), select(args)
    # One server, each scenario measured once even when several lists hold it.
    scenarios = list(dict.fromkeys(s for issue in chosen.values() for s in issue))
    server_args = tuple(a for issue in chosen for a in SERVER_ARGS.get(issue, ()))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tritium-bench-") as tmp:
        repo, work = Path(tmp) / "models", Path(tmp)
        build_repository(repo, list(chosen))
        info: dict[str, Any] = {"server_args": list(server_args)}
        info["baselines"] = run_baselines(repo, sorted({s.model for s in scenarios}), settings)
        precompute_references(repo, scenarios)
        rows = run_scenarios(repo, work, scenarios, settings, info, server_args)
    machine = {**machine_info(), "loadavg_1min": [load_before, os.getloadavg()[0]]}
    by_name = {row["name"]: row for row in rows}
    for issue, issue_scenarios in chosen.items():
        issue_rows = [by_name[s.name] for s in issue_scenarios if s.name in by_name]
        if issue in ROW_RATIOS:
            ROW_RATIOS[issue](issue_rows)
        models = {row["model"] for row in issue_rows}
        report = {
            "issue": issue,
            "settings": asdict(settings),
            "machine": machine,
            **info,
            "baselines": {m: b for m, b in info["baselines"].items() if m in models},
            "scenarios": issue_rows,
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
