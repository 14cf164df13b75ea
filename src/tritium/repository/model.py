"""A loaded model version: its spec, instances and scheduler, and what a request reads of it
(``ServedModel``: the checks of its config, its scheduler's entry, its statistics)."""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field

from ..backends.base import ModelInstance
from ..config.spec import ModelSpec
from ..scheduling.base import Scheduler
from ..scheduling.batch_policy import BatchConfig
from ..scheduling.direct import DirectScheduler
from ..scheduling.dynamic import DynamicBatcher
from ..scheduling.ensemble import Dispatch, EnsembleScheduler
from ..scheduling.rate_limiter import Gate, RateLimiter
from ..scheduling.rate_policy import InstanceLimits
from ..scheduling.sequence import SequenceScheduler
from ..metrics.settings import MetricsSettings
from ..metrics.stats import ModelStats
from ..request import ServedModel
from ..validation import InputCheck, Validator
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


@dataclass(frozen=True, slots=True)
class VersionSettings:
    """What a version's lifecycle uses besides its own files (the manager's, from the
    server's options): how an ensemble's steps reach their models, the rate limiter
    (--rate-limit=execution_count; None: off), --sequence-backlog-limit (0: no bound),
    --metrics-config (and whether the server has a response cache), and how long an unload
    waits for a version's executions before killing its instances (None: no bound)."""

    dispatch: Dispatch | None = None
    limiter: RateLimiter | None = None
    sequence_backlog: int = 0
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    unload_timeout: float | None = None


class Model:
    """One version of one model, ready to take requests; what a request reads of it is its
    ``served`` value (``request.ServedModel``)."""

    def __init__(
        self,
        spec: ModelSpec,
        version: int,
        instances: list[ModelInstance],
        settings: VersionSettings,
        namespace: str = "",  # its repository's path under --model-namespacing
        generation: bytes = b"",  # the response cache's (generation.py)
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = version
        self.version_str = str(version)
        self.instances = instances
        self.namespace = namespace
        self.stats = ModelStats(self.name, self.version_str)
        # Registering with the rate limiter may fail the load (resource counts too low).
        limiter = settings.limiter
        self._limiter = limiter if instances and spec.ensemble is None else None
        self._gates: list[Gate] | None = None
        if self._limiter is not None:
            owner = f"model '{self.name}' version {version}"
            self._gates = self._limiter.gates(owner, _instance_limits(spec, len(instances)))
        self.scheduler: Scheduler = _scheduler(
            spec,
            instances,
            self.version_str,
            settings.dispatch,
            self._gates,
            settings.sequence_backlog,
        )
        if isinstance(self.scheduler, SequenceScheduler):
            self.stats.sequence_backlog = self.scheduler.backlogged
        self._closing: asyncio.Task[None] | None = None
        for instance in instances:  # instances that restart count it in the statistics
            count = getattr(instance, "count_restarts_in", None)
            if count is not None:
                count(self.stats.restarts)
        # What a request reads of this version (``request.model``): nothing above it.
        self.served = _served(self, namespace, generation)

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


def _served(model: Model, namespace: str, generation: bytes) -> ServedModel:
    spec = model.spec
    batching = spec.max_batch_size > 0
    checks = {
        name: InputCheck(
            io.datatype, (-1,) + io.dims if batching else io.dims, io.reshape, io.optional
        )
        for name, io in spec.inputs.items()
    }
    return ServedModel(
        name=model.name,
        version=model.version,
        version_str=model.version_str,
        stats=model.stats,
        checks=Validator(model.name, checks, spec.outputs, spec.max_batch_size),
        submit=model.scheduler.submit,
        namespace=namespace,
        generation=generation,
        decoupled=spec.decoupled,
        sequence=spec.sequence is not None,
        ensemble=spec.ensemble is not None,
        # the config's response_cache.enable (a protobuf field: each read makes objects)
        response_cache=spec.config.response_cache.enable,
        max_batch_size=spec.max_batch_size,
        outputs={name: (io.datatype, io.dims) for name, io in spec.outputs.items()},
    )


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
