"""ModelInferRequest → ClientRequest and InferenceResponse → ModelInferResponse."""

from __future__ import annotations

from math import prod
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from ...errors import ServerError, invalid_arg
from ...server import parse_version
from ...tensor_codec import object_array
from ...types import ClientRequest, DataType, InferenceResponse, RequestedOutput, Tensor
from ..tensors import (
    MAX_PARAMETERS,
    MAX_TENSORS,
    check_shape,
    numeric_array,
    shm_tensor,
    tensor_bytes,
    tensor_from_buffer,
    too_many,
)
from .wire import (
    RAW_VIEWS_FROM,
    Pieces,
    SimpleRequest,
    decode_contents,
    infer_response,
    output_tensor,
    parse_request,
    simple_request,
)

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


def decode_message(
    raw: bytes, forwarded: dict[str, str] | None = None
) -> tuple[pb.ModelInferRequest, ClientRequest]:
    """A ModelInferRequest's bytes, undecoded by the transport (see ``wire``), decoded;
    ``forwarded``: metadata ``--grpc-header-forward-pattern`` turns into parameters."""
    msg, contents, views = parse_request(raw)
    return msg, decode_request(msg, parse_version(msg.model_version), contents, forwarded, views)


def decode_infer(raw: bytes, forwarded: dict[str, str] | None = None) -> ClientRequest:
    """``decode_message(raw, forwarded)[1]``: a small message of the common shape
    (``wire.simple_request``) straight from its bytes, any other (or one that is wrong in any
    way) through protobuf, which then gives the error."""
    if len(raw) < RAW_VIEWS_FROM:
        fields = simple_request(raw)
        if fields is not None:
            client = _simple_client(fields, forwarded)
            if client is not None:
                return client
    return decode_message(raw, forwarded)[1]


def _simple_client(fields: SimpleRequest, forwarded: dict[str, str] | None) -> ClientRequest | None:
    """``decode_request`` of a message without parameters and typed contents, every input in
    ``raw_input_contents``; None where that would raise (the full path says why)."""
    model, version_text, request_id, specs, names, raws = fields
    if len(raws) != len(specs) or not raws or len(specs) > MAX_TENSORS:
        return None
    if len(names) > MAX_TENSORS:
        return None
    try:
        version = parse_version(version_text)
        inputs = []
        for (name, wire_type, shape), raw in zip(specs, raws, strict=True):
            datatype = DataType.from_wire(wire_type)
            if datatype is None:
                return None
            check_shape(shape, name)
            inputs.append(tensor_from_buffer(name, datatype, shape, raw, model))
    except ServerError:
        return None
    outputs = tuple(RequestedOutput(name, {}) for name in names)
    parameters = dict(forwarded) if forwarded else {}
    return ClientRequest(model, version, request_id, tuple(inputs), outputs, parameters, False)


def decode_request(
    msg: pb.ModelInferRequest,
    version: int,
    contents: dict[int, memoryview] | None = None,
    forwarded: dict[str, str] | None = None,
    views: list[memoryview] | None = None,
) -> ClientRequest:
    """``views``: the raw contents when ``wire.parse_request`` kept them out of ``msg``."""
    model = msg.model_name
    raw: Any = msg.raw_input_contents if views is None else views
    _check_counts(msg, raw)
    used = 0  # raw_input_contents holds one entry per input that is not in shared memory
    inputs = []
    uses_shm = False
    for index, inp in enumerate(msg.inputs):
        if len(inp.parameters) > MAX_PARAMETERS:
            raise too_many(f"parameters for input '{inp.name}'", MAX_PARAMETERS)
        if "shared_memory_region" in inp.parameters:
            params = {k: parameter_value(v) for k, v in inp.parameters.items()}
            inputs.append(shm_tensor(inp.name, _datatype(inp), tuple(inp.shape), params))
            uses_shm = True
            continue
        if raw and used >= len(raw):
            raise invalid_arg(f"expected more raw_input_contents for model '{model}'")
        kept = contents.get(index) if contents else None
        inputs.append(_input(inp, raw[used] if raw else None, model, kept))
        used += 1 if raw else 0
    if raw and used != len(raw):
        raise invalid_arg(f"expected {used} raw_input_contents for model '{model}', got {len(raw)}")
    outputs = []
    for out in msg.outputs:
        if len(out.parameters) > MAX_PARAMETERS:
            raise too_many(f"parameters for output '{out.name}'", MAX_PARAMETERS)
        params = {k: parameter_value(v) for k, v in out.parameters.items()}
        uses_shm = uses_shm or "shared_memory_region" in params
        if "classification" in params:
            _check_classification(out.parameters["classification"], params)
        outputs.append(RequestedOutput(out.name, params))
    parameters = _parameters(msg.parameters) if msg.parameters else {}
    if forwarded:
        parameters = {**forwarded, **parameters}  # the request's own parameters win
    return ClientRequest(
        model, version, msg.id, tuple(inputs), tuple(outputs), parameters, uses_shm
    )


