"""PyTriton's decorators for inference callables (``pytriton.decorators``), same names and
behaviour: ``batch``, ``sample``, ``group_by_keys``, ``group_by_values``, ``fill_optionals``,
``pad_batch``, ``first_value``, ``triton_context``, and the helpers they share.

A decorated callable is a small picklable object (``_Decorated``) over the function it wraps,
so a function bound with ``pool="process"`` crosses to its process; it binds like a function
when it decorates a method. The model configuration a decorator reads is the one of the
execution it runs in (``current_model_config``), set by the binding before each call.
"""

from __future__ import annotations

import bisect
import contextvars
import dataclasses
import functools
import importlib
import inspect
import itertools
import operator
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError
from .model_config.triton_model_config import TritonModelConfig

InferenceRequest = dict[str, np.ndarray]
InferenceRequests = list[InferenceRequest] | tuple[InferenceRequest, ...]
InferenceResult = dict[str, np.ndarray]
InferenceResults = list[InferenceResult] | tuple[InferenceResult, ...]

TRITON_CONTEXT_FIELD_NAME = "triton_context"
_SPECIAL_KEYS = ("__triton_context__",)
_CURRENT: contextvars.ContextVar[TritonModelConfig | None] = contextvars.ContextVar(
    "tritium_pytriton_model_config", default=None
)


@dataclasses.dataclass
class TritonContext:
    """What ``@triton_context`` gives a callable: the bound models' configurations."""

    model_configs: dict[Any, TritonModelConfig] = dataclasses.field(default_factory=dict)


def current_model_config() -> TritonModelConfig:
    config = _CURRENT.get()
    if config is None:
        raise PyTritonValidationError(
            "Wrapped function or object must bound with triton to get  __triton_context__"
        )
    return config


def running(config: TritonModelConfig) -> contextvars.Token[TritonModelConfig | None]:
    """Set the model configuration the decorators of this execution read."""
    return _CURRENT.set(config)


def finished(token: contextvars.Token[TritonModelConfig | None]) -> None:
    _CURRENT.reset(token)


def get_inference_request_batch_size(inference_request: Any) -> int:
    first_input_value = next(iter(inference_request.values()))
    return int(first_input_value.shape[0])


def get_triton_context(wrapped: Any = None, instance: Any = None) -> TritonContext:
    config = current_model_config()
    return _ContextOf(config)


class _ContextOf(TritonContext):
    """A context whose ``model_configs[anything]`` is the running model's configuration."""

    def __init__(self, config: TritonModelConfig) -> None:
        super().__init__(_AnyKey(config))


class _AnyKey(dict[Any, TritonModelConfig]):
    def __init__(self, config: TritonModelConfig) -> None:
        super().__init__()
        self._config = config

    def __missing__(self, key: Any) -> TritonModelConfig:
        return self._config


def get_model_config(wrapped: Any = None, instance: Any = None) -> TritonModelConfig:
    return current_model_config()


def convert_output(
    outputs: Any,
    wrapped: Any = None,
    instance: Any = None,
    model_config: TritonModelConfig | None = None,
) -> dict[str, np.ndarray]:
    """A list or tuple of outputs as a dict, in the configured outputs' order."""
    if isinstance(outputs, dict):
        return outputs
    if isinstance(outputs, (list, tuple)):
        config = model_config if model_config is not None else current_model_config()
        specs = config.outputs or []
        if len(outputs) != len(specs):
            raise PyTritonValidationError("Outputs length different than config outputs length")
        return {spec.name: output for spec, output in zip(specs, outputs, strict=True)}
    raise PyTritonValidationError(f"Unsupported output type {type(outputs)}.")


# -- the decorator object ------------------------------------------------------------------
Impl = Callable[[Callable[..., Any], tuple[Any, ...], tuple[Any, ...], dict[str, Any]], Any]


