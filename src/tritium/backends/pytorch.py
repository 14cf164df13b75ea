"""PyTorch backend (TorchScript ``model.pt``, CPU), Triton's ``pytorch`` / ``pytorch_libtorch``
contract: each instance runs its TorchScript module on its own thread (torch releases the GIL
while a module runs, so instances execute concurrently); a dynamic batch is concatenated along
the batch dimension and the outputs cut back per request; BYTES tensors are ``List[str]``.

How inputs and outputs reach ``forward()`` is decided at load (``pytorch_io.bind``). Triton's
parameters are read in ``TorchOptions.from_config``; the thread pools, which torch keeps per
process, in ``_ThreadPools``. Imported only when a model needs it (``pip install
tritium[pytorch]``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..config.model_config import ModelConfig
from ..config.spec import ModelSpec
from ..errors import internal, invalid_arg, unavailable
from ..logs.settings import about_model
from ..request import InferenceRequest
from ..types import DataType, InferenceResponse, Tensor
from .base import LoadContext, ModelInstance, instance_names, output_tensor, requested_names
from .data_dependence import torch_graph_reason, variable_inputs
from .inline_policy import ModelExecution, execution_mode
from .pytorch_io import Binding, bind, check_output_shape
from .ragged import batch_input_array, merge_ragged
from .threaded import ThreadedInstance, union

log = logging.getLogger("tritium")

_TO_TORCH = {
    DataType.BOOL: torch.bool,
    DataType.UINT8: torch.uint8,
    DataType.INT8: torch.int8,
    DataType.INT16: torch.int16,
    DataType.INT32: torch.int32,
    DataType.INT64: torch.int64,
    DataType.FP16: torch.float16,
    DataType.FP32: torch.float32,
    DataType.FP64: torch.float64,
}
_FROM_TORCH = {dtype: datatype for datatype, dtype in _TO_TORCH.items()}


def _parse_bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "on", "1"):
        return True
    if value in ("false", "off", "0"):
        return False
    raise invalid_arg(f"failed to convert '{text}' to boolean value for parameter '{key}'")


def _parse_count(key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise invalid_arg(f"failed to convert '{text}' to integral value for '{key}'") from None


@dataclass(frozen=True, slots=True)
class TorchOptions:
    """Triton's PyTorch parameters. ``None``: not set, torch's own setting stays (Triton
    changes the JIT settings only when the parameter is given)."""

    optimized_execution: bool = True  # DISABLE_OPTIMIZED_EXECUTION
    inference_mode: bool = True  # INFERENCE_MODE
    jit_executor: bool | None = None  # ENABLE_JIT_EXECUTOR
    jit_profiling: bool | None = None  # ENABLE_JIT_PROFILING
    tensor_fuser: bool | None = None  # ENABLE_TENSOR_FUSER
    weight_sharing: bool = False  # ENABLE_WEIGHT_SHARING
    intra_op_threads: int | None = None  # INTRA_OP_THREAD_COUNT, else NUM_THREADS (> 0)
    inter_op_threads: int | None = None  # INTER_OP_THREAD_COUNT, else NUM_INTEROP_THREADS (> 0)

    @classmethod
    def from_config(cls, config: ModelConfig) -> TorchOptions:
        params = {k: v.string_value for k, v in config.parameters.items()}
        for key in ("DISABLE_CUDNN", "ENABLE_CACHE_CLEANING"):  # GPU only: checked, no effect
            if key in params:
                _parse_bool(key, params[key])

        def flag(key: str) -> bool | None:
            return _parse_bool(key, params[key]) if key in params else None

        def count(key: str) -> int | None:
            value = _parse_count(key, params[key]) if key in params else -1
            return value if value > 0 else None  # Triton: 0 or less leaves torch's default

        def threads(key: str, alias: str) -> int | None:
            """The README's PyTorch 2 name is accepted as the alias of libtorch's key; the
            libtorch key, which Triton's TorchScript backend reads, wins if both differ."""
            value, other = count(key), count(alias)
            if key in params and alias in params and value != other:
                log.warning(
                    "model '%s': %s is given: %s %s is not applied",
                    *(config.name, key, alias, params[alias]),
                    extra=about_model(config.name),
                )
            return value if key in params else other

        return cls(
            optimized_execution=not flag("DISABLE_OPTIMIZED_EXECUTION"),
            inference_mode=flag("INFERENCE_MODE") is not False,
            jit_executor=flag("ENABLE_JIT_EXECUTOR"),
            jit_profiling=flag("ENABLE_JIT_PROFILING"),
            tensor_fuser=flag("ENABLE_TENSOR_FUSER"),
            weight_sharing=bool(flag("ENABLE_WEIGHT_SHARING")),
            intra_op_threads=threads("INTRA_OP_THREAD_COUNT", "NUM_THREADS"),
            inter_op_threads=threads("INTER_OP_THREAD_COUNT", "NUM_INTEROP_THREADS"),
        )

    def apply_jit(self) -> None:
        """The JIT settings of one execution, on the thread that runs it (Triton sets them
        before each forward; the graph-executor switch is per thread in torch)."""
        torch._C._set_graph_executor_optimize(self.optimized_execution)
        if self.jit_profiling is not None:
            torch._C._jit_set_profiling_mode(self.jit_profiling)
        if self.jit_executor is not None:
            torch._C._jit_set_profiling_executor(self.jit_executor)
        if self.tensor_fuser is not None:
            torch._C._jit_set_texpr_fuser_enabled(self.tensor_fuser)


