"""The same networks under ONNX Runtime, PyTorch and OpenVINO, each against its framework run
in-process.

    python -m bench backends [--seconds 2] [--batch 8,32,64,128] [--concurrency 1,2]
                                       [--rounds 2] [--protocol grpc|http]
                                       [--backends onnx,pytorch,openvino]
                                       [--networks small,large,floor]

Networks, each copy with the same weights and tensor names (``INPUT__0`` -> ``OUTPUT__0``),
dynamic batching as the examples (``max_queue_delay_microseconds: 1000``), one instance:

- ``small``: the examples ``mlp_small_onnx``, ``mlp_small_pytorch``, ``mlp_small_openvino``
  (examples/torch_models.py, openvino_models.py: 256 -> 1024 -> 1024 -> 16), about 1.3 M
  multiply-adds per sample; the copy here says ``max_batch_size: 1024`` (the examples' 64),
  so that its best batch can be measured;
- ``large``: ``mlp_large_*``, made here (no download): 1024 -> 4096 -> 4096 -> 1000 from a
  fixed seed, about 25 M multiply-adds per sample (a recommender tower, a classifier head);
- ``floor``: ``floor_*``, a model that does nothing (256 -> its first 16 columns): what a
  request costs the server over the protocol with the framework's own cost taken away, the
  floor of the ratio for a network that is cheap per sample.

The client is ``h2load`` (bench/h2load_infer.py) sending one prebuilt request of ``--batch``
rows (gRPC raw contents, or HTTP/1.1 with binary tensors), closed loop, ``--concurrency``
requests in flight: a C client that encodes nothing per request, as the in-process loop
encodes nothing. (tritonclient's asyncio client, used before, spent more CPU per request than
the server on the 2-core bench machine, and its load fell on the server's measurement.)

For each network, backend, batch size and concurrency it reports samples per second and the
**server's CPU seconds per sample** (the run time of the server's threads, /proc/<pid>/task/
*/schedstat; split into the event-loop thread and the others: the instance thread, the
framework's pools), against a
plain Python loop running the same framework on the same batch in this process
(``time.process_time`` per sample; ONNX Runtime with tritium's session settings, torch with
tritium's default intra-op pool of one thread, OpenVINO compiled as tritium compiles the model
for one instance: one stream, one thread, float32). The ratio server / in-process is tritium's
overhead; the target is at most 1.15 at batch >= 8. When the dynamic batcher joins requests
into larger executions, the loop is also measured at the batch the server mostly ran, and the
ratio reported is the larger of the two (bench/backends_report.py); the tables start with each
network and backend's best cell. A request costs the server a fixed amount
(the floor rows), so the ratio falls as the batch and the network grow. Server and loop windows
alternate, ``--rounds`` times, so load from elsewhere on the machine falls on both; the median
of the rounds is reported.

Results: bench/results/backends.json and .md (git-ignored).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))  # build_models, a script importing its siblings

from bench import h2load_infer, proctree  # noqa: E402
from bench.backends_report import TARGET, line, ratio, report  # noqa: E402
from bench.process import ServerProcess  # noqa: E402

BACKENDS = ("onnx", "pytorch", "openvino")
NETWORKS = {  # network -> (model name stem, layer sizes; the floor's are its input and output)
    "small": ("mlp_small", (256, 1024, 1024, 16)),
    "large": ("mlp_large", (1024, 4096, 4096, 1000)),
    "floor": ("floor", (256, 16)),
}
LARGE_SEED = 20261204
BENCH_MAX_BATCH = 1024  # every copy here (the small one's config says 64 in the examples)


def model_name(network: str, backend: str) -> str:
    return f"{NETWORKS[network][0]}_{backend}"


def build(target: Path, networks: list[str]) -> None:
    """The examples' small network, and the networks made here, under every backend whose
    framework is installed (the ONNX file first: OpenVINO's IR is converted from it)."""
    import build_models

    build_models.torch_examples(target)
    shutil.rmtree(target / "pytorch_classifier", ignore_errors=True)
    for config in target.glob(f"{NETWORKS['small'][0]}_*/config.pbtxt"):  # this copy only
        text = config.read_text()
        config.write_text(text.replace("max_batch_size: 64", f"max_batch_size: {BENCH_MAX_BATCH}"))
    if "large" in networks:
        sizes = NETWORKS["large"][1]
        layers = build_models._mlp_weights(sizes, LARGE_SEED)
        nodes, initializers = build_models._dense_nodes("INPUT__0", layers, "OUTPUT__0")
        _write_copies(target, "large", nodes, initializers, _torch_mlp(layers))
    if "floor" in networks:
        _write_copies(target, "floor", *_floor_onnx(), _torch_floor())


def _config(network: str, backend: str) -> str:
    import openvino_models
    import torch_models

    line = {
        "onnx": 'platform: "onnxruntime_onnx"',
        "pytorch": 'platform: "pytorch_libtorch"',
        "openvino": openvino_models.OPENVINO_LINES,
    }[backend]
    sizes = NETWORKS[network][1]
    text = torch_models._NET_CONFIG.format(
        name=model_name(network, backend), backend=line, width=sizes[0], classes=sizes[-1]
    )
    return text.replace("max_batch_size: 64", f"max_batch_size: {BENCH_MAX_BATCH}")


def _write_copies(
    target: Path, network: str, nodes: Any, initializers: Any, torch_module: Any
) -> None:
    import build_models

    sizes = NETWORKS[network][1]
    model = build_models._onnx_model(
        model_name(network, "onnx"),
        nodes,
        [build_models._fp32("INPUT__0", ["batch", sizes[0]])],
        [build_models._fp32("OUTPUT__0", ["batch", sizes[-1]])],
        initializers,
    )
    onnx_dir = _model_dir(target, network, "onnx")
    (onnx_dir / "1" / "model.onnx").write_bytes(model.SerializeToString())
    if _installed("pytorch", quiet=True) and torch_module is not None:
        import torch_models

        (_model_dir(target, network, "pytorch") / "1" / "model.pt").write_bytes(
            torch_models._scripted(torch_module)
        )
    if _installed("openvino", quiet=True):
        import openvino as ov

        converted = ov.convert_model(str(onnx_dir / "1" / "model.onnx"))
        xml = _model_dir(target, network, "openvino") / "1" / "model.xml"
        ov.save_model(converted, str(xml), compress_to_fp16=False)


def _model_dir(target: Path, network: str, backend: str) -> Path:
    directory = target / model_name(network, backend)
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "config.pbtxt").write_text(_config(network, backend))
    return directory


