"""The registry of the bench's suites: each name (what the suite measures), the module whose
``main(argv)`` runs it, the arguments put before the user's, and one line for ``--list``.

``python -m bench <suite> [flags]`` runs one (bench/__main__.py); ``python -m bench <suite> -h``
gives its flags. A suite's latest results are ``bench/results/<suite>.md`` (and ``.json``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Suite:
    name: str
    module: str
    summary: str
    args: tuple[str, ...] = ()


def _scenarios(name: str, summary: str) -> Suite:
    """One scenario list of bench/cli.py (closed-loop tritonclient load, in-process baseline)."""
    return Suite(name, "bench.cli", summary, ("--only", name))


SUITES: tuple[Suite, ...] = (
    # End to end, tritonclient's closed loop against the real server (bench/cli.py).
    _scenarios("foundation", "simple models over HTTP, HTTP/JSON and gRPC vs the bare backend"),
    _scenarios("streaming", "gRPC streams (one and many) vs unary; decoupled responses"),
    _scenarios("batching", "dynamic batching of an ONNX MLP vs one request per execution"),
    _scenarios("shm", "system shared memory for inputs/outputs vs tensors on the wire"),
    _scenarios("ensembles", "ensembles vs the same models chained by the client"),
    _scenarios("grpc", "tritium's gRPC transport vs a bare grpc.aio server (the floor)"),
    _scenarios("sequence", "sequence batching (direct, oldest) vs stateless calls"),
    _scenarios("bls", "a BLS pipeline vs the same ensemble; the cost of one BLS call"),
    _scenarios("handoff", "the server <-> Python stub hand-off per request"),
    Suite("scenarios", "bench.cli", "the scenario lists above that `make bench` runs, one server"),
    # Against NVIDIA Triton.
    Suite("openai", "bench.openai_stream", "OpenAI streaming chat: TTFT, tokens/s at c1/16/64"),
    Suite("vs-triton", "bench.vs_triton", "tritium vs Triton 2.51, same model.py, perf_analyzer"),
    Suite("pytriton", "bench.pytriton_vs", "tritium.pytriton vs PyTriton 0.7, a bound function"),
    Suite("loop-spin", "bench.loop_spin", "the event loop's spin on and off, vs Triton"),
    # Server CPU per inference with h2load (no Python client in the way).
    Suite("grpc-cpu", "bench.h2load_grpc", "server CPU per unary gRPC ModelInfer (h2load)"),
    Suite("mypyc", "bench.mypyc_cpu", "server CPU per inference, compiled vs pure build"),
    Suite("mypyc-profile", "bench.mypyc_profile", "what still runs interpreted (py-spy)"),
    Suite("workers", "bench.workers", "--workers 1/2/3: throughput, CPU, latency, memory"),
    Suite("backends", "bench.backends", "ONNX Runtime, PyTorch, OpenVINO served vs in-process"),
    Suite("onnx-inline", "bench.onnx_inline", "ONNX inline vs thread vs auto, fast/throttled CPU"),
    Suite("inprocess", "bench.inprocess", "in-process infer (tritonserver API) vs HTTP and gRPC"),
    Suite("inline-policy", "bench.costly_inline", "how long one costly request blocks others"),
    # Floors and micro-benchmarks (no model, or no server).
    Suite("grpc-transport", "bench.grpc_transport_cpu", "gRPC transport CPU per call, in memory"),
    Suite("grpcio-floor", "bench.grpc_floor", "a bare grpcio server's floor on this machine"),
    Suite("http-micro", "bench.http_protocol_micro", "HTTP/1.1 connection layer per request"),
    Suite("stub-channels", "bench.channel_floor", "server <-> stub round trip per channel"),
    # Resources under hostile or long load.
    Suite("streams", "bench.streams_soak", "many gRPC streams opened and closed: leaks?"),
    Suite("hostile-http", "bench.hostile_cli", "one hostile HTTP client: cost to the others"),
    Suite("hostile-grpc", "bench.hostile_grpc_cli", "one hostile gRPC client: cost to the others"),
    Suite("h2-floods", "bench.grpc_floods", "HTTP/2 floods on the gRPC port: cost to others"),
    Suite("soak", "bench.soak_cli", "HTTP + gRPC load with 1 % hostile requests, for long"),
    Suite("large-request", "bench.large_decode", "one large request must not stall the others"),
    Suite("repeated-fields", "bench.repeated_fields", "many empty repeated entries: no stall"),
    Suite("zero-window", "bench.zero_window_rss", "clients that read nothing: server RSS"),
    Suite("memory", "bench.memory_rest", "idle memory (RSS, PSS) per process vs Triton 2.51"),
)

BY_NAME: dict[str, Suite] = {suite.name: suite for suite in SUITES}

# What `make bench` runs: the figures a user compares (end to end, vs Triton, CPU per
# inference, workers, backends, streams); the others are run by hand (bench/README.md).
DEFAULT: tuple[str, ...] = (
    "scenarios",
    "vs-triton",
    "grpc-cpu",
    "mypyc",
    "workers",
    "backends",
    "streams",
)
