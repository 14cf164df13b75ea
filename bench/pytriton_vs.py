"""tritium.pytriton vs PyTriton 0.7 (its embedded Triton 2.51) serving the same bound function
(bench/pytriton_serve.py: add_sub with @batch behind a dynamic batcher), measured by the real
perf_analyzer 2.60 at c16 over HTTP and gRPC, the two sides alternating, repeated.

    python -m bench pytriton [--rounds 2] [--interval 2000]

Needs ../shared/triton/setup.sh's install (TRITON_DIR, default /tmp/triton-ref). PyTriton's
Python stub links the system's libpython3.11 while its interpreter's standard library may be
another 3.11 (pyenv's here): the side runs with that interpreter's libpython first on
LD_LIBRARY_PATH (``--pytriton-libpython``), else its model fails to initialize.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from bench.vs_triton import TRITON_DIR, _free_port, perf_analyzer, shared_scripts, triton_installed
from bench.vs_triton_report import Row

ROOT = Path(__file__).resolve().parent.parent
SERVE = ROOT / "bench" / "pytriton_serve.py"
PYTRITON_PYTHON = TRITON_DIR / "pytriton" / "bin" / "python"


class Side:
    def __init__(self, name: str, libpython: str) -> None:
        self.name = name
        self.ports = [_free_port() for _ in range(3)]
        self.ready = Path(tempfile.mkdtemp()) / "ready"
        env = dict(os.environ)
        if name == "tritium":
            python = sys.executable
            env["PYTHONPATH"] = str(ROOT / "src")
        else:
            python = str(PYTRITON_PYTHON)
            env["LD_LIBRARY_PATH"] = ":".join(
                p for p in (libpython, env.get("LD_LIBRARY_PATH")) if p
            )
        self._log = open(self.ready.parent / "log", "wb")  # noqa: SIM115 - closed in stop()
        args = [python, str(SERVE), name, *map(str, self.ports), str(self.ready)]
        self.proc = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd="/tmp"
        )

    def wait(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.ready.parent / "log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} did not start: {tail}")
            time.sleep(0.2)

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[0] if protocol == 'http' else self.ports[1]}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench pytriton", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval", type=int, default=2000, help="ms per perf_analyzer window")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pytriton-libpython", default=sysconfig.get_config_var("LIBDIR") or "")
    args = parser.parse_args(argv)
    scripts = shared_scripts()
    if scripts is None or not triton_installed() or not PYTRITON_PYTHON.is_file():
        print(f"pytriton: skipped: PyTriton / perf_analyzer not set up under {TRITON_DIR}")
        return 0
    sides = [Side("tritium", ""), Side("pytriton", args.pytriton_libpython)]
    try:
        for side in sides:
            side.wait()
        results: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds):
            for protocol in ("http", "grpc"):
                row = Row(
                    f"{protocol}-c{args.concurrency}", protocol, args.concurrency, dynamic=True
                )
                order = sides if round_ % 2 == 0 else sides[::-1]
                for side in order:
                    figures = perf_analyzer(
                        scripts, row, "add_sub", side.url(protocol), args.interval
                    )
                    results.setdefault((protocol, side.name), []).append(figures["throughput"])
                    print(f"round {round_} {protocol} c{args.concurrency} {side.name}: "
                          f"{figures['throughput']:.0f} infer/s, p50 {figures['p50_us']:.0f} µs, "
                          f"p99 {figures['p99_us']:.0f} µs", flush=True)  # fmt: skip
        for protocol in ("http", "grpc"):
            ours, theirs = results[(protocol, "tritium")], results[(protocol, "pytriton")]
            best_ours, best_theirs = max(ours), max(theirs)
            ratio = best_ours / best_theirs
            print(f"{protocol} c{args.concurrency}: tritium.pytriton best {best_ours:.0f}/s, "
                  f"PyTriton 0.7 best {best_theirs:.0f}/s: {ratio:.2f}x")  # fmt: skip
    finally:
        for side in sides:
            side.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
