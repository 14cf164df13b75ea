"""What the manager knows of each model and version: state, reason, the loaded ``Model``,
where it was loaded from; and the repository index rendered from it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set as AbstractSet
from dataclasses import dataclass, field

from ..config.model_config import ModelConfig
from .model import Model, ModelState
from .layout import ModelId, ModelLocation


# The reason of a version unloaded on purpose (Triton's deleter sets the same text).
UNLOADED = "unloaded"
# Triton's reason for a model name found in several repositories (MODEL_READY_REASON_DUPLICATE).
DUPLICATE = "model appears in two or more repositories"


@dataclass(slots=True)
class VersionRecord:
    version: int
    state: ModelState = ModelState.LOADING
    reason: str = ""
    model: Model | None = None


@dataclass(slots=True)
class ModelRecord:
    name: str
    state: ModelState = ModelState.UNKNOWN  # for failures before any version exists
    reason: str = ""
    versions: dict[int, VersionRecord] = field(default_factory=dict)
    ready: dict[int, Model] = field(default_factory=dict)  # ready versions, for lookups
    latest: Model | None = None
    location: ModelLocation | None = None
    depends: frozenset[ModelId] = frozenset()  # an ensemble's composing models
    namespace: str = ""  # its repository's path under --model-namespacing
    # What the versions were loaded from, for a reload that changes only the instance
    # groups (instance_update.py): the config as read (or a load request's), and the model
    # directory's other files (path, size, mtime).
    config: ModelConfig | None = None
    files: tuple[tuple[str, int, int], ...] = ()

    @property
    def key(self) -> ModelId:
        return ModelId(self.namespace, self.name)


def refresh(record: ModelRecord) -> None:
    """Recompute the ready versions and the latest of them (for lookups)."""
    record.ready = {
        v: e.model
        for v, e in record.versions.items()
        if e.state is ModelState.READY and e.model is not None
    }
    record.latest = record.ready[max(record.ready)] if record.ready else None


def index_rows(
    records: Mapping[ModelId, ModelRecord],
    known: Iterable[ModelId],
    ready_only: bool,
    duplicates: AbstractSet[ModelId] = frozenset(),
) -> list[dict[str, str]]:
    """The repository index: one entry per model version (or per model that has none). A
    name in several namespaces is listed once per namespace, by name only (as Triton's). A
    name in several repositories (``duplicates``) is one UNAVAILABLE row with Triton's
    reason, even in the ready-only index (as Triton's RepositoryIndex)."""
    rows: list[dict[str, str]] = []
    for key in sorted(records.keys() | set(known), key=lambda k: (k.name, k.namespace)):
        name, record = key.name, records.get(key)
        if key in duplicates:
            rows.append({"name": name, "state": "UNAVAILABLE", "reason": DUPLICATE})
            continue
        if record is None:  # on disk, never loaded (explicit mode)
            if not ready_only:
                rows.append({"name": name})
            continue
        if not record.versions:
            if ready_only:
                continue
            row = {"name": name}
            if record.state is not ModelState.UNKNOWN:
                row["state"] = record.state.value
            if record.reason:
                row["reason"] = record.reason
            rows.append(row)
            continue
        for version, entry in sorted(record.versions.items()):
            if ready_only and entry.state is not ModelState.READY:
                continue
            row = {"name": name, "version": str(version), "state": entry.state.value}
            if entry.reason:
                row["reason"] = entry.reason
            rows.append(row)
    return rows


def failure(record: ModelRecord) -> str:
    """Why a freshly loaded record serves nothing ('' when a version is ready)."""
    if record.ready:
        return ""
    if record.reason:
        return record.reason
    reasons = [e.reason for e in record.versions.values() if e.reason]
    return "; ".join(reasons) or "no version is available"


def was_unloaded(record: ModelRecord) -> bool:
    """Every version of the model was unloaded (rather than failing to load)."""
    return not record.ready and all(e.reason == UNLOADED for e in record.versions.values())


def unload_versions(record: ModelRecord) -> list[Model]:
    """Mark the versions that were serving UNAVAILABLE "unloaded" and return their models to
    close. A version that failed to load keeps its state and reason: Triton's
    ModelLifeCycle::AsyncUnload releases only the versions that have a model."""
    models = [e.model for e in record.versions.values() if e.model is not None]
    for entry in record.versions.values():
        if entry.model is not None:
            entry.state, entry.reason, entry.model = ModelState.UNAVAILABLE, UNLOADED, None
    refresh(record)
    return models


def strictly_ready(records: Iterable[ModelRecord]) -> bool:
    """Triton's strict readiness (InferenceServer::IsReady): every model has a version, and
    every version is READY (a crashed instance makes it UNAVAILABLE) or was unloaded on purpose
    (explicitly, or by poll mode when it left the repository). A version that failed to load,
    or a model that failed before it had versions, is not ready."""
    for record in records:
        if not record.versions:
            return False
        for entry in record.versions.values():
            if entry.state is not ModelState.READY and entry.reason != UNLOADED:
                return False
    return True
