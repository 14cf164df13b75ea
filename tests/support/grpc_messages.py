"""Inference messages built and read with tritonclient's generated protobuf classes, for tests
that drive the gRPC endpoint below tritonclient's API (another client stack, raw sockets).

The models are the examples' ``simple``, ``square_int32`` and ``repeat_int32`` and the test
model ``slow`` (tests/support/models.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb


def _tensor(request: Any, name: str, array: np.ndarray, datatype: str) -> None:
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = name, datatype
    tensor.shape.extend(array.shape)
    request.raw_input_contents.append(array.tobytes())


def simple_request(seed: int, request_id: str = "") -> pb.ModelInferRequest:
    """``simple`` with INPUT0 = seed + [0..15] and INPUT1 = 3."""
    request = pb.ModelInferRequest(model_name="simple", id=request_id)
    _tensor(request, "INPUT0", _simple_a(seed), "INT32")
    _tensor(request, "INPUT1", np.full((1, 16), 3, np.int32), "INT32")
    return request


def _simple_a(seed: int) -> np.ndarray:
    return (np.arange(16, dtype=np.int32) + seed).reshape(1, 16)


def square_request(n: int, request_id: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="square_int32", id=request_id)
    _tensor(request, "IN", np.array([n], np.int32), "INT32")
    return request


def repeat_request(count: int, delay_ms: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="repeat_int32", id="repeat")
    _tensor(request, "IN", np.arange(count, dtype=np.int32), "INT32")
    _tensor(request, "DELAY", np.full(count, delay_ms, np.uint32), "UINT32")
    _tensor(request, "WAIT", np.array([0], np.uint32), "UINT32")
    return request


def slow_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="slow", id="slow")
    _tensor(request, "INPUT0", np.ones(4, np.float32), "FP32")
    return request


def output(response: pb.ModelInferResponse, name: str, dtype: type) -> np.ndarray:
    index = [o.name for o in response.outputs].index(name)
    return np.frombuffer(response.raw_output_contents[index], dtype=dtype)


def assert_simple_answer(response: pb.ModelInferResponse, seed: int) -> None:
    a = _simple_a(seed).reshape(-1)
    np.testing.assert_array_equal(output(response, "OUTPUT0", np.int32), a + 3)
    np.testing.assert_array_equal(output(response, "OUTPUT1", np.int32), a - 3)


def stream_responses(raw: list[bytes]) -> list[pb.ModelInferResponse]:
    """Decode ModelStreamInferResponse messages; an in-stream error fails the test."""
    out = []
    for message in raw:
        streamed = pb.ModelStreamInferResponse.FromString(message)
        assert streamed.error_message == "", streamed.error_message
        out.append(streamed.infer_response)
    return out