class _ThreadPools:
    """torch's intra-op and inter-op pools are per process. As in Triton, the first model
    that sets INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT decides (a later, different value
    is logged and not applied). Until one does, the intra-op pool has one thread, as each ONNX
    Runtime instance has: the instances, which run concurrently, are the parallelism, and an
    OpenMP pool of every CPU per instance fights the other instances and the server for the
    cores (measured here on a loaded 2-core machine: 2 threads made a batch of 8 over 20 times
    slower than 1)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._intra: int | None = None  # the explicit value, once given
        self._inter: int | None = None
        self._threads = 1  # the intra-op pool's size now
        self._applied = threading.local()

    def on_this_thread(self) -> None:
        """Give the calling thread the process's intra-op size: OpenMP (and MKL under it)
        keep the thread count per thread, so an instance thread that never called
        torch.set_num_threads runs every operator with one OpenMP thread per core whatever
        the process set (measured: ~10x the CPU per sample on a loaded 2-core machine)."""
        if getattr(self._applied, "threads", None) != self._threads:
            torch.set_num_threads(self._threads)
            self._applied.threads = self._threads

    def configure(self, model: str, options: TorchOptions) -> None:
        with self._lock:
            self._configure_intra(model, options.intra_op_threads)
            if options.inter_op_threads is not None:
                self._configure_inter(model, options.inter_op_threads)

    def _configure_intra(self, model: str, wanted: int | None) -> None:
        if wanted is None:
            return  # one thread, or the first explicit value
        if self._intra is None:
            self._intra = self._threads = wanted
        elif wanted != self._intra:
            _kept(model, "INTRA_OP_THREAD_COUNT", wanted, self._intra)
        log.info(
            "Intra op thread count is set to %d for model '%s'",
            self._threads,
            model,
            extra=about_model(model),
        )

    def _configure_inter(self, model: str, wanted: int) -> None:
        if self._inter is None:
            self._inter = wanted
            try:
                torch.set_num_interop_threads(wanted)
            except RuntimeError:  # the pool already started: torch allows setting it once
                log.warning(
                    "model '%s': INTER_OP_THREAD_COUNT %d cannot be applied: torch's "
                    "inter-op pool already started with %d threads",
                    model,
                    wanted,
                    torch.get_num_interop_threads(),
                    extra=about_model(model),
                )
        elif wanted != self._inter:
            _kept(model, "INTER_OP_THREAD_COUNT", wanted, self._inter)
        log.info(
            "Inter op thread count is set to %d for model '%s'",
            torch.get_num_interop_threads(),
            model,
            extra=about_model(model),
        )


def _kept(model: str, key: str, wanted: int, kept: int) -> None:
    log.warning(
        "model '%s': %s %d is not applied: torch's thread pools are per process and the "
        "first model that set it chose %d (as in Triton)",
        model,
        key,
        wanted,
        kept,
        extra=about_model(model),
    )


_POOLS = _ThreadPools()


def _arguments(module: Any) -> list[tuple[str, str]]:
    """forward()'s arguments as (name, type kind), ``self`` left out."""
    arguments = module.forward.schema.arguments
    pairs = [(a.name, a.type.kind()) for a in arguments]
    return pairs[1:] if pairs and pairs[0][1] == "ClassType" else pairs


_JIT_DEPRECATED = r"`torch\.jit\.\w+` is deprecated"


