"""The load of the soak suite: paced tritonclient asyncio workers over HTTP and gRPC whose every
answer is checked, the tally of what happened, and the mixer that turns every N-th request slot
into a hostile request (bench/hostile_clients.py ``hostile_kinds``) run on a thread."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.hostile_clients import SOAK_TIMEOUT_S, HostileKind
from bench.probes import process_sample
from bench.soak_attacks import ATTACK_MAX_S
from bench.soak_resource_attacks import RESOURCE_ATTACK_MAX_S

REQUEST_TIMEOUT_S = 30.0
HOSTILE_TIMEOUT_S = max(SOAK_TIMEOUT_S, ATTACK_MAX_S, RESOURCE_ATTACK_MAX_S)
HOSTILE_IN_FLIGHT = 8
# gRPC UNAVAILABLE texts of grpcio itself (no answer came), not of the server
LOST_MARKERS = (
    "Socket closed",
    "Connection reset",
    "failed to connect",
    "Broken pipe",
    "Stream removed",
    "GOAWAY",
    "Connection refused",
    "Transport closed",
)


@dataclass
class Tally:
    answered: Counter[str] = field(default_factory=Counter)  # "http/simple" -> answers
    errors: Counter[str] = field(default_factory=Counter)  # "http/simple 400" -> count
    examples: dict[str, str] = field(default_factory=dict)  # one message per error kind
    wrong: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)  # "http/simple ServerDisconnected"
    hostile: Counter[str] = field(default_factory=Counter)  # "gzip_bomb: 400" -> count
    hostile_runs: Counter[str] = field(default_factory=Counter)  # kind -> finished runs
    hostile_items: Counter[str] = field(default_factory=Counter)  # "kind: what" -> summed
    hostile_max_s: dict[str, float] = field(default_factory=dict)  # kind -> longest run
    hostile_peaks: dict[str, float] = field(default_factory=dict)  # "kind: max what" -> max
    findings: Counter[str] = field(default_factory=Counter)  # "kind: what!" -> count
    hostile_skipped: int = 0
    health: Counter[str] = field(default_factory=Counter)  # /v2/health/ready status -> polls
    last_answer: float = field(default_factory=time.monotonic)
    failure: str | None = None

    def error(self, key: str, kind: str, message: str) -> None:
        self.errors[f"{key} {kind}"] += 1
        self.examples.setdefault(f"{key} {kind}", message[:200])

    def lose(self, key: str, kind: str, message: str) -> None:
        """A request that got no answer (timeout, connection broken or refused)."""
        self.lost[f"{key} {kind}"] += 1
        self.examples.setdefault(f"{key} {kind} (lost)", message[:200])

    def fail(self, why: str) -> None:
        self.failure = self.failure or why

    def record_hostile(self, kind: str, outcome: Outcome, seconds: float) -> None:
        """One finished hostile run: its outcome (of a {what: how many}, the whats seen, the
        numbers summed per kind; a ``max ...`` what is a figure: its largest is kept) and how
        long it took. An outcome or what with ``!`` or ``WRONG`` is a finding."""
        if isinstance(outcome, dict):
            for what, n in outcome.items():
                if what.startswith("max "):
                    peak = f"{kind}: {what}"
                    self.hostile_peaks[peak] = max(n, self.hostile_peaks.get(peak, n))
                    continue
                self.hostile_items[f"{kind}: {what}"] += int(n)
                if is_finding(what):
                    self.findings[f"{kind}: {what}"] += int(n)
            outcome = " + ".join(sorted(k for k in outcome if not k.startswith("max ")))
            outcome = outcome or "nothing"
        elif is_finding(outcome):
            self.findings[f"{kind}: {outcome}"] += 1
        self.hostile[f"{kind}: {outcome}"] += 1
        self.hostile_runs[kind] += 1
        self.hostile_max_s[kind] = round(max(seconds, self.hostile_max_s.get(kind, 0.0)), 1)


Outcome = str | dict[str, int] | dict[str, float]


def is_finding(what: str) -> bool:
    return "!" in what or "WRONG" in what


def sample(label: str, pid: int, started: float, tally: Tally) -> dict[str, Any]:
    return {
        "label": label,
        "t_s": round(time.monotonic() - started, 1),
        "answered": sum(tally.answered.values()),
        **process_sample(pid),
    }


# ---------------------------------------------------------------------------------------------
# Normal load
# ---------------------------------------------------------------------------------------------
def client_module(protocol: str) -> Any:
    if protocol == "http":
        import tritonclient.http.aio as module
    else:
        import tritonclient.grpc.aio as module
    return module


def prepare(protocol: str, seed: int) -> tuple[list, list, np.ndarray, np.ndarray]:
    module = client_module(protocol)
    rng = np.random.default_rng(seed)
    in0, in1 = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
    inputs = []
    for name, array in (("INPUT0", in0), ("INPUT1", in1)):
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = [module.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    return inputs, outputs, in0, in1


class Pace:
    """Open-loop schedule of one worker: one slot every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval, self.next = interval, time.monotonic()

    async def wait(self) -> None:
        self.next += self.interval
        delay = self.next - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -1.0:  # more than 1 s behind: drop the backlog instead of bursting
            self.next = time.monotonic()


