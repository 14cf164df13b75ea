"""Whether a small execution runs on the event loop or goes to the instance's thread, decided
from costs measured on the running machine (no threshold tuned on another one).

Both costs are what the loop loses to one execution, in wall time. An inline run blocks the
loop for all of it: ``inline_cost``, a moving average of the wall time of runs made on the
loop. A hand-off costs the loop the part of its round trip (from handing the work over to
resuming with the answer) that the loop could not spend on anything else: the round trip less
the larger of two credits, ``handoff_cost``:

- the thread's compute in the runtime (the GIL released): what the loop is free for during
  it, whether or not it has work (the credit of an idle loop: a big model goes to the thread);
- the loop's own work on other requests during the round trip, the *overlap*: the loop
  thread's CPU time over the round trip, divided by ``share``, the fraction of a core the
  loop gets while it runs (CPU over wall of its inline runs: a throttled or shared core
  gives it less than one). A saturated loop spends nearly the whole trip on the next
  requests' protocol work, so a hand-off then costs it only what the thread's Python takes
  of the GIL, the wake-ups and the waits nothing overlapped; an idle loop overlaps nothing.

So the same model runs inline while the loop has idle time (a hand-off's wake-ups then are
pure latency) and on the thread when the loop is the busiest thread and the compute and the
thread's part of a batch overlap with other requests; and inline again where the overlap is
lost (one core for both threads, or the GIL convoys: waits nothing overlapped). A hand-off of
``n`` runs is one round trip, so ``n`` inline runs are weighed against one hand-off.

Both estimates go stale while the other path is taken: after every ``probe_every`` samples of
the preferred path, and at least ``probe_gap`` seconds after the last probe, the other one is
taken until it has given one sample, so the decision can flip back when conditions change
(load, CPU frequency, a neighbour on the core). The gap bounds what probes cost: a probe of
the thread stalls the requests queued behind it for a whole round trip, which on a busy CPU
(the thread waits for a core, then for the GIL) is milliseconds, and a fast model gives 64
samples in a few of those (bench/results/onnx-inline.md).

Where a model may run at all is ``ModelExecution``'s, one per model version, shared by its
instances (ONNX Runtime, PyTorch, OpenVINO alike):

- the model's ``TRITIUM_EXECUTION`` parameter (config.pbtxt ``parameters``, tritium's own
  key: Triton ignores it, so the same file still loads there): ``auto`` (the default: the
  measured costs choose), ``thread`` (never on the loop) or ``inline`` (the loop whenever
  allowed, costs unmeasured: benchmarks, `python -m bench onnx-inline`); the environment variable
  ``TRITIUM_EXECUTION`` (or its older name ``TRITIUM_ONNX_EXECUTION``) sets the server-wide
  default; any other value fails the load;
- a model whose cost can depend on input values (backends/data_dependence.py, decided at
  load) never runs on the loop, whatever the setting;
- and any run on the loop that takes more than ``BOUND_WALL`` of wall time, or more than
  ``BOUND_CPU`` of the loop thread's CPU (the model computed that long on the loop: a
  preemption does not count), pins the model to its instance threads for good, logged once.
  The CPU is timed on one run in ``SHARE_EVERY`` (it costs two system calls), and on every
  run for a while after a run that took more than ``BOUND_CPU`` of wall time untimed.

Both paths pay for the GIL: the runtime releases it while it computes, and a thread that wants
it back waits for whichever Python thread took it to let go, up to ``sys.getswitchinterval()``
(5 ms by default) when that thread is busy (the loop serving other clients, a decode worker, the
log writer). ``switch_interval`` is the shorter interval a server with an instance thread runs
with (``SWITCH_INTERVAL_US``; ``TRITIUM_SWITCH_INTERVAL_US`` sets another for benchmarks).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ..errors import ServerError, invalid_arg
from ..logs.settings import about_model

log = logging.getLogger("tritium")

MODES = ("auto", "inline", "thread")
PARAMETER: Final = "TRITIUM_EXECUTION"  # the model's setting (config.pbtxt parameters)
ENV: Final = "TRITIUM_EXECUTION"  # the server-wide default
LEGACY_ENV: Final = "TRITIUM_ONNX_EXECUTION"  # its older name (ONNX only then)
# The hard bound of one run on the loop: more of the loop thread's CPU than this, or more
# wall time than BOUND_WALL, pins the model to its threads. A cheap model runs in tens of
# microseconds; a hand-off costs about a hundred, so a model this dear never gains by the
# loop. BOUND_WALL is for frameworks that compute on threads of their own (OpenVINO's
# streams) while the loop waits; it is far above a preemption of a loaded machine.
BOUND_CPU: Final = 0.002
BOUND_WALL: Final = 0.05
# The loop thread's CPU is read (a system call each side, 1-2 µs on a loaded VM) on one run
# in SHARE_EVERY, and on every run for SUSPECT_RUNS runs after a run past BOUND_CPU in wall
# time that was not timed (threaded.py).
SHARE_EVERY: Final = 8
SUSPECT_RUNS: Final = 64
SWITCH_ENV = "TRITIUM_SWITCH_INTERVAL_US"
# The GIL switch interval once an instance thread exists: a thread waiting for the GIL behind a
# busy one gets it within this (bench/results/onnx-inline.md: 5 ms made every run wait).
SWITCH_INTERVAL_US = 200
MAX_SWITCH_INTERVAL_US = 1_000_000
ALPHA = 0.2  # weight of a new sample in the moving averages
OUTLIER = 4.0  # a new sample counts for at most this many times the average
PROBE_EVERY = 64  # samples of the preferred path between two probes of the other
PROBE_GAP = 0.5  # and seconds, at least, between two probes
MIN_SHARE = 0.05  # the least share of a core the loop is taken to get (a bound, not a tuning)


def mode_from_env(environ: Mapping[str, str] | None = None) -> str:
    """The server-wide default: ``TRITIUM_EXECUTION`` (or ``TRITIUM_ONNX_EXECUTION``), or
    ``auto``."""
    env = os.environ if environ is None else environ
    for name in (ENV, LEGACY_ENV):
        value = env.get(name, "").strip().lower()
        if value:
            if value not in MODES:
                raise mode_error(name, value)
            return value
    return "auto"


def mode_error(name: str, value: str) -> ServerError:
    return invalid_arg(f"{name} must be one of {', '.join(MODES)}, got '{value}'")


def execution_mode(parameters: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str:
    """A model's setting: its ``TRITIUM_EXECUTION`` parameter, else the server-wide default."""
    if PARAMETER not in parameters:
        return mode_from_env(environ)
    value = parameters[PARAMETER].strip().lower()
    if value not in MODES:
        raise mode_error(f"parameter '{PARAMETER}'", parameters[PARAMETER])
    return value


