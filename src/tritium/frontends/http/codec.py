"""HTTP/REST inference codec: KServe v2 JSON plus Triton's binary tensor extension."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import orjson

from ...errors import invalid_arg
from ...types import BY_WIRE, ClientRequest, DataType, InferenceResponse, RequestedOutput, Tensor
from ..tensors import (
    MAX_TENSORS,
    OFFLOAD_BYTES,
    element_count,
    numeric_array,
    parse_shape,
    shm_tensor,
    tensor_bytes,
    tensor_from_buffer,
    too_many,
)
from .json_data import (
    SKELETON_MAX,
    Span,
    flatten,
    skeleton_size,
    span_values,
    split_document,
)

# Triton's JSON reader (common/triton_json.h), whose words Triton's front-end passes on.
_NO_MEMBERS: Final = "attempt to get members for non-object"
_NOT_OBJECT: Final = "attempt to access JSON non-object as object"
_NUMPY_JSON: Final = {DataType.FP16, DataType.BF16, DataType.BYTES}  # need .tolist()/decoding
# The members the hot paths compare with, as Final constants (docs/compiled-code.md).
_BOOL: Final = DataType.BOOL
_BYTES: Final = DataType.BYTES
_FP16: Final = DataType.FP16
_BF16: Final = DataType.BF16


class OutputPlan:
    """How the client wants outputs encoded: binary by default or per output."""

    __slots__ = ("binary_default", "binary")

    def __init__(self, binary_default: bool = False, binary: dict[str, bool] | None = None) -> None:
        self.binary_default = binary_default
        self.binary: dict[str, bool] = {} if binary is None else binary


def _json_error(exc: Exception) -> Exception:
    return invalid_arg(f"failed to parse the request JSON buffer: {exc}")


def decode_request(
    body: bytes | bytearray, header_length: int | None, model: str, version: int
) -> tuple[ClientRequest, OutputPlan]:
    if header_length is None:
        json_part, binary = body, memoryview(b"")
    else:
        if header_length < 0 or header_length > len(body):
            raise invalid_arg(
                f"inference header size should be in range (0, {len(body)}), got: {header_length}"
            )
        json_part, binary = body[:header_length], memoryview(body)[header_length:]
    doc, spans = _parse_json(json_part)
    plan = OutputPlan()
    rid = doc.get("id")
    params = doc.get("parameters")
    parameters = _request_parameters(params, plan) if "parameters" in doc else {}
    items = doc.get("inputs")
    if not isinstance(items, list):
        raise invalid_arg("failed to parse the request JSON buffer: 'inputs' must be an array")
    if len(items) > MAX_TENSORS:
        raise too_many("inputs", MAX_TENSORS)
    offset = 0
    inputs = []
    uses_shm = False
    for item in items:
        tensor, used = _input(item, binary, offset, model, spans)
        offset += used
        uses_shm = uses_shm or tensor.shm is not None
        inputs.append(tensor)
    if spans:  # a large "data" array that is no input's data (a parameter's, say)
        raise invalid_arg("failed to parse the request JSON buffer: 'data' outside an input")
    if offset != len(binary):
        raise invalid_arg(
            f"unexpected additional input data for model '{model}': {len(binary) - offset} "
            "bytes beyond the inputs' binary_data_size"
        )
    wanted = doc.get("outputs")
    outputs = _requested_outputs(wanted, plan) if wanted else ()
    uses_shm = uses_shm or any("shared_memory_region" in o.parameters for o in outputs)
    request = ClientRequest(
        model,
        version,
        "" if rid is None else str(rid),
        tuple(inputs),
        outputs,
        parameters,
        uses_shm,
    )
    return request, plan


def _parse_json(json_part: bytes | bytearray) -> tuple[dict[str, Any], dict[str, Span]]:
    """The JSON object; a large one without its inputs' ``data`` arrays (see json_data)."""
    spans: dict[str, Span] = {}
    if len(json_part) > OFFLOAD_BYTES:
        json_part, spans = split_document(bytes(json_part))
        size = skeleton_size(json_part)
        if size > SKELETON_MAX:
            raise invalid_arg(
                f"failed to parse the request JSON buffer: {size} bytes of JSON besides "
                f"the inputs' 'data' arrays; at most {SKELETON_MAX} are accepted"
            )
    try:
        doc = orjson.loads(json_part)
    except orjson.JSONDecodeError as exc:
        raise _json_error(exc) from None
    if not isinstance(doc, dict):
        raise invalid_arg("failed to parse the request JSON buffer: expected a JSON object")
    return doc, spans