def _check_counts(msg: pb.ModelInferRequest, raw: Any) -> None:
    """The bounds ``wire._Census`` applies to a large message, on any message (a small one
    is parsed by protobuf at once: it cannot hold more than ``wire.MAX_FIELDS`` fields)."""
    if len(msg.inputs) > MAX_TENSORS:
        raise too_many("inputs", MAX_TENSORS)
    if len(msg.outputs) > MAX_TENSORS:
        raise too_many("outputs", MAX_TENSORS)
    if len(raw) > MAX_TENSORS:
        raise too_many("raw_input_contents", MAX_TENSORS)
    if len(msg.parameters) > MAX_PARAMETERS:
        raise too_many("parameters", MAX_PARAMETERS)


def _check_classification(param: Any, params: dict[str, Any]) -> None:
    """The wire form Triton's gRPC front-end accepts (a positive int64_param, never with
    shared memory; grpc_utils.cc ParseClassificationParams). The core does the rest."""
    if param.WhichOneof("parameter_choice") != "int64_param":
        raise invalid_arg("invalid value type for 'classification' parameter, expected int64_param")
    if param.int64_param <= 0:
        raise invalid_arg("invalid value for 'classification' parameter, expected >= 0")
    if "shared_memory_region" in params:
        raise invalid_arg("output can't set both 'shared_memory_region' and 'classification'")


def _parameters(params: Any) -> dict[str, Any]:
    """The request's parameters for the core, less what only this front-end reads: forwarded
    ``headers`` and the stream's ``triton_enable_empty_final_response``."""
    return {
        key: parameter_value(param)
        for key, param in params.items()
        if key not in ("headers", "triton_enable_empty_final_response")
    }


def _datatype(inp: Any) -> DataType:
    datatype = DataType.from_wire(inp.datatype)
    if datatype is None:
        raise invalid_arg(f"invalid datatype '{inp.datatype}' for input '{inp.name}'")
    check_shape(tuple(inp.shape), inp.name)
    return datatype


def _input(inp: Any, raw: bytes | memoryview | None, model: str, kept: memoryview | None) -> Tensor:
    name = inp.name
    datatype = _datatype(inp)
    shape = tuple(inp.shape)
    has_contents = kept is not None or inp.HasField("contents")
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
    count = prod(shape)
    if kept is not None:
        values: Any = decode_contents(kept, field, count)
    else:
        values = getattr(inp.contents, field)
    if len(values) != count:
        raise invalid_arg(
            f"input '{name}' got unexpected elements count {len(values)}, expected {count}"
        )
    if datatype is DataType.BYTES:
        array = values if kept is not None else object_array(list(values), (count,))
    else:
        array = numeric_array(values if kept is not None else list(values), datatype, name)
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


def encode_answer(response: InferenceResponse) -> bytes | Pieces:
    """``encode_response(response).SerializeToString()``, written without protobuf and
    without copying the large outputs (``wire.infer_response``)."""
    outputs = []
    raws: list[bytes | memoryview] = []
    for tensor in response.outputs:
        outputs.append(output_tensor(tensor.name, tensor.datatype.wire, tensor.shape))
        # An output written into shared memory keeps its place with an empty entry.
        raws.append(b"" if tensor.shm is not None else tensor_bytes(tensor))
    parameters = b""
    if response.parameters:  # rare: protobuf writes the map (its order is protobuf's)
        msg = pb.ModelInferResponse()
        set_parameters(msg.parameters, response.parameters)
        parameters = msg.SerializeToString()
    names = (response.model_name, response.model_version, response.id)
    return infer_response(names, parameters, outputs, raws)


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
