"""Loads the models of the repositories, tracks each version's state, and resolves requests
to a ready ``Model``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..backends import find_backend, unknown_backend
from ..backends.base import Backend
from ..errors import ServerError, invalid_arg, not_found, unavailable
from .model import Model, ModelState, VersionSettings
from ..logs.settings import about_model
from .generation import files_digest
from .instance_update import model_files, update_version, updatable
from .lifecycle import Hooks, Source, VersionLoad, load_version, unloading
from ..scheduling.rate_limiter import RateLimiter
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
    strictly_ready,
    unload_versions,
    was_unloaded,
)
from ..config.spec import ModelSpec, infer_backend

log = logging.getLogger("tritium")


@dataclass(slots=True)
class _NameLock:
    """Serialises the load/unload requests of one model name; dropped when nobody holds it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ModelRepositoryManager:
    """Built complete by the composition root (server.py): the repositories, the backends,
    how the repositories are read (``layout``), what each version's lifecycle uses
    (``settings``: lifecycle.py) and ``on_change``, called wherever the server's strict
    readiness may change (a record stored, a version failing, recovering or unloaded)."""

    def __init__(
        self,
        repositories: list[Path],
        backends: Mapping[str, Backend],
        layout: RepositoryLayout | None = None,
        settings: VersionSettings | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._repositories = repositories
        self._layout = layout or RepositoryLayout()  # how the repositories are read
        self._settings = settings or VersionSettings()
        self._on_change = on_change
        self._backends = backends
        self._auto_complete = self._layout.auto_complete
        self._load_slots = asyncio.Semaphore(max(self._layout.load_threads, 1))
        self._records: dict[ModelId, ModelRecord] = {}
        self._names = NameIndex(self._layout.namespacing)  # name -> its records, for lookups
        self._known: set[ModelId] = set()  # model directories seen in the repositories
        # names found in several repositories (without --model-namespacing): never served
        self._duplicates: frozenset[ModelId] = frozenset()
        self._retiring: set[asyncio.Task[None]] = set()
        self._retiring_models: set[Model] = set()  # old versions closing after a reload
        # Loads in progress (name -> done), so an ensemble can wait for its composing models,
        # and what each loading ensemble waits for (to refuse a cycle between ensembles).
        self._loading: dict[ModelId, asyncio.Future[None]] = {}
        self._waiting_on: dict[ModelId, set[ModelId]] = {}
        self._locks: dict[ModelId, _NameLock] = {}
        self._hooks = self._lifecycle_hooks()

    def _lifecycle_hooks(self) -> Hooks:
        """What each version's lifecycle (lifecycle.py) takes from the manager."""
        return Hooks(
            self._settings,
            self._auto_complete,
            self._layout.load_retries,
            self._changed,
            self.composing_spec,
        )

    @property
    def limiter(self) -> RateLimiter | None:
        """--rate-limit=execution_count: the limiter every instance joins (None: off)."""
        return self._settings.limiter

    def share_limiter(self, limiter: RateLimiter) -> None:
        """--workers: the whole server's rate limiter instead of this process's; called by
        the worker before any model loads (the resources are the whole server's)."""
        self._settings = replace(self._settings, limiter=limiter)
        self._hooks = self._lifecycle_hooks()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    # -- loading -----------------------------------------------------------------------------
    def scan(self) -> dict[ModelId, ModelLocation]:
        locations = scan(self._repositories, self._layout.namespacing)
        self._known = set(locations)
        self._duplicates = frozenset(k for k, loc in locations.items() if loc.path is None)
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
        load = VersionLoad(record, entry, Source(config, problem, model_dir), self._hooks)
        added, removed = await update_version(model, config, backend, load.context_for, model_dir)
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
            timeout = self._settings.unload_timeout
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
        source = Source(config, problem, location.path)
        loads = (self._load_version(record, backend, source, versions[v]) for v in served)
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

    async def _load_version(
        self, record: ModelRecord, backend: Backend, source: Source, version_dir: Path
    ) -> None:
        """One version's load (lifecycle.py), timed from here: the digests its response
        cache's generation covers are read first."""
        entry = record.versions[int(version_dir.name)]
        load = VersionLoad(record, entry, source, self._hooks)
        started = time.monotonic()
        files = await self._files_digests(record, source.config, source.model_dir, version_dir)
        await load_version(load, backend, files, started)

    async def _files_digests(
        self, record: ModelRecord, config: ModelConfig, model_dir: Path, version_dir: Path
    ) -> list[bytes] | None:
        """The digests of the files a version's generation covers (``generation.py``): its
        own, and an ensemble's composing models' (all their versions, nested ensembles'
        too); read in a thread. None when the version does not use a response cache."""
        if not (self._settings.metrics.response_cache and config.response_cache.enable):
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
            unloading(record)
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
        return index_rows(self._records, self._known, ready_only, self._duplicates)

    def all_ready(self) -> bool:
        """Strict readiness: models unloaded on purpose do not count, failed ones do."""
        return strictly_ready(self._records.values())


def _by_name(key: ModelId) -> tuple[str, str]:
    return key.name, key.namespace


__all__ = ["ModelRepositoryManager", "RepositoryLayout", "VersionSettings", "version_from_string"]