class ModelExecution:
    """Whether one model's executions may run on the event loop, shared by its instances:
    ``threads_only`` once its setting says ``thread``, its cost depends on input values
    (``reason``, decided at load), or a run on the loop passed the hard bound (``bounded``)."""

    def __init__(self, model: str, mode: str = "auto", reason: str = "") -> None:
        self.model = model
        self.mode = mode
        self.reason = reason or ("its setting is 'thread'" if mode == "thread" else "")
        self.threads_only = bool(self.reason)
        self.suspect = 0  # runs left to time in CPU after a slow one that was not
        if reason:
            log.info(
                "model '%s' runs on its instance threads only: %s",
                model,
                reason,
                extra=about_model(model),
            )

    def bounded(self, wall: float, cpu: float | None) -> None:
        """One run on the loop took ``wall`` seconds, ``cpu`` of them the loop thread's CPU
        (None: not timed in CPU). Past the hard bound the model stays on its threads from now
        on (logged once); a run past ``BOUND_CPU`` in wall time that was not timed in CPU
        has the next ``SUSPECT_RUNS`` runs timed (``suspect``): a run past the bound in CPU
        among them pins the model, a preempted one (wall time without CPU) does not."""
        if self.threads_only:
            return
        if wall > BOUND_WALL or (cpu is not None and cpu > BOUND_CPU):
            self._pin(wall, cpu)
        elif cpu is None and wall > BOUND_CPU:
            self.suspect = SUSPECT_RUNS
        elif cpu is not None and self.suspect:
            self.suspect -= 1

    def _pin(self, wall: float, cpu: float | None) -> None:
        self.threads_only = True
        spent = f"{cpu * 1e3:.1f} ms of CPU" if cpu is not None else "CPU not timed"
        self.reason = (
            f"a run on the event loop took {wall * 1e3:.1f} ms ({spent}), past the bound of "
            f"{BOUND_CPU * 1e3:g} ms of CPU or {BOUND_WALL * 1e3:g} ms"
        )
        log.warning(
            "model '%s' runs on its instance threads only from now on: %s",
            self.model,
            self.reason,
            extra=about_model(self.model),
        )


def switch_interval(environ: dict[str, str] | None = None) -> float:
    """The GIL switch interval (seconds) for a server with instance threads: the default,
    or ``TRITIUM_SWITCH_INTERVAL_US`` (whole microseconds, 1 to 1,000,000)."""
    text = (os.environ if environ is None else environ).get(SWITCH_ENV, "").strip()
    if not text:
        return SWITCH_INTERVAL_US / 1e6
    if not text.isdigit() or not 1 <= int(text) <= MAX_SWITCH_INTERVAL_US:
        raise invalid_arg(
            f"{SWITCH_ENV} must be a whole number of microseconds from 1 to "
            f"{MAX_SWITCH_INTERVAL_US}, got '{text}'"
        )
    return int(text) / 1e6


