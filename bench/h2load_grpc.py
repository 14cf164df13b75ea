"""Server CPU per unary gRPC ``ModelInfer`` of ``simple``, measured with ``h2load`` (issue 24).

``h2load`` (Debian's nghttp2-client, a C client that costs almost nothing) sends gRPC-framed
requests — ``body.bin`` is one length-prefixed ModelInferRequest for ``simple`` — over
``-c`` connections with ``-m`` streams each; the server's CPU (user + system, the main
process and its children, from ``/proc/<pid>/stat``) over the run, divided by the requests
answered, is the CPU per inference. Several source trees (each with its ``.venv`` and built
models: ``make venv models``) can be compared: they are measured in turn, alternating, for
``--rounds`` rounds, so that the machine's load falls on all of them alike; only the ratios
within one run mean anything on a shared machine.

    python -m bench grpc-cpu [--requests 20000] [--rounds 3] \\
        [--compare ../other-tree ...] [--out bench/results/grpc-cpu.md]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from bench.process import tree_python
from bench.proctree import tree_cpu_seconds
from bench.server import model_subset

ROOT = Path(__file__).resolve().parents[1]
PATH = "/inference.GRPCInferenceService/ModelInfer"
START_TIMEOUT = 120.0


def request_body(model: str = "simple") -> bytes:
    """A gRPC message (5-byte prefix) holding ``simple``'s two INT32 [1, 16] inputs."""
    message = pb.ModelInferRequest(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    message.raw_input_contents.extend(
        [np.arange(16, dtype=np.int32).tobytes(), np.ones(16, np.int32).tobytes()]
    )
    data = message.SerializeToString()
    return b"\0" + len(data).to_bytes(4, "big") + data


class TreeServer:
    """``python -m tritium serve`` of one source tree (its own venv, or this interpreter on its
    ``src``; its example models, or ``simple`` built here), only ``simple`` loaded, every port 0."""

    def __init__(self, tree: Path, workdir: Path) -> None:
        self.tree = tree
        ports = workdir / "ports.json"
        self.log = open(workdir / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        python, env = tree_python(tree)
        repo = tree / "examples" / "model_repository"
        if not (repo / "simple" / "1" / "model.onnx").is_file():  # no `make models` there
            repo = model_subset(workdir, ["simple"])
        command = [
            python, "-m", "tritium", "serve",
            "--model-repository", str(repo),
            "--model-control-mode=explicit", "--load-model=simple",
            "--ports-file", str(ports),
        ]  # fmt: skip
        for service in ("http", "grpc", "metrics"):
            command += [f"--{service}-address", "127.0.0.1", f"--{service}-port", "0"]
        self.proc = subprocess.Popen(
            command, cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not ports.exists() or not ports.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{tree}: the server did not start")
            time.sleep(0.1)
        self.ports = json.loads(ports.read_text())
        self._wait_ready(deadline)

    def _wait_ready(self, deadline: float) -> None:
        url = f"http://127.0.0.1:{self.ports['http']}/v2/models/simple/ready"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.tree}: simple not ready")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['grpc']}{PATH}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@dataclass
class Sample:
    tree: str
    round: int
    requests: int
    cpu_s: float
    wall_s: float

    @property
    def cpu_us_per_inference(self) -> float:
        return self.cpu_s / self.requests * 1e6

    @property
    def rate(self) -> float:
        return self.requests / self.wall_s


def h2load(url: str, body: Path, requests: int, connections: int, streams: int) -> int:
    """Runs h2load; the requests that succeeded (all of them, or it raises)."""
    h2load_bin = shutil.which("h2load")
    if h2load_bin is None:
        raise SystemExit("h2load not found: `make interop-deps` installs nghttp2-client")
    command = [
        h2load_bin, "-n", str(requests), "-c", str(connections), "-m", str(streams),
        "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers", url,
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    if done is None or int(done.group(1)) != requests:
        raise RuntimeError(f"h2load did not succeed on every request:\n{out}")
    return requests


def measure(tree: Path, body: Path, args: argparse.Namespace, index: int) -> Sample:
    with tempfile.TemporaryDirectory(prefix="h2load-grpc-") as workdir:
        server = TreeServer(tree, Path(workdir))
        try:
            h2load(server.url, body, args.warmup, args.connections, args.streams)
            before, start = tree_cpu_seconds(server.proc.pid), time.monotonic()
            done = h2load(server.url, body, args.requests, args.connections, args.streams)
            cpu, wall = tree_cpu_seconds(server.proc.pid) - before, time.monotonic() - start
        finally:
            server.stop()
    return Sample(str(tree), index, done, cpu, wall)


def report(samples: list[Sample], trees: list[Path], args: argparse.Namespace) -> str:
    lines = [
        f"h2load -n {args.requests} -c {args.connections} -m {args.streams} (after "
        f"{args.warmup} warm-up requests), unary ModelInfer of `simple`; server CPU = user + "
        "system of the server process and its descendants, /proc/<pid>/stat.",
        "",
        "| round | tree | CPU per inference (µs) | requests/s |",
        "|---|---|---|---|",
    ]
    for sample in samples:
        lines.append(
            f"| {sample.round} | {sample.tree} | {sample.cpu_us_per_inference:.1f} | "
            f"{sample.rate:,.0f} |"
        )
    medians = {
        str(tree): statistics.median(s.cpu_us_per_inference for s in samples if s.tree == str(tree))
        for tree in trees
    }
    first = medians[str(trees[0])]
    lines += ["", "| tree | median CPU per inference (µs) | vs the first tree |", "|---|---|---|"]
    for tree, median in medians.items():
        lines.append(f"| {tree} | {median:.1f} | {median / first:.2f}× |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--compare", type=Path, action="append", default=[],
        help="another source tree to measure, alternating with this one",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "grpc-cpu.md", help="the report"
    )
    args = parser.parse_args(argv)
    trees = [ROOT, *(tree.resolve() for tree in args.compare)]
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as handle:
        handle.write(request_body())
        body = Path(handle.name)
    samples: list[Sample] = []
    try:
        for index in range(1, args.rounds + 1):
            order = trees if index % 2 else list(reversed(trees))  # alternate who goes first
            for tree in order:
                sample = measure(tree, body, args, index)
                print(f"round {index} {tree}: {sample.cpu_us_per_inference:.1f} µs CPU per "
                      f"inference, {sample.rate:,.0f}/s", flush=True)  # fmt: skip
                samples.append(sample)
    finally:
        body.unlink()
    text = report(samples, trees, args)
    print(text)
    args.out.write_text(text)
