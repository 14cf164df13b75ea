"""An ensemble's ``ensemble_scheduling`` checked against its composing models and frozen into
an ``EnsemblePlan``: the DAG the ensemble scheduler walks for every request.

Everything here is pure: composing models are looked up through a callable, so the checks run
the same at load time and in unit tests. Messages follow Triton's and name the ensemble, the
step and the tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ServerError, invalid_arg
from ..types import DataType
from .model_config import mc
from .spec import IOSpec, ModelSpec

# (name, version) -> the composing model's spec, or a ServerError saying why it has none.
SpecLookup = Callable[[str, int], ModelSpec]


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    model_name: str
    model_version: int  # -1: the latest ready version at request time
    inputs: tuple[tuple[str, str], ...]  # (composing model input, ensemble tensor)
    outputs: tuple[tuple[str, str], ...]  # (composing model output, ensemble tensor)
    decoupled: bool
    # The rank each input must have for the composing model (its batch dimension included):
    # a tensor from a model that batches differently gains or loses a leading 1, as in Triton.
    ranks: tuple[int, ...] = ()

    def describe(self) -> str:
        return f"step {self.index} (model '{self.model_name}')"


@dataclass(frozen=True, slots=True)
class Route:
    """What one request walks, given the ensemble outputs it asked for: only the steps those
    outputs depend on, and how many reads each tensor has left before it can be dropped."""

    wanted: tuple[str, ...]
    steps: tuple[Step, ...]  # every step of the ensemble, by index (unneeded ones unused)
    start: tuple[int, ...]  # needed steps that read ensemble inputs only
    consumers: dict[str, tuple[int, ...]]  # tensor -> needed steps reading it
    refs: dict[str, int]  # tensor -> reads by needed steps (+1 when it is a wanted output)
    requested: dict[int, tuple[str, ...]]  # step -> the composing outputs to ask for


@dataclass(frozen=True, slots=True)
class _Source:
    """Where a tensor's datatype and shape come from, for mismatch messages."""

    who: str  # "model 'x'" or "ensemble 'y'"
    datatype: DataType
    dims: tuple[int, ...]  # without the batch dimension
    batching: bool

    @property
    def full(self) -> tuple[int, ...]:
        return ((-1,) + self.dims) if self.batching else self.dims


class EnsemblePlan:
    def __init__(
        self,
        name: str,
        inputs: tuple[str, ...],
        outputs: dict[str, int],
        steps: tuple[Step, ...],
        max_inflight: int = 0,
    ) -> None:
        self.name = name
        self.max_inflight = max_inflight  # per step, across requests (0: no limit)
        self.inputs = inputs
        self.outputs = tuple(outputs)
        self.output_ranks = outputs  # ensemble output -> its rank as clients see it
        self.steps = steps
        self.decoupled = any(s.decoupled for s in steps)
        self.producer = {t: s.index for s in steps for _, t in s.outputs}
        self._routes: dict[tuple[str, ...], Route] = {}

    def route(self, wanted: tuple[str, ...]) -> Route:
        route = self._routes.get(wanted)
        if route is None:
            route = self._routes[wanted] = self._build_route(wanted)
        return route

    def _build_route(self, wanted: tuple[str, ...]) -> Route:
        needed: set[int] = set()
        todo = [self.producer[t] for t in wanted]
        while todo:
            index = todo.pop()
            if index not in needed:
                needed.add(index)
                todo.extend(
                    self.producer[t] for _, t in self.steps[index].inputs if t in self.producer
                )
        consumers: dict[str, list[int]] = {}
        refs: dict[str, int] = dict.fromkeys(wanted, 1)
        for index in sorted(needed):
            for _, tensor in self.steps[index].inputs:
                consumers.setdefault(tensor, []).append(index)
                refs[tensor] = refs.get(tensor, 0) + 1
        inputs = set(self.inputs)
        return Route(
            wanted=wanted,
            steps=self.steps,
            start=tuple(
                i for i in sorted(needed) if all(t in inputs for _, t in self.steps[i].inputs)
            ),
            consumers={t: tuple(dict.fromkeys(c)) for t, c in consumers.items()},
            refs=refs,
            requested={i: tuple(o for o, t in self.steps[i].outputs if t in refs) for i in needed},
        )