def _torch_mlp(layers: Any) -> Any:
    if not _installed("pytorch", quiet=True):
        return None
    import torch_models

    return torch_models._mlp(layers)


def _floor_onnx() -> tuple[list[Any], list[Any]]:
    """The do-nothing network: the input's first columns (one Slice)."""
    from onnx import helper, numpy_helper

    width = NETWORKS["floor"][1][-1]
    constants = {"starts": [0], "ends": [width], "axes": [1]}
    initializers = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in constants.items()]
    node = helper.make_node("Slice", ["INPUT__0", *constants], ["OUTPUT__0"], name="columns")
    return [node], initializers


def _torch_floor() -> Any:
    if not _installed("pytorch", quiet=True):
        return None
    import torch

    width = NETWORKS["floor"][1][-1]

    class Columns(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :width].contiguous()

    return torch.jit.trace(Columns(), torch.zeros((2, NETWORKS["floor"][1][0])))


class InProcess:
    """The framework on one batch, called in a plain loop."""

    def __init__(self, repo: Path, network: str, backend: str) -> None:
        self.backend, self.network = backend, network
        self.width = NETWORKS[network][1][0]
        model = repo / model_name(network, backend) / "1"
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
        x = _batch(batch, self.width)
        for _ in range(3):
            self._call(x)
        calls, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - wall0 < seconds or calls < 3:
            self._call(x)
            calls += 1
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        samples = calls * batch
        return {"samples_per_s": samples / wall, "cpu_us_per_sample": 1e6 * cpu / samples}


