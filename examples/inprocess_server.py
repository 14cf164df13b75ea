"""tritium inside a Python program: Triton's in-process API (``tritonserver``) and its
front-ends (``tritonfrontend``), with no Triton binary.

    python examples/inprocess_server.py

It builds the example repository's ONNX files into a temporary copy, starts a server in this
process with three models (ONNX ``simple``, the Python ``add_sub_python``, the decoupled
Python ``square_int32``), calls them directly (from this thread and from an asyncio event
loop), then opens the HTTP and gRPC endpoints and asks the same over the wire with
tritonclient. The same script runs against Triton's own packages: replace the two
``tritium.`` imports (or keep ``tritium.compat.install()`` and ``import tritonserver``).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_models import build_examples  # noqa: E402

import tritium.compat  # noqa: E402

tritium.compat.install()  # `import tritonserver` is tritium's unless Triton's is installed
import tritonserver  # noqa: E402
from tritonfrontend import KServeGrpc, KServeHttp  # noqa: E402

MODELS = ["simple", "add_sub_python", "square_int32"]


def embedded(server: tritonserver.Server) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    for model in ("simple", "add_sub_python"):
        (response,) = server.model(model).infer(inputs={"INPUT0": a, "INPUT1": b})
        total = np.from_dlpack(response.outputs["OUTPUT0"])  # no copy
        print(f"{model}: INPUT0 + INPUT1 = {total[0, :4]}...")
    # A decoupled model: every response, the last one flagged final.
    for response in server.model("square_int32").infer(inputs={"IN": np.array([3], np.int32)}):
        out = response.outputs.get("OUT")
        print(
            "square_int32:",
            None if out is None else np.asarray(out),
            "final" if response.final else "",
        )


async def from_an_event_loop(server: tritonserver.Server) -> None:
    async def one(n: int) -> int:
        count = 0
        async for response in server.model("square_int32").async_infer(
            inputs={"IN": np.array([n], np.int32)}
        ):
            count += 0 if response.final else 1
        return count

    print("async_infer, three requests at once:", await asyncio.gather(one(1), one(2), one(3)))


def over_the_wire(server: tritonserver.Server) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    http_options = KServeHttp.Options(address="127.0.0.1", port=0)
    grpc_options = KServeGrpc.Options(address="127.0.0.1", port=0)
    with KServeHttp(server, http_options) as http, KServeGrpc(server, grpc_options) as grpc:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        for module, port in ((httpclient, http.port), (grpcclient, grpc.port)):
            client = module.InferenceServerClient(f"127.0.0.1:{port}")
            inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(a)
            result = client.infer("simple", inputs)
            total = result.as_numpy("OUTPUT0")
            print(f"{module.__name__} on port {port}: OUTPUT0 = {total[0, :4]}...")
            client.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        repository = Path(scratch) / "model_repository"
        build_examples(repository)
        server = tritonserver.Server(
            model_repository=str(repository),
            model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
            startup_models=MODELS,
        ).start(wait_until_ready=True)
        try:
            print(
                "ready:", server.ready(), "models:", sorted(server.models(exclude_not_ready=True))
            )
            embedded(server)
            asyncio.run(from_an_event_loop(server))
            over_the_wire(server)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