class _Decorated:
    """``impl(wrapped, options, args, kwargs)`` around ``wrapped``; binds as a method does."""

    def __init__(self, impl: Impl, wrapped: Callable[..., Any], options: tuple[Any, ...]):
        functools.update_wrapper(self, wrapped)
        self._impl = impl
        self._options = options
        self.__wrapped__ = wrapped

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._impl(self.__wrapped__, self._options, args, kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        bound = self.__wrapped__.__get__(instance, owner)
        return _Decorated(self._impl, bound, self._options)

    def __reduce__(self) -> tuple[Any, ...]:
        """By name where the module holds this very object (a decorated module-level
        function: its inner function's name leads here, not to the function); else by parts."""
        module, name = getattr(self, "__module__", None), getattr(self, "__qualname__", "")
        if module and "<" not in name and _lookup(module, name) is self:
            return (_lookup, (module, name))
        return (_Decorated, (self._impl, self.__wrapped__, self._options))


def _lookup(module: str, qualname: str) -> Any:
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _decorator(impl: Impl, options: tuple[Any, ...] = ()) -> Callable[[Any], _Decorated]:
    def decorate(wrapped: Any) -> _Decorated:
        return _Decorated(impl, wrapped, options)

    return decorate


def _stack(fn: Any) -> Iterator[Impl]:
    while isinstance(fn, _Decorated):
        yield fn._impl
        fn = fn.__wrapped__


# -- sample / batch ------------------------------------------------------------------------
def _sample(wrapped: Callable[..., Any], _: tuple[Any, ...], args: Any, kwargs: Any) -> Any:
    kwargs = {**kwargs, **args[0][0]}
    return [convert_output(wrapped(*args[1:], **kwargs))]


def _batch(wrapped: Callable[..., Any], _: tuple[Any, ...], args: Any, kwargs: Any) -> Any:
    requests = args[0]
    names = requests[0].keys()
    for other in requests[1:]:
        if names != other.keys():
            raise PyTritonValidationError("Cannot batch requests with different set of inputs keys")
    inputs = {name: np.concatenate([r[name] for r in requests]) for name in names}
    outputs = wrapped(*args[1:], **{**kwargs, **inputs})
    if inspect.isgenerator(outputs):
        return (_split(requests, result) for result in outputs)
    return _split(requests, outputs)


def _split(requests: Any, result: Any) -> list[dict[str, np.ndarray]]:
    outputs = convert_output(result)
    total = sum(get_inference_request_batch_size(r) for r in requests)
    wrong = {n: t.shape for n, t in outputs.items() if t.shape[0] != total}
    if wrong:
        listed = ", ".join(f"{n}: {s}" for n, s in wrong.items())
        raise ValueError(
            f"Received output tensors with different batch sizes: {listed}. "
            f"Expected batch size: {total}. "
        )
    answers, start = [], 0
    for request in requests:
        size = get_inference_request_batch_size(request)
        answers.append({n: t[start : start + size, ...] for n, t in outputs.items()})
        start += size
    return answers


sample = _decorator(_sample)
batch = _decorator(_batch)


# -- grouping ------------------------------------------------------------------------------
def _group_by_keys(wrapped: Callable[..., Any], _: tuple[Any, ...], args: Any, kwargs: Any) -> Any:
    indexed = sorted(
        ((i, tuple(sorted(r.keys())), r) for i, r in enumerate(args[0])),
        key=operator.itemgetter(1),
    )
    results: list[tuple[int, Any]] = []
    for _key, group in itertools.groupby(indexed, key=operator.itemgetter(1)):
        idx, _keys, samples = zip(*group, strict=True)
        results.extend(zip(idx, wrapped(list(samples), *args[1:], **kwargs), strict=True))
    return [answer for _, answer in sorted(results, key=operator.itemgetter(0))]


group_by_keys = _decorator(_group_by_keys)


def _value_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype == np.object_ or value.dtype.type == np.bytes_:
            return tuple(bytes(v) for v in value.reshape(-1)) + (value.shape,)
        return value.tobytes() + repr(value.shape).encode()
    return value


def _group_by_values(
    wrapped: Callable[..., Any], options: tuple[Any, ...], args: Any, kwargs: Any
) -> Any:
    keys, pad_fn = options
    if _batch in _stack(wrapped):
        raise PyTritonRuntimeError(
            "The @group_by_values decorator must be used after the @batch decorator."
        )
    request = {k: v for k, v in kwargs.items() if k not in _SPECIAL_KEYS}
    special = {k: v for k, v in kwargs.items() if k in _SPECIAL_KEYS}
    size = get_inference_request_batch_size(request)
    ordered = sorted(
        ((i, tuple(_value_key(request[k][i]) for k in keys)) for i in range(size)),
        key=operator.itemgetter(1),
    )
    parts = []
    for _value, group in itertools.groupby(ordered, key=operator.itemgetter(1)):
        idx = [i for i, _ in group]
        sub = {name: value[idx, ...] for name, value in request.items()}
        parts.append((idx, wrapped(*args, **sub, **special)))
    if pad_fn is not None:
        padded = pad_fn([result for _, result in parts])
        parts = [(idx, result) for (idx, _), result in zip(parts, padded, strict=True)]
    first = parts[0][1]
    merged = {n: np.zeros((size,) + d.shape[1:], dtype=d.dtype) for n, d in first.items()}
    for idx, result in parts:
        for name, data in result.items():
            merged[name][idx, ...] = data
    return merged


def group_by_values(
    *keys: str, pad_fn: Callable[[InferenceRequests], InferenceRequests] | None = None
) -> Callable[[Any], _Decorated]:
    """Run the callable once per group of samples with equal values of ``keys``."""
    return _decorator(_group_by_values, (keys, pad_fn))


class ConstantPadder:
    """Pads the arrays of several batches to a common shape (for ``group_by_values``)."""

    def __init__(self, pad_value: Any = 0) -> None:
        self.pad_value = pad_value

    def __call__(self, batches_list: InferenceResults) -> InferenceResults:
        names = list(dict.fromkeys(n for b in batches_list for n in b.keys()))
        by_name = {n: [b.get(n) for b in batches_list] for n in names}
        for arrays in by_name.values():
            present = [a for a in arrays if a is not None]
            shape = tuple(np.max([a.shape[1:] for a in present], axis=0))
            dtype = _padded_dtype(present)
            fill = self.pad_value if dtype.kind not in "SUO" else b""
            for i, a in enumerate(arrays):
                if a is not None:
                    pads = [(0, 0)] + [(0, b - s) for s, b in zip(a.shape[1:], shape, strict=True)]
                    arrays[i] = np.pad(a, pads, constant_values=fill).astype(dtype)
        padded: list[InferenceResult] = []
        for i in range(len(batches_list)):
            padded.append({n: a for n, arrays in by_name.items() if (a := arrays[i]) is not None})
        return padded


def _padded_dtype(arrays: list[np.ndarray]) -> np.dtype:
    dtypes = [a.dtype for a in arrays]
    first = dtypes[0]
    if not all(d.kind == first.kind for d in dtypes):
        raise PyTritonRuntimeError(
            "All input arrays for given input name must have the same dtype."
        )
    if first.kind in "SU":
        return np.dtype(f"{first.str[:2]}{max(int(d.str[2:]) for d in dtypes)}")
    if not all(d == first for d in dtypes):
        raise PyTritonRuntimeError(
            "All input arrays for given input name must have the same dtype."
        )
    return first


# -- optionals, padding, first values, context ---------------------------------------------
def _check_defaults(defaults: dict[str, Any], config: TritonModelConfig) -> None:
    inputs = {spec.name: spec for spec in config.inputs or []}
    unknown = sorted(set(defaults) - set(inputs))
    if unknown:
        raise PyTritonBadParameterError(f"Could not found {', '.join(unknown)} inputs")
    not_numpy = {k: v for k, v in defaults.items() if not isinstance(v, np.ndarray)}
    if not_numpy:
        listed = ", ".join(f"{k}={v}" for k, v in not_numpy.items())
        raise PyTritonBadParameterError(
            f"Could not use {listed} defaults as they are not NumPy arrays"
        )
    for name, value in defaults.items():
        spec = inputs[name]
        if value.dtype != np.dtype(spec.dtype):
            raise PyTritonBadParameterError(
                f"Could not use {name}: dtype={value.dtype} expected_dtype={spec.dtype} "
                "defaults as they have different than input signature dtypes"
            )
        expected = tuple(spec.shape)
        if len(value.shape) != len(expected) or any(
            e != -1 and h != e for h, e in zip(value.shape, expected, strict=True)
        ):
            raise PyTritonBadParameterError(
                f"Could not use {name}: shape={value.shape} expected_shape={expected} "
                "defaults as they have different than input signature shapes"
            )


def _fill_optionals(
    wrapped: Callable[..., Any], options: tuple[Any, ...], args: Any, kwargs: Any
) -> Any:
    (defaults,) = options
    config = current_model_config()
    _check_defaults(defaults, config)
    for request in args[0]:
        size = get_inference_request_batch_size(request) if config.batching else None
        for name, value in defaults.items():
            if name in request:
                continue
            if size is not None:
                value = np.tile(value, (size,) + (1,) * value.ndim)
            request[name] = value
    return wrapped(*args, **kwargs)


def fill_optionals(**defaults: Any) -> Callable[[Any], _Decorated]:
    """Fill the inputs a request left out with ``defaults`` (repeated over the batch)."""
    return _decorator(_fill_optionals, (defaults,))


def _triton_context(wrapped: Callable[..., Any], _: tuple[Any, ...], args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **{**kwargs, TRITON_CONTEXT_FIELD_NAME: get_triton_context()})


triton_context = _decorator(_triton_context)


def _pad_batch(wrapped: Callable[..., Any], _: tuple[Any, ...], args: Any, kwargs: Any) -> Any:
    inputs = {k: v for k, v in kwargs.items() if k != "__triton_context__"}
    first = next(iter(inputs.values()))
    config = current_model_config()
    preferred = config.batcher.preferred_batch_size if config.batcher is not None else None
    sizes = sorted(preferred or [])
    sizes.append(config.max_batch_size)
    size = sizes[bisect.bisect_left(sizes, first.shape[0])]
    for name, array in inputs.items():
        repeats = np.ones(array.shape[0], dtype=np.int64)
        repeats[-1] = size - array.shape[0] + 1
        kwargs[name] = np.repeat(array, repeats, axis=0)
    return wrapped(*args, **kwargs)


pad_batch = _decorator(_pad_batch)


def _first_of(request: Any, keys: tuple[str, ...], squeeze: bool, strict: bool) -> Any:
    for name in keys:
        if name not in request:
            continue
        values = request[name]
        if strict:
            unique = np.unique(values, axis=None if values.dtype == object else 0)
            if len(unique) > 1:
                raise PyTritonRuntimeError(
                    f"The values on the {name!r} input are not equal. "
                    "To proceed, either disable strict mode in @first_value wrapper "
                    "or ensure that the values always are consistent. "
                    f"The current values of {name!r} are {values!r}."
                )
        first = values[0]
        if squeeze and not np.isscalar(first) and all(d == 1 for d in first.shape):
            first = np.squeeze(first)[()]
        request[name] = first
    return request


def _first_value(
    wrapped: Callable[..., Any], options: tuple[Any, ...], args: Any, kwargs: Any
) -> Any:
    keys, squeeze, strict = options
    if not current_model_config().batching:
        raise PyTritonRuntimeError(
            "The @first_value decorator can only be used with models that support batching."
        )
    if set(kwargs) - set(_SPECIAL_KEYS):
        return wrapped(*args, **_first_of(dict(kwargs), keys, squeeze, strict))
    requests, *rest = args
    return wrapped([_first_of(r, keys, squeeze, strict) for r in requests], *rest, **kwargs)


def first_value(
    *keys: str, squeeze_single_values: bool = True, strict: bool = True
) -> Callable[[Any], _Decorated]:
    """Replace the batch of each of ``keys`` by its first value (all equal, when strict)."""
    bad = [k for k in keys if k in _SPECIAL_KEYS]
    if bad:
        raise PyTritonBadParameterError(
            f"The keys {', '.join(bad)} are not allowed as keys for @first_value wrapper. "
            f"The set of not allowed keys are {', '.join(_SPECIAL_KEYS)}"
        )
    return _decorator(_first_value, (keys, squeeze_single_values, strict))
