"""The ``sequence`` list (issue 13, item 5): stateful models under the sequence batcher.

64 lanes, each running sequences of 50 steps (START, 48 middle steps, END) one after the other
with a new correlation ID each, so that 64 sequences are in flight for the whole window. Each
lane is one tritonclient asyncio gRPC client with one ``ModelStreamInfer`` stream and one
request in flight (the next step is sent when the answer of the previous one arrives; one
stream per lane, since a stream answers a non-decoupled model in arrival order, and a step
waiting for a direct slot would hold the other lanes' answers back). Two models, each under
the ``direct`` and ``oldest`` strategies and, as the baseline of the same run, served without
sequence batching (``stateless``: ``dynamic_batching { }``, the client sending what the
sequence batcher would add): see sequence_models.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Issue, Rows, Scenario, Settings, Target, Window
from bench.drivers import GrpcDriver
from bench.engine import run_window
from bench.report import CPU, Column, rows_table
from bench.scenarios.sequence_models import (
    CANDIDATES,
    MAX_BATCH,
    RUNNING_SUM,
    SIMPLE,
    SOURCES,
    STATE_DIMS,
    STATELESS,
    VARIANTS,
    WIDE,
    Variant,
    build_models,
    split_name,
)
from bench.server import Server

LANES, STEPS = 64, 50
TARGET = "seq"  # the list's own server: only its models loaded
PROTOCOL = "grpc-streams"  # one stream per lane, one step in flight on each


def sequence_scenarios() -> list[Scenario]:
    """Both models, each direct, oldest and stateless, 64 lanes of 50-step sequences."""
    return [
        Scenario(Variant(base, s).name, PROTOCOL, LANES, target=TARGET, steps=STEPS)
        for base in (SIMPLE, RUNNING_SUM)
        for s in VARIANTS
    ]


# ---------------------------------------------------------------------------------------------
# What a lane sends and expects (pure)
# ---------------------------------------------------------------------------------------------
def step_flags(step: int, steps: int, closing: bool) -> tuple[bool, bool]:
    """(START, END) of a step: END on the last step, or on the step a closing lane sends to
    end its sequence early (the server then frees its slot at once, not at the idle
    timeout)."""
    return step == 0, step == steps - 1 or closing


def sequence_id(lane: int, n: int) -> int:
    """The ``n``-th sequence of ``lane``: unique in a scenario, never 0 (no sequence)."""
    return lane * 1_000_000 + n + 1


@dataclass(frozen=True)
class Contract:
    """A base model's steps: the inputs the client sends at each step of a lane's sequences
    (every sequence of a lane sends the same ones), the OUTPUT expected, and the state the
    client carries itself when the model is served stateless (input, output names)."""

    inputs: Callable[[int, int, bool], dict[str, np.ndarray]]  # (lane, step, stateless)
    expected: Callable[[int, int], np.ndarray]  # (lane, step) -> OUTPUT
    client_state: tuple[str, str] | None = None


def simple_value(lane: int, step: int) -> int:
    return 1 + (lane * 53 + step * 7) % 1000


def simple_inputs(lane: int, step: int, stateless: bool) -> dict[str, np.ndarray]:
    arrays = {"INPUT": np.array([[simple_value(lane, step)]], np.int32)}
    if stateless:  # the controls the sequence batcher would add, sent as inputs
        arrays["START"] = np.array([[int(step == 0)]], np.int32)
        arrays["READY"] = np.array([[1]], np.int32)
    return arrays


def simple_expected(lane: int, step: int) -> np.ndarray:
    """Triton's ``simple_sequence``: OUTPUT = READY × (INPUT + START)."""
    return np.array([[simple_value(lane, step) + (step == 0)]], np.int32)


SUM_PATTERN = np.array([1.0, -2.0, 3.0, -4.0], np.float32)


def sum_inputs(lane: int, step: int, stateless: bool = False) -> dict[str, np.ndarray]:
    return {"INPUT": (SUM_PATTERN * (lane % 7 + step + 1)).reshape(1, STATE_DIMS)}


def sum_expected(lane: int, step: int) -> np.ndarray:
    """The running sum of the sequence's inputs so far (the state starts at zeros)."""
    return sum((sum_inputs(lane, s)["INPUT"] for s in range(step + 1)), np.zeros_like(SUM_PATTERN))


CONTRACTS = {
    SIMPLE: Contract(simple_inputs, simple_expected),
    RUNNING_SUM: Contract(sum_inputs, sum_expected, ("INPUT_STATE", "OUTPUT_STATE")),
}


def check_output(result: Any, want: np.ndarray) -> str | None:
    got = result.as_numpy("OUTPUT")
    if got is None:
        return "missing OUTPUT"
    if got.shape != want.shape or not np.array_equal(got, want):
        return f"OUTPUT {got.tolist()}, {want.tolist()} expected"
    return None


