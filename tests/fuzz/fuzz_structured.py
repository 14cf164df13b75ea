"""Structured fuzz inputs: infer requests (HTTP JSON + binary, gRPC messages) and config.pbtxt
text, mostly well-formed with a few things wrong, so the decoders' deep paths are reached."""

from __future__ import annotations

from math import prod
from typing import Any

import json
from fuzz_harness import Target, mutated
from hypothesis import strategies as st
from fuzz_grpc import check_grpc_message
from fuzz_http import decode_http
from fuzz_misc import CONFIG_TOKENS, load_config
from tritonclient.grpc import service_pb2 as pb

from tritium.types import DataType

WIRE_TYPES = [t.wire for t in DataType]
_VALID_TYPES = st.sampled_from(WIRE_TYPES)
datatypes = st.one_of(_VALID_TYPES, _VALID_TYPES, _VALID_TYPES, st.text(max_size=6))
names = st.one_of(st.sampled_from(["A", "B", "OUT"]), st.text(max_size=4))
_EDGES = [0, 1, -1, 127, 128, -129, 255, 256, 1000, 32767, 32768, 65535, 65536]
_EDGES += [s * 2**b + d for b in (31, 32, 63, 64) for s in (1, -1) for d in (-1, 0)]


def edge_ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], often at the boundaries where narrowing conversions break."""
    edges = sorted({v for v in _EDGES if lo <= v <= hi} | {lo, hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


small_shapes = st.lists(st.integers(0, 4), max_size=3)
odd_dims = st.one_of(st.integers(-3, 4), edge_ints(-(2**63), 2**63 - 1))
shapes = st.one_of(small_shapes, small_shapes, st.lists(odd_dims, max_size=4))
json_scalars = st.one_of(
    edge_ints(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=4),
    st.none(),
)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=12)
param_values = st.one_of(json_scalars, st.lists(json_scalars, max_size=2))
param_keys = st.one_of(
    st.sampled_from(
        [
            "priority",
            "timeout",
            "sequence_id",
            "sequence_start",
            "binary_data_output",
            "triton_x",
            "triton_enable_empty_final_response",
            "binary_data",
            "binary_data_size",
            "classification",
            "shared_memory_region",
            "shared_memory_byte_size",
            "shared_memory_offset",
        ]
    ),
    st.text(max_size=4),
)
params = st.dictionaries(param_keys, param_values, max_size=3)


@st.composite
def http_inputs(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """One JSON input and the binary bytes it brings (``binary_data_size`` or none)."""
    shape = draw(shapes)
    datatype = draw(st.one_of(datatypes, datatypes, datatypes, json_values, params))
    item: dict[str, Any] = {"name": draw(names), "datatype": datatype, "shape": shape}
    binary = b""
    mode = draw(st.sampled_from(["data", "binary", "shm", "params"]))
    count = prod(shape) if shape and all(0 <= d <= 8 for d in shape) else draw(st.integers(0, 3))
    if mode == "data":
        length = draw(st.sampled_from([count, count, max(count - 1, 0), count + 1]))
        if draw(st.integers(0, 3)):
            item["data"] = draw(st.lists(json_scalars, min_size=length, max_size=length))
        else:
            item["data"] = draw(json_values)
    elif mode == "binary":
        size = DataType[datatype].size if datatype in WIRE_TYPES else 1
        nbytes = draw(st.sampled_from([count * max(size, 1), count * max(size, 4) + 4, 0, 3]))
        binary = draw(st.binary(min_size=nbytes, max_size=nbytes))
        item["parameters"] = {"binary_data_size": draw(st.sampled_from([nbytes, nbytes + 1]))}
    elif mode == "shm":
        item["parameters"] = {
            "shared_memory_region": draw(param_values),
            "shared_memory_byte_size": draw(param_values),
        }
    else:
        item["parameters"] = draw(params)
    return item, binary


@st.composite
def http_requests(draw: st.DrawFn) -> tuple[bytes, int | None]:
    parts = draw(st.lists(http_inputs(), max_size=3))
    doc: dict[str, Any] = {"inputs": [p[0] for p in parts]}
    if draw(st.booleans()):
        doc["parameters"] = draw(params)
    if draw(st.booleans()):
        doc["outputs"] = [{"name": draw(names), "parameters": draw(params)}]
    if draw(st.booleans()):
        doc["id"] = draw(json_scalars)
    head = json.dumps(doc).encode()  # orjson refuses ints beyond 64 bits
    binary = b"".join(p[1] for p in parts)
    header = draw(st.sampled_from([None, len(head), len(head), len(head) + 1, -1]))
    if header is None and not binary:
        return head, None
    return head + binary, header


def check_http_struct(value: tuple[bytes, int | None]) -> None:
    decode_http(*value)


HTTP_CODEC_STRUCT = Target("http_codec_struct", check_http_struct, http_requests(), raw=False)


# -- gRPC ----------------------------------------------------------------------------------

_CONTENTS = {
    "bool_contents": st.booleans(),
    "int_contents": edge_ints(-(2**31), 2**31 - 1),
    "int64_contents": edge_ints(-(2**63), 2**63 - 1),
    "uint_contents": edge_ints(0, 2**32 - 1),
    "uint64_contents": edge_ints(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=4),
}
_FIELD_FOR = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
grpc_params = st.one_of(
    st.builds(pb.InferParameter, bool_param=st.booleans()),
    st.builds(pb.InferParameter, int64_param=edge_ints(-(2**63), 2**63 - 1)),
    st.builds(pb.InferParameter, uint64_param=edge_ints(0, 2**64 - 1)),
    st.builds(pb.InferParameter, string_param=st.text(max_size=4)),
    st.builds(pb.InferParameter, double_param=st.floats()),
    st.just(pb.InferParameter()),
)
grpc_param_maps = st.dictionaries(param_keys, grpc_params, max_size=3)


@st.composite
def grpc_inputs(draw: st.DrawFn) -> tuple[Any, bytes | None]:
    shape = draw(shapes)
    tensor = pb.ModelInferRequest.InferInputTensor(
        name=draw(names), datatype=draw(datatypes), shape=shape
    )
    count = prod(shape) if shape and all(0 <= d <= 8 for d in shape) else draw(st.integers(0, 3))
    length = draw(st.sampled_from([count, count, max(count - 1, 0), count + 1]))
    mode = draw(st.sampled_from(["contents", "raw", "shm", "params"]))
    if mode == "contents":
        own = _FIELD_FOR.get(tensor.datatype)  # usually the field the datatype reads
        field = draw(st.sampled_from(sorted(_CONTENTS)) if own is None else st.just(own))
        if draw(st.integers(0, 4)) == 0:
            field = draw(st.sampled_from(sorted(_CONTENTS)))
        values = draw(st.lists(_CONTENTS[field], min_size=length, max_size=length))
        getattr(tensor.contents, field).extend(values)
        return tensor, None
    if mode == "raw":
        size = DataType[tensor.datatype].size if tensor.datatype in WIRE_TYPES else 1
        nbytes = draw(st.sampled_from([length * max(size, 1), length * 4 + 4, 0, 3]))
        return tensor, draw(st.binary(min_size=nbytes, max_size=nbytes))
    if mode == "shm":
        for key in ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"):
            tensor.parameters[key].CopyFrom(draw(grpc_params))
    else:
        for key, value in draw(grpc_param_maps).items():
            tensor.parameters[key].CopyFrom(value)
    return tensor, None


@st.composite
def grpc_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m", id=draw(st.text(max_size=3)))
    for key, value in draw(grpc_param_maps).items():
        msg.parameters[key].CopyFrom(value)
    raws = []
    for tensor, raw in draw(st.lists(grpc_inputs(), max_size=3)):
        msg.inputs.append(tensor)
        if raw is not None:
            raws.append(raw)
    if raws and draw(st.integers(0, 3)):
        msg.raw_input_contents.extend(raws)
    for name, out_params in draw(st.lists(st.tuples(names, grpc_param_maps), max_size=2)):
        out = msg.outputs.add(name=name)
        for key, value in out_params.items():
            out.parameters[key].CopyFrom(value)
    return msg


GRPC_STRUCT = Target("grpc_struct", check_grpc_message, grpc_requests(), raw=False)


# -- config.pbtxt --------------------------------------------------------------------------

_CONFIG_TYPES = [f"TYPE_{t}" for t in ("BOOL", "UINT8", "INT32", "FP16", "BF16", "STRING")]
pb_ints = st.one_of(st.integers(-3, 8), edge_ints(-(2**64), 2**64))
pb_strings = st.one_of(
    st.sampled_from(["m", "python", "x.py", "ensemble", ""]), st.text(max_size=5)
)


def _dims(values: list[int]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


@st.composite
def io_entries(draw: st.DrawFn) -> str:
    parts = [f"name: {json.dumps(draw(names))}"]
    if draw(st.integers(0, 4)):
        datatype = draw(st.one_of(st.sampled_from(_CONFIG_TYPES), st.just("TYPE_INVALID")))
        parts.append(f"data_type: {datatype}")
    if draw(st.integers(0, 4)):
        parts.append(f"dims: {_dims(draw(st.lists(pb_ints, max_size=3)))}")
    if draw(st.booleans()):
        parts.append(f"reshape {{ shape: {_dims(draw(st.lists(pb_ints, max_size=3)))} }}")
    if draw(st.booleans()):
        parts.append(f"optional: {str(draw(st.booleans())).lower()}")
    return "{ " + " ".join(parts) + " }"


@st.composite
def pbtxt_configs(draw: st.DrawFn) -> str:
    lines = []
    for key in ("name", "backend", "platform", "default_model_filename"):
        if draw(st.booleans()):
            lines.append(f"{key}: {json.dumps(draw(pb_strings))}")
    if draw(st.booleans()):
        lines.append(f"max_batch_size: {draw(pb_ints)}")
    for kind in ("input", "output"):
        lines.append(f"{kind} [ {', '.join(draw(st.lists(io_entries(), max_size=3)))} ]")
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"]))
        lines.append(f"instance_group [ {{ kind: {kind} count: {draw(pb_ints)} }} ]")
    policy = draw(
        st.sampled_from(["", "all { }", "latest { num_versions: %d }", "specific { versions: %s }"])
    )
    if "%d" in policy:
        policy %= draw(pb_ints)
    elif "%s" in policy:
        policy %= _dims(draw(st.lists(pb_ints, max_size=3)))
    if policy:
        lines.append(f"version_policy {{ {policy} }}")
    if draw(st.booleans()):
        lines.append(f"dynamic_batching {{ preferred_batch_size: {draw(pb_ints)} }}")
    if draw(st.booleans()):
        lines.append("sequence_batching { max_sequence_idle_microseconds: 0 }")
    return "\n".join(lines)


def pbtxt_texts() -> st.SearchStrategy[bytes]:
    grammar = pbtxt_configs().map(str.encode)
    return st.one_of(grammar, grammar.flatmap(lambda t: mutated([t], CONFIG_TOKENS)))


CONFIG_STRUCT = Target("config_struct", load_config, pbtxt_texts(), raw=False)
