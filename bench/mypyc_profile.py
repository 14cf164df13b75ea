"""What still runs interpreted in the compiled build: py-spy samples per function.

    PY_SPY=/path/to/py-spy python -m bench mypyc-profile [--seconds 8]
        [--models simple,add_sub_python] [--protocols http,grpc] [--pure]

Starts the server (compiled unless ``--pure``), drives each (model, protocol) with h2load as
``bench/mypyc_cpu.py`` does, and samples it with py-spy (``--native --gil``: only while the GIL
is held, C frames included). Each sample belongs to its innermost tritium/Python frame or
mypyc-compiled function (C libraries it called are counted to that caller), so the ``.py``
rows are the interpreted functions ranked by their own time: what compiling would remove next.
Prints the top rows per workload and the share of all samples per kind (interpreted,
compiled, C without a Python caller).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench.mypyc_cpu import Plan, grpc_body, http_body, py_spy_raw, start  # noqa: E402
from bench.server import model_subset  # noqa: E402


def _where(frame: str) -> tuple[str, str]:
    """(function, file) of one py-spy frame ``func (file:line)``."""
    func, _, rest = frame.partition(" (")
    return func, rest.rsplit(":", 1)[0].rstrip(")")


def owner(frames: list[str]) -> str:
    """The innermost interpreted function (``file:function``) or compiled function
    (``compiled file:function``) of a sample; ``C`` when none is on the stack."""
    for frame in reversed(frames):
        func, where = _where(frame)
        if where.endswith(".py"):
            short = where.split("site-packages/", 1)[-1].split("/src/", 1)[-1]
            return f"{short}:{func}"
        name = where.rsplit("/", 1)[-1]
        if name.startswith("__native_tritium___") or func.startswith("CPyDef_"):
            module = name[len("__native_") : -2].replace("___", "/")
            return f"compiled {module}:{func.removeprefix('CPyDef_')}"
    return "C"


# CPython's own C code: a sample whose innermost frame is there is the Python code's own time.
_INTERPRETER = (
    "Python/",
    "Objects/",
    "Modules/",
    "Include/",
    "Parser/",
    "libpython",
    "python3",
    ".h:",
)


def in_c_library(frames: list[str]) -> bool:
    """Whether the sample's innermost frame is a C library's (libc's system calls, uvloop,
    numpy, protobuf...), not Python code nor the interpreter: compiling the caller would not
    remove that time."""
    func, where = _where(frames[-1])
    if where.endswith(".py") or "<frozen" in where:
        return False
    return not any(marker in frames[-1] for marker in _INTERPRETER)


def shares(raw: str) -> tuple[Counter[str], Counter[str]]:
    """Samples per owner (``owner``), and of those the ones inside a C library it called."""
    counts: Counter[str] = Counter()
    below: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            frames = stack.split(";")
            key = owner(frames)
            counts[key] += int(count)
            if in_c_library(frames):
                below[key] += int(count)
    return counts, below


def sample(pid: int, command: list, seconds: float) -> tuple[Counter[str], Counter[str]]:
    raw = py_spy_raw(pid, command, seconds, rate=250)
    if raw is None:
        raise SystemExit("py-spy not found: set PY_SPY")
    if os.environ.get("PROFILE_RAW"):
        Path(os.environ["PROFILE_RAW"]).write_text(raw)
    return shares(raw)


def _kind(key: str) -> str:
    return "compiled" if key.startswith("compiled") else "C" if key == "C" else "interpreted"


def report(title: str, found: tuple[Counter[str], Counter[str]], top: int) -> None:
    """The share per kind (own time, and in C libraries below), then the interpreted functions
    ranked by their own time (the share in C below them beside it)."""
    counts, below = found
    total = sum(counts.values()) or 1
    kinds: Counter[str] = Counter()
    for key, n in counts.items():
        kinds[_kind(key) + " own"] += n - below[key]
        kinds[_kind(key) + " C below"] += below[key]
    print(
        f"\n== {title}: {total} samples; "
        + ", ".join(f"{k} {v / total:.1%}" for k, v in kinds.most_common())
    )
    own = Counter({k: n - below[k] for k, n in counts.items() if _kind(k) == "interpreted"})
    print("    own  C below  interpreted function")
    for key, n in own.most_common(top):
        print(f"  {n / total:5.1%}  {below[key] / total:5.1%}    {key}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--models", default="simple,add_sub_python")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--pure", action="store_true")
    args = parser.parse_args(argv)
    models, protocols = args.models.split(","), args.protocols.split(",")
    build = "pure" if args.pure else "compiled"
    with tempfile.TemporaryDirectory(prefix="tritium-mypyc-profile-") as tmp:
        tmpdir = Path(tmp)
        plan = Plan(args, {})
        for model in models:
            for protocol in protocols:
                make = http_body if protocol == "http" else grpc_body
                plan.bodies[model, protocol] = tmpdir / f"{model}.{protocol}.body"
                plan.bodies[model, protocol].write_bytes(make(model))
        server = start(build, model_subset(tmpdir / "models", models), tmpdir / "srv", models)
        try:
            for model, protocol in plan.bodies:
                command = plan.command(server, model, protocol, args.requests)
                subprocess.run(command, capture_output=True, check=False)  # warm-up
                report(
                    f"{build} {model} {protocol}",
                    sample(server.pid, command, args.seconds),
                    args.top,
                )
        finally:
            server.stop()
    return 0