# ---------------------------------------------------------------------------------------------
# The lanes
# ---------------------------------------------------------------------------------------------
class StreamCaller:
    """One ModelStreamInfer stream of tritonclient's asyncio client used one request at a
    time: ``call`` sends a request (a dict as ``stream_infer`` takes) and returns its answer."""

    def __init__(self, client: Any) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.stream = client.stream_infer(self._requests())

    async def _requests(self) -> Any:
        while (request := await self.queue.get()) is not None:
            yield request

    async def call(self, request: dict[str, Any]) -> Any:
        self.queue.put_nowait(request)
        result, error = await self.stream.__anext__()
        if error is not None:
            raise error
        return result

    async def close(self) -> None:
        """Half-closes the stream and reads it to its end (no answer may be left)."""
        self.queue.put_nowait(None)
        async for _ in self.stream:
            raise RuntimeError("an answer after the last request")


@dataclass
class LaneTally:
    """What the lanes share besides the window: the START steps' latencies and the sequences
    that ended inside the window."""

    start_latencies: list[float]
    ended: int = 0


class Lane:
    """One lane: sequences of ``sc.steps`` steps one after the other on one stream."""

    def __init__(self, sc: Scenario, lane: int, win: Window, tally: LaneTally, every: int):
        base, strategy = split_name(sc.model)
        self.sc, self.lane, self.win, self.tally, self.every = sc, lane, win, tally, every
        self.contract = CONTRACTS[base]
        self.stateless = strategy == STATELESS
        driver = GrpcDriver()
        self.driver = driver
        outputs = ("OUTPUT", self.contract.client_state[1]) if self._carries_state else ("OUTPUT",)
        self.prepared = [
            driver.prepare_tensors(self.contract.inputs(lane, step, self.stateless), outputs)
            for step in range(sc.steps)
        ]
        self.state_input = None
        if self._carries_state:
            name = self.contract.client_state[0]
            self.state_input = driver.mod.InferInput(name, [1, STATE_DIMS], "FP32")

    @property
    def _carries_state(self) -> bool:
        return self.stateless and self.contract.client_state is not None

    def request(self, step: int, n: int, closing: bool) -> dict[str, Any]:
        inputs, outputs = self.prepared[step]
        request: dict[str, Any] = {"model_name": self.sc.model, "outputs": outputs}
        if self.state_input is not None:
            inputs = [*inputs, self.state_input]
        request["inputs"] = inputs
        if not self.stateless:
            start, end = step_flags(step, self.sc.steps, closing)
            request.update(sequence_id=sequence_id(self.lane, n), sequence_start=start)
            request["sequence_end"] = end
        return request

    async def sequence(self, caller: StreamCaller, n: int) -> None:
        """One sequence; a closing window ends it early with an END step."""
        if self.state_input is not None:
            self.state_input.set_data_from_numpy(np.zeros((1, STATE_DIMS), np.float32))
        for step in range(self.sc.steps):
            closing = step > 0 and self.win.closed()
            request = self.request(step, n, closing)
            t0 = time.perf_counter()
            result = await caller.call(request)
            elapsed = time.perf_counter() - t0
            end = step == self.sc.steps - 1 or closing
            if self.win.open():
                self.win.latencies.append(elapsed)
                if step == 0:
                    self.tally.start_latencies.append(elapsed)
                self.tally.ended += end
            if self.state_input is not None:
                state = result.as_numpy(self.contract.client_state[1])
                self.state_input.set_data_from_numpy(state)
            if step % self.every == 0 or end:
                self.win.verified += 1
                problem = check_output(result, self.contract.expected(self.lane, step))
                if problem:
                    self.win.wrong.append(f"lane {self.lane} step {step}: {problem}")
            if end:
                return

    async def run(self, url: str) -> None:
        client = self.driver.client(url)
        caller = StreamCaller(client)
        try:
            n = 0
            while not self.win.closed():
                await self.sequence(caller, n)
                n += 1
            await caller.close()
        except Exception as exc:  # noqa: BLE001 - a failing scenario is reported, not fatal
            self.win.errors.append(f"lane {self.lane}: {type(exc).__name__}: {exc}")
        finally:
            caller.stream.cancel()
            await client.close()


def percentile_ms(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values) * 1e3, q)) if values else None


async def drive(sc: Scenario, server: Server, settings: Settings) -> Window:
    win, tally = Window(), LaneTally([])
    lanes = [Lane(sc, i, win, tally, settings.verify_every) for i in range(sc.concurrency)]
    url = server.url("grpc")
    await run_window(sc, server, settings, win, [lane.run(url) for lane in lanes])
    base, strategy = split_name(sc.model)
    win.extras.update(
        base_model=base,
        strategy=strategy,
        model_source=SOURCES.get(base, "?"),
        start_p50_ms=percentile_ms(tally.start_latencies, 50),
        start_p99_ms=percentile_ms(tally.start_latencies, 99),
        sequences_ended=tally.ended,
    )
    if win.start is not None and win.end is not None:
        win.extras["sequences_per_s"] = tally.ended / (win.end.wall - win.start.wall)
    return win