def _load_module(path: Any, model: str, options: TorchOptions) -> Any:
    if not path.is_file():
        raise unavailable(f"unable to find '{path}' for model instance '{model}'")
    try:
        # torch 2.13 warns that TorchScript's loader is deprecated: TorchScript is what
        # Triton's PyTorch backend loads, so a warning turned into an error (python -W error,
        # pytest's filterwarnings) must not fail the load.
        with warnings.catch_warnings(), torch.inference_mode(options.inference_mode):
            warnings.filterwarnings("ignore", message=_JIT_DEPRECATED)
            return torch.jit.load(str(path), map_location="cpu")  # type: ignore[no-untyped-call]
    except Exception as exc:  # torch raises RuntimeError and its own types
        raise internal(f"failed to load model '{model}': {exc}") from None


def _graph_reason(module: Any) -> str:
    """Why the module's cost may depend on input values (backends/data_dependence.py), read
    from forward()'s graph with the calls inlined; a graph that cannot be read counts."""
    try:
        graph = module.inlined_graph
    except Exception as exc:  # a module without a scripted forward()
        return f"its graph could not be read ({exc})"
    return torch_graph_reason(graph)


class TorchInstance(ThreadedInstance):
    """One TorchScript module (its own, or shared with ENABLE_WEIGHT_SHARING) on one thread."""

    failure = "PyTorch execute failure"
    own_errors = True

    def __init__(  # noqa: PLR0913 - what one instance needs, all given by the backend
        self,
        name: str,
        spec: ModelSpec,
        version: int,
        module: Any,
        binding: Binding,
        options: TorchOptions,
        execution: ModelExecution,
    ) -> None:
        self._spec = spec
        self._module = module
        self._binding = binding
        self._options = options
        self._ragged = frozenset(n for n, io in spec.inputs.items() if io.allow_ragged)
        super().__init__(name, version, "torch", execution)

    def _run(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        t0 = time.perf_counter_ns()
        arguments = self._arguments(requests)
        t1 = time.perf_counter_ns()
        _POOLS.on_this_thread()
        self._options.apply_jit()
        guard = torch.inference_mode() if self._options.inference_mode else torch.no_grad()
        with guard:
            returned = self._module(*arguments)
        results = _returned_values(returned)
        t2 = time.perf_counter_ns()
        responses = self._responses(requests, results)
        timing = (t1 - t0, t2 - t1, time.perf_counter_ns() - t2)
        for request in requests:
            request.timing = timing
        return responses

    def _arguments(self, requests: list[InferenceRequest]) -> list[Any]:
        """forward()'s arguments for the batch: each tensor at its bound position, or all of
        them in one dictionary."""
        values = self._values(requests)
        if self._binding.dict_input:
            return [values]
        arguments: list[Any] = [None] * self._binding.argument_count
        for name, value in values.items():
            arguments[self._binding.inputs[name]] = value
        return arguments

    def _values(self, requests: list[InferenceRequest]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for tensor in requests[0].inputs:
            if tensor.name not in self._binding.inputs:
                continue  # an optional input the model has no argument for
            parts = [_input(r, tensor.name).data for r in requests]
            if tensor.name in self._ragged:
                data = merge_ragged(parts)
            else:
                data = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
            values[tensor.name] = _to_torch(data, tensor.datatype)
        for batch_input in self._spec.batch_inputs:
            shapes = [_input(r, batch_input.source).shape for r in requests]
            array = batch_input_array(batch_input, shapes)
            for target in batch_input.targets:
                values[target] = _to_torch(array, batch_input.datatype)
        return values

    def _responses(
        self, requests: list[InferenceRequest], results: list[Any]
    ) -> list[InferenceResponse]:
        names = union(requested_names(self._spec, r) for r in requests)
        arrays = {name: self._output(name, results) for name in names}
        batched = self._spec.max_batch_size > 0
        rows = sum(request.batch_size for request in requests) if batched else 0
        for name, array in arrays.items():
            check_output_shape(self._spec, name, array.shape, rows)
        responses = []
        start = 0
        for request in requests:
            size = request.batch_size if batched else 0
            outputs = [
                output_tensor(self._spec, n, _part(arrays[n], start, size, len(requests)))
                for n in requested_names(self._spec, request)
            ]
            start += size
            responses.append(
                InferenceResponse(request.model_name, self._version, request.id, outputs)
            )
        return responses

    def _output(self, name: str, results: list[Any]) -> np.ndarray:
        index = self._binding.outputs[name]
        if index >= len(results):
            raise internal(f"output tensor '{name}' is not found")
        value = results[index]
        if isinstance(value, list):  # List[str]
            return np.array([s.encode("utf-8") for s in value], dtype=object)
        provided = _FROM_TORCH.get(value.dtype)
        expected = self._spec.outputs[name].datatype if name in self._spec.outputs else None
        if expected is not None and provided is not expected:
            shown = provided.config_name if provided is not None else "TYPE_INVALID"
            raise invalid_arg(
                f"configuration expects datatype {expected.config_name} for output '{name}', "
                f"model provides {shown}"
            )
        if value.dim() == 0:
            raise invalid_arg(f"output '{name}' is a scalar which is not supported.")
        array: np.ndarray = value.detach().contiguous().numpy()
        return array


def _input(request: InferenceRequest, name: str) -> Tensor:
    return next(t for t in request.inputs if t.name == name)


def _to_torch(data: np.ndarray, datatype: DataType) -> Any:
    if datatype is DataType.BYTES:  # List[str], as Triton's PyTorch backend gives strings
        return [
            v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
            for v in data.reshape(-1)
        ]
    if not data.flags.writeable or not data.flags.c_contiguous:
        data = np.ascontiguousarray(data).copy()  # the model may write into its inputs
    return torch.from_numpy(data)


def _returned_values(returned: Any) -> list[Any]:
    """What forward() returned, as Triton's PyTorch backend reads it: one Tensor or List[str],
    or a tuple of them."""
    values = list(returned) if isinstance(returned, tuple) else [returned]
    for index, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            continue
        if isinstance(value, list):
            where = f"output at index {index}" if isinstance(returned, tuple) else "output"
            raise internal(f"{where} must be of type Tensor or List[str]")
        raise internal(
            "output must be of type Tensor, List[str] or Tuple containing one of these two "
            "types. It should not be a List / Dictionary of Tensors or a Scalar"
        )
    return values


def _part(array: np.ndarray, start: int, size: int, count: int) -> np.ndarray:
    """One request's rows of a batch output (the whole output when not batching)."""
    if size == 0 or count == 1:
        return array
    if array.shape[0] < start + size:
        raise internal(
            f"output has batch dimension {array.shape[0]}, fewer than the batch's requests"
        )
    return array[start : start + size]


class PyTorchBackend:
    """``backend: "pytorch"`` / ``platform: "pytorch_libtorch"``."""

    async def load(self, ctx: LoadContext) -> tuple[ModelSpec, list[ModelInstance]]:
        config = ctx.config
        if config.platform == "torch_aoti":
            raise invalid_arg(
                f"model '{ctx.model_name}': AOT Inductor packages (platform \"torch_aoti\", "
                "model.pt2) are not supported by tritium; serve a TorchScript model.pt with "
                'platform "pytorch_libtorch"'
            )
        if ctx.auto_complete:  # Triton's PyTorch backend has nothing to fill it from
            log.warning(
                "skipping model configuration auto-complete for '%s': not supported for "
                "pytorch backend",
                ctx.model_name,
                extra=about_model(ctx.model_name),
            )
        options = TorchOptions.from_config(config)
        mode = execution_mode({k: v.string_value for k, v in config.parameters.items()})
        spec = ctx.finalize(config)
        _POOLS.configure(spec.name, options)
        path = ctx.model_file("model.pt")
        first = await asyncio.to_thread(_load_module, path, spec.name, options)
        binding = bind(spec, _arguments(first))
        names = instance_names(spec, ctx)
        modules = await self._modules(first, path, spec.name, options, len(names))
        reason = variable_inputs(spec)
        if not reason and mode != "thread":
            reason = await asyncio.to_thread(_graph_reason, first)
        execution = ModelExecution(spec.name, mode, reason)
        return spec, [
            TorchInstance(n, spec, ctx.version, m, binding, options, execution)
            for n, m in zip(names, modules, strict=True)
        ]

    async def _modules(
        self, first: Any, path: Any, model: str, options: TorchOptions, count: int
    ) -> list[Any]:
        if options.weight_sharing:
            log.info(
                "Reusing TorchScript model for the %d instances of '%s'",
                count,
                model,
                extra=about_model(model),
            )
            return [first] * count
        rest = await asyncio.gather(
            *(asyncio.to_thread(_load_module, path, model, options) for _ in range(count - 1))
        )
        return [first, *rest]
