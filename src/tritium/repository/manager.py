"""Loads the models of the repositories, tracks each version's state, and resolves requests
to a ready ``Model``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import find_backend, unknown_backend
from ..backends.base import Backend, LoadContext
from ..errors import ServerError, invalid_arg, not_found, unavailable
from .model import Model, ModelState, VersionSettings
from ..metrics.settings import MetricsSettings
from ..logs.settings import about_model
from ..scheduling.ensemble import Dispatch
from .warmup import warm_up
from .generation import files_digest, model_generation
from .instance_update import model_files, update_version, updatable
from ..scheduling.rate_limiter import RateLimiter
from ..config.confine import without_model_dir
from ..config.fields import check_fields
from ..config.model_config import ConfigProblem, ModelConfig, read_config
from .layout import ModelId, ModelLocation, RepositoryLayout, scan, select_versions, version_dirs
from .names import version_from_string
from .namespaces import NameIndex, composing_id
from .records import (
    ModelRecord,
    VersionRecord,
    failure,
    index_rows,
    refresh,
    strictly_ready,
    unload_versions,
    was_unloaded,
)
from ..config.spec import ModelSpec, build_spec, infer_backend, normalize

log = logging.getLogger("tritium")


@dataclass(slots=True)
class _NameLock:
    """Serialises the load/unload requests of one model name; dropped when nobody holds it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ModelRepositoryManager:
    def __init__(
        self,
        repositories: list[Path],
        backends: Mapping[str, Backend],
        unload_timeout: float | None = None,
        dispatch: Dispatch | None = None,
        layout: RepositoryLayout | None = None,
    ) -> None:
        self._repositories = repositories
        self._layout = layout or RepositoryLayout()  # how the repositories are read
        self._dispatch = dispatch  # given to ensembles: how their steps reach their models
        # --rate-limit=execution_count: the server's limiter, which every instance joins
        # (set by the server before anything loads; None: rate limiting is off).
        self.limiter: RateLimiter | None = None
        # --sequence-backlog-limit: sequences a sequence model's backlog holds (0: no bound).
        self.sequence_backlog = 0
        # How long an unload waits for a model's executions before killing its instances.
        self._unload_timeout = unload_timeout
        self._backends = backends
        self._auto_complete = self._layout.auto_complete
        self._load_slots = asyncio.Semaphore(max(self._layout.load_threads, 1))
        self._records: dict[ModelId, ModelRecord] = {}
        self._names = NameIndex(self._layout.namespacing)  # name -> its records, for lookups
        self._known: set[ModelId] = set()  # model directories seen in the repositories
        self._retiring: set[asyncio.Task[None]] = set()
        self._retiring_models: set[Model] = set()  # old versions closing after a reload
        # Loads in progress (name -> done), so an ensemble can wait for its composing models,
        # and what each loading ensemble waits for (to refuse a cycle between ensembles).
        self._loading: dict[ModelId, asyncio.Future[None]] = {}
        self._waiting_on: dict[ModelId, set[ModelId]] = {}
        self._locks: dict[ModelId, _NameLock] = {}
        # --metrics-config (and whether the server has a response cache), set by the server.
        self.metrics = MetricsSettings()
        # Called wherever the server's strict readiness may change (a record stored, a version
        # failing, recovering or unloaded); set by the server (Health.Watch's wake-up).
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- loading -----------------------------------------------------------------------------
    def scan(self) -> dict[ModelId, ModelLocation]:
        locations = scan(self._repositories, self._layout.namespacing)
        self._known = set(locations)
        return locations

    async def load_all(self, names: set[str] | None = None) -> None:
        """Load every model of the repositories (or only ``names``)."""
        locations = self.scan()
        chosen = [loc for k, loc in locations.items() if names is None or k.name in names]
        loop = asyncio.get_running_loop()
        for location in chosen:  # registered first: an ensemble may wait for any of them
            self._loading.setdefault(location.key, loop.create_future())
        await asyncio.gather(*(self._load(loc) for loc in chosen))

    async def load(self, location: ModelLocation, override: ModelConfig | None = None) -> str:
        """Load (or reload) a model. The new versions replace the old ones only once they are
        ready, so requests keep being served meanwhile; a load that fails leaves a model that
        was serving as it was. Returns the failure reason ('' on success).

        Loads and unloads of one name run one at a time, in arrival order (two at once would
        race to replace the record, and the loser's instances would never be closed)."""
        key = location.key
        async with self._exclusive(key):
            updated = await self._update_instances(location, override)
            if updated is not None:  # only the instance groups changed: updated in place
                return updated
            reason = await self._load_record(location, override)
        if not reason:
            await self._reload_dependents(key)
        return reason

    async def _update_instances(
        self, location: ModelLocation, override: ModelConfig | None
    ) -> str | None:
        """A reload of a serving model whose config changed in its instance groups only
        (``instance_update.py``): its versions keep serving and only the instances that
        changed come and go. Returns the failure reason ('' on success), or None when the
        model must load whole."""
        record = self._records.get(location.key)
        if record is None or location.path is None or record.location != location:
            return None
        model_dir = location.path
        files = await asyncio.to_thread(model_files, model_dir)
        if override is not None:
            config, path, text = override, None, ""
        else:
            try:
                config, path, text = await asyncio.to_thread(
                    read_config, model_dir, self._layout.config_name
                )
            except ServerError:
                return None  # the full load reports it
        models = updatable(record, config, files, model_dir)
        if models is None:
            return None
        problem = ConfigProblem(record.name, path, text, client=override is not None)
        try:
            check_fields(config, problem)  # the new instance groups' fields
            for model in models:
                await self._update_version(record, model, config, problem, model_dir)
        except ServerError as exc:
            log.error("failed to load '%s': %s", record.name, exc.message)
            return exc.message
        record.config = config
        self._changed()
        return ""

    async def _update_version(
        self,
        record: ModelRecord,
        model: Model,
        config: ModelConfig,
        problem: ConfigProblem,
        model_dir: Path,
    ) -> None:
        backend = await find_backend(self._backends, model.spec.config.backend)
        if backend is None:
            raise invalid_arg(
                unknown_backend(model.spec.config.backend, record.name, self._backends)
            )
        entry = record.versions[model.version]

        def make_context(merged: ModelConfig) -> LoadContext:
            return self._context(record, entry, merged, problem, model_dir, True)()

        added, removed = await update_version(model, config, backend, make_context, model_dir)
        log.info(
            "updated the instance groups of '%s' version %d in place: %d instances added, "
            "%d removed",
            record.name,
            model.version,
            added,
            removed,
            extra=about_model(record.name),
        )

    async def _load(self, location: ModelLocation, override: ModelConfig | None = None) -> str:
        """A load the manager starts itself (startup, an ensemble's composing model, an
        ensemble to recheck): not queued behind requests, which wait for it instead."""
        reason = await self._load_record(location, override)
        if not reason:
            await self._reload_dependents(location.key)
        return reason

    @contextlib.asynccontextmanager
    async def _exclusive(self, key: ModelId) -> AsyncIterator[None]:
        """Hold ``key``'s lock, once any load of it the manager started itself is done."""
        entry = self._locks.setdefault(key, _NameLock())
        entry.users += 1
        try:
            async with entry.lock:
                while (busy := self._loading.get(key)) is not None and not busy.done():
                    await asyncio.shield(busy)
                yield
        finally:
            entry.users -= 1
            if not entry.users:
                del self._locks[key]

    async def _load_record(self, location: ModelLocation, override: ModelConfig | None) -> str:
        name, key = location.name, location.key
        record = ModelRecord(name, location=location, namespace=location.namespace)
        done = self._loading.get(key)
        if done is None or done.done():
            done = self._loading[key] = asyncio.get_running_loop().create_future()
        try:
            await self._load_versions(record, location, override)
        except ServerError as exc:
            self._fail_model(record, exc.message)
        except Exception as exc:  # a broken model must never stop the others
            log.exception("failed to load '%s'", name, extra=about_model(name))
            self._fail_model(record, f"{type(exc).__name__}: {exc}")
        finally:
            self._waiting_on.pop(key, None)
            if self._loading.get(key) is done:
                del self._loading[key]
            if not done.done():  # a load the manager started may overlap a request's
                done.set_result(None)
        reason = failure(record)
        old = self._records.get(key)
        if reason and old is not None and old.ready:
            self._retire(record)  # keep serving the old model
        else:
            self._records[key] = record
            self._names.store(record)
            if old is not None:
                self._retire(old)
            if reason and not record.depends:
                self._forget_files(record)
        self._changed()
        return reason

    async def unload(self, name: str, dependents: bool = False) -> None:
        """Stop routing requests to the model and unload it once its in-flight requests are
        done (this waits for them). ``dependents`` (an ensemble): also unload its composing
        models that no other loaded ensemble uses. Queued behind loads of the same name. Under
        --model-namespacing every namespace's model of that name goes (as Triton's)."""
        keys = self._names.keys(name, (*self._records, *self._loading, *self._locks))
        for key in keys:
            await self.unload_id(key, dependents)

    async def unload_id(self, key: ModelId, dependents: bool = False) -> None:
        """Unload one model (one namespace's, under --model-namespacing)."""
        async with self._exclusive(key):
            await self._unload(key, dependents)

    async def _unload(self, key: ModelId, dependents: bool = False) -> None:
        record = self._records.get(key)
        if record is None:
            return
        models = unload_versions(record)
        self._changed()
        for other in list(self._records.values()):  # Triton: an ensemble goes with its parts
            if key in other.depends and other.ready:
                log.info(
                    "unloading ensemble '%s': composing model '%s' was unloaded",
                    other.name,
                    key.name,
                )
                await self._unload(other.key)
        if dependents:
            used = {n for r in self._records.values() if r.ready for n in r.depends}
            for part in sorted(record.depends - used):
                await self._unload(part, dependents=True)
        location = record.location
        if location is not None and location.scratch is not None:
            record.location = None  # its files go with it: nothing may reload from there
        await self._close(models, location)

    async def _reload_dependents(self, key: ModelId) -> None:
        """A composing model was (re)loaded: reload the ensembles built on it, so they check
        its new configuration (and come back if its unload had taken them down)."""
        for other in list(self._records.values()):
            if key in other.depends and other.location is not None:
                if other.key not in self._loading:
                    log.info(
                        "reloading ensemble '%s': composing model '%s' changed",
                        other.name,
                        key.name,
                    )
                    await self._load(other.location)

    def _retire(self, record: ModelRecord) -> None:
        """Close a record that no longer serves (in the background: it drains first)."""
        models = [e.model for e in record.versions.values() if e.model is not None]
        if not models and (record.location is None or record.location.scratch is None):
            return
        self._retiring_models.update(models)  # shutdown bounds them too
        self._background(self._close(models, record.location))

    def _forget_files(self, record: ModelRecord) -> None:
        """A load from a request's files failed: nothing will load from them again (only a
        failed ensemble is reloaded when its composing models change, so it keeps its own)."""
        location = record.location
        if location is not None and location.scratch is not None:
            record.location = None
            self._background(self._close([], location))

    def _background(self, closing: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(closing)
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _close(self, models: list[Model], location: ModelLocation | None) -> None:
        """Close model versions, then remove the directory of a model loaded from a request's
        ``file:`` overrides unless a current record still loads from it."""
        try:
            timeout = self._unload_timeout
            await asyncio.gather(*(m.close(timeout) for m in models), return_exceptions=True)
        finally:
            self._retiring_models.difference_update(models)
        scratch = location.scratch if location is not None else None
        if scratch is None or any(
            r.location is not None and r.location.scratch == scratch for r in self._records.values()
        ):
            return
        await asyncio.to_thread(shutil.rmtree, scratch, True)

    def _fail_model(self, record: ModelRecord, reason: str) -> None:
        record.state, record.reason = ModelState.UNAVAILABLE, reason
        log.error("failed to load '%s': %s", record.name, reason, extra=about_model(record.name))

    async def _load_versions(
        self, record: ModelRecord, location: ModelLocation, override: ModelConfig | None
    ) -> None:
        if location.path is None:
            raise invalid_arg(location.problem)
        record.files = await asyncio.to_thread(model_files, location.path)
        if override is not None:
            config, path, text = override, None, ""
        else:
            config, path, text = await asyncio.to_thread(
                read_config, location.path, self._layout.config_name
            )
        record.config = ModelConfig()
        record.config.CopyFrom(config)
        if path is None and override is None and not self._auto_complete:
            raise invalid_arg(
                f"unable to find the model configuration file "
                f"'{location.path / 'config.pbtxt'}' for model '{record.name}'"
            )
        versions = version_dirs(location.path)
        infer_backend(config, list(versions.values()))
        served = select_versions(config, list(versions))
        if not served:
            raise invalid_arg(
                f"at least one version must be available under the version policy of model "
                f"'{record.name}'"
            )
        backend = await find_backend(self._backends, config.backend)
        if backend is None:
            if not config.backend and config.platform:  # an unknown platform (Triton's text)
                raise invalid_arg(f"unexpected platform type '{config.platform}' for {record.name}")
            raise invalid_arg(unknown_backend(config.backend, record.name, self._backends))
        problem = ConfigProblem(record.name, path, text, client=override is not None)
        if config.platform == "ensemble":
            record.depends = frozenset(
                self._composing_id(record.namespace, s.model_name)
                for s in config.ensemble_scheduling.step
            )
            await self._load_composing(record.key, record.depends)
        for version in served:
            record.versions[version] = VersionRecord(version)
        loads = (
            self._load_version(record, backend, config, problem, location.path, versions[v])
            for v in served
        )
        if record.depends:  # an ensemble loads nothing heavy and must not hold a slot
            await asyncio.gather(*loads)
            return
        async with self._load_slots:
            await asyncio.gather(*loads)

    def _composing_id(self, namespace: str, name: str) -> ModelId:
        """Which model an ensemble's step names (its own namespace first)."""
        return composing_id(namespace, name, (*self._records, *self._known), self._names.on)

    async def _load_composing(self, ensemble: ModelId, keys: frozenset[ModelId]) -> None:
        """Wait for the composing models being loaded; load those never loaded or unloaded
        since (Triton loads an ensemble's composing models with it). A cycle between
        ensembles fails."""
        self._waiting_on[ensemble] = set(keys)
        cycle = self._cycle(ensemble, ensemble, [ensemble])
        if cycle:
            raise invalid_arg(
                "circular dependency between ensembles: " + " -> ".join(k.name for k in cycle)
            )
        locations = None
        waits: list[asyncio.Future[Any]] = []
        for key in sorted(keys):
            if key in self._loading:
                waits.append(asyncio.shield(self._loading[key]))
            elif key not in self._records or was_unloaded(self._records[key]):
                locations = locations or self.scan()
                if key in locations:
                    self._loading[key] = asyncio.get_running_loop().create_future()
                    waits.append(asyncio.ensure_future(self._load(locations[key])))
        await asyncio.gather(*waits)

    def _cycle(self, start: ModelId, current: ModelId, path: list[ModelId]) -> list[ModelId]:
        for name in sorted(self._waiting_on.get(current, ())):
            if name == start:
                return [*path, name]
            if name not in path:
                found = self._cycle(start, name, [*path, name])
                if found:
                    return found
        return []

    def composing_spec(self, owner: ModelId, name: str, version: int) -> ModelSpec:
        """A composing model's spec for an ensemble's checks, or Triton's reason it has none
        (the ensemble's own namespace first under --model-namespacing)."""
        ensemble = owner.name
        record = self._records.get(self._composing_id(owner.namespace, name))
        if record is None:
            raise not_found(f"ensemble '{ensemble}' depends on '{name}' which is not loaded")
        if not record.ready:
            reason = failure(record)
            raise unavailable(
                f"ensemble '{ensemble}' depends on '{name}' which has no loaded version."
                + (f" Model '{name}' loading failed with error: {reason}" if reason else "")
            )
        model = record.latest if version <= 0 else record.ready.get(version)
        if model is None:
            raise unavailable(
                f"ensemble '{ensemble}' depends on '{name}' whose required version {version} is "
                "not loaded."
            )
        return model.spec

    def _context(
        self,
        record: ModelRecord,
        entry: VersionRecord,
        config: ModelConfig,
        problem: ConfigProblem,
        model_dir: Path,
        checked: bool = False,
    ) -> Callable[[], LoadContext]:
        """What a backend gets to load one version (a fresh copy of ``config`` each call),
        its callbacks bound to the version's record. ``checked``: ``config`` is a completed
        config whose fields were checked already (an instance-group update)."""
        version = entry.version
        version_dir = model_dir / str(version)  # version folders are canonical numbers

        def finalize(completed: ModelConfig) -> ModelSpec:
            # Every backend comes through here once auto-complete is done: refuse the fields
            # tritium does not honour before normalize fills in Triton's defaults.
            if not checked:
                check_fields(completed, problem)
            normalize(completed, record.name, problem)
            return build_spec(completed, problem, model_dir)

        def on_failure(reason: str) -> None:
            entry.state, entry.reason = ModelState.UNAVAILABLE, reason
            refresh(record)
            self._changed()
            log.error(
                "model '%s' version %d is unavailable: %s",
                record.name,
                version,
                reason,
                extra=about_model(record.name),
            )

        def on_recovered() -> None:
            if entry.model is None or entry.state is not ModelState.UNAVAILABLE:
                return  # unloaded or unloading meanwhile: it stays so
            entry.state, entry.reason = ModelState.READY, ""
            refresh(record)
            self._changed()
            log.info(
                "model '%s' version %d is ready again",
                record.name,
                version,
                extra=about_model(record.name),
            )

        def context() -> LoadContext:  # a fresh copy of the config for each attempt
            own = ModelConfig()
            own.CopyFrom(config)
            return LoadContext(
                record.name,
                version,
                model_dir,
                version_dir,
                own,
                self._auto_complete,
                finalize,
                on_failure,
                composing=functools.partial(self.composing_spec, record.key),
                on_recovered=on_recovered,
                confined=problem.client,
            )

        return context

    async def _load_version(
        self,
        record: ModelRecord,
        backend: Backend,
        config: ModelConfig,
        problem: ConfigProblem,
        model_dir: Path,
        version_dir: Path,
    ) -> None:
        version = int(version_dir.name)
        entry = record.versions[version]
        context = self._context(record, entry, config, problem, model_dir)

        started = time.monotonic()
        files = await self._files_digests(record, config, model_dir, version_dir)
        for attempt in range(self._layout.load_retries + 1):  # Triton: --model-load-retry-count
            try:
                spec, instances = await backend.load(context())
                await warm_up(spec, instances, model_dir, version)  # before READY
                break
            except Exception as exc:
                reason = exc.message if isinstance(exc, ServerError) else _describe(exc)
                log.error(
                    "failed to load '%s' version %d: %s",
                    record.name,
                    version,
                    reason,
                    extra=about_model(record.name),
                )
                if attempt == self._layout.load_retries:
                    if problem.client:  # the log has the paths; the client gets none
                        reason = without_model_dir(reason, model_dir)
                    entry.state, entry.reason = ModelState.UNAVAILABLE, reason
                    return
        try:
            settings = VersionSettings(
                self._dispatch,
                self.limiter,
                self.sequence_backlog,
                self.metrics,
                self._unload_timeout,
            )
            generation = (  # the response cache's generation of this version
                model_generation(spec.config.SerializeToString(deterministic=True), files)
                if files is not None
                else b""
            )
            entry.model = Model(spec, version, instances, settings, record.namespace, generation)
        except ServerError as exc:  # the rate limiter's resource counts cannot serve it
            await asyncio.gather(*(i.close() for i in instances), return_exceptions=True)
            entry.state, entry.reason = ModelState.UNAVAILABLE, exc.message
            log.error(
                "failed to load '%s' version %d: %s",
                record.name,
                version,
                exc.message,
                extra=about_model(record.name),
            )
            return
        entry.state = ModelState.READY
        refresh(record)
        # No await since the model was made: no request can have reached it yet.
        _configure_metrics(entry.model, self.metrics, time.monotonic() - started)
        log.info(
            "successfully loaded '%s' version %d (%.0f ms)",
            record.name,
            version,
            (time.monotonic() - started) * 1000,
            extra=about_model(record.name),
        )

    async def _files_digests(
        self, record: ModelRecord, config: ModelConfig, model_dir: Path, version_dir: Path
    ) -> list[bytes] | None:
        """The digests of the files a version's generation covers (``generation.py``): its
        own, and an ensemble's composing models' (all their versions, nested ensembles'
        too); read in a thread. None when the version does not use a response cache."""
        if not (self.metrics.response_cache and config.response_cache.enable):
            return None
        sources: list[tuple[Path, Path | None]] = [(model_dir, version_dir)]
        seen = {record.key}
        pending = list(record.depends)
        while pending:
            key = pending.pop()
            composing = self._records.get(key)
            if key in seen or composing is None or composing.location is None:
                continue
            seen.add(key)
            if composing.location.path is not None:
                sources.append((composing.location.path, None))
            pending.extend(composing.depends)
        return await asyncio.to_thread(lambda: [files_digest(d, v) for d, v in sources])

    def live_models(self) -> int:
        """Model versions loading, loaded or unloading, not yet unloaded (Triton's live
        models at shutdown)."""
        models = [e.model for r in self._records.values() for e in r.versions.values() if e.model]
        models += self._retiring_models
        return len(self._loading) + sum(1 for m in models if not m.unloaded())

    async def unload_all(self, timeout: float | None = None) -> None:
        """Unload every model (shutdown); executions still running after ``timeout`` are
        failed and their instances killed."""
        models = [e.model for r in self._records.values() for e in r.versions.values() if e.model]
        models += self._retiring_models
        for record in self._records.values():
            for entry in record.versions.values():
                entry.state = ModelState.UNLOADING
            refresh(record)
        self._changed()
        await asyncio.gather(
            *(m.close(timeout) for m in models), *self._retiring, return_exceptions=True
        )

    # -- lookups -----------------------------------------------------------------------------
    def get(self, name: str, version: int = -1, near: str | None = None) -> Model:
        """The ready model version a request is for, or Triton's error for why not. ``near``:
        the namespace of the ensemble whose step asks (looked in first)."""
        record = self._names.find(name, near)
        if record is None:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version < 0 or version == 0:
            if record.latest is None:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            return record.latest
        model = record.ready.get(version)
        if model is not None:
            return model
        if version in record.versions:
            raise unavailable(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        raise not_found(f"Request for unknown model: '{name}' version {version} is not found")

    def down(self, name: str, version: int) -> list[tuple[int, str]]:
        """Versions of ``name`` (``version``; -1 or 0: any) that loaded but are UNAVAILABLE
        now (an instance is down: ``on_failure``), with why."""
        record = self._names.find(name)
        if record is None:
            return []
        return [
            (number, entry.reason)
            for number, entry in sorted(record.versions.items())
            if entry.model is not None
            and entry.state is ModelState.UNAVAILABLE
            and (version <= 0 or number == version)
        ]

    def loaded(self, name: str, version: int) -> list[Model]:
        """Ready model versions: all of them (no name), one model's, or one version."""
        if not name:
            records = [self._records[k] for k in sorted(self._records, key=_by_name)]
        else:
            found = self._names.find(name)
            records = [found] if found is not None else []
        models = [m for r in records for _, m in sorted(r.ready.items())]
        return [m for m in models if version <= 0 or m.version == version]

    def ready_versions(self, name: str) -> list[int]:
        record = self._names.find(name)
        return sorted(record.ready) if record else []

    def failures(self) -> list[str]:
        problems = []
        for record in self._records.values():
            if record.state is ModelState.UNAVAILABLE:
                problems.append(f"{record.name}: {record.reason}")
            for v, entry in record.versions.items():
                if entry.state is ModelState.UNAVAILABLE:
                    problems.append(f"{record.name} version {v}: {entry.reason}")
        return problems

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """The repository index: one entry per model version (or per model that has none)."""
        return index_rows(self._records, self._known, ready_only)

    def all_ready(self) -> bool:
        """Strict readiness: models unloaded on purpose do not count, failed ones do."""
        return strictly_ready(self._records.values())


def _by_name(key: ModelId) -> tuple[str, str]:
    return key.name, key.namespace


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


__all__ = ["ModelRepositoryManager", "RepositoryLayout", "version_from_string"]


def _configure_metrics(model: Model, settings: MetricsSettings, load_seconds: float) -> None:
    """The version's metric settings and its nv_model_load_duration_secs (Triton's
    ModelLifeCycle reports the load time when the version becomes READY)."""
    spec = model.spec
    cache = settings.response_cache and spec.config.response_cache.enable and not spec.decoupled
    model.stats.configure(settings, spec.metrics, cache, model.namespace)
    model.stats.load_seconds = load_seconds
