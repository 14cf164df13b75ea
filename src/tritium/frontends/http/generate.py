"""Triton's generate extension: ``/generate`` (one JSON answer) and ``/generate_stream``
(server-sent events), so a decoupled model can stream to a browser or curl.

Request: a JSON object; each top-level key, and each key inside ``parameters``, that names a
model input becomes that input (datatype from the model metadata, a scalar or flat list
reshaped to fit the input's variable dimensions); every other key becomes a request
parameter. Response: ``{"id"?, "model_name", "model_version", <output>: value, ...}`` with
one-element outputs unwrapped.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from math import prod
from typing import Any

import numpy as np
import orjson

from ...errors import ServerError, invalid_arg
from ...api import InferenceCall, ResponseStream
from ...server import InferenceServer, parse_version
from ...types import ClientRequest, DataType, InferenceResponse, Tensor
from ..tensors import numeric_array
from .errors import triton_status


def build_request(
    server: InferenceServer, name: str, version: str, body: bytes | bytearray
) -> ClientRequest:
    """Triton's ConvertGenerateRequest: each key, in order (``parameters`` opened in place),
    is a model input or a request parameter; a key given twice is refused as Triton refuses
    it (orjson keeps the last of duplicate keys, so they are looked for apart)."""
    try:
        doc = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(doc, dict):
        raise invalid_arg("failed to parse the request JSON buffer: expected a JSON object")
    meta = server.model_metadata(name, version)
    request = _Converted({t["name"]: t for t in meta["inputs"]})
    for key, value in _members(doc, body):
        if key == "parameters" and key not in request.inputs:
            if not isinstance(value, dict):
                raise invalid_arg("Expected JSON object for keyword: 'parameters'")
            try:
                for inner, inner_value in _members(value, body, nested=True):
                    request.add(inner, inner_value)
            except ServerError as exc:
                raise invalid_arg(f"Converting keyword: 'parameters': {exc.message}") from None
        elif key == "id" and key not in request.inputs:
            request.rid = str(value)
        else:
            request.add(key, value)
    tensors, parameters = tuple(request.tensors), request.parameters  # parameters: the core's
    return ClientRequest(name, parse_version(version), request.rid, tensors, (), parameters)


class _Converted:
    """What a generate request's keys made so far."""

    def __init__(self, inputs: dict[str, dict[str, Any]]) -> None:
        self.inputs = inputs
        self.tensors: list[Tensor] = []
        self.parameters: dict[str, Any] = {}
        self.rid = ""

    def add(self, key: str, value: Any) -> None:
        meta = self.inputs.get(key)
        if meta is None:
            if not isinstance(value, str | int | float):  # bool is an int
                raise invalid_arg(
                    f"parameter '{key}' has invalid type. It should be either 'int', 'bool', "
                    "or 'string'."
                )
            self.parameters[key] = value
            return
        if any(t.name == key for t in self.tensors):
            raise invalid_arg(f"input '{key}' already exists in request")
        self.tensors.append(_tensor(meta, value))


def _members(
    doc: dict[str, Any], body: bytes | bytearray, nested: bool = False
) -> list[tuple[str, Any]]:
    """An object's (key, value) pairs in order, a duplicated key as often as it was given
    (``nested``: the top-level object's 'parameters'). orjson's dict keeps one value per key:
    when the body has no escape and each key's quoted form appears once in it, no key was
    given twice; otherwise (a key repeated, or maybe written with escapes) the body is read
    again with the standard library, which sees every pair."""
    if b"\\" not in body and all(body.count(orjson.dumps(key)) == 1 for key in doc):
        return list(doc.items())
    top: _Pairs = json.loads(bytes(body), object_pairs_hook=_Pairs)  # an object (orjson's was)
    if not nested:
        return top.pairs
    inner = top.get("parameters")  # the last one given, as orjson's
    return inner.pairs if isinstance(inner, _Pairs) else list(doc.items())


class _Pairs(dict[str, Any]):
    """A JSON object read by ``json.loads``: a dict (the last value of a key wins, as
    orjson's) that also keeps every (key, value) pair in order."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


def _tensor(meta: dict[str, Any], value: Any) -> Tensor:
    name = meta["name"]
    datatype = DataType.from_wire(meta["datatype"])
    assert datatype is not None
    flat = value if isinstance(value, list) else [value]
    dims = list(meta["shape"])
    if dims and dims[0] == -1 and len(dims) > 1:  # the batch dimension: one request
        dims[0] = 1
    known = prod(d for d in dims if d != -1)
    if dims.count(-1) == 1 and known:
        dims[dims.index(-1)] = len(flat) // known
    if prod(dims) != len(flat):
        raise invalid_arg(
            f"unable to fit {len(flat)} value(s) of '{name}' into its shape {meta['shape']}"
        )
    if datatype is DataType.BYTES:
        array = np.empty(len(flat), dtype=object)
        array[:] = [_bytes(v) for v in flat]
    elif datatype is DataType.BOOL and not all(isinstance(v, bool) for v in flat):
        raise invalid_arg("attempt to access JSON non-boolean as boolean")  # TritonJson's
    elif datatype is not DataType.BOOL and any(isinstance(v, bool) for v in flat):
        raise invalid_arg(f"unable to convert '{name}' to {datatype.wire}: expected numbers")
    else:
        array = numeric_array(flat, datatype, name)
    shape = tuple(dims)
    return Tensor(name, datatype, shape, array.reshape(shape))


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    raise invalid_arg("attempt to access JSON non-string as string")  # TritonJson's text


def response_json(response: InferenceResponse) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    for tensor in response.outputs:
        flat = tensor.data.reshape(-1)
        if tensor.datatype is DataType.BYTES:
            values: list[Any] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat
            ]
        else:
            values = flat.tolist()
        doc[tensor.name] = values[0] if len(values) == 1 else values
    doc.update(response.parameters)
    return doc


async def sse_chunks(stream: ResponseStream, call: InferenceCall) -> AsyncIterator[bytes]:
    """``data: <json>\\n\\n`` per response; a later error is sent as an event too, since the
    status line (200) is already written (the call's access line takes the first error's
    kind)."""
    async for response in stream.responses():
        if response.error is not None:
            call.first_error(triton_status(response.error))
            doc: dict[str, Any] = {"error": str(response.error)}
        else:
            doc = response_json(response)
        yield b"data: " + orjson.dumps(doc) + b"\n\n"


async def logged_chunks(chunks: AsyncIterator[bytes], call: InferenceCall) -> AsyncIterator[bytes]:
    """A streamed answer's chunks, counted into its call's access-log line, which is written
    when they end, fail or are closed (the client went away)."""
    try:
        async for chunk in chunks:
            call.count(len(chunk))
            yield chunk
    except BaseException:
        call.outcome("CANCELLED", None if call.entry is None else call.entry.code)
        raise
    finally:
        call.logged()


async def generate_once(stream: ResponseStream) -> dict[str, Any]:
    """``/generate``: the model's single response (a decoupled model must send one)."""
    answers = [r async for r in stream.responses()]
    if len(answers) != 1:
        raise invalid_arg(
            "generate expects model to produce exactly 1 response, use generate stream for "
            f"model that generates various number of responses (got {len(answers)})"
        )
    if answers[0].error is not None:
        error = answers[0].error
        raise error if isinstance(error, ServerError) else invalid_arg(str(error))
    return response_json(answers[0])
