"""The ``bls`` scenario list (issue 14, item 11): what Business Logic Scripting costs.

1. **The image pipeline as ONE BLS model** (``image_classifier_bls`` of the example
   repository: a Python model whose ``execute`` calls ``preprocess`` → ``classifier`` →
   ``postprocess`` with ``InferenceRequest.async_exec``) against the same pipeline as the
   ``image_classifier`` ensemble, in the same run, on the same unary worker and contract as the
   ``ensembles`` list (binary HTTP and gRPC, concurrency 1 and 16; each cell the ensemble, then
   the BLS model). The BLS rows get ``vs_ensemble``: their figures ÷ the ensemble row's.
2. **The cost of one BLS call**: the bench's own parent model ``bls_calls`` (built into the
   bench's repository only) calls a child ``calls`` times in one ``execute`` with ``exec()``,
   timing each call, with an FP32 tensor of 64 B or 16 MiB, into an ONNX child that runs in the
   server (``identity_fp32``, the shm list's Identity: the BLS hops alone) and into a Python
   child (``bls_identity``, a second stub: its own EXECUTE hop too). One client request at a
   time; the row's figures are per child call: exec() µs (p50, p99, mean), the child's own
   compute time from the statistics extension, the overhead (mean exec() − child compute) and
   server / stub CPU per call. The 16 MiB rows also show the floor: the tensor through a
   shared-memory segment there and back in this process (``shm_tensors``, the path the server
   and the stubs use for tensors of ``SHM_MIN_BYTES`` and more).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BLS_PIPELINE, ENSEMBLE, Issue, Rows, Scenario, Settings, Window
from bench.drivers import PROTOCOLS
from bench.engine import run_window
from bench.report import CONC, Column, rows_table
from bench.scenarios import ensembles, shm
from bench.server import Server

PARENT = "bls_calls"
ONNX_CHILD = shm.IDENTITY_MODEL  # ONNX Identity FP32 [-1], runs in the server
PYTHON_CHILD = "bls_identity"  # Python identity FP32 [-1], a stub of its own
CHILDREN = {ONNX_CHILD: "ONNX (in-server)", PYTHON_CHILD: "Python (2nd stub)"}
SMALL_BYTES, LARGE_BYTES = 64, 16 << 20
# child calls per client request: enough that the client's round trip is amortised, few
# enough that a request stays well under a second
CALLS = {SMALL_BYTES: 200, LARGE_BYTES: 2}
MAX_CALLS, MAX_FLOATS = 10_000, 64 << 20  # the parent refuses more (bounded work per request)
OTHER_CPU_WARNING = 0.1  # cores used by other processes during a window, flagged


def scenarios() -> list[Scenario]:
    """Each (protocol, concurrency) cell twice, the ensemble then the BLS model; then the
    call-overhead rows (one request in flight, gRPC: the client's protocol is outside the
    timed calls)."""
    pipeline = [
        Scenario(model, protocol, concurrency)
        for protocol in ("http", "grpc")
        for concurrency in (1, 16)
        for model in (ENSEMBLE, BLS_PIPELINE)
    ]
    overhead = [
        Scenario(PARENT, "grpc", 1, child=child, tensor_bytes=size)
        for child in CHILDREN
        for size in (SMALL_BYTES, LARGE_BYTES)
    ]
    return pipeline + overhead


# ---------------------------------------------------------------------------------------------
# The call-overhead models, in the bench's repository only.
# ---------------------------------------------------------------------------------------------
_PARENT_SOURCE = f'''"""bls_calls: calls CHILD CALLS times with exec(), an FP32 [FLOATS] tensor of
ones as INPUT0; answers MICROS FP64 [CALLS]: each call's time in microseconds, around exec()."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

MAX_CALLS, MAX_FLOATS = {MAX_CALLS}, {MAX_FLOATS}