def build_plan(config: Any, lookup: SpecLookup) -> EnsemblePlan:
    """Check an ensemble's config against its composing models; raise INVALID_ARG naming the
    ensemble, the step and the tensor at the first problem."""
    name = config.name
    _check_shape_of_config(config)
    ens_inputs = {i.name: _ensemble_source(config, i) for i in config.input}
    ens_outputs = {o.name: _ensemble_source(config, o) for o in config.output}
    specs = _composing_specs(config, lookup)
    steps = tuple(_step(config, i, specs[i]) for i in range(len(specs)))
    _check_batch_sizes(config, steps, specs)
    producers = _producers(name, steps, ens_inputs)
    _check_connected(name, steps, producers, ens_inputs, ens_outputs)
    order = _topological_order(name, steps, producers)
    _check_types(name, steps, specs, producers, ens_inputs, ens_outputs)
    _check_lineage(name, steps, order, ens_outputs)
    ranks = {t: len(source.full) for t, source in ens_outputs.items()}
    limit = config.ensemble_scheduling.max_inflight_requests
    return EnsemblePlan(name, tuple(ens_inputs), ranks, steps, limit)


def _fail(message: str) -> ServerError:
    return invalid_arg(message)


def _check_shape_of_config(config: Any) -> None:
    name = config.name
    if config.instance_group:
        raise _fail(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise _fail(f"optimization should not be specified for ensemble '{name}'")
    if config.model_warmup:
        raise _fail(f"model_warmup can not be specified for ensemble '{name}'")
    if not config.HasField("ensemble_scheduling"):
        raise _fail(
            f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
        )
    if not config.ensemble_scheduling.step:
        raise _fail(f"must specify 'step' for ensemble '{name}'")
    for index, step in enumerate(config.ensemble_scheduling.step):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                raise _fail(f"must specify '{field}' in step {index} of ensemble '{name}'")


def _ensemble_source(config: Any, io: Any) -> _Source:
    datatype = DataType.from_config(_config_type_name(io.data_type))
    if datatype is None:
        raise _fail(f"ensemble '{config.name}': tensor '{io.name}' must specify 'data_type'")
    dims = tuple(io.reshape.shape) if io.HasField("reshape") else tuple(io.dims)
    return _Source(f"ensemble '{config.name}'", datatype, dims, config.max_batch_size > 0)


def _config_type_name(value: int) -> str:
    return str(mc.DataType.Name(value))


def _composing_specs(config: Any, lookup: SpecLookup) -> list[ModelSpec]:
    specs: list[ModelSpec] = []
    problems: dict[str, str] = {}  # model -> "step i (model 'm'): why"
    for index, step in enumerate(config.ensemble_scheduling.step):
        if step.model_name == config.name:
            raise _fail(f"circular dependency between ensembles: {config.name} -> {config.name}")
        try:
            specs.append(lookup(step.model_name, int(step.model_version)))
        except ServerError as exc:
            where = f"step {index} (model '{step.model_name}')"
            problems.setdefault(step.model_name, f"{where}: {exc.message}")
    if problems:
        names = ", ".join(sorted(problems))
        details = "; ".join(problems[n] for n in sorted(problems))
        raise _fail(
            f"ensemble {config.name} contains models that are not available or ambiguous: "
            f"{names} ({details})"
        )
    return specs


def _step(config: Any, index: int, spec: ModelSpec) -> Step:
    """One step's maps, checked against its composing model's inputs and outputs."""
    entry = config.ensemble_scheduling.step[index]
    where = f"in ensemble {config.name}, step {index} (model '{spec.name}')"
    for key, tensor in entry.input_map.items():
        if key not in spec.inputs:
            raise _fail(
                f"{where}: ensemble tensor {tensor} is mapping to non-existing input {key} in "
                f"model {spec.name}"
            )
    for key in spec.required_inputs:
        if key not in entry.input_map:
            raise _fail(
                f"{where}: input {key} in model {spec.name} is not mapped to any ensemble tensors"
            )
    seen: dict[str, str] = {}
    for key, tensor in entry.output_map.items():
        if key not in spec.outputs:
            raise _fail(
                f"{where}: ensemble tensor {tensor} is mapped from non-existing output {key} in "
                f"model {spec.name}"
            )
        if tensor in seen:
            raise _fail(
                f"{where}: multiple outputs in model {spec.name} are mapped to the same ensemble "
                f"tensor {tensor}"
            )
        seen[tensor] = key
    inputs = tuple(sorted(entry.input_map.items()))
    batch = 1 if spec.max_batch_size > 0 else 0
    return Step(
        index=index,
        model_name=spec.name,
        model_version=int(entry.model_version),
        inputs=inputs,
        outputs=tuple(sorted(entry.output_map.items())),
        decoupled=spec.decoupled,
        ranks=tuple(len(spec.inputs[key].dims) + batch for key, _ in inputs),
    )


def _check_batch_sizes(config: Any, steps: Iterable[Step], specs: list[ModelSpec]) -> None:
    limit = config.max_batch_size
    for step in steps:
        own = specs[step.index].max_batch_size
        if limit > 0 and 0 < own < limit:
            raise _fail(
                f"ensemble {config.name} allows maximum batch size {limit}, but it contains "
                f"model {step.model_name} which only allows maximum batch size to be {own} "
                f"({step.describe()})"
            )


def _producers(
    name: str, steps: tuple[Step, ...], ens_inputs: dict[str, _Source]
) -> dict[str, int]:
    """tensor -> the step writing it; a tensor is written once (ensemble inputs count)."""
    producers: dict[str, int] = {}
    for step in steps:
        for _, tensor in step.outputs:
            if tensor in producers or tensor in ens_inputs:
                first = (
                    "it is an ensemble input"
                    if tensor in ens_inputs
                    else f"{steps[producers[tensor]].describe()} writes it too"
                )
                raise _fail(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' {step.describe()} ({first})"
                )
            producers[tensor] = step.index
    return producers


def _check_connected(
    name: str,
    steps: tuple[Step, ...],
    producers: dict[str, int],
    ens_inputs: dict[str, _Source],
    ens_outputs: dict[str, _Source],
) -> None:
    read = {t for s in steps for _, t in s.inputs}
    for step in steps:
        for key, tensor in step.inputs:
            if tensor not in producers and tensor not in ens_inputs:
                raise _fail(
                    f"in ensemble {name}, {step.describe()}: ensemble tensor '{tensor}' for "
                    f"input '{key}' is neither an ensemble input nor written by any step"
                )
    for tensor in ens_inputs:
        if tensor not in read:
            raise _fail(f"ensemble input '{tensor}' for ensemble '{name}' is not used")
    for tensor in ens_outputs:
        if tensor not in producers:
            raise _fail(f"output '{tensor}' for ensemble '{name}' is not written by any step")
    for tensor, index in producers.items():
        if tensor not in read and tensor not in ens_outputs:
            raise _fail(
                f"ensemble tensor '{tensor}' is unused in ensemble '{name}': "
                f"{steps[index].describe()} writes it but no step reads it"
            )


def _topological_order(name: str, steps: tuple[Step, ...], producers: dict[str, int]) -> list[int]:
    """Steps in an order where every step follows the steps it reads from; a cycle is an
    error that walks the cycle."""
    order: list[int] = []
    state = [0] * len(steps)  # 0 new, 1 on the current path, 2 done
    path: list[tuple[int, str]] = []

    def visit(index: int, via: str) -> None:
        if state[index] == 2:
            return
        path.append((index, via))
        if state[index] == 1:
            start = next(i for i, (s, _) in enumerate(path) if s == index)
            raise _fail(f"in ensemble {name}, the steps form a cycle: {_walk(steps, path[start:])}")
        state[index] = 1
        for _, tensor in steps[index].inputs:
            if tensor in producers:
                visit(producers[tensor], tensor)
        state[index] = 2
        path.pop()
        order.append(index)

    for step in steps:
        visit(step.index, "")
    return order


def _walk(steps: tuple[Step, ...], cycle: list[tuple[int, str]]) -> str:
    """'step 0 (model a) reads 'x' from step 1 (model b) reads 'y' from step 0 (model a)'."""
    parts = [steps[cycle[0][0]].describe()]
    for index, tensor in cycle[1:]:
        parts.append(f"reads '{tensor}' from {steps[index].describe()}")
    return " ".join(parts)


def _check_types(
    name: str,
    steps: tuple[Step, ...],
    specs: list[ModelSpec],
    producers: dict[str, int],
    ens_inputs: dict[str, _Source],
    ens_outputs: dict[str, _Source],
) -> None:
    """Connected tensors agree on datatype and shape (-1 matches any size)."""
    sources = dict(ens_inputs)
    for step in steps:
        spec = specs[step.index]
        for key, tensor in step.outputs:
            sources[tensor] = _model_source(spec, spec.outputs[key])
    for step in steps:
        spec = specs[step.index]
        for key, tensor in step.inputs:
            _agree(
                name,
                step.describe(),
                tensor,
                sources[tensor],
                _model_source(spec, spec.inputs[key]),
            )
    for tensor, wanted in ens_outputs.items():
        step = steps[producers[tensor]]
        _agree(name, step.describe(), tensor, sources[tensor], wanted)


def _model_source(spec: ModelSpec, io: IOSpec) -> _Source:
    dims = io.reshape if io.reshape is not None else io.dims
    return _Source(f"model {spec.name}", io.datatype, dims, spec.max_batch_size > 0)


def _agree(name: str, where: str, tensor: str, have: _Source, want: _Source) -> None:
    prefix = f"in ensemble {name}, {where}: ensemble tensor {tensor}"
    if have.datatype is not want.datatype:
        raise _fail(
            f"{prefix}: inconsistent data type: {have.datatype.config_name} is inferred from "
            f"{have.who} while {want.datatype.config_name} is inferred from {want.who}"
        )
    # As Triton: the shapes agree without the batch dimension, or with it on both sides.
    if not (_match(have.dims, want.dims) or _match(have.full, want.full)):
        raise _fail(
            f"{prefix}: inconsistent shape: {_dims(have.full)} is inferred from {have.who} "
            f"while {_dims(want.full)} is inferred from {want.who}"
        )


def _match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(
        x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=False)
    )


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _check_lineage(
    name: str, steps: tuple[Step, ...], order: list[int], ens_outputs: dict[str, _Source]
) -> None:
    """Every response of a decoupled step starts its own flow of tensors, so a step may not
    mix tensors of two flows (Triton's rule): ensemble inputs are flow 0, each decoupled step
    starts a new one, and any other step continues the flow of its inputs."""
    flow: dict[str, int] = {}
    for index in order:
        step = steps[index]
        sources = {flow.get(t, 0) for _, t in step.inputs}
        if len(sources) > 1:
            raise _fail(
                f"in ensemble {name}, step of model '{step.model_name}' receives inputs "
                f"originated from different decoupled models ({step.describe()})"
            )
        own = index + 1 if step.decoupled else sources.pop()
        for _, tensor in step.outputs:
            flow[tensor] = own
    if len({flow[t] for t in ens_outputs}) > 1:
        origins = ", ".join(
            f"'{t}' from " + (steps[flow[t] - 1].describe() if flow[t] else "the ensemble inputs")
            for t in ens_outputs
        )
        raise _fail(
            f"in ensemble {name}, ensemble outputs originated from different decoupled models: "
            f"{origins}"
        )