def _request_parameters(params: object, plan: OutputPlan) -> dict[str, Any]:
    """The request's parameters for the core, less ``binary_data_output`` (how this
    front-end encodes the answer). Anything but an object (null and [] included) is refused
    with Triton's words (http_server.cc ParseJsonTritonParams)."""
    if not isinstance(params, dict):
        raise invalid_arg(f"failed to get request params.: {_NO_MEMBERS}")
    if "binary_data_output" in params:
        params = dict(params)
        plan.binary_default = bool(params.pop("binary_data_output"))
    return params


def _tensor_parameters(item: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """An input's or output's ``parameters``: an object, or none. Triton's front-end skips
    one that is no object; tritium refuses it (nothing a client sends is silently ignored),
    in the words of Triton's JSON reader."""
    params = item.get("parameters")
    if isinstance(params, dict):
        return params
    if params is None and "parameters" not in item:
        return {}
    raise invalid_arg(f"Unable to parse 'parameters' of {kind} '{name}': {_NOT_OBJECT}")


def _input(
    item: Any, binary: memoryview, offset: int, model: str, spans: dict[str, Span]
) -> tuple[Tensor, int]:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise invalid_arg("failed to parse the request JSON buffer: each input needs a 'name'")
    name = item["name"]
    wire = item.get("datatype", "")
    datatype = BY_WIRE.get(wire) if isinstance(wire, str) else None
    if datatype is None:
        raise invalid_arg(f"invalid datatype '{item.get('datatype')}' for input '{name}'")
    shape = parse_shape(item.get("shape"), name)
    params = _tensor_parameters(item, "input", name)
    size = params.get("binary_data_size")
    if "shared_memory_region" in params:
        return shm_tensor(name, datatype, shape, params), 0
    if size is not None:
        if "data" in item:
            raise invalid_arg(f"input '{name}' must not specify both 'data' and 'binary_data_size'")
        if not isinstance(size, int) or size < 0:
            raise invalid_arg(f"invalid 'binary_data_size' for input '{name}'")
        if offset + size > len(binary):
            raise invalid_arg(
                f"unexpected size for input '{name}', expecting {size} bytes of binary data "
                f"but only {len(binary) - offset} bytes remain in the request body"
            )
        return tensor_from_buffer(
            name, datatype, shape, binary[offset : offset + size], model
        ), size
    if "data" not in item:
        raise invalid_arg(
            f"input '{name}' must specify 'data', 'binary_data_size' or 'shared_memory_region'"
        )
    data = item["data"]
    if isinstance(data, str) and data in spans:
        span = spans.pop(data)
        convert = lambda flat, text: _json_array(name, datatype, flat, text)  # noqa: E731
        array = span_values(span, convert, element_count(shape), datatype.dtype, name)
        return Tensor(name, datatype, shape, array.reshape(shape)), 0
    return _json_tensor(name, datatype, shape, data), 0


def _json_tensor(name: str, datatype: DataType, shape: tuple[int, ...], data: Any) -> Tensor:
    flat = flatten(data)
    count = element_count(shape)
    if len(flat) != count:
        raise invalid_arg(
            f"input '{name}' got unexpected elements count {len(flat)}, expected {count}"
        )
    return Tensor(name, datatype, shape, _json_array(name, datatype, flat).reshape(shape))


def _json_array(
    name: str, datatype: DataType, flat: list[Any], text: bytes | None = None
) -> np.ndarray:
    """``flat`` as ``datatype``; ``text`` (the JSON of a large array's piece) tells whether it
    holds booleans faster than looking at each value."""
    if datatype is _FP16 or datatype is _BF16:
        raise invalid_arg(
            f"receiving {datatype.wire} data via JSON is not supported. Please use the binary "
            f"data format for input '{name}'"
        )
    if datatype is _BYTES:
        array = np.empty(len(flat), dtype=object)
        array[:] = [v.encode("utf-8") if isinstance(v, str) else _not_string(name, v) for v in flat]
    elif datatype is not _BOOL and _has_bool(flat, text):
        raise invalid_arg(
            f"unable to parse 'data' for input '{name}' as {datatype.wire}: expected numbers"
        )
    else:
        array = numeric_array(flat, datatype, name)
    return array


def _has_bool(flat: list[Any], text: bytes | None) -> bool:
    if text is not None:  # a string holding "true" is refused as a string anyway
        return b"true" in text or b"false" in text
    return any(isinstance(v, bool) for v in flat)


def _not_string(name: str, value: Any) -> bytes:
    raise invalid_arg(
        f"unable to parse 'data' for input '{name}' as BYTES: expected strings, "
        f"got {type(value).__name__}"
    )


def _requested_outputs(outputs: Any, plan: OutputPlan) -> tuple[RequestedOutput, ...]:
    if not isinstance(outputs, list):
        raise invalid_arg("failed to parse the request JSON buffer: 'outputs' must be an array")
    if len(outputs) > MAX_TENSORS:
        raise too_many("outputs", MAX_TENSORS)
    requested = []
    for item in outputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise invalid_arg("failed to parse the request JSON buffer: each output needs a 'name'")
        params = _tensor_parameters(item, "output", item["name"])
        if "classification" in params:
            _check_classification(params)
        if "binary_data" in params:
            plan.binary[item["name"]] = bool(params["binary_data"])
        requested.append(RequestedOutput(item["name"], params))
    return tuple(requested)


def _check_classification(params: dict[str, Any]) -> None:
    """The wire form Triton's HTTP front-end accepts (an unsigned integer; 0: not requested;
    never with shared memory). The core does the rest (``classification.py``)."""
    if "shared_memory_region" in params:
        raise invalid_arg("Output can't set both 'shared_memory_region' and 'classification'")
    value = params["classification"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_arg(
            "Unable to set 'classification': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer"
        )


def _json_data(tensor: Tensor) -> Any:
    data = tensor.data.ravel()  # a view when it can be (reshape(-1) costs twice as much)
    if tensor.datatype is _BYTES:
        try:
            return [v.decode() if isinstance(v, (bytes, bytearray)) else str(v) for v in data]
        except UnicodeDecodeError:
            # Triton writes the raw bytes into the JSON, which no client can parse; tritium
            # answers an error instead of corrupting the data with replacement characters.
            raise invalid_arg(
                f"unable to return output '{tensor.name}' as JSON: its BYTES elements are not "
                "valid UTF-8; request it with binary_data=true"
            ) from None
    if tensor.datatype in _NUMPY_JSON:
        return data.astype(np.float32).tolist()
    return data


def encode_response(response: InferenceResponse, plan: OutputPlan) -> tuple[bytes, list[Any], int]:
    """JSON header, binary parts, and the header length (-1 when nothing is binary)."""
    outputs = []
    parts: list[Any] = []
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype.wire,
            "shape": list(tensor.shape),
        }
        if tensor.shm is not None:  # written into the client's region already
            pass
        elif plan.binary.get(tensor.name, plan.binary_default):
            raw = tensor_bytes(tensor)
            entry["parameters"] = {
                "binary_data_size": len(raw) if isinstance(raw, bytes) else raw.nbytes
            }
            parts.append(raw)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs
    header = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    return header, parts, (len(header) if parts else -1)
