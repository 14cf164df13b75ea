"""What every fuzz target shares: the rejection rule, the per-input time bound, and a
mutating generator so hypothesis starts from valid inputs instead of pure noise.

A target is a plain function of one input that returns normally when the code under test
accepted or properly rejected the input, and raises anything else. The same function is
driven by hypothesis (short runs inside pytest) and by atheris (``make fuzz``)."""

from __future__ import annotations

import json
import os
import random
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritium.errors import ErrorKind, ServerError

# How a decoder may reject client bytes; anything else (or any other exception type) is a bug.
REJECT_KINDS = frozenset({ErrorKind.INVALID_ARG})

# CPU seconds one input may take. CPU time, not wall time: the machine running the suite is
# shared and noisy, but nothing in these decoders needs a full second of CPU for a few KiB.
INPUT_CPU_LIMIT_S = float(os.environ.get("FUZZ_INPUT_CPU_S", "1.0"))


class Hang(BaseException):
    """One input used more CPU than INPUT_CPU_LIMIT_S. A BaseException, so that the code
    under test cannot swallow it in an ``except Exception``."""


class FuzzFailure(AssertionError):
    """The code under test broke a rule without raising (e.g. answered 502)."""


def check_rejection(exc: ServerError) -> None:
    if exc.kind not in REJECT_KINDS:
        raise FuzzFailure(f"rejected with kind {exc.kind.name}, not INVALID_ARG: {exc!r}")
    if not isinstance(exc.message, str) or not exc.message.strip():
        raise FuzzFailure(f"rejected without a message: {exc!r}")


def _on_cpu_limit(signum: int, frame: Any) -> None:
    raise Hang(f"one input used more than {INPUT_CPU_LIMIT_S} s of CPU")


@contextmanager
def bounded() -> Iterator[None]:
    """Fail an input that spins: a CPU-time alarm interrupts Python code, and a check after
    the call catches time spent in C code that the alarm could not interrupt."""
    previous = signal.signal(signal.SIGVTALRM, _on_cpu_limit)
    signal.setitimer(signal.ITIMER_VIRTUAL, INPUT_CPU_LIMIT_S)
    start = time.thread_time()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
    used = time.thread_time() - start
    if used > INPUT_CPU_LIMIT_S:
        raise Hang(f"one input used {used:.2f} s of CPU (limit {INPUT_CPU_LIMIT_S} s)")


@dataclass(frozen=True)
class KnownBug:
    """A crash already reported (and owned by someone else): tolerated, so that fuzzing goes
    on past it, and counted. ``tests/fuzz/test_known_bugs.py`` holds its reproducer as a
    strict xfail: once the fix lands that test fails, and the entry here must go."""

    key: str
    where: tuple[str, ...]  # "<file>:<function>" of the innermost tritium frame that raised
    types: tuple[type[BaseException], ...]
    issue: str


KNOWN_BUGS: list[KnownBug] = []
_hits: dict[str, int] = {}


def known_bug(exc: BaseException) -> KnownBug | None:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/tritium/" in f.filename]
    if not frames:
        return None
    where = f"{frames[-1].filename.rsplit('/tritium/', 1)[1]}:{frames[-1].name}"
    for bug in KNOWN_BUGS:
        if where in bug.where and isinstance(exc, bug.types):
            return bug
    return None


def _record(bug: KnownBug, value: Any, exc: BaseException) -> None:
    """Count a tolerated hit; with FUZZ_KNOWN_DIR set, keep the count and first example."""
    count = _hits[bug.key] = _hits.get(bug.key, 0) + 1
    folder = os.environ.get("FUZZ_KNOWN_DIR")
    if folder and count & (count - 1) == 0:  # on hits 1, 2, 4, 8, ...
        path = os.path.join(folder, f"{bug.key}.json")
        os.makedirs(folder, exist_ok=True)
        first = _first.setdefault(bug.key, f"{type(exc).__name__}: {exc} <- {value!r}"[:2000])
        with open(path, "w") as sink:
            json.dump({"bug": bug.key, "issue": bug.issue, "hits": count, "first": first}, sink)


_first: dict[str, str] = {}


