"""ModelInferRequest → InferenceRequest and InferenceResponse → ModelInferResponse."""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from ...errors import invalid_arg, unsupported
from ...types import DataType, InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from ..tensors import shm_tensor, tensor_bytes, tensor_from_buffer

# Typed `contents` field for each datatype (FP16 and BF16 have none: raw bytes only).
_CONTENTS_FIELD = {
    DataType.BOOL: "bool_contents",
    DataType.INT8: "int_contents",
    DataType.INT16: "int_contents",
    DataType.INT32: "int_contents",
    DataType.INT64: "int64_contents",
    DataType.UINT8: "uint_contents",
    DataType.UINT16: "uint_contents",
    DataType.UINT32: "uint_contents",
    DataType.UINT64: "uint64_contents",
    DataType.FP32: "fp32_contents",
    DataType.FP64: "fp64_contents",
    DataType.BYTES: "bytes_contents",
}


def parameter_value(param: Any) -> Any:
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def decode_request(msg: pb.ModelInferRequest, version: int) -> InferenceRequest:
    model = msg.model_name
    request = InferenceRequest(model, version, msg.id)
    if msg.parameters:
        _parameters(request, msg.parameters)
    raw = msg.raw_input_contents
    used = 0  # raw_input_contents holds one entry per input that is not in shared memory
    for inp in msg.inputs:
        if "shared_memory_region" in inp.parameters:
            params = {k: parameter_value(v) for k, v in inp.parameters.items()}
            request.inputs.append(shm_tensor(inp.name, _datatype(inp), tuple(inp.shape), params))
            request.uses_shm = True
            continue
        if raw and used >= len(raw):
            raise invalid_arg(f"expected more raw_input_contents for model '{model}'")
        request.inputs.append(_input(inp, raw[used] if raw else None, model))
        used += 1 if raw else 0
    if raw and used != len(raw):
        raise invalid_arg(f"expected {used} raw_input_contents for model '{model}', got {len(raw)}")
    for out in msg.outputs:
        params = {k: parameter_value(v) for k, v in out.parameters.items()}
        if "shared_memory_region" in params:
            request.uses_shm = True
        if "classification" in params:
            raise unsupported("the classification extension is not supported by tritium yet")
        request.outputs.append(RequestedOutput(out.name, params))
    return request


def _parameters(request: InferenceRequest, params: Any) -> None:
    custom = {}
    for key, param in params.items():
        value = parameter_value(param)
        if key == "priority":
            request.priority = int(value)
        elif key == "sequence_id":
            request.correlation_id = value
        elif key == "timeout":
            request.timeout_us = int(value)
        elif key in ("sequence_start", "sequence_end", "headers"):
            continue
        elif key.startswith("triton_"):
            if key != "triton_enable_empty_final_response":
                raise invalid_arg(
                    f"parameter keys starting with 'triton_' are reserved for Triton usage and "
                    f"should not be specified: '{key}'"
                )
        else:
            custom[key] = value
    request.parameters = custom


def _datatype(inp: Any) -> DataType:
    datatype = DataType.from_wire(inp.datatype)
    if datatype is None:
        raise invalid_arg(f"invalid datatype '{inp.datatype}' for input '{inp.name}'")
    if any(d < 0 for d in inp.shape):
        raise invalid_arg(f"unable to parse 'shape' for input '{inp.name}': negative dimension")
    return datatype


def _input(inp: Any, raw: bytes | None, model: str) -> Tensor:
    name = inp.name
    datatype = _datatype(inp)
    shape = tuple(inp.shape)
    has_contents = inp.HasField("contents")
    if raw is not None:
        if has_contents:
            raise invalid_arg(
                f"contents field must not be specified when using raw_input_contents for "
                f"'{name}' for model '{model}'"
            )
        return tensor_from_buffer(name, datatype, shape, raw, model)
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise invalid_arg(
            f"{datatype.wire} input '{name}' must be sent in raw_input_contents: the typed "
            "contents fields cannot carry it"
        )
    values = getattr(inp.contents, field)
    count = prod(shape)
    if len(values) != count:
        raise invalid_arg(
            f"input '{name}' got unexpected elements count {len(values)}, expected {count}"
        )
    if datatype is DataType.BYTES:
        array = np.empty(count, dtype=object)
        array[:] = list(values)
    else:
        array = np.array(values, dtype=datatype.dtype)
    return Tensor(name, datatype, shape, array.reshape(shape))


def encode_response(response: InferenceResponse) -> pb.ModelInferResponse:
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    outputs = msg.outputs
    raw = msg.raw_output_contents
    for tensor in response.outputs:
        outputs.add(name=tensor.name, datatype=tensor.datatype.wire, shape=tensor.shape)
        # An output written into shared memory keeps its place with an empty entry.
        raw.append(b"" if tensor.shm is not None else bytes(tensor_bytes(tensor)))
    if response.parameters:
        set_parameters(msg.parameters, response.parameters)
    return msg


def set_parameters(target: Any, values: dict[str, Any]) -> None:
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)