# ---------------------------------------------------------------------------------------------
# The server, the comparison with the stateless rows, the table
# ---------------------------------------------------------------------------------------------
def tritium(repo: Path, workdir: Path, args: tuple[str, ...], models: list[str]) -> Server:
    load = ("--model-control-mode=explicit", *(f"--load-model={m}" for m in models))
    return Server(repo, workdir, (*args, *load))


TARGETS = {TARGET: Target(tritium, "tritium (only the sequence list's models loaded)")}


def compare(rows: Rows) -> None:
    """Each direct / oldest row gets ``vs_stateless``: its steps/s, p50 and (server + stub)
    CPU per step ÷ those of the stateless row of the same base model."""
    stateless = {
        split_name(r["model"])[0]: r
        for r in rows
        if split_name(r["model"])[1] == STATELESS and "infer_per_s" in r
    }
    for row in rows:
        base, strategy = split_name(row["model"])
        ref = stateless.get(base)
        if strategy == STATELESS or ref is None or "infer_per_s" not in row:
            continue
        cpu, ref_cpu = (r["server_cpu_us"] + r["stub_cpu_us"] for r in (row, ref))
        row["vs_stateless"] = {
            "steps_per_s": row["infer_per_s"] / ref["infer_per_s"],
            "p50_ms": row["p50_ms"] / ref["p50_ms"] if ref["p50_ms"] else None,
            "cpu_us": cpu / ref_cpu if ref_cpu else None,
        }


COLUMNS = [
    Column("model", lambda r: split_name(r["model"])[0], left=True),
    Column("strategy", lambda r: split_name(r["model"])[1], left=True),
    Column("steps/s", "infer_per_s"),
    Column("seq/s", "sequences_per_s", 1),
    Column("p50 ms", "p50_ms", 2),
    Column("p99 ms", "p99_ms", 2),
    Column("START p99 ms", "start_p99_ms", 1),
    Column("avg batch", "avg_batch", 2),
    Column("exec batch", "avg_exec_batch", 2),
    *[Column(c.header.replace("/inf", "/step"), c.value) for c in CPU],
    Column("other cores", "other_cpu_util", 2),
    Column("steps ÷ stateless", "vs_stateless.steps_per_s", 2),
    Column("CPU × stateless", "vs_stateless.cpu_us", 2),
]


def table(rows: Rows) -> list[str]:
    sources = {r["base_model"]: r["model_source"] for r in rows if "model_source" in r}
    lines = rows_table(COLUMNS, rows)
    lines += ["", "Model files: " + "; ".join(f"`{b}` from {s}" for b, s in sources.items())]
    busy = [r for r in rows if (r.get("other_cpu_util") or 0) > 0.1]
    if busy:
        lines += [
            "",
            f"⚠ other processes used more than 0.1 cores during {len(busy)} of {len(rows)} "
            "rows: those figures are disturbed.",
        ]
    return lines


NOTE = (
    f"{LANES} lanes, each one tritonclient asyncio gRPC client with one ModelStreamInfer "
    f"stream, run sequences of {STEPS} steps (START, {STEPS - 2} middle steps, END) one after "
    f"the other, one step in flight: {LANES} sequences in flight for the whole window. "
    "A step's latency is send → answer; START p99 is that of the first steps only (under "
    "`direct` it includes the wait in the backlog for a slot). seq/s = sequences whose END "
    "was answered in the window ÷ window. `simple_sequence` (Python backend, INT32, OUTPUT = "
    "READY × (INPUT + START), START/READY controls) and `running_sum_onnx` (ONNX, FP32 [4], "
    "OUTPUT = state + INPUT, the state kept by the server: `sequence_batching.state`), both "
    f"`max_batch_size: {MAX_BATCH}`, one CPU instance. `direct`: {MAX_BATCH} slots, the other "
    f"sequences wait in the backlog; `direct64`: the same on {WIDE} instances, "
    f"{WIDE * MAX_BATCH} slots, every lane's sequence in one; `oldest`: "
    f"`max_candidate_sequences: {CANDIDATES}`, no queue delay. "
    "`stateless`: the same model file without `sequence_batching`, with "
    "`dynamic_batching { }` (no delay, batches of up to 8), the client sending START/READY "
    "(`simple_sequence`) or the state (`running_sum_onnx`: INPUT_STATE in, OUTPUT_STATE "
    "read back) itself. avg batch = requests ÷ executions, exec batch = rows computed ÷ "
    "executions (`batch_stats`: READY = 0 fillers included) over the window; CPU per step; "
    "÷ stateless: ÷ the stateless row of the same model (CPU: server + stub). Every 10th step "
    "and every END step is checked (the running sum checks the state kept so far)."
)
ISSUE = Issue(
    "sequence",
    sequence_scenarios,
    ratios="ratios to the same model served stateless in the same run (see below).",
    note=NOTE,
    table=table,
    row_ratios=compare,
    repository_extra=build_models,
    targets=TARGETS,
)