def _scalar(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


def _error(message):
    error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
    return pb_utils.InferenceResponse(error=error)


class TritonPythonModel:
    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        child = _scalar(request, "CHILD").decode()
        calls, floats = int(_scalar(request, "CALLS")), int(_scalar(request, "FLOATS"))
        if not (0 < calls <= MAX_CALLS and 0 < floats <= MAX_FLOATS):
            return _error(f"CALLS must be in 1..{{MAX_CALLS}} and FLOATS in 1..{{MAX_FLOATS}}")
        data = np.ones(floats, dtype=np.float32)
        micros = np.empty(calls, dtype=np.float64)
        for i in range(calls):
            began = time.perf_counter()
            response = pb_utils.InferenceRequest(
                model_name=child,
                inputs=[pb_utils.Tensor("INPUT0", data)],
                requested_output_names=["OUTPUT0"],
            ).exec()
            micros[i] = (time.perf_counter() - began) * 1e6
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
            if out.shape != data.shape or out[0] != 1.0 or out[-1] != 1.0:
                return _error(f"{{child}} answered OUTPUT0 {{out.shape}}, not the input")
        return pb_utils.InferenceResponse([pb_utils.Tensor("MICROS", micros)])
'''

_PARENT_CONFIG = f"""name: "{PARENT}"
backend: "python"
max_batch_size: 0
input [
  {{ name: "CHILD" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "FLOATS" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [ {{ name: "MICROS" data_type: TYPE_FP64 dims: [ -1 ] }} ]
"""

_CHILD_SOURCE = '''"""bls_identity: OUTPUT0 = INPUT0 (FP32 [-1]), the Python child of bls_calls."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return out
'''

_CHILD_CONFIG = f"""name: "{PYTHON_CHILD}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""


def build_models(repo: Path) -> None:
    """``bls_calls``, ``bls_identity`` and the ONNX ``identity_fp32`` (the shm list's)."""
    if not (repo / ONNX_CHILD).exists():
        shm.build_identity_model(repo)
    for name, config, source in (
        (PARENT, _PARENT_CONFIG, _PARENT_SOURCE),
        (PYTHON_CHILD, _CHILD_CONFIG, _CHILD_SOURCE),
    ):
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(source)


# ---------------------------------------------------------------------------------------------
# The call-overhead rows: one request in flight, each answer the per-call times.
# ---------------------------------------------------------------------------------------------
def request_arrays(sc: Scenario) -> dict[str, np.ndarray]:
    return {
        "CHILD": np.array([sc.child.encode()], dtype=np.object_),
        "CALLS": np.array([CALLS[sc.tensor_bytes]], dtype=np.int32),
        "FLOATS": np.array([sc.tensor_bytes // 4], dtype=np.int64),
    }


async def drive_calls(sc: Scenario, server: Server, settings: Settings) -> Window:
    """The call-overhead scenario: ``sc.concurrency`` workers send ``bls_calls`` requests in a
    closed loop; the per-call times of the answers completed inside the window are kept."""
    driver = PROTOCOLS[sc.protocol]()
    url, win = server.url(driver.url_key), Window()
    micros: list[np.ndarray] = []
    calls = CALLS[sc.tensor_bytes]

    async def worker() -> None:
        client = driver.client(url)
        try:
            inputs, outputs = driver.prepare_tensors(request_arrays(sc), ("MICROS",))
            while not win.closed():
                began = time.perf_counter()
                result = await driver.infer(client, PARENT, inputs, outputs)
                latency = time.perf_counter() - began
                times = result.as_numpy("MICROS")
                if times is None or times.shape != (calls,):
                    win.wrong.append(f"MICROS {None if times is None else times.shape}")
                    continue
                win.verified += 1
                if win.open():
                    win.latencies.append(latency)
                    micros.append(times)
        except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
            win.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            await client.close()

    floor = shm_floor_us(sc.tensor_bytes)
    await run_window(sc, server, settings, win, [worker() for _ in range(sc.concurrency)])
    win.extras.update(call_figures(micros, calls), floor_us=floor)
    return win


def call_figures(micros: list[np.ndarray], calls: int) -> dict[str, Any]:
    """Per-call exec() times of the window's answers: p50, p99, mean (µs) and their count."""
    figures: dict[str, Any] = {"calls_per_request": calls, "child_calls": 0}
    if micros:
        every = np.concatenate(micros)
        figures.update(
            child_calls=int(every.size),
            call_p50_us=float(np.percentile(every, 50)),
            call_p99_us=float(np.percentile(every, 99)),
            call_mean_us=float(every.mean()),
        )
    return figures


def shm_floor_us(nbytes: int, rounds: int = 8) -> float | None:
    """One call's tensor traffic at its cheapest, in this process: ``nbytes`` packed into a
    shared-memory segment and mapped back, there and back (the input and the output), with the
    segment pools the server and the stubs use; None below ``SHM_MIN_BYTES`` (small tensors
    travel inside the socket frame)."""
    from tritium.backends.python import shm_tensors

    if nbytes < shm_tensors.SHM_MIN_BYTES:
        return None
    names = shm_tensors.SegmentNames(os.getpid(), os.getpid())
    stub, server = shm_tensors.SegmentPool(names), shm_tensors.SegmentPool(names)
    payload = np.ones(nbytes, dtype=np.uint8)
    try:
        shm_tensors.unpack(shm_tensors.pack(payload, [], stub), [], server)  # pages warm
        began = time.perf_counter()
        for _ in range(rounds):
            view = shm_tensors.unpack(shm_tensors.pack(payload, [], stub), [], server)
            del view
            view = shm_tensors.unpack(shm_tensors.pack(payload, [], server), [], stub)
            del view
        return (time.perf_counter() - began) * 1e6 / rounds
    finally:
        stub.close()
        server.close()


# ---------------------------------------------------------------------------------------------
# Ratios between rows, and the two tables.
# ---------------------------------------------------------------------------------------------
RATIO_KEYS = ("infer_per_s", "p50_ms", "p99_ms", "server_cpu_us", "stub_cpu_us", "client_cpu_us")


def serving_cpu(row: dict[str, Any]) -> float:
    return row["server_cpu_us"] + row["stub_cpu_us"]


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def add_ratios(rows: Rows) -> None:
    """``vs_ensemble`` on each BLS pipeline row (÷ the ensemble row of the same protocol and
    concurrency; ``serving_cpu_us`` is server + stubs); per-call CPU and the overhead on each
    call-overhead row."""
    ensemble = {
        (r["protocol"], r["concurrency"]): r
        for r in rows
        if r["model"] == ENSEMBLE and not r.get("chained") and "infer_per_s" in r
    }
    for row in rows:
        if "infer_per_s" not in row:
            continue
        if row["model"] == BLS_PIPELINE:
            ref = ensemble.get((row["protocol"], row["concurrency"]))
            if ref is not None:
                vs = {k: ratio(row[k], ref[k]) for k in RATIO_KEYS}
                vs["serving_cpu_us"] = ratio(serving_cpu(row), serving_cpu(ref))
                row["vs_ensemble"] = vs
        elif row.get("child"):
            add_call_costs(row)


def add_call_costs(row: dict[str, Any]) -> None:
    """Server and stub CPU per child call, the child's compute per call (statistics) and the
    overhead: mean exec() time − the child's compute."""
    calls = row["calls_per_request"]
    row["server_cpu_us_per_call"] = row["server_cpu_us"] / calls
    row["stub_cpu_us_per_call"] = row["stub_cpu_us"] / calls
    compute = (row.get("composing_stats") or {}).get(row["child"], {}).get("compute_total_us")
    row["child_compute_us"] = compute
    if compute is not None and "call_mean_us" in row:
        row["overhead_us"] = row["call_mean_us"] - compute


def mode(row: dict[str, Any]) -> str:
    return "BLS" if row["model"] == BLS_PIPELINE else "ensemble"


def size_text(row: dict[str, Any]) -> str:
    size = row["tensor_bytes"]
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} B"


PIPELINE_COLUMNS = [
    Column("protocol", "protocol", left=True),
    CONC,
    Column("mode", mode, left=True),
    Column("infer/s", "infer_per_s"),
    Column("p50 ms", "p50_ms", 2),
    Column("p99 ms", "p99_ms", 2),
    Column("server CPU µs/inf", "server_cpu_us"),
    Column("stub CPU µs/inf", "stub_cpu_us"),
    Column("client CPU µs/inf", "client_cpu_us"),
    Column("classifier avg batch", ensembles.step_batch, 2),
    Column("other cores", "other_cpu_util", 2),
    Column("thr BLS ÷ ens", "vs_ensemble.infer_per_s", 2),
    Column("p50 BLS ÷ ens", "vs_ensemble.p50_ms", 2),
    Column("p99 BLS ÷ ens", "vs_ensemble.p99_ms", 2),
    Column("CPU BLS ÷ ens", "vs_ensemble.serving_cpu_us", 2),
]
CALL_COLUMNS = [
    Column("child", lambda r: CHILDREN.get(r["child"], r["child"]), left=True),
    Column("tensor", size_text),
    Column("calls/req", "calls_per_request"),
    Column("calls/s", lambda r: r.get("child_calls", 0) / r["seconds"] if "seconds" in r else None),
    Column("exec() p50 µs", "call_p50_us", 1),
    Column("p99 µs", "call_p99_us", 1),
    Column("mean µs", "call_mean_us", 1),
    Column("child compute µs", "child_compute_us", 1),
    Column("overhead µs", "overhead_us", 1),
    Column("server CPU µs/call", "server_cpu_us_per_call", 1),
    Column("stub CPU µs/call", "stub_cpu_us_per_call", 1),
    Column("shm floor µs", "floor_us", 1),
    Column("other cores", "other_cpu_util", 2),
]


def table(rows: Rows) -> list[str]:
    pipeline = [r for r in rows if not r.get("child")]
    calls = [r for r in rows if r.get("child")]
    return (
        rows_table(PIPELINE_COLUMNS, pipeline)
        + verdict(pipeline)
        + rows_table(CALL_COLUMNS, calls, CALLS_INTRO)
        + busy_warning(rows)
    )


def verdict(rows: Rows) -> list[str]:
    compared = [r for r in rows if "vs_ensemble" in r]
    if not compared:
        return []
    parts = [
        f"{r['protocol']} c{r['concurrency']} {r['vs_ensemble']['infer_per_s']:.2f}× "
        f"(CPU {r['vs_ensemble']['serving_cpu_us']:.2f}×)"
        for r in compared
    ]
    return ["", f"BLS ÷ ensemble infer/s (server + stub CPU per image): {'; '.join(parts)}."]


def busy_warning(rows: Rows) -> list[str]:
    busy = [r for r in rows if r.get("other_cpu_util", 0.0) > OTHER_CPU_WARNING]
    if not busy:
        return []
    return [
        "",
        "⚠ other processes were busy on the machine during "
        + ", ".join(f"{r['name']} ({r['other_cpu_util']:.2f} cores)" for r in busy)
        + ": those rows measure a shared CPU.",
    ]


CALLS_INTRO = (
    f"BLS call overhead: `{PARENT}` calls the child `calls/req` times per request with "
    "`InferenceRequest(...).exec()` (FP32 tensor of ones, OUTPUT0 checked against it), one "
    "request in flight. exec() µs is each call's time in the parent (stub → server → child → "
    "server → stub); child compute = the child's compute_input + compute_infer + "
    "compute_output per inference (statistics extension; for the Python child it includes its "
    "own EXECUTE hop to its stub); overhead = mean exec() − child compute. CPU per call = the "
    "window's CPU ÷ child calls (stub: the parent's and the Python child's stubs). shm floor = "
    "the 16 MiB tensor through a shared-memory segment and back in one process (the least "
    "one call's input and output can cost)."
)
NOTE = (
    f"`{ENSEMBLE}` is the ensemble (the server's ensemble scheduler runs `preprocess` → "
    f"`classifier` → `postprocess`); `{BLS_PIPELINE}` is ONE Python model whose `async "
    "execute` calls the same three models with `InferenceRequest(...).async_exec()` (dynamic "
    "batching with no delay: the requests of a batch run their pipelines at once). Same "
    "client, images, contract and checks as the `ensembles` list: one inference = one "
    "128×128 JPEG → top-3 `LABELS`, every Nth answer compared with the in-process pipeline. "
    "Stub CPU = every Python stub (BLS model, preprocess, postprocess). CPU BLS ÷ ens = "
    "(server + stub CPU per image) ÷ the ensemble row's."
)


ISSUE = Issue(
    "bls",
    scenarios,
    ratios="BLS ÷ ens = the BLS model's row ÷ the ensemble's row of the same protocol and "
    "concurrency.",
    note=NOTE,
    table=table,
    row_ratios=add_ratios,
    repository_extra=build_models,
)
