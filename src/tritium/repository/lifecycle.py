"""One model version's lifecycle (Triton core's model_lifecycle.cc): the states a version
goes through and every transition between them, in one place; the load of one version (its
attempts, warm-up and the ``Model`` made of it); what its backend gets (``LoadContext``) and
the callbacks it calls back, as methods of one object rather than closures::

    LOADING ──ready()──▶ READY ──instance_failed()──▶ UNAVAILABLE ──recovered()──▶ READY
       │                   │                                │
       └──failed()──▶ UNAVAILABLE (why)                     │
                           └──────── unloaded: UNAVAILABLE "unloaded" (records.unload_versions)
    a shutdown (manager.unload_all): every version UNLOADING

The manager (manager.py) decides which versions of which models load, when, and what replaces
what; nothing here knows of other models.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..backends.base import Backend, LoadContext, ModelInstance
from ..config.confine import without_model_dir
from ..config.fields import check_fields
from ..config.model_config import ConfigProblem, ModelConfig
from ..config.spec import ModelSpec, build_spec, normalize
from ..errors import ServerError
from ..logs.settings import about_model
from .generation import model_generation
from .layout import ModelId
from .model import Model, ModelState, VersionSettings
from .records import ModelRecord, VersionRecord, refresh
from .warmup import warm_up

log = logging.getLogger("tritium")


@dataclass(frozen=True, slots=True)
class Source:
    """What a model's versions load from: its config (as read, or a load request's), how a
    problem in it is reported, and its directory."""

    config: ModelConfig
    problem: ConfigProblem
    model_dir: Path


@dataclass(frozen=True, slots=True)
class Hooks:
    """What a version's lifecycle takes from its manager: the settings, whether configs are
    auto-completed, the load's retries (--model-load-retry-count), what to call when the
    server's readiness may have changed, and an ensemble's composing model's spec (the
    ensemble, the step's model name and version), or Triton's error why it has none."""

    settings: VersionSettings
    auto_complete: bool
    load_retries: int
    changed: Callable[[], None]
    composing: Callable[[ModelId, str, int], ModelSpec]


class VersionLoad:
    """One version being loaded (or its instance groups updated, ``checked``: the config is
    a completed one whose fields were checked already): the backend's ``LoadContext`` and the
    callbacks it gets, bound to the version's record."""

    __slots__ = ("record", "entry", "source", "hooks", "checked")

    def __init__(
        self,
        record: ModelRecord,
        entry: VersionRecord,
        source: Source,
        hooks: Hooks,
        checked: bool = False,
    ) -> None:
        self.record = record
        self.entry = entry
        self.source = source
        self.hooks = hooks
        self.checked = checked

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def version(self) -> int:
        return self.entry.version

    def context(self) -> LoadContext:
        """What the backend gets for one attempt (a fresh copy of the config each time)."""
        source = self.source
        own = ModelConfig()
        own.CopyFrom(source.config)
        return LoadContext(
            self.name,
            self.version,
            source.model_dir,
            source.model_dir / str(self.version),  # version folders are canonical numbers
            own,
            self.hooks.auto_complete,
            self.finalize,
            self.instance_failed,
            composing=self.composing,
            on_recovered=self.recovered,
            confined=source.problem.client,
        )

    def context_for(self, config: ModelConfig) -> LoadContext:
        """An instance-group update's context (instance_update.py): ``config`` is the
        completed config with the new groups, its fields checked already."""
        source = replace(self.source, config=config)
        return VersionLoad(self.record, self.entry, source, self.hooks, checked=True).context()

    def finalize(self, completed: ModelConfig) -> ModelSpec:
        """Every backend comes through here once auto-complete is done: refuse the fields
        tritium does not honour before normalize fills in Triton's defaults."""
        problem = self.source.problem
        if not self.checked:
            check_fields(completed, problem)
        normalize(completed, self.name, problem)
        return build_spec(completed, problem, self.source.model_dir)

    def composing(self, name: str, version: int) -> ModelSpec:
        return self.hooks.composing(self.record.key, name, version)

    # -- transitions ---------------------------------------------------------------------------
    def ready(self, model: Model) -> None:
        """LOADING → READY: it serves."""
        self.entry.model = model
        self.entry.state = ModelState.READY
        refresh(self.record)

    def failed(self, reason: str) -> None:
        """LOADING → UNAVAILABLE: it did not load (``reason``: why)."""
        self.entry.state, self.entry.reason = ModelState.UNAVAILABLE, reason

    def instance_failed(self, reason: str) -> None:
        """READY → UNAVAILABLE: an instance died (the backend's ``on_failure``)."""
        entry = self.entry
        entry.state, entry.reason = ModelState.UNAVAILABLE, reason
        refresh(self.record)
        self.hooks.changed()
        log.error(
            "model '%s' version %d is unavailable: %s",
            self.name,
            self.version,
            reason,
            extra=about_model(self.name),
        )

    def recovered(self) -> None:
        """UNAVAILABLE → READY: its instances serve again (a restarted stub); a version
        unloaded or unloading meanwhile stays so."""
        entry = self.entry
        if entry.model is None or entry.state is not ModelState.UNAVAILABLE:
            return
        entry.state, entry.reason = ModelState.READY, ""
        refresh(self.record)
        self.hooks.changed()
        log.info(
            "model '%s' version %d is ready again",
            self.name,
            self.version,
            extra=about_model(self.name),
        )


