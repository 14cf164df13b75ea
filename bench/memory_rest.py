"""Memory at rest: the idle server's whole process tree, tritium against Triton 2.51, for the
same Python models of examples/model_repository (issue 43).

    python -m bench memory [--models add_sub_python,simple_identity,square_int32,repeat_int32]
                           [--settle 8] [--sides tritium,triton]

Each side serves a copy of the models on free ports; once ready and ``--settle`` seconds
later, each process of the tree is read: RSS (``/proc/<pid>/status`` VmRSS) and PSS
(``/proc/<pid>/smaps_rollup``: shared pages divided among the processes that map them, so
the tree's PSS adds up to what it costs the machine). tritium is this checkout (``-m
tritium``, PYTHONPATH=src); Triton is /tmp/triton-ref through the shared serve.sh
(TRITON_DIR, as bench/vs_triton.py). Writes bench/results/memory.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from bench.proctree import tree  # noqa: E402
from bench.vs_triton import EXAMPLES, RESULTS, TRITON_DIR, _free_port, shared_scripts  # noqa: E402

DEFAULT_MODELS = "add_sub_python,simple_identity,square_int32,repeat_int32"
READY_TIMEOUT_S = 180.0


def _kib(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def _role(command: str) -> str:
    """What a process of either tree is, in a word."""
    for marker, role in (
        ("tritium.backends.python.stub_zygote", "stub zygote"),
        ("tritium.backends.python.stub", "stub"),
        ("triton_python_backend_stub", "stub"),
        (" -I -S -c ", "stub group keeper"),
        ("tritonserver", "server"),
        ("-m tritium serve", "server"),
    ):
        if marker in command:
            return role
    return "other"


def processes(root: int) -> list[dict[str, Any]]:
    rows = []
    for pid in tree(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        rss = _kib(f"/proc/{pid}/status", "VmRSS")
        pss = _kib(f"/proc/{pid}/smaps_rollup", "Pss:")
        if rss == 0 and pss == 0:  # serve.sh's bash before its exec, a zombie
            continue
        rows.append(
            {"pid": pid, "role": _role(command), "rss_mib": rss / 1024, "pss_mib": pss / 1024,
             "command": " ".join(command.split())[:100]}
        )  # fmt: skip
    return rows


def _command(side: str, repo: Path, ports: list[int]) -> tuple[list[str], dict[str, str]]:
    flags = ["--http-port", str(ports[0]), "--grpc-port", str(ports[1])]
    flags += ["--metrics-port", str(ports[2])]
    if side == "triton":
        scripts = shared_scripts()
        if scripts is None:
            raise SystemExit("Triton's serve.sh not found (TRITON_SHARED)")
        env = {**os.environ, "TRITON_DIR": str(TRITON_DIR)}
        return ["bash", str(scripts / "serve.sh"), str(repo), *flags], env
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return [sys.executable, "-m", "tritium", "serve", "--model-repository", str(repo), *flags], env


def measure(side: str, models: list[str], settle: float, work: Path) -> dict[str, Any]:
    repo = work / f"repo-{side}"
    for model in models:
        shutil.copytree(EXAMPLES / model, repo / model)
    ports = [_free_port() for _ in range(3)]
    command, env = _command(side, repo, ports)
    with open(work / f"{side}.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_ready(ports[0], proc)
            time.sleep(settle)
            rows = processes(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "side": side,
        "processes": rows,
        "rss_mib": sum(r["rss_mib"] for r in rows),
        "pss_mib": sum(r["pss_mib"] for r in rows),
    }


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    url = f"http://127.0.0.1:{port}/v2/health/ready"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server was not ready in time")


def markdown(results: list[dict[str, Any]], models: list[str], settle: float) -> str:
    lines = [
        "# Memory at rest (`python -m bench memory`)",
        "",
        f"Models: {', '.join(models)} (examples/model_repository, one instance each); "
        f"measured {settle:g} s after ready. PSS from /proc/<pid>/smaps_rollup (shared pages "
        "divided among the processes that map them), RSS from /proc/<pid>/status.",
        "",
        "| side | processes | RSS MiB | PSS MiB |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['side']} | {len(r['processes'])} | {r['rss_mib']:.1f} | "
                     f"{r['pss_mib']:.1f} |")  # fmt: skip
    by_side = {r["side"]: r for r in results}
    if "tritium" in by_side and "triton" in by_side and by_side["triton"]["pss_mib"]:
        ratio = by_side["tritium"]["pss_mib"] / by_side["triton"]["pss_mib"]
        lines += ["", f"tritium's PSS ÷ Triton's: **{ratio:.2f}×**"]
    lines += ["", "| side | role | RSS MiB | PSS MiB | command |", "|---|---|---|---|---|"]
    for r in results:
        for p in r["processes"]:
            lines.append(f"| {r['side']} | {p['role']} | {p['rss_mib']:.1f} | "
                         f"{p['pss_mib']:.1f} | `{p['command'][:70]}` |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__)
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--settle", type=float, default=8.0)
    parser.add_argument("--sides", default="tritium,triton")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        results = [measure(s, models, args.settle, Path(tmp)) for s in args.sides.split(",")]
    text = markdown(results, models, args.settle)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.md").write_text(text)
    (args.out / "memory.json").write_text(json.dumps(results, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
