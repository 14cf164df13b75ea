"""Shared pieces of the raw-socket gRPC tests (tests/integration/test_grpc_http2*.py): the
servers they start, and tritonclient's protobuf messages built and checked by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from testkit.server_process import ServerProcess

SERVICE = "/inference.GRPCInferenceService/"
INFER = SERVICE + "ModelInfer"
STREAM = SERVICE + "ModelStreamInfer"
MAX_INPUT = 4 << 20  # the servers' --http-max-input-size: the largest message they accept
GZIP = [("grpc-encoding", "gzip")]
# GRPC status codes asserted on the wire.
OK, CANCELLED, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 4, 5
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 8, 12, 13
# HTTP/2 error codes (RFC 9113 §7).
NO_ERROR, PROTOCOL_ERROR, FRAME_SIZE_ERROR, REFUSED_STREAM, ENHANCE_YOUR_CALM = 0, 1, 6, 7, 11


BIG_OUTPUT = "big_output"  # a Python model answering N zero bytes (uint8 OUT)
_BIG_OUTPUT_CONFIG = """name: "big_output"
backend: "python"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]
parameters { key: "delay_ms" value: { string_value: "%d" } }
"""
_BIG_OUTPUT_PY = """\
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.delay = int(parameters["delay_ms"]["string_value"]) / 1000

    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep(self.delay)
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            out = pb_utils.Tensor("OUT", np.zeros(n, np.uint8))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def write_big_output(repo: Path, delay_ms: int = 0) -> None:
    """The ``big_output`` model in ``repo``: each request's answer is ``N`` zero bytes,
    after ``delay_ms`` (so that a test can keep the backend from racing ahead of the loop)."""
    (repo / BIG_OUTPUT / "1").mkdir(parents=True)
    (repo / BIG_OUTPUT / "config.pbtxt").write_text(_BIG_OUTPUT_CONFIG % delay_ms)
    (repo / BIG_OUTPUT / "1" / "model.py").write_text(_BIG_OUTPUT_PY)


def big_output_request(size: int) -> bytes:
    """ModelInferRequest for ``big_output``: an answer of ``size`` bytes."""
    message = pb.ModelInferRequest(model_name=BIG_OUTPUT)
    message.inputs.add(name="N", datatype="INT32", shape=[1])
    message.raw_input_contents.append(np.array([size], np.int32).tobytes())
    return message.SerializeToString()


def start_server(repos: list[Path], models: list[str], *flags: str) -> ServerProcess:
    """A server loading only ``models`` (explicit mode: quick to start), with ``flags``."""
    loads = [f"--load-model={name}" for name in models]
    return ServerProcess(
        repos,
        "--model-control-mode=explicit",
        *loads,
        f"--http-max-input-size={MAX_INPUT}",
        *flags,
    )


def simple_request(seed: int = 0, model: str = "simple", rid: str = "") -> bytes:
    """ModelInferRequest for ``simple`` (INT32 [1, 16] add/sub): INPUT0 = seed + 0..15,
    INPUT1 = 3."""
    message = pb.ModelInferRequest(model_name=model, id=rid)
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    a = np.arange(16, dtype=np.int32) + seed
    message.raw_input_contents.extend([a.tobytes(), np.full(16, 3, np.int32).tobytes()])
    return message.SerializeToString()


def check_simple(payload: bytes, seed: int = 0) -> pb.ModelInferResponse:
    """The answer to ``simple_request(seed)``: OUTPUT0 = sum, OUTPUT1 = difference."""
    response = pb.ModelInferResponse.FromString(payload)
    outputs = {
        out.name: np.frombuffer(raw, np.int32)
        for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }
    a = np.arange(16, dtype=np.int32) + seed
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + 3)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - 3)
    return response


def fp32_request(model: str, values: np.ndarray, rid: str = "") -> bytes:
    """ModelInferRequest for an FP32 [-1] test model (identity_fp32, slow)."""
    message = pb.ModelInferRequest(model_name=model, id=rid)
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[len(values)])
    message.raw_input_contents.append(values.astype(np.float32).tobytes())
    return message.SerializeToString()


def fp32_output(response: pb.ModelInferResponse) -> np.ndarray:
    assert [out.name for out in response.outputs] == ["OUTPUT0"]
    return np.frombuffer(response.raw_output_contents[0], np.float32)


def stream_responses(payloads: list[bytes]) -> list[pb.ModelInferResponse]:
    """ModelStreamInferResponse payloads -> their infer_responses; none may carry an error."""
    responses = []
    for payload in payloads:
        message = pb.ModelStreamInferResponse.FromString(payload)
        assert message.error_message == "", message.error_message
        responses.append(message.infer_response)
    return responses