def _batch(batch: int, width: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, width), dtype=np.float32)


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


def _request(server: ServerProcess, protocol: str, model: str, x: np.ndarray) -> Any:
    """h2load's URL, body and headers for one request of ``x``."""
    if protocol == "grpc":
        body = h2load_infer.grpc_body(model, {"INPUT__0": x}, ("OUTPUT__0",))
        url = f"http://{server.grpc_url}{h2load_infer.GRPC_PATH}"
        return url, body, h2load_infer.grpc_headers()
    body, header = h2load_infer.http_body({"INPUT__0": x}, ("OUTPUT__0",))
    url = f"http://{server.http_url}/v2/models/{model}/infer"
    return url, body, h2load_infer.http_headers(header)


def _serve_window(  # noqa: PLR0913 - one window of one scenario
    server: ServerProcess, protocol: str, model: str, width: int, batch: int, concurrency: int,
    seconds: float,
) -> dict[str, float]:  # fmt: skip
    url, body, headers = _request(server, protocol, model, _batch(batch, width))
    pid = server.proc.pid
    done0 = _successes(server.grpc_url, model)
    threads0, wall0 = proctree.thread_cpu(pid), time.perf_counter()
    if protocol == "grpc":
        h2load_infer.h2load(url, body, headers, seconds, 1, concurrency)
    else:
        h2load_infer.h2load(url, body, headers, seconds, concurrency, h1=True)
    wall = time.perf_counter() - wall0
    split = h2load_infer.thread_delta(threads0, proctree.thread_cpu(pid), pid)
    cpu = split["total"]
    samples = max((_successes(server.grpc_url, model) - done0) * batch, 1)
    return {
        "samples_per_s": samples / wall,
        "cpu_us_per_sample": 1e6 * cpu / samples,
        "loop_us_per_request": 1e6 * split["loop"] * batch / samples,
        "others_us_per_request": 1e6 * (cpu - split["loop"]) * batch / samples,
    }


