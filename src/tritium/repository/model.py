"""A loaded model version: its spec, instances and scheduler, and request validation."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter
from collections.abc import Sequence

from ..backends.base import ModelInstance
from ..errors import invalid_arg
from ..config.spec import IOSpec, ModelSpec
from ..scheduling.base import Scheduler
from ..scheduling.batch_policy import BatchConfig
from ..scheduling.direct import DirectScheduler
from ..scheduling.dynamic import DynamicBatcher
from ..scheduling.ensemble import Dispatch, EnsembleScheduler
from ..scheduling.rate_limiter import Gate, RateLimiter
from ..scheduling.rate_policy import InstanceLimits
from ..scheduling.sequence import SequenceScheduler
from ..metrics.stats import ModelStats
from ..request import InferenceRequest
from ..types import RequestedOutput, Tensor
from ..logs.settings import about_model

log = logging.getLogger("tritium")
# After the instances were killed, how long closing may still take (their executions are
# answered at once; this only bounds a backend that cannot be killed, such as a native run).
_ABORT_GRACE_S = 5.0


class ModelState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


class _InputCheck:
    """What ``Model.validate`` checks of one input, copied out of its ``IOSpec``."""

    __slots__ = ("datatype", "full_dims", "reshape", "optional")

    def __init__(self, io: IOSpec, batching: bool) -> None:
        self.datatype = io.datatype
        # The shape as the client sees it, for the check and its message: with the batch
        # dimension when the model batches.
        self.full_dims: tuple[int, ...] = (-1,) + io.dims if batching else io.dims
        self.reshape = io.reshape
        self.optional = io.optional


class Model:
    """One version of one model, ready to take requests."""

    def __init__(
        self,
        spec: ModelSpec,
        version: int,
        instances: list[ModelInstance],
        dispatch: Dispatch | None = None,  # how an ensemble's steps reach their models
        limiter: RateLimiter | None = None,  # --rate-limit=execution_count
        sequence_backlog: int = 0,  # --sequence-backlog-limit (0: no bound)
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = version
        self.version_str = str(version)
        self.instances = instances
        self.namespace = ""  # its repository's path under --model-namespacing (set on load)
        self.stats = ModelStats(self.name, self.version_str)
        # Registering with the rate limiter may fail the load (resource counts too low).
        self._limiter = limiter if instances and spec.ensemble is None else None
        self._gates: list[Gate] | None = None
        if self._limiter is not None:
            owner = f"model '{self.name}' version {version}"
            self._gates = self._limiter.gates(owner, _instance_limits(spec, len(instances)))
        self.scheduler: Scheduler = _scheduler(
            spec, instances, self.version_str, dispatch, self._gates, sequence_backlog
        )
        if isinstance(self.scheduler, SequenceScheduler):
            self.stats.sequence_backlog = self.scheduler.backlogged
        self._closing: asyncio.Task[None] | None = None
        for instance in instances:  # instances that restart count it in the statistics
            count = getattr(instance, "count_restarts_in", None)
            if count is not None:
                count(self.stats.restarts)
        batching = spec.max_batch_size > 0
        # What validate reads of the config, per input (native fields when compiled: the
        # config's own objects are interpreted ones, each field a lookup by name).
        self._inputs = {name: _InputCheck(io, batching) for name, io in spec.inputs.items()}
        self._max_batch = spec.max_batch_size
        self._required = len(spec.required_inputs)
        # The config's response_cache.enable (a protobuf field: each read makes objects).
        self.response_cache: bool = spec.config.response_cache.enable
        # What the response cache's keys begin with: a digest of the config and files this
        # version was loaded from (repository/generation.py; set by the manager at load).
        self.generation: bytes = b""
        self._batching_note = (
            ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
            "dimension to be prepended to each input shape. If you want to specify the full "
            "shape including the batch dim in your input dims config, try setting "
            "max_batch_size to zero. See the model configuration docs for more info on "
            "max_batch_size."
            if batching
            else ""
        )

    def validate(self, request: InferenceRequest) -> int:
        """Check inputs and requested outputs against the config; apply ``reshape``.
        Returns the request's batch size (1 for a model without batching)."""
        inputs = self._inputs
        max_batch = self._max_batch
        batch = -1
        seen = 0
        tensors = request.inputs  # the request's own list: the client's tensors stay as sent
        if len(tensors) > len(inputs):  # Triton counts first (InferenceRequest::Normalize)
            self._missing_inputs(request)
        for index in range(len(tensors)):
            tensor = tensors[index]
            check = inputs.get(tensor.name)
            if check is None:
                raise invalid_arg(
                    f"unexpected inference input '{tensor.name}' for model '{self.name}'"
                )
            self._check_tensor(tensor, check)
            shape = tensor.shape
            if max_batch:
                if batch == -1:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise invalid_arg(
                        f"input '{tensor.name}' batch size does not match other inputs for "
                        f"'{self.name}'"
                    )
            if check.reshape is not None:
                new_shape = ((shape[0],) if max_batch else ()) + check.reshape
                data = tensor.data.reshape(new_shape)
                tensors[index] = tensor.with_data(data, data.shape)
            if not check.optional:
                seen += 1
        if seen != self._required:
            self._missing_inputs(request)
        if batch > max_batch > 0:
            raise invalid_arg(
                f"inference request batch-size must be <= {max_batch} for '{self.name}'"
            )
        requested = request.outputs
        if requested:
            self._check_outputs(requested)
        return batch if batch > 0 else 1

    def _check_outputs(self, requested: tuple[RequestedOutput, ...]) -> None:
        outputs = self.spec.outputs
        for output in requested:
            if output.name not in outputs:
                raise invalid_arg(
                    f"unexpected inference output '{output.name}' for model '{self.name}'"
                )
        if len(requested) > len(outputs):  # then one is asked twice (Triton's text)
            dup = _repeated([output.name for output in requested])
            raise invalid_arg(f"output '{dup}' already requested")

    def _check_tensor(self, tensor: Tensor, check: _InputCheck) -> None:
        if tensor.datatype is not check.datatype:
            raise invalid_arg(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype.wire}', "
                f"but model '{self.name}' expects '{check.datatype.wire}'"
            )
        shape, full = tensor.shape, check.full_dims
        fits = len(shape) == len(full)
        if fits:
            for index in range(len(full)):
                expected = full[index]
                if expected != -1 and shape[index] != expected:
                    fits = False
                    break
        if not fits:
            raise invalid_arg(
                f"unexpected shape for input '{tensor.name}' for model '{self.name}'. "
                f"Expected {_dims(full)}, got {_dims(shape)}{self._batching_note}"
            )

    def _missing_inputs(self, request: InferenceRequest) -> None:
        spec = self.spec
        got = [t.name for t in request.inputs]
        dup = _repeated(got)
        if dup is not None:
            raise invalid_arg(f"input '{dup}' is specified more than once for model '{self.name}'")
        missing = [n for n in spec.inputs if n in spec.required_inputs and n not in got]
        total, required = len(spec.inputs), len(spec.required_inputs)
        expected = (
            f"expected {required} inputs"
            if total == required
            else f"expected number of inputs between {required} and {total}"
        )
        raise invalid_arg(
            f"{expected} but got {len(got)} inputs for model '{self.name}'. Got input(s) "
            f"{_names(got)}, but missing required input(s) {_names(missing)}. Please provide "
            "all required input(s)."
        )

    def updatable(self) -> bool:
        """Whether a reload that changes only the instance groups can update this version
        in place: its scheduler learns a new instance set (an ensemble's has none)."""
        return isinstance(self.scheduler, (DirectScheduler, DynamicBatcher, SequenceScheduler))

    async def update_instances(
        self, spec: ModelSpec, instances: list[ModelInstance], added: list[ModelInstance]
    ) -> None:
        """Serve ``instances`` (the new instance groups' order): the ``added`` ones join
        the rate limiter (which may refuse them: ServerError, nothing changed) and the
        scheduler; those no longer listed take no more requests, finish what they run and
        are closed before this returns (Triton's TritonModel::UpdateInstanceGroup)."""
        kept = {id(i) for i in instances}
        removed = [i for i in self.instances if id(i) not in kept]
        gate_of = dict(zip((id(i) for i in self.instances), self._gates or (), strict=False))
        new_gates: list[Gate] | None = None
        if self._limiter is not None:
            limits = _instance_limits(spec, len(instances))
            fresh = {id(i) for i in added}
            owner = f"model '{self.name}' version {self.version}"
            chosen = [lim for i, lim in zip(instances, limits, strict=True) if id(i) in fresh]
            new_gates = self._limiter.gates(owner, chosen)
            gate_of.update(zip((id(i) for i in added), new_gates, strict=True))
            self._gates = [gate_of[id(i)] for i in instances]
        self.spec = spec
        self.instances = instances
        for instance in added:
            count = getattr(instance, "count_restarts_in", None)
            if count is not None:
                count(self.stats.restarts)
        scheduler = self.scheduler
        assert isinstance(scheduler, (DirectScheduler, DynamicBatcher, SequenceScheduler))
        await scheduler.update(added, new_gates, removed)
        await asyncio.gather(*(i.close() for i in removed), return_exceptions=True)
        if self._limiter is not None:
            self._limiter.close([gate_of[id(i)] for i in removed if id(i) in gate_of])

    async def is_ready(self) -> bool:
        for instance in self.instances:
            if not await instance.is_ready():
                return False
        return True

    def unloaded(self) -> bool:
        """Its unload (``close``) is done."""
        return self._closing is not None and self._closing.done()

    async def close(self, timeout: float | None = None) -> None:
        """Unload: let running executions finish, then close the instances. After
        ``timeout`` seconds (None: no bound) the instances are killed and what they still
        run is answered with an error. Closing twice joins the first close (a shutdown may
        shorten the bound of an unload in progress)."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        closing = self._closing
        done, _ = await asyncio.wait({closing}, timeout=timeout)
        if not done:
            log.warning(
                "model '%s' version %s did not finish its executions within %g s; killing "
                "its instances",
                self.name,
                self.version_str,
                timeout,
                extra=about_model(self.name),
            )
            self._abort(
                "the model was unloaded while executing: its executions did not finish within "
                "the unload timeout (--exit-timeout-secs) and its stub process was killed"
            )
            done, _ = await asyncio.wait({closing}, timeout=_ABORT_GRACE_S)
            if not done:
                closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)

    async def _close(self) -> None:
        try:
            await self.scheduler.close()
            await asyncio.gather(*(i.close() for i in self.instances), return_exceptions=True)
        finally:
            if self._limiter is not None and self._gates is not None:
                self._limiter.close(self._gates)

    def _abort(self, reason: str) -> None:
        for instance in self.instances:
            abort = getattr(instance, "abort", None)
            if abort is not None:
                abort(reason)


def _repeated(names: list[str]) -> str | None:
    """The first of ``names`` that occurs more than once (None: none does)."""
    counts = Counter(names)
    return next((name for name in names if counts[name] > 1), None)


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _instance_limits(spec: ModelSpec, count: int) -> list[InstanceLimits]:
    """Each instance's ``rate_limiter``: the backends create instances group by group, in
    the config's order, ``count`` of each (all on the CPU, device 0, as Triton's KIND_CPU)."""
    limits = [
        InstanceLimits.from_group(group)
        for group in spec.config.instance_group
        for _ in range(group.count)
    ]
    return limits[:count] + [InstanceLimits()] * (count - len(limits))


def _scheduler(
    spec: ModelSpec,
    instances: list[ModelInstance],
    version: str,
    dispatch: Dispatch | None,
    gates: list[Gate] | None,
    sequence_backlog: int = 0,
) -> Scheduler:
    """The one place a model version's scheduler is chosen: an ensemble's walks its plan;
    the sequence batcher for a stateful model; dynamic batching when the config asks for it
    on a model that batches; otherwise Triton's default scheduler. ``gates``: the rate
    limiter's, one per instance, when it is on."""
    if spec.ensemble is not None:
        assert dispatch is not None, "an ensemble needs the server's dispatch"
        return EnsembleScheduler(spec.ensemble, dispatch, version)
    if spec.sequence is not None:
        return SequenceScheduler(instances, version, spec, gates, sequence_backlog)
    config = spec.config
    if config.HasField("dynamic_batching") and spec.max_batch_size > 0:
        # Triton compares shapes only for variable-size inputs not marked allow_ragged_batch.
        equal = frozenset(
            name
            for name, io in spec.inputs.items()
            if not io.allow_ragged and (-1 in io.dims or -1 in (io.reshape or ()))
        )
        optional = any(io.optional for io in spec.inputs.values())
        batching = BatchConfig.from_config(config, not equal, equal, optional)
        return DynamicBatcher(instances, version, batching, gates)
    return DirectScheduler(instances, version, gates)
