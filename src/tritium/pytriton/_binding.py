"""A bound callable as a model: its folder in the workspace's model store (a config.pbtxt as
PyTriton writes it, for ``backend: "pytriton"``), and the job the backend runs
(backends/bound.py): PyTriton's ``Request`` objects in, its validated answers out."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from ..backends.bound import Answer, Binding, Call
from .decorators import finished, running
from .exceptions import PyTritonBadParameterError
from .model_config import DeviceKind, DynamicBatcher, ModelConfig, QueuePolicy, Tensor
from .model_config.triton_model_config import ResponseCache, TensorSpec, TritonModelConfig
from .proxy.types import Request

_TRITON_DTYPES = {
    np.bool_: "TYPE_BOOL",
    np.uint8: "TYPE_UINT8",
    np.uint16: "TYPE_UINT16",
    np.uint32: "TYPE_UINT32",
    np.uint64: "TYPE_UINT64",
    np.int8: "TYPE_INT8",
    np.int16: "TYPE_INT16",
    np.int32: "TYPE_INT32",
    np.int64: "TYPE_INT64",
    np.float16: "TYPE_FP16",
    np.float32: "TYPE_FP32",
    np.float64: "TYPE_FP64",
    np.bytes_: "TYPE_STRING",
    np.object_: "TYPE_STRING",
    bytes: "TYPE_STRING",
    object: "TYPE_STRING",
}


def triton_dtype(dtype: Any) -> str:
    kind = dtype if isinstance(dtype, type) else np.dtype(dtype).type
    found = _TRITON_DTYPES.get(kind)
    if found is None:
        if np.dtype(dtype).kind in "SUO":
            return "TYPE_STRING"
        raise PyTritonBadParameterError(f"Unsupported dtype {dtype} for Triton")
    return found


def model_config(
    name: str,
    version: int,
    config: ModelConfig,
    inputs: list[Tensor],
    outputs: list[Tensor],
    count: int,
) -> TritonModelConfig:
    """PyTriton's ``Model._get_triton_model_config``: unnamed tensors are INPUT_i/OUTPUT_i."""
    if config.model_warmup:
        raise PyTritonBadParameterError(
            "ModelConfig.model_warmup is not supported by tritium.pytriton: warm the model up "
            "by calling it once after bind()"
        )
    return TritonModelConfig(
        model_name=name,
        model_version=version,
        batching=config.batching,
        batcher=config.batcher,
        max_batch_size=config.max_batch_size,
        decoupled=config.decoupled,
        instance_group={DeviceKind.KIND_CPU: count},
        inputs=[
            TensorSpec(t.name or f"INPUT_{i}", tuple(t.shape), t.dtype, t.optional)
            for i, t in enumerate(inputs, start=1)
        ],
        outputs=[
            TensorSpec(t.name or f"OUTPUT_{i}", tuple(t.shape), t.dtype)
            for i, t in enumerate(outputs, start=1)
        ],
        response_cache=ResponseCache(enable=True) if config.response_cache else None,
    )


def _queue_policy(policy: QueuePolicy) -> dict[str, Any]:
    return {
        "timeoutAction": policy.timeout_action.value,
        "defaultTimeoutMicroseconds": int(policy.default_timeout_microseconds),
        "allowTimeoutOverride": policy.allow_timeout_override,
        "maxQueueSize": int(policy.max_queue_size),
    }


def _batcher(batcher: DynamicBatcher) -> dict[str, Any]:
    """PyTriton's ``ModelConfigGenerator._set_batching`` for a dynamic batcher."""
    found: dict[str, Any] = {}
    if batcher.max_queue_delay_microseconds > 0:
        found["maxQueueDelayMicroseconds"] = int(batcher.max_queue_delay_microseconds)
    if batcher.preferred_batch_size:
        found["preferredBatchSize"] = [int(b) for b in batcher.preferred_batch_size]
    if batcher.preserve_ordering:
        found["preserveOrdering"] = True
    if batcher.priority_levels:
        found["priorityLevels"] = batcher.priority_levels
    if batcher.default_priority_level:
        if batcher.default_priority_level > batcher.priority_levels:
            raise PyTritonBadParameterError(
                f"The `default_priority_level` must be between 1 and {batcher.priority_levels}."
            )
        found["defaultPriorityLevel"] = batcher.default_priority_level
    if batcher.default_queue_policy:
        found["defaultQueuePolicy"] = _queue_policy(batcher.default_queue_policy)
    if batcher.priority_queue_policy:
        if not batcher.priority_levels:
            raise PyTritonBadParameterError(
                "Provide the `priority_levels` if you want to define `priority_queue_policy` "
                "for Dynamic Batching."
            )
        found["priorityQueuePolicy"] = {
            str(p): _queue_policy(q) for p, q in batcher.priority_queue_policy.items()
        }
    return found


def _io(spec: TensorSpec) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": spec.name,
        "dims": [int(d) for d in spec.shape],
        "data_type": triton_dtype(spec.dtype),
    }
    if spec.optional:
        item["optional"] = True
    return item


def config_dict(config: TritonModelConfig) -> dict[str, Any]:
    """PyTriton's ``ModelConfigGenerator.get_config`` (backend: pytriton)."""
    found: dict[str, Any] = {"name": config.model_name, "backend": config.backend}
    if not config.batching:
        found["max_batch_size"] = 0
    elif config.max_batch_size < 1:
        raise PyTritonBadParameterError("The `max_batch_size` must be greater or equal to 1.")
    else:
        found["max_batch_size"] = config.max_batch_size
        if config.batcher is not None:
            found["dynamic_batching"] = _batcher(config.batcher)
    found["input"] = [_io(s) for s in config.inputs or []]
    found["output"] = [_io(s) for s in config.outputs or []]
    found["instance_group"] = [
        {"count": count, "kind": kind.value} for kind, count in config.instance_group.items()
    ]
    if config.decoupled:
        found["model_transaction_policy"] = {"decoupled": True}
    if config.response_cache is not None:
        found["response_cache"] = {"enable": config.response_cache.enable}
    return found