def guarded(check: Callable[[Any], None]) -> Callable[[Any], None]:
    """``check`` under the time bound, with known bugs counted instead of raised."""

    def run(value: Any) -> None:
        with bounded():
            try:
                check(value)
            except Exception as exc:
                bug = known_bug(exc)
                if bug is None:
                    raise
                _record(bug, value, exc)

    return run


@dataclass(frozen=True)
class Target:
    """A fuzz target: ``check(value)`` for values from ``strategy``. Byte targets
    (``raw=True``) take bytes, so atheris can feed them directly; the others take structured
    values, which atheris drives through hypothesis's ``fuzz_one_input``."""

    name: str
    check: Callable[[Any], None]
    strategy: st.SearchStrategy[Any]
    raw: bool = True
    seeds: list[bytes] = field(default_factory=list)
    tokens: list[bytes] = field(default_factory=list)
    max_len: int = 4096


def hypothesis_runner(target: Target, examples: int, derandomize: bool) -> Callable[[], None]:
    """A hypothesis test running ``target`` on ``examples`` generated values."""

    @settings(
        max_examples=examples,
        derandomize=derandomize,
        database=None,
        deadline=None,  # the CPU bound above replaces hypothesis's wall-clock deadline
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(target.strategy)
    def run(value: Any) -> None:
        one(value)

    one = guarded(target.check)
    return run


# -- a mutating byte generator -------------------------------------------------------------


def _apply(data: bytes, op: tuple[Any, ...]) -> bytes:
    kind, pos, arg = op
    pos = pos % (len(data) + 1)
    if kind == "insert":
        return data[:pos] + arg + data[pos:]
    if kind == "delete":
        return data[:pos] + data[pos + arg :]
    if kind == "flip":
        if pos >= len(data):
            return data
        return data[:pos] + bytes([data[pos] ^ (1 << (arg % 8))]) + data[pos + 1 :]
    if kind == "repeat":
        return data[:pos] + data[pos : pos + 16] * (arg % 8) + data[pos:]
    return data[:pos]  # truncate


def mutated(seeds: list[bytes], tokens: list[bytes]) -> st.SearchStrategy[bytes]:
    """A seed with a few random edits: inserted tokens or bytes, deletions, bit flips,
    repeats and truncation. Reaches the deep paths that uniform random bytes never do."""
    pieces = st.binary(max_size=8)
    if tokens:
        pieces = st.one_of(st.sampled_from(tokens), pieces)
    position = st.integers(0, 1 << 16)
    op = st.one_of(
        st.tuples(st.just("insert"), position, pieces),
        st.tuples(st.just("delete"), position, st.integers(1, 16)),
        st.tuples(st.just("flip"), position, st.integers(0, 7)),
        st.tuples(st.just("repeat"), position, st.integers(2, 7)),
        st.tuples(st.just("truncate"), position, st.none()),
    )

    def build(seed: bytes, ops: list[tuple[Any, ...]]) -> bytes:
        for one in ops:
            seed = _apply(seed, one)
        return seed

    return st.builds(build, st.sampled_from(seeds), st.lists(op, max_size=4))


def random_inputs(target: Target, count: int, seed: int) -> Iterator[bytes]:
    """``count`` inputs for a byte target from a seeded PRNG: the same mix as the hypothesis
    strategy (noise, seeds, mutated seeds) at a fraction of the cost per input."""
    rng = random.Random(seed)
    pieces = [*target.tokens, b"\x00", b"\xff", b"0", b"-1"]
    for _ in range(count):
        roll = rng.random()
        if roll < 0.15 or not target.seeds:
            yield rng.randbytes(rng.randrange(64))
            continue
        data = rng.choice(target.seeds)
        for _ in range(0 if roll < 0.2 else rng.randint(1, 4)):
            kind = rng.choice(["insert", "insert", "delete", "flip", "repeat", "truncate"])
            arg: Any = rng.choice(pieces) if rng.random() < 0.5 else rng.randbytes(4)
            if kind != "insert":
                arg = rng.randint(1, 16)
            data = _apply(data, (kind, rng.randrange(1 << 16), arg))
        yield data


def byte_inputs(seeds: list[bytes], tokens: list[bytes], max_size: int) -> st.SearchStrategy[bytes]:
    """Random bytes, seeds as they are, and mutated seeds."""
    return st.one_of(st.binary(max_size=max_size), st.sampled_from(seeds), mutated(seeds, tokens))
