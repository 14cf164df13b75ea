#!/usr/bin/env python3
"""The same network under ONNX Runtime, PyTorch and OpenVINO, each against its framework run
in-process.

    .venv/bin/python bench/backends.py [--seconds 3] [--batch 8,64] [--concurrency 1,2]
                                       [--rounds 2] [--protocol grpc|http]
                                       [--backends onnx,pytorch,openvino]

``mlp_small_onnx``, ``mlp_small_pytorch`` and ``mlp_small_openvino`` (examples/torch_models.py,
examples/openvino_models.py: one MLP 256 -> 1024 -> 1024 -> 16 with the same weights) are
served by one tritium child process; this process is
the client (tritonclient's asyncio client, gRPC or binary HTTP, closed loop: N coroutines
each sending a request of ``--batch`` rows when the previous answer arrives).

For each backend, batch size and concurrency it reports samples per second and the **server's
CPU seconds per sample** (utime + stime of the server process, from /proc), against a plain
Python loop running the same framework on the same batch size in this process
(``time.process_time`` per sample; ONNX Runtime with tritium's session settings, torch with
tritium's default intra-op pool of one thread, OpenVINO compiled as tritium compiles the
example for one instance: one stream, one thread, float32). The ratio server / in-process is
tritium's overhead; the target is at most 1.15 at batch >= 8. A request costs the server a
fixed amount (gRPC, decoding, scheduling; ~0.4 ms of CPU for the ``simple`` model on a quiet
2-core machine, bench/run.py), so the ratio falls as the batch grows: for this small network
the fixed cost is of the order of the compute of a batch of 8, and a small part of a batch of
64. Server and loop windows alternate, ``--rounds`` times, so load from elsewhere on the
machine falls on both; the median of the rounds is reported.

Results: bench/results/backends.json and .md (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from bench.common import proc_cpu_seconds  # noqa: E402
from tests.support.server_process import ServerProcess  # noqa: E402

MODELS = {
    "onnx": "mlp_small_onnx",
    "pytorch": "mlp_small_pytorch",
    "openvino": "mlp_small_openvino",
}
TARGET = 1.15


def build(target: Path) -> None:
    import build_models

    build_models.torch_examples(target)


class InProcess:
    """The framework on one batch, called in a plain loop."""

    def __init__(self, repo: Path, backend: str) -> None:
        self.backend = backend
        model = repo / MODELS[backend] / "1"
        if backend == "onnx":
            import onnxruntime as ort

            options = ort.SessionOptions()  # as backends/onnxruntime.py:_session_options
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            session = ort.InferenceSession(
                str(model / "model.onnx"), options, providers=["CPUExecutionProvider"]
            )
            self._call = lambda x: session.run(["OUTPUT__0"], {"INPUT__0": x})[0]
        elif backend == "openvino":
            self._call = _openvino_call(model / "model.xml")
        else:
            import torch

            torch.set_num_threads(1)  # as tritium's default intra-op pool
            module = torch.jit.load(str(model / "model.pt"))

            def call(x: np.ndarray) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(x)).numpy()

            self._call = call

    def measure(self, batch: int, seconds: float) -> dict[str, float]:
        x = np.random.default_rng(0).standard_normal((batch, 256), dtype=np.float32)
        for _ in range(5):
            self._call(x)
        calls, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - wall0 < seconds:
            self._call(x)
            calls += 1
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        samples = calls * batch
        return {"samples_per_s": samples / wall, "cpu_us_per_sample": 1e6 * cpu / samples}


def _openvino_call(xml: Path) -> Any:
    """One infer request of the IR, compiled as backends/openvino.py compiles the example's
    single instance (one stream, one inference thread, float32)."""
    import openvino as ov

    compiled = ov.Core().compile_model(
        str(xml),
        "CPU",
        {"NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"},
    )
    request = compiled.create_infer_request()
    return lambda x: request.infer({"INPUT__0": x}, share_inputs=True)["OUTPUT__0"]


async def _serve_window(  # noqa: PLR0913 - one window of one scenario
    server: ServerProcess,
    protocol: str,
    model: str,
    batch: int,
    concurrency: int,
    seconds: float,
) -> dict[str, float]:
    import tritonclient.grpc.aio as grpcaio
    import tritonclient.http.aio as httpaio

    module: Any = grpcaio if protocol == "grpc" else httpaio
    x = np.random.default_rng(0).standard_normal((batch, 256), dtype=np.float32)
    clients = [module.InferenceServerClient(server.url(protocol)) for _ in range(concurrency)]
    counts = [0] * concurrency
    state = {"measuring": False, "stop": False}

    async def loop(i: int) -> None:
        inp = module.InferInput("INPUT__0", [batch, 256], "FP32")
        inp.set_data_from_numpy(x)
        while not state["stop"]:
            result = await clients[i].infer(model, [inp])
            assert result.as_numpy("OUTPUT__0").shape == (batch, 16)
            if state["measuring"]:
                counts[i] += 1

    tasks = [asyncio.create_task(loop(i)) for i in range(concurrency)]
    await asyncio.sleep(min(1.0, seconds / 4))  # warm-up
    state["measuring"] = True
    pid = server.proc.pid
    wall0, cpu0 = time.perf_counter(), proc_cpu_seconds(pid)
    await asyncio.sleep(seconds)
    state["measuring"] = False
    wall, cpu = time.perf_counter() - wall0, proc_cpu_seconds(pid) - cpu0
    state["stop"] = True
    await asyncio.gather(*tasks)
    for c in clients:
        await c.close()
    samples = sum(counts) * batch
    return {"samples_per_s": samples / wall, "cpu_us_per_sample": 1e6 * cpu / max(samples, 1)}


def _batch_sizes(url: str, model: str) -> dict[int, int]:
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url)
    try:
        stats = c.get_inference_statistics(model).model_stats[0]
        return {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
    finally:
        c.close()


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="tritium-bench-backends-"))
    try:
        repo = work / "repo"
        build(repo)
        wanted = {MODELS[b] for b in args.backends}
        for name in list(p.name for p in repo.iterdir()):
            if name not in wanted:
                shutil.rmtree(repo / name)
        loops = {b: InProcess(repo, b) for b in args.backends}
        server = ServerProcess([repo], start_timeout=120)
        try:
            return _measure(args, server, loops)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure(
    args: argparse.Namespace, server: ServerProcess, loops: dict[str, InProcess]
) -> list[dict[str, Any]]:
    rows = []
    for backend in loops:
        model = MODELS[backend]
        for batch in args.batch:
            for concurrency in args.concurrency:
                rows.append(_scenario(args, server, loops[backend], model, batch, concurrency))
                print(_line(rows[-1]), flush=True)
    return rows


def _scenario(  # noqa: PLR0913 - one scenario of the grid
    args: argparse.Namespace,
    server: ServerProcess,
    loop: InProcess,
    model: str,
    batch: int,
    concurrency: int,
) -> dict[str, Any]:
    served, local = [], []
    before = _batch_sizes(server.grpc_url, model)
    for _ in range(args.rounds):  # alternate: the machine's other load hits both
        window = _serve_window(server, args.protocol, model, batch, concurrency, args.seconds)
        served.append(asyncio.run(window))
        local.append(loop.measure(batch, args.seconds / 2))
    after = _batch_sizes(server.grpc_url, model)
    row = _row(loop.backend, concurrency, batch, served, local, before, after)
    return {"protocol": args.protocol, **row}


def _median(windows: list[dict[str, float]], key: str) -> float:
    return statistics.median(w[key] for w in windows)


def _row(  # noqa: PLR0913 - one report row gathers them all
    backend: str,
    concurrency: int,
    batch: int,
    served: list[dict[str, float]],
    local: list[dict[str, float]],
    before: dict[int, int],
    after: dict[int, int],
) -> dict[str, Any]:
    cpu_server = _median(served, "cpu_us_per_sample")
    cpu_local = _median(local, "cpu_us_per_sample")
    return {
        "backend": backend,
        "batch": batch,
        "concurrency": concurrency,
        "server_samples_per_s": _median(served, "samples_per_s"),
        "inprocess_samples_per_s": _median(local, "samples_per_s"),
        "server_cpu_us_per_sample": cpu_server,
        "inprocess_cpu_us_per_sample": cpu_local,
        "cpu_ratio": cpu_server / cpu_local,
        "executions_by_batch_size": {
            str(k): v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)
        },
    }


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['protocol']:4} {row['backend']:8} batch {row['batch']:3} c{row['concurrency']:<2} "
        f"server {row['server_samples_per_s']:9.0f}/s {row['server_cpu_us_per_sample']:7.1f} µs "
        f"CPU/sample | in-process {row['inprocess_samples_per_s']:9.0f}/s "
        f"{row['inprocess_cpu_us_per_sample']:7.1f} µs | ratio {row['cpu_ratio']:.2f} "
        f"(target <= {TARGET}) | executions {row['executions_by_batch_size']}"
    )


def _report(rows: list[dict[str, Any]]) -> None:
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "backends.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "| protocol | backend | batch | concurrency | server samples/s | in-process samples/s "
        "| server CPU µs/sample | in-process CPU µs/sample | ratio | executions by batch size |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['protocol']} | {r['backend']} | {r['batch']} | {r['concurrency']} | "
            f"{r['server_samples_per_s']:.0f} | {r['inprocess_samples_per_s']:.0f} | "
            f"{r['server_cpu_us_per_sample']:.1f} | {r['inprocess_cpu_us_per_sample']:.1f} | "
            f"{r['cpu_ratio']:.2f} | {r['executions_by_batch_size']} |"
        )
    (out / "backends.md").write_text("\n".join(lines) + "\n")


_EXTRA = {"pytorch": "torch", "openvino": "openvino"}


def _installed(backend: str) -> bool:
    """Whether the backend's framework imports; a missing one is skipped, saying so."""
    module = _EXTRA.get(backend)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        print(f"bench/backends.py: {module} is not installed (pip install 'tritium[{backend}]')")
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    numbers = lambda t: [int(v) for v in t.split(",")]  # noqa: E731
    parser.add_argument("--seconds", type=float, default=3.0, help="one server window")
    parser.add_argument("--batch", type=numbers, default=[8, 64])
    parser.add_argument("--concurrency", type=numbers, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument(
        "--backends", type=lambda t: t.split(","), default=list(MODELS), help="a subset of these"
    )
    args = parser.parse_args(argv)
    args.backends = [b for b in args.backends if _installed(b)]
    rows = run(args)
    _report(rows)
    over = [r for r in rows if r["cpu_ratio"] > TARGET]
    print(f"{len(rows) - len(over)}/{len(rows)} rows within {TARGET}x the in-process CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