def write_model(store: Path, config: TritonModelConfig) -> Path:
    """The model's folder: config.pbtxt and an empty version folder."""
    message = json_format.ParseDict(config_dict(config), model_config_pb2.ModelConfig())
    text = text_format.MessageToString(message)
    if not config.batching:
        text += "max_batch_size: 0\n"
    folder = store / config.model_name
    (folder / str(config.model_version)).mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(text)
    return folder


def binding(
    callables: list[Callable[..., Any]], config: TritonModelConfig, strict: bool, processes: bool
) -> Binding:
    if processes and config.decoupled:
        raise PyTritonBadParameterError(
            "a decoupled model streams from its callable: bind it with pool='thread' "
            "(a process pool runs callables whose answers are one list per execution)"
        )
    return Binding(
        tuple(functools.partial(run_callable, fn, config, strict) for fn in callables),
        processes,
    )


# -- the job, on the instance's thread (or in its process) ---------------------------------
_LOOPS = threading.local()


def _loop() -> asyncio.AbstractEventLoop:
    """An event loop of this thread's own for async callables (made once per thread)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_LOOPS, "loop", None)
    if loop is None:
        loop = _LOOPS.loop = asyncio.new_event_loop()
    return loop


def run_callable(
    fn: Callable[..., Any], config: TritonModelConfig, strict: bool, calls: list[Call]
) -> Iterator[Answer]:
    """One execution: ``fn`` over the requests, each answer checked (PyTriton's
    TritonResultsValidator); a generator (or async generator) gives several answers."""
    requests = [
        Request(data=dict(inputs), parameters=parameters, requested_output_names=wanted)
        for inputs, parameters, wanted in calls
    ]
    token = running(config)
    try:
        result = fn(requests)
        if inspect.iscoroutine(result):
            result = _loop().run_until_complete(result)
        for answer in _answers(result):
            yield validated(config, answer, len(requests), strict)
    finally:
        finished(token)


def _answers(result: Any) -> Iterator[Any]:
    if inspect.isgenerator(result):
        yield from result
    elif inspect.isasyncgen(result):
        loop = _loop()
        while True:
            try:
                yield loop.run_until_complete(result.__anext__())
            except StopAsyncIteration:
                return
    else:
        yield result


def validated(config: TritonModelConfig, answer: Any, count: int, strict: bool) -> Answer:
    name = config.model_name
    if not isinstance(answer, list):
        raise ValueError(
            f"Outputs returned by `{name}` model callable must be list of response dicts "
            f"with numpy arrays. Got outputs={answer} instead."
        )
    if len(answer) != count:
        raise ValueError(
            f"Number of outputs returned by `{name}` inference callable ({len(answer)}) does "
            f"not match number of requests ({count}) received from Triton."
        )
    specs = {s.name: s for s in config.outputs or []}
    for response in answer:
        if not isinstance(response, dict):
            raise ValueError(
                f"Outputs returned by `{name}` model callable must be list of response dicts "
                f"with numpy arrays. Got response={response} instead."
            )
        for key, value in response.items():
            _check_output(name, key, value)
            if strict:
                _check_strict(config, specs, key, value)
    return answer


def _check_output(model: str, key: Any, value: Any) -> None:
    if not isinstance(key, str):
        raise ValueError(f"Not all keys returned by `{model}` model callable are string")
    if not isinstance(value, np.ndarray):
        raise ValueError(f"Not all values returned by `{model}` model callable are numpy arrays")
    if value.dtype.kind not in "biufOSU":
        raise ValueError(
            "Only bool, numeric, string, unicode and object arrays are supported by Triton "
            f"(dtype.kind: biufOSU). Returned `{key}` for model `{model}` has "
            f"`{value.dtype.kind}` dtype.kind."
        )
    if value.dtype.kind == "O" and value.size and not isinstance(value.item(0), bytes):
        raise ValueError(
            "Use string/byte-string instead of object for passing string in NumPy array "
            f"from model `{model}`."
        )


def _check_strict(
    config: TritonModelConfig, specs: dict[str, TensorSpec], key: str, value: np.ndarray
) -> None:
    """PyTriton's ``_validate_output_dtype_and_shape``, its messages."""
    model = config.model_name
    spec = specs.get(key)
    if spec is None:
        raise ValueError(
            f"Returned output `{key}` is not defined in model config for model `{model}`."
        )
    objects = (bytes, object, np.bytes_, np.object_)
    if (value.dtype.kind not in "OSU" and not np.issubdtype(value.dtype, spec.dtype)) or (
        value.dtype.kind in "OSU" and spec.dtype not in objects
    ):
        raise ValueError(
            f"Returned output `{key}` for model `{model}` has invalid type. "
            f"Returned: {value.dtype} ({value.dtype.kind}). Expected: {spec.dtype}."
        )
    dims = value.shape[1:] if config.batching else value.shape
    expected = tuple(spec.shape)
    if len(dims) != len(expected):
        raise ValueError(
            f"Returned output `{key}` for model `{model}` has invalid shapes. "
            f"Returned: {dims}. Expected: {expected}."
        )
    if any(d != e != -1 for d, e in zip(dims, expected, strict=True)):
        raise ValueError(
            f"Returned output `{key}` for model `{model}` has invalid shapes at one or more "
            f"positions. Returned: {dims}. Expected: {expected}."
        )
