"""The ``shm`` list (issue 6): a 16 MiB FP32 round trip through the bench's own
``identity_fp32`` with input and output in system shared memory (the request over HTTP or
gRPC) next to the tensor in the HTTP body and in gRPC; the shared-memory workers, the model,
its baseline and the table."""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from bench.baselines import closed_loop, onnx_session
from bench.common import Contract, Issue, Rows, Scenario, Settings, Window
from bench.drivers import ShmDriver
from bench.engine import run_window
from bench.report import CONC, MODEL, PROTOCOL, Column, rows_table
from bench.server import Server

# Issue 6: a 16 MiB FP32 tensor through the bench's own ``identity_fp32`` (ONNX Identity).
IDENTITY_MODEL = "identity_fp32"
SHM_TENSOR_BYTES = 16 << 20
SHM_ELEMENTS = SHM_TENSOR_BYTES // 4
SHM_SETS = 2  # input sets per worker (the requests alternate between them)
SHM_REFERENCE = "shm-http"  # the row the others of the shm list are compared with
SHM_PROTOCOLS = ("shm-http", "shm-grpc")
# input + output bytes of one inference, for MB/s
PAYLOAD_BYTES = {IDENTITY_MODEL: 2 * SHM_TENSOR_BYTES}
SERVER_ARGS = ("--allow-client-shm=true", "--http-max-input-size", str(64 << 20))


def shm_scenarios() -> list[Scenario]:
    """Issue 6: a 16 MiB FP32 round trip through ``identity_fp32`` with the input and the
    output in system shared memory (the request over HTTP or gRPC) next to the binary HTTP
    body and gRPC, at concurrency 1 and 4."""
    return [
        Scenario(IDENTITY_MODEL, protocol, concurrency)
        for concurrency in (1, 4)
        for protocol in (*SHM_PROTOCOLS, "http", "grpc")
    ]


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


CONTRACT = Contract(
    ("OUTPUT0",),
    identity_inputs,
    lambda result, d: identity_problem(result.as_numpy("OUTPUT0"), d["INPUT0"]),
)


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


async def drive_shm(
    sc: Scenario, driver: ShmDriver, url: str, server: Server, settings: Settings, win: Window
) -> Window:
    """Each worker gets its own client and regions, created, filled and registered before the
    warm-up starts; after the window every region is unregistered (an error there fails the
    scenario) and destroyed."""
    data = CONTRACT.make_inputs(0, sc.batch)
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


SHM_COLUMNS = [
    MODEL,
    PROTOCOL,
    CONC,
    Column("infer/s", "infer_per_s", 1),
    Column("p50 ms", "p50_ms", 2),
    Column("p99 ms", "p99_ms", 2),
    Column("MB/s", "mb_per_s"),
    Column("server CPU µs/inf", "server_cpu_us"),
    Column("client CPU µs/inf", "client_cpu_us"),
    Column("server cores", "server_cpu_util", 2),
    Column("thr ÷ shm", "vs_shm.infer_per_s", 2),
    Column("p50 ÷ shm", "vs_shm.p50_ms", 2),
    Column("p99 ÷ shm", "vs_shm.p99_ms", 2),
    Column("CPU ÷ shm", "vs_shm.server_cpu_us", 2),
]


def shm_table(rows: list[dict[str, Any]]) -> list[str]:
    return rows_table(SHM_COLUMNS, rows)


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


def table(rows: Rows) -> list[str]:
    return shm_table(rows) + shm_verdict(rows)


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


NOTE = (
    f"`{IDENTITY_MODEL}` is the bench's own ONNX Identity (FP32 dims [-1], "
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
    + f"`{' '.join(SERVER_ARGS)}`"
    + "."
)
ISSUE = Issue(
    "shm",
    shm_scenarios,
    ratios=f"ratios to the `{SHM_REFERENCE}` row of the same concurrency.",
    note=NOTE,
    table=table,
    row_ratios=add_shm_ratios,
    server_args=SERVER_ARGS,
    repository_extra=build_identity_model,
)
