"""Triton's generate extension: ``/generate`` (one JSON answer) and ``/generate_stream``
(server-sent events), so a decoupled model can stream to a browser or curl.

Request: a JSON object; each top-level key, and each key inside ``parameters``, that names a
model input becomes that input (datatype from the model metadata, a scalar or flat list
reshaped to fit the input's variable dimensions); every other key becomes a request
parameter. Response: ``{"id"?, "model_name", "model_version", <output>: value, ...}`` with
one-element outputs unwrapped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from math import prod
from typing import Any

import numpy as np
import orjson

from ...errors import ServerError, invalid_arg
from ...server import AccessEntry, AccessLog, InferenceRequest, InferenceServer, parse_version
from ...types import ClientRequest, DataType, InferenceResponse, Tensor
from ..tensors import numeric_array
from .errors import triton_status


def build_request(
    server: InferenceServer, name: str, version: str, body: bytes | bytearray
) -> ClientRequest:
    try:
        doc = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(doc, dict):
        raise invalid_arg("failed to parse the request JSON buffer: expected a JSON object")
    meta = server.model_metadata(name, version)
    inputs = {t["name"]: t for t in meta["inputs"]}
    params = doc.pop("parameters", {})
    if not isinstance(params, dict):  # null and [] too, as Triton's reader refuses them
        raise invalid_arg("failed to get request params.: attempt to get members for non-object")
    rid = str(doc.pop("id")) if "id" in doc else ""
    tensors = []
    parameters: dict[str, Any] = {}  # parsed by the core, as every protocol's
    for key, value in (*doc.items(), *params.items()):
        if key in inputs:
            tensors.append(_tensor(inputs[key], value))
        else:
            parameters[key] = value
    return ClientRequest(name, parse_version(version), rid, tuple(tensors), (), parameters)


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
        array[:] = [_bytes(name, v) for v in flat]
    elif datatype is not DataType.BOOL and any(isinstance(v, bool) for v in flat):
        raise invalid_arg(f"unable to convert '{name}' to {datatype.wire}: expected numbers")
    else:
        array = numeric_array(flat, datatype, name)
    shape = tuple(dims)
    return Tensor(name, datatype, shape, array.reshape(shape))


def _bytes(name: str, value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    raise invalid_arg(
        f"unable to parse 'data' for input '{name}' as BYTES: expected strings, "
        f"got {type(value).__name__}"
    )


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


class GenerateStream:
    """Responses of one generate request as they come (from the server's callback)."""

    def __init__(self) -> None:
        self.request: InferenceRequest | None = None  # the server's, once started (to cancel)
        self._queue: asyncio.Queue[tuple[InferenceResponse | None, bool]] = asyncio.Queue()

    def __call__(self, response: InferenceResponse | None, final: bool) -> None:
        self._queue.put_nowait((response, final))

    async def responses(self) -> AsyncIterator[InferenceResponse]:
        try:
            while True:
                response, final = await self._queue.get()
                if response is not None:
                    yield response
                if final:
                    return
        finally:  # the client went away (or we are done): drop work that has not started
            if self.request is not None:
                self.request.cancel()


async def sse_chunks(
    stream: GenerateStream, access: AccessEntry | None = None
) -> AsyncIterator[bytes]:
    """``data: <json>\\n\\n`` per response; a later error is sent as an event too, since the
    status line (200) is already written (``access``: its line takes the first error's kind)."""
    async for response in stream.responses():
        if response.error is not None:
            if access is not None and access.status == "SUCCESS":
                access.outcome(triton_status(response.error), access.code)
            doc: dict[str, Any] = {"error": str(response.error)}
        else:
            doc = response_json(response)
        yield b"data: " + orjson.dumps(doc) + b"\n\n"


async def logged_chunks(
    chunks: AsyncIterator[bytes], entry: AccessEntry, access_log: AccessLog
) -> AsyncIterator[bytes]:
    """A streamed answer's chunks, counted into its access-log line, which is put when they
    end, fail or are closed (the client went away)."""
    try:
        async for chunk in chunks:
            entry.bytes_out += len(chunk)
            yield chunk
    except BaseException:
        entry.outcome("CANCELLED", entry.code)
        raise
    finally:
        entry.ended()
        access_log.put(entry)


async def generate_once(stream: GenerateStream) -> dict[str, Any]:
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
