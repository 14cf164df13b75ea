"""What every part of the bench shares: the scenario, a scenario list (``Issue``), the run's
settings, the request/answer contract of the unary workers, the measuring window, and CPU
snapshots (read by bench/proctree.py).

The bench's layers, each importing only those above it (tests/unit/test_bench_layout.py checks
that there is no cycle): ``proctree`` (CPU, memory, files of a process tree) → ``common`` →
``drivers``, ``server``, ``baselines``, ``report`` → ``engine`` → ``scenarios/*`` (one module
per list) → ``catalog`` (the registries) → ``cli`` (the scenario suites). The hostile-http and
soak suites sit on ``raw_http`` → ``probes``, ``hostile_clients`` → ``soak_load`` →
``hostile_cli``, ``soak_cli`` (with ``server`` and ``report``); the hostile-grpc suite on
``hostile_clients`` → ``hostile_grpc_clients`` → ``hostile_grpc_cli``. ``kit/*``: what the
suites share with the tests, copied (the bench imports nothing from ``tests``). The suites'
registry is ``suites``, the entry point ``__main__``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.proctree import children, machine_busy_seconds
from bench.proctree import cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
BUILD_MODELS = ROOT / "examples" / "build_models.py"
Rows = list[dict[str, Any]]


# ---------------------------------------------------------------------------------------------
# The ensembles the bench measures (the ``ensembles`` list chains their composing models on the
# client; ``Scenario.models`` waits for them and reads their statistics).
# ---------------------------------------------------------------------------------------------
ENSEMBLE = "image_classifier"
# The same pipeline as ONE Python model calling the three models with BLS (the ``bls`` list).
BLS_PIPELINE = "image_classifier_bls"


@dataclass(frozen=True)
class Step:
    model: str
    input: str
    output: str


STEPS = (
    Step("preprocess", "IMAGE", "PIXELS"),
    Step("classifier", "PIXELS", "PROBABILITIES"),
    Step("postprocess", "PROBABILITIES", "LABELS"),
)
# The composing models of each ensemble the list measures, in chaining order.
CHAINS: dict[str, tuple[Step, ...]] = {ENSEMBLE: STEPS}
# Every measured pipeline (an ensemble, or a BLS model calling the same steps), by model: the
# models whose statistics its rows read, and whose expected answers are precomputed.
PIPELINES: dict[str, tuple[Step, ...]] = {**CHAINS, BLS_PIPELINE: STEPS}


def composing(model: str) -> tuple[str, ...]:
    """The composing models of ``model`` when it is a measured pipeline, else ()."""
    return tuple(step.model for step in PIPELINES.get(model, ()))


# ---------------------------------------------------------------------------------------------
# Scenarios and scenario lists: one list per issue, in a module of bench/scenarios/ each, named
# in catalog.ISSUES (a new wire path adds a driver in drivers.PROTOCOLS; a new model a baseline
# in catalog.BASELINES and, unless it follows the ``simple`` contract, a Contract).
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
    # the server that answers: "" the run's tritium server, else a name of an Issue's
    # ``targets`` (its own server, e.g. the grpc list's tritium or the bare grpc.aio floor)
    target: str = ""
    # sequences (the ``sequence`` list): each of the ``concurrency`` lanes runs sequences of
    # ``steps`` requests (START ... END), one after the other
    steps: int = 0
    # BLS call overhead (the ``bls`` list): the parent model calls ``child`` with a tensor of
    # ``tensor_bytes`` bytes, many times per request
    child: str = ""
    tensor_bytes: int = 0

    @property
    def name(self) -> str:
        suffix = f"/n{self.responses}" if self.responses else ""
        suffix += f"/s{self.steps}" if self.steps else ""
        suffix += f"/{self.child}/{self.tensor_bytes}B" if self.child else ""
        suffix += "/chained" if self.chained else ""
        suffix += f"@{self.target}" if self.target else ""
        return f"{self.model}/{self.protocol}/c{self.concurrency}{suffix}"

    @property
    def models(self) -> tuple[str, ...]:
        """The model and, for a pipeline, its composing models, or the BLS child (waited for,
        statistics)."""
        return (self.model, *composing(self.model), *((self.child,) if self.child else ()))


@dataclass(frozen=True)
class Target:
    """A server of its own for the scenarios naming it (``Scenario.target``), started when its
    first scenario runs and stopped after its last: ``start(repository, workdir, server_args,
    models)`` returns it started (its ``pid``, ``url(key)``, ``wait_ready(models)``,
    ``healthy()``, ``log_tail()``, ``stop()`` and ``statistics``, as ``server.Server``).
    ``grpc_only``: it serves no HTTP (no HTTP variant of its scenarios)."""

    start: Callable[[Path, Path, tuple[str, ...], list[str]], Any]
    what: str
    grpc_only: bool = False


@dataclass(frozen=True)
class Issue:
    """A scenario list (``--issue NAME``, one report ``NAME.md`` / ``NAME.json``): its
    scenarios and what its report and the server need."""

    name: str
    scenarios: Callable[[], list[Scenario]]
    # the header's sentence on the ratio columns
    ratios: str = (
        "ratios: throughput ÷ baseline calls/s, (server+stub CPU) ÷ baseline CPU per call."
    )
    note: str = ""  # a paragraph under the header
    table: Callable[[Rows], list[str]] | None = None  # its rows' table; None: the regular one
    row_ratios: Callable[[Rows], None] | None = None  # ratios between its rows
    server_args: tuple[str, ...] = ()  # flags the one server of a run then gets
    # models the list adds to the bench's copy of the example repository
    repository_extra: Callable[[Path], None] | None = None
    # servers of its own its scenarios name (Scenario.target), besides the run's server
    targets: dict[str, Target] = field(default_factory=dict)


@dataclass
class Settings:
    warmup: float = 1.0
    seconds: float = 5.0
    baseline_seconds: float = 3.0
    verify_every: int = 10
    quick: bool = False


@dataclass
class CpuSnapshot:
    wall: float
    server: float
    stubs: dict[int, float]
    client: float
    machine: float = 0.0  # busy CPU seconds of the whole machine (all processes)

    @classmethod
    def take(cls, server_pid: int) -> CpuSnapshot:
        stubs = {pid: cpu_seconds(pid) for pid in children(server_pid)}
        return cls(
            time.perf_counter(),
            cpu_seconds(server_pid),
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


# ---------------------------------------------------------------------------------------------
# The measuring window and the ``simple`` contract of the unary workers.
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
    extras: dict[str, Any] = field(default_factory=dict)  # a list's own fields for its rows

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
