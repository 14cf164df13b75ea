"""The long fuzz run (``make fuzz``): each target in its own process under atheris
(libFuzzer, coverage-guided), for a bounded number of inputs; crashes, hangs and
reproducers go to ``<dir>/crashes``. Exits non-zero when any target found a problem.

    python tests/fuzz/run_fuzz.py --runs 100000 --dir build/fuzz [TARGET ...]

Without atheris (no wheel for this Python) the same targets run under hypothesis.
Reproduce a crash: ``python tests/fuzz/run_fuzz.py --worker TARGET <crash file>``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# Modules whose coverage guides the fuzzer: tritium itself and the pure-Python protobuf text
# parser behind config.pbtxt. Not hypothesis, numpy or the harness: their edges are noise.
INSTRUMENT = ["tritium", "google.protobuf.text_format"]
_STATS = re.compile(r"stat::(\w+):\s+(\d+)")
_COV = re.compile(r"cov: (\d+) ft: (\d+) corp: (\d+)")


def worker(name: str, args: list[str]) -> None:
    """Run one target under libFuzzer; ``args`` are libFuzzer's flags and corpus paths."""
    import atheris

    with atheris.instrument_imports(include=INSTRUMENT):
        from fuzz_harness import guarded, hypothesis_runner
        from fuzz_targets import TARGETS
    target = TARGETS[name]
    if target.raw:
        one_input = guarded(target.check)
    else:  # atheris mutates hypothesis's choice sequence; hypothesis builds the value
        one_input = hypothesis_runner(target, 1, derandomize=False).hypothesis.fuzz_one_input
    atheris.Setup([sys.argv[0], *args], one_input)
    atheris.Fuzz()


def _prepare(out: Path, target: object) -> tuple[Path, list[str]]:
    corpus = out / "corpus" / target.name
    corpus.mkdir(parents=True, exist_ok=True)
    for index, seed in enumerate(target.seeds):
        (corpus / f"seed-{index}").write_bytes(seed)
    flags = [f"-max_len={target.max_len}"]
    if not target.raw:  # a hypothesis choice sequence: too short a one builds nothing
        flags.append("-len_control=0")
    if target.tokens:
        tokens = out / "dict" / f"{target.name}.dict"
        tokens.parent.mkdir(parents=True, exist_ok=True)
        tokens.write_text("".join(f'"{_escape(t)}"\n' for t in target.tokens))
        flags.append(f"-dict={tokens}")
    return corpus, flags


def _escape(token: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\x{b:02x}" for b in token)


def run_atheris(name: str, target: object, runs: int, out: Path) -> dict[str, object]:
    corpus, flags = _prepare(out, target)
    crashes = out / "crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        __file__,
        "--worker",
        name,
        f"-runs={runs}",
        "-timeout=20",  # wall seconds per input (hangs in C); the harness bounds CPU at 1 s
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={crashes}/{name}-",
        *flags,
        str(corpus),
    ]
    known = out / "known" / name
    env = {**os.environ, "FUZZ_KNOWN_DIR": str(known)}
    started = time.monotonic()
    with log.open("w") as sink:
        rc = subprocess.call(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    text = log.read_text(errors="replace")
    stats = {k: int(v) for k, v in _STATS.findall(text)}
    cov = _COV.findall(text)
    return {
        "target": name,
        "ok": rc == 0,
        "inputs": stats.get("number_of_executed_units", 0),
        "seconds": round(time.monotonic() - started, 1),
        "cov": int(cov[-1][0]) if cov else None,
        "features": int(cov[-1][1]) if cov else None,
        "corpus": int(cov[-1][2]) if cov else None,
        "peak_rss_mb": stats.get("peak_rss_mb"),
        "known_bug_hits": {p.stem: json.loads(p.read_text())["hits"] for p in known.glob("*.json")},
        "log": str(log),
    }


def run_hypothesis(name: str, target: object, runs: int, out: Path) -> dict[str, object]:
    from fuzz_harness import hypothesis_runner

    started = time.monotonic()
    ok = True
    try:
        hypothesis_runner(target, runs, derandomize=False)()
    except BaseException as exc:  # noqa: BLE001 - every failure is a finding to report
        ok = False
        crash = out / "crashes" / f"{name}-hypothesis.txt"
        crash.parent.mkdir(parents=True, exist_ok=True)
        crash.write_text(f"{type(exc).__name__}: {exc}\n")
    seconds = round(time.monotonic() - started, 1)
    return {"target": name, "ok": ok, "inputs": runs, "seconds": seconds}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", help="targets to run (default: all)")
    parser.add_argument("--runs", type=int, default=int(os.environ.get("FUZZ_RUNS", 100_000)))
    parser.add_argument("--dir", type=Path, default=Path("build/fuzz"))
    parser.add_argument("--engine", choices=["atheris", "hypothesis"], default=None)
    args = parser.parse_args()
    from fuzz_targets import TARGETS

    engine = args.engine or _default_engine()
    results = []
    for name in args.targets or list(TARGETS):
        run = run_atheris if engine == "atheris" else run_hypothesis
        results.append(run(name, TARGETS[name], args.runs, args.dir))
        print(json.dumps(results[-1]), flush=True)
    return _report(results, args.dir)


def _default_engine() -> str:
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: fuzzing with hypothesis (no coverage guidance)")
        return "hypothesis"
    return "atheris"


def _report(results: list[dict[str, object]], out: Path) -> int:
    for path in sorted((out / "known").glob("*/*.json")):
        print(f"known bug hit (tolerated) in {path.parent.name}: {path.read_text().strip()}")
    failed = [r["target"] for r in results if not r["ok"]]
    crashes = sorted(p.name for p in (out / "crashes").glob("*")) if failed else []
    print(f"fuzzed {len(results)} targets; failed: {failed or 'none'}; artifacts: {crashes}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
