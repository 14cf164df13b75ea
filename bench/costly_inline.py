"""How long one costly request of a few bytes blocks everyone else, and what a cheap model
costs per request: the inline-or-thread policy (backends/execution_policy.py) seen from
clients.

    python -m bench inline-policy [--steps 3000000] [--side 1500] [--cheap 200]
                                            [--simple 2000] [--execution auto,thread]
                                            [--log DIR] [--workers N]

For each execution setting (``TRITIUM_EXECUTION``, the server-wide default) one server over
three models: ``pt_spin`` (a TorchScript loop of INPUT__0 steps, 8 input bytes), and
``onnx_square`` (ConstantOfShape of SHAPE, 16 bytes, then a MatMul: n*n*m) from
bench/kit/costly_models.py, and the example ``simple`` (ONNX add/sub, INT32 [16]).
``--cheap`` small requests first teach the instance that the model is fast; then one costly
request runs while another client asks ``/v2/health/ready`` every 5 ms on its own connection:
the figures are the costly request's duration, the longest health answer meanwhile and how
many health answers came back before the costly one did. Then ``--simple`` sequential
``simple`` requests over HTTP (one client, keep-alive): mean and p50 latency, which shows
whether the cheap model still runs on the loop (inline) or pays a hand-off each time.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import tritonclient.http as httpclient  # noqa: E402

import build_models  # noqa: E402
from bench.kit import costly_models  # noqa: E402
from bench.process import ServerProcess  # noqa: E402


def build(root: Path) -> Path:
    costly_models.write_onnx(root)
    costly_models.write_torch(root)
    (root / "simple" / "1").mkdir(parents=True)
    config = ROOT / "examples" / "model_repository" / "simple" / "config.pbtxt"
    (root / "simple" / "config.pbtxt").write_text(config.read_text())
    model = build_models._add_sub_model("simple", "TYPE_INT32")
    (root / "simple" / "1" / "model.onnx").write_bytes(model.SerializeToString())
    return root


def _input(name: str, values: list[int]) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, [len(values)], "INT64")
    tensor.set_data_from_numpy(np.array(values, dtype=np.int64))
    return tensor


def _request(model: str, costly: bool, args: argparse.Namespace) -> httpclient.InferInput:
    if model == costly_models.SPIN:
        return _input("INPUT__0", [args.steps if costly else 1])
    side = args.side if costly else 1
    return _input("SHAPE", [side, side])


class Prober(threading.Thread):
    """``/v2/health/ready`` every 5 ms on one keep-alive connection until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.latencies: list[tuple[float, float]] = []  # (answered at, seconds)
        self.halt = threading.Event()

    def run(self) -> None:
        host, port = self.url.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        while not self.halt.is_set():
            started = time.perf_counter()
            conn.request("GET", "/v2/health/ready")
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
            now = time.perf_counter()
            self.latencies.append((now, now - started))
            time.sleep(0.005)
        conn.close()


def costly_row(url: str, model: str, args: argparse.Namespace) -> dict[str, float]:
    client = httpclient.InferenceServerClient(url, network_timeout=600)
    for _ in range(args.cheap):
        client.infer(model, [_request(model, False, args)])
    prober = Prober(url)
    prober.start()
    time.sleep(0.2)
    started = time.perf_counter()
    result = client.infer(model, [_request(model, True, args)])
    done = time.perf_counter()
    prober.halt.set()
    prober.join()
    client.close()
    during = [s for at, s in prober.latencies if started < at < done]
    blocked = [s for at, s in prober.latencies if at > started]
    return {
        "costly_s": done - started,
        "answer": float(result.as_numpy(result.get_response()["outputs"][0]["name"])[0]),
        "health_during": len(during),
        "health_max_ms": max(blocked) * 1e3 if blocked else float("nan"),
    }


def simple_row(url: str, count: int) -> dict[str, float]:
    client = httpclient.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    times = []
    for _ in range(count + 100):
        started = time.perf_counter()
        client.infer("simple", inputs)
        times.append(time.perf_counter() - started)
    client.close()
    times = times[100:]
    return {"mean_us": statistics.fmean(times) * 1e6, "p50_us": statistics.median(times) * 1e6}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3_000_000)
    parser.add_argument("--side", type=int, default=1500)
    parser.add_argument("--cheap", type=int, default=200)
    parser.add_argument("--simple", type=int, default=2000)
    parser.add_argument("--execution", default="auto,thread")
    parser.add_argument("--log", help="keep the servers' logs here (with --log-verbose 1)")
    parser.add_argument("--workers", type=int, default=0, help="serve with --workers N")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        repo = build(Path(tmp) / "repo")
        print(
            "| execution | model | costly request s | health answers meanwhile "
            "| longest health ms | simple mean µs | simple p50 µs |"
        )
        print("|---|---|---|---|---|---|---|")
        for execution in args.execution.split(","):
            env = {"TRITIUM_EXECUTION": execution, "TRITIUM_ONNX_EXECUTION": execution}
            workdir = Path(args.log) / execution if args.log else None
            if workdir:
                workdir.mkdir(parents=True, exist_ok=True)
            verbose = ("--log-verbose", "1") if workdir else ()
            server = ServerProcess([repo], *verbose, env=env, start_timeout=120, workdir=workdir)
            try:
                url = server.url("http")
                simple = simple_row(url, args.simple)
                for model in (costly_models.SPIN, costly_models.SQUARE):
                    row = costly_row(url, model, args)
                    print(
                        f"| {execution} | {model} | {row['costly_s']:.2f} "
                        f"| {row['health_during']} | {row['health_max_ms']:.1f} "
                        f"| {simple['mean_us']:.0f} | {simple['p50_us']:.0f} |",
                        flush=True,
                    )
            finally:
                server.stop()