def _successes(url: str, model: str) -> int:
    """The model's successful inferences so far (its statistics)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        return int(
            client.get_inference_statistics(model).model_stats[0].inference_stats.success.count
        )
    finally:
        client.close()


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
        build(repo, args.networks)
        wanted = {model_name(n, b) for n in args.networks for b in args.backends}
        for name in list(p.name for p in repo.iterdir()):
            if name not in wanted:
                shutil.rmtree(repo / name)
        loops = {
            (n, b): InProcess(repo, n, b)
            for n in args.networks
            for b in args.backends
            if (repo / model_name(n, b)).is_dir()
        }
        server = ServerProcess([repo], start_timeout=300)
        try:
            return _measure(args, server, loops)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure(
    args: argparse.Namespace, server: ServerProcess, loops: dict[tuple[str, str], InProcess]
) -> list[dict[str, Any]]:
    rows = []
    for (network, backend), loop in loops.items():
        for batch in args.batch:
            if batch > BENCH_MAX_BATCH:
                print(f"{model_name(network, backend)}: batch {batch} > {BENCH_MAX_BATCH}")
                continue
            for concurrency in args.concurrency:
                rows.append(_scenario(args, server, loop, batch, concurrency))
                print(line(rows[-1]), flush=True)
    return rows


def _scenario(
    args: argparse.Namespace, server: ServerProcess, loop: InProcess, batch: int, concurrency: int
) -> dict[str, Any]:
    model = model_name(loop.network, loop.backend)
    served, local = [], []
    before = _batch_sizes(server.grpc_url, model)
    # the large network's requests are slow: longer windows, enough of them to count
    seconds = args.seconds * (3 if loop.network == "large" else 1)
    for _ in range(args.rounds):  # alternate: the machine's other load hits both
        served.append(
            _serve_window(server, args.protocol, model, loop.width, batch, concurrency, seconds)
        )
        local.append(loop.measure(batch, seconds / 2))
    after = _batch_sizes(server.grpc_url, model)
    row = _row(loop, concurrency, batch, served, local, before, after)
    # The batcher joined requests: the loop at the batch the server mostly ran, too.
    counts = row["executions_by_batch_size"]
    executed = int(max(counts, key=counts.get)) if counts else batch
    row["executed_batch"] = executed
    if executed != batch:
        at = [loop.measure(executed, seconds / 2) for _ in range(args.rounds)]
        row["inprocess_cpu_executed"] = _median(at, "cpu_us_per_sample")
        row["cpu_ratio_executed"] = row["server_cpu_us_per_sample"] / row["inprocess_cpu_executed"]
    return {"protocol": args.protocol, **row}


def _median(windows: list[dict[str, float]], key: str) -> float:
    return statistics.median(w[key] for w in windows)


def _row(  # noqa: PLR0913 - one report row gathers them all
    loop: InProcess,
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
        "network": loop.network,
        "backend": loop.backend,
        "batch": batch,
        "concurrency": concurrency,
        "server_samples_per_s": _median(served, "samples_per_s"),
        "inprocess_samples_per_s": _median(local, "samples_per_s"),
        "server_cpu_us_per_sample": cpu_server,
        "inprocess_cpu_us_per_sample": cpu_local,
        "server_loop_us_per_request": _median(served, "loop_us_per_request"),
        "server_others_us_per_request": _median(served, "others_us_per_request"),
        "inprocess_us_per_batch": cpu_local * batch,
        "cpu_ratio": cpu_server / cpu_local,
        "executions_by_batch_size": {
            str(k): v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)
        },
    }


_EXTRA = {"pytorch": "torch", "openvino": "openvino"}


def _installed(backend: str, quiet: bool = False) -> bool:
    """Whether the backend's framework imports; a missing one is skipped, saying so."""
    module = _EXTRA.get(backend)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        if not quiet:
            print(
                f"bench/backends.py: {module} is not installed (pip install 'tritium[{backend}]')"
            )
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    numbers = lambda t: [int(v) for v in t.split(",")]  # noqa: E731
    names = lambda t: t.split(",")  # noqa: E731
    parser.add_argument("--seconds", type=float, default=2.0, help="one server window")
    parser.add_argument("--batch", type=numbers, default=[8, 32, 64, 128])
    parser.add_argument("--concurrency", type=numbers, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--backends", type=names, default=list(BACKENDS), help="a subset")
    parser.add_argument("--networks", type=names, default=list(NETWORKS), help="a subset")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    unknown = [n for n in args.networks if n not in NETWORKS]
    if unknown or any(b not in BACKENDS for b in args.backends):
        parser.error(
            f"--networks from {', '.join(NETWORKS)}; --backends from {', '.join(BACKENDS)}"
        )
    args.backends = [b for b in args.backends if _installed(b)]
    load0, started = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = run(args)
    load1 = os.getloadavg()
    command = " ".join(sys.argv[1:] if argv is None else argv)
    header = (
        f"{started} · `python -m bench backends {command}` "
        f"· nproc {os.cpu_count()} · load average before "
        f"{'/'.join(f'{x:.1f}' for x in load0)}, after {'/'.join(f'{x:.1f}' for x in load1)}"
    )
    report(rows, header, args.output_dir)
    over = [r for r in rows if ratio(r) > TARGET and r["network"] != "floor"]
    networks = [r for r in rows if r["network"] != "floor"]
    print(f"{len(networks) - len(over)}/{len(networks)} rows within {TARGET}x the in-process CPU")
    return 0
