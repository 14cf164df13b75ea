"""The ``batching`` list (issue 4): the example ``mlp`` (dynamic batching) and ``mlp_nobatch``
(the same ``model.onnx`` without it) next to the in-process onnxruntime ceiling; their
contract (answers compared with in-process onnxruntime), the ceiling and the table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.baselines import closed_loop, load_config, onnx_session
from bench.common import Contract, Issue, Rows, Scenario
from bench.drivers import UNARY_PROTOCOLS
from bench.report import CONC, MODEL, PROTOCOL, RATE, Column, rows_table


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


ONNX_REFERENCE_MODELS = ("mlp", "mlp_nobatch")  # checked against in-process onnxruntime


CONTRACTS: dict[str, Contract] = {
    model: Contract(("OUTPUT0",), mlp_inputs, mlp_checker(model)) for model in ONNX_REFERENCE_MODELS
}


def precompute(repo: Path, scenarios: list[Scenario]) -> None:
    """The reference answers of every input set the unary workers will send."""
    REFERENCE.repo = repo
    for sc in scenarios:
        if sc.model in ONNX_REFERENCE_MODELS and sc.protocol in UNARY_PROTOCOLS:
            for wid in range(sc.concurrency):
                for inputs in CONTRACTS[sc.model].make_inputs(wid, sc.batch):
                    REFERENCE.expected(sc.model, inputs["INPUT0"])


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


BATCHING_COLUMNS = [
    MODEL,
    PROTOCOL,
    CONC,
    *RATE,
    Column("server CPU µs/inf", "server_cpu_us"),
    Column("client CPU µs/inf", "client_cpu_us"),
    Column("server cores", "server_cpu_util", 2),
    Column("avg batch", "avg_batch", 2),
    Column("thr ÷ ceiling", "throughput_ratio", 3),
    Column("CPU × ceiling", "cpu_ratio", 2),
]


def batching_table(rows: list[dict[str, Any]]) -> list[str]:
    return rows_table(BATCHING_COLUMNS, rows)


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


def table(rows: Rows) -> list[str]:
    return batching_table(rows) + batching_goal(rows)


NOTE = (
    "`mlp` has `dynamic_batching { max_queue_delay_microseconds: 500 }`, "
    "`mlp_nobatch` is the same `model.onnx` without it (one request per execution); both "
    "`max_batch_size: 64`, one CPU instance, 2 intra-op threads. Each request is one sample "
    "(`INPUT0` FP32 [1, 256]). `http` is binary HTTP, `grpc` unary `ModelInfer`, one client "
    "per in-flight request. The ceiling is in-process `InferenceSession.run` at the best batch "
    "size (table below); thr ÷ ceiling = infer/s ÷ ceiling samples/s, CPU × ceiling = server "
    "CPU per inference ÷ ceiling CPU per sample. server cores = server CPU time ÷ window; avg "
    "batch = inferences ÷ model executions over the window (statistics extension). Every "
    "Nth answer is compared with in-process onnxruntime on the same input (tolerance 1e-4)."
)
ISSUE = Issue(
    "batching",
    batching_scenarios,
    ratios="ratios to the in-process onnxruntime ceiling (see below).",
    note=NOTE,
    table=table,
)