def unloading(record: ModelRecord) -> None:
    """READY (or any) → UNLOADING: a shutdown unloads every version."""
    for entry in record.versions.values():
        entry.state = ModelState.UNLOADING
    refresh(record)


async def load_version(
    load: VersionLoad, backend: Backend, files: list[bytes] | None, started: float
) -> None:
    """Load one version: the backend's attempts (Triton's --model-load-retry-count), its
    warm-up, then the ``Model`` that serves it, READY; or UNAVAILABLE with why. ``files``:
    the digests its response cache's generation covers (None: it uses no cache);
    ``started``: when its load began (monotonic), for nv_model_load_duration_secs."""
    loaded = await _attempts(load, backend)
    if loaded is None:
        return
    spec, instances = loaded
    model = await _serving(load, spec, instances, files)
    if model is None:
        return
    load.ready(model)
    # No await since the model was made: no request can have reached it yet.
    configure_metrics(model, load.hooks.settings, time.monotonic() - started)
    log.info(
        "successfully loaded '%s' version %d (%.0f ms)",
        load.name,
        load.version,
        (time.monotonic() - started) * 1000,
        extra=about_model(load.name),
    )


async def _attempts(
    load: VersionLoad, backend: Backend
) -> tuple[ModelSpec, list[ModelInstance]] | None:
    """The backend's load and the warm-up, tried ``load_retries`` more times on failure;
    None (the version UNAVAILABLE) when the last attempt failed."""
    retries = load.hooks.load_retries
    for attempt in range(retries + 1):
        try:
            spec, instances = await backend.load(load.context())
            await warm_up(spec, instances, load.source.model_dir, load.version)  # before READY
            return spec, instances
        except Exception as exc:
            reason = exc.message if isinstance(exc, ServerError) else _describe(exc)
            _log_failure(load, reason)
            if attempt == retries:
                if load.source.problem.client:  # the log has the paths; the client gets none
                    reason = without_model_dir(reason, load.source.model_dir)
                load.failed(reason)
    return None


async def _serving(
    load: VersionLoad, spec: ModelSpec, instances: list[ModelInstance], files: list[bytes] | None
) -> Model | None:
    """The ``Model`` of the loaded version; None (its instances closed, the version
    UNAVAILABLE) when the rate limiter's resource counts cannot serve it."""
    generation = (  # the response cache's generation of this version
        model_generation(spec.config.SerializeToString(deterministic=True), files)
        if files is not None
        else b""
    )
    try:
        settings, namespace = load.hooks.settings, load.record.namespace
        return Model(spec, load.version, instances, settings, namespace, generation)
    except ServerError as exc:
        await asyncio.gather(*(i.close() for i in instances), return_exceptions=True)
        load.failed(exc.message)
        _log_failure(load, exc.message)
        return None


def configure_metrics(model: Model, settings: VersionSettings, load_seconds: float) -> None:
    """The version's metric settings and its nv_model_load_duration_secs (Triton's
    ModelLifeCycle reports the load time when the version becomes READY)."""
    spec = model.spec
    metrics = settings.metrics
    cache = metrics.response_cache and spec.config.response_cache.enable and not spec.decoupled
    model.stats.configure(metrics, spec.metrics, cache, model.namespace)
    model.stats.load_seconds = load_seconds


def _log_failure(load: VersionLoad, reason: str) -> None:
    log.error(
        "failed to load '%s' version %d: %s",
        load.name,
        load.version,
        reason,
        extra=about_model(load.name),
    )


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