@dataclass
class Load:
    """What the workers share."""

    urls: dict[str, str]
    tally: Tally
    stop: asyncio.Event
    mixer: HostileMixer
    interval: float


async def worker(index: int, protocol: str, model: str, load: Load) -> None:
    from tritonclient.utils import InferenceServerException

    client = client_module(protocol).InferenceServerClient(load.urls[protocol])
    inputs, outputs, in0, in1 = prepare(protocol, index)
    key, pace = f"{protocol}/{model}", Pace(load.interval)
    try:
        while not load.stop.is_set():
            await pace.wait()
            if load.mixer.take_slot():
                continue
            try:
                result = await asyncio.wait_for(
                    client.infer(model, inputs, outputs=outputs), REQUEST_TIMEOUT_S
                )
            except TimeoutError:
                load.tally.lose(key, "client timeout", f"no answer in {REQUEST_TIMEOUT_S} s")
            except InferenceServerException as exc:
                record_error(load.tally, key, str(exc.status()), str(exc.message()))
            except Exception as exc:  # noqa: BLE001 - a broken connection is a finding
                load.tally.lose(key, type(exc).__name__, str(exc))
            else:
                record_answer(load.tally, key, result, in0, in1)
    finally:
        await client.close()


def record_error(tally: Tally, key: str, status: str, message: str) -> None:
    """An error answer, or a lost request where grpcio says no answer came."""
    if status == "StatusCode.UNAVAILABLE" and any(m in message for m in LOST_MARKERS):
        tally.lose(key, status, message)
    else:
        tally.error(key, status, message)


def record_answer(tally: Tally, key: str, result: Any, in0: np.ndarray, in1: np.ndarray) -> None:
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    if np.array_equal(out0, in0 + in1) and np.array_equal(out1, in0 - in1):
        tally.answered[key] += 1
        tally.last_answer = time.monotonic()
    else:
        tally.wrong[key] += 1


# ---------------------------------------------------------------------------------------------
# Hostile requests (blocking, on threads)
# ---------------------------------------------------------------------------------------------
class HostileMixer:
    """Every ``every``-th request slot (all workers together) becomes a hostile request."""

    def __init__(self, every: int, kinds: list[HostileKind], ports: dict[str, int], tally: Tally):
        self.every, self.ports, self.tally = every, ports, tally
        self.kinds, self.count = itertools.cycle(kinds), len(kinds)
        self.last_run: dict[str, float] = {}  # kind -> monotonic time of its last launch
        self.slots = self.launched = 0
        self.pool = ThreadPoolExecutor(HOSTILE_IN_FLIGHT, thread_name_prefix="hostile")
        self.tasks: set[asyncio.Future] = set()

    def take_slot(self) -> bool:
        """True when this slot went to a hostile request (or was skipped for one)."""
        self.slots += 1
        if self.every <= 0 or self.slots % self.every:
            return False
        if len(self.tasks) >= HOSTILE_IN_FLIGHT:
            self.tally.hostile_skipped += 1
            return True
        kind, count = self.next_kind(), self.launched
        if kind is None:  # every kind waits for its gap: a normal request
            return False
        self.launched += 1
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(self.pool, self._run, kind, count)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    def next_kind(self) -> HostileKind | None:
        """The next kind of the rotation whose ``gap_s`` since its last run has passed."""
        now = time.monotonic()
        for _ in range(self.count):
            kind = next(self.kinds)
            if now - self.last_run.get(kind.name, float("-inf")) >= kind.gap_s:
                self.last_run[kind.name] = now
                return kind
        return None

    def _run(self, kind: HostileKind, count: int) -> None:
        started = time.monotonic()
        try:
            outcome = kind.run(self.ports[kind.protocol], count)
        except Exception as exc:  # noqa: BLE001 - the client's own failure is an outcome
            outcome = f"client {type(exc).__name__}"
            self.tally.examples.setdefault(f"{kind.name}: {outcome}", str(exc)[:200])
        self.tally.record_hostile(kind.name, outcome, time.monotonic() - started)

    async def drain(self) -> None:
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=HOSTILE_TIMEOUT_S + 10)
        self.pool.shutdown(wait=False, cancel_futures=True)