def _average(old: float | None, sample: float) -> float:
    """A moving average whose new sample counts for at most ``OUTLIER`` times the average
    (a run preempted for milliseconds on a loaded machine moves it, but does not flip the
    choice alone; a lasting change still shows within a few samples)."""
    if old is None:
        return sample
    if old > 0.0:
        sample = min(sample, OUTLIER * old)
    return (1.0 - ALPHA) * old + ALPHA * sample


@dataclass
class InlinePolicy:
    mode: str = "auto"
    probe_every: int = PROBE_EVERY
    probe_gap: float = PROBE_GAP
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    inline_cost: float | None = None  # seconds per run on the loop
    handoff_cost: float | None = None  # seconds per hand-off the loop spends on nothing else
    share: float = 1.0  # the loop's CPU over wall while it runs (of its inline runs)
    _run_cpu: float | None = None  # moving averages of the inline runs timed in CPU too
    _run_wall: float | None = None
    seeded: bool = False  # inline_cost is a stand-in from a thread run, not measured inline
    probing: bool = False  # the other path is due for a sample
    probe_inline: bool = False  # which path the probe takes
    _since_probe: int = 0
    _probed_at: float | None = None  # when the last probe began

    def prefers_inline(self, runs: int = 1) -> bool:
        """Whether ``runs`` executions should run on the loop now."""
        if self.mode != "auto":
            return self.mode == "inline"
        if self.handoff_cost is None or self.inline_cost is None:
            return False  # nothing measured: the thread cannot block the loop on a big model
        return self.probe_inline if self.probing else self._better_inline(runs)

    def settled(self) -> str:
        """The path the measured costs prefer for one run, probes aside: ``inline``,
        ``thread``, or ``unmeasured``."""
        if self.mode != "auto":
            return self.mode
        if self.handoff_cost is None or self.inline_cost is None:
            return "unmeasured"
        return "inline" if self._better_inline() else "thread"

    def _better_inline(self, runs: int = 1) -> bool:
        assert self.inline_cost is not None and self.handoff_cost is not None
        return runs * self.inline_cost <= self.handoff_cost

    def record_inline(self, seconds: float, cpu: float | None = None) -> None:
        """One run made on the loop took ``seconds``, of which the loop thread got ``cpu``
        seconds of a core (None: not measured)."""
        if self.seeded:  # the stand-in gives way to the first real measurement
            self.inline_cost, self.seeded = None, False
        self.inline_cost = _average(self.inline_cost, seconds)
        if cpu is not None and seconds > 0.0:  # a ratio of averages: one preemption is rare
            self._run_cpu = _average(self._run_cpu, max(cpu, 0.0))
            self._run_wall = _average(self._run_wall, seconds)
            self.share = min(max(self._run_cpu / self._run_wall, MIN_SHARE), 1.0)
        self._sampled(inline=True)

    def record_handoff(  # noqa: PLR0913 - one hand-off's measures
        self, runs: int, roundtrip: float, compute: float, busy: float, overlap: float = 0.0
    ) -> None:
        """A hand-off of ``runs`` executions came back after ``roundtrip`` seconds, of which
        the thread spent ``compute`` in the runtime and ``busy`` in the runs altogether, and
        the loop thread ``overlap`` seconds of CPU (on other work) meanwhile."""
        overlapped = min(roundtrip, overlap / self.share)
        lost = roundtrip - max(compute, overlapped)
        self.handoff_cost = _average(self.handoff_cost, max(0.0, lost))
        if self.inline_cost is None and runs > 0:
            self.inline_cost, self.seeded = busy / runs, True
        self._sampled(inline=False)

    def _sampled(self, inline: bool) -> None:
        if self.mode != "auto" or self.inline_cost is None or self.handoff_cost is None:
            return
        if self.probing:
            if inline == self.probe_inline:  # the probed path gave its sample
                self.probing, self._since_probe = False, 0
            return
        if inline != self._better_inline():
            return  # a run that had to take the other path (too big, or several at once)
        self._since_probe += 1
        if self._since_probe >= self.probe_every and self._gap_passed():
            self.probing, self.probe_inline = True, not self._better_inline()

    def _gap_passed(self) -> bool:
        now = self.clock()
        if self._probed_at is not None and now - self._probed_at < self.probe_gap:
            return False
        self._probed_at = now
        return True
