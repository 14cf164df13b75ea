"""A reload that changes only a model's instance groups updates its loaded versions in place,
as Triton's ``ModelLifeCycle::UpdateModelConfig`` → ``TritonModel::UpdateInstanceGroup`` do.

A reload qualifies when the model's other files are unchanged (path, size, mtime: Triton's
``IsModelVersionModified``), it serves the same versions, all of them READY, and its new config
differs from the one it was loaded from in ``instance_group`` (and ``version_policy``) only
(Triton's ``ConfigChangeRequiresReload``), both compared as the server normalizes them before
any backend sees them (Triton's ``GetNormalizedModelConfig``: backend, default file name,
version policy, batching and pinned-memory defaults), so the served config returned by the
load API's ``config`` with a new instance count also updates in place, as in Triton.
Then each version keeps the instances that still match a requested one: same group settings but
for ``name`` and ``count`` (Triton's instance signature), creates only the missing ones
(``initialize`` runs once per new instance, then its warmup), and removes the rest: they take
no more requests, finish what they run, and are closed (``finalize``) before the load returns;
under the sequence batcher a removed instance first serves the sequences it holds to their end
(or their idle timeout), as Triton's. The version serves throughout. Anything else reloads the
whole model, as before; so does an ensemble (it has no instances).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ..backends.base import Backend, LoadContext, ModelInstance
from ..config.model_config import ConfigProblem, ModelConfig
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup
from ..errors import ServerError
from ..config.spec import ModelSpec, infer_backend, normalize
from .layout import version_dirs, select_versions
from .model import Model, ModelState
from .records import ModelRecord
from .warmup import warm_up

Files = tuple[tuple[str, int, int], ...]


def model_files(model_dir: Path) -> Files:
    """The model directory's files but its configs (relative path, size, mtime), sorted;
    ``__pycache__`` left out, symbolic links followed. (The config read is compared by its
    contents.)"""
    entries: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(model_dir, followlinks=True):  # a linked version too
        real = os.path.realpath(top)
        if real in seen:  # a loop of links is walked once
            dirs.clear()
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            path = os.path.join(top, name)
            relative = os.path.relpath(path, model_dir)
            if relative == "config.pbtxt" or (
                relative.startswith("configs" + os.sep) and name.endswith(".pbtxt")
            ):
                continue
            try:
                stat = os.stat(path)
            except OSError:
                continue
            entries.append((relative, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


def only_instances_changed(old: ModelConfig, new: ModelConfig) -> bool:
    """Triton's ``!ConfigChangeRequiresReload``: equal but for the instance groups and the
    version policy."""
    left, right = ModelConfig(), ModelConfig()
    left.CopyFrom(old)
    right.CopyFrom(new)
    for config in (left, right):
        config.ClearField("instance_group")
        config.ClearField("version_policy")
    return bool(left == right)


def server_normalized(config: ModelConfig, name: str, dirs: list[Path]) -> ModelConfig | None:
    """A copy of ``config`` as Triton's ``GetNormalizedModelConfig`` leaves it (what its
    ``ConfigChangeRequiresReload`` compares); None when normalizing refuses it (the full
    load then reports why)."""
    normalized = ModelConfig()
    normalized.CopyFrom(config)
    infer_backend(normalized, dirs)
    try:
        normalize(normalized, name, ConfigProblem(name, None, ""))
    except ServerError:
        return None
    return normalized


def updatable(
    record: ModelRecord, config: ModelConfig, files: Files, model_dir: Path
) -> list[Model] | None:
    """The versions to update in place when ``record`` is reloaded from ``config`` and
    ``files``; None when the reload must load the model whole."""
    if record.config is None or record.depends or record.files != files or not record.versions:
        return None
    dirs = version_dirs(model_dir)
    old = server_normalized(record.config, record.name, list(dirs.values()))
    new = server_normalized(config, record.name, list(dirs.values()))
    if old is None or new is None or not only_instances_changed(old, new):
        return None
    if set(select_versions(config, list(dirs))) != set(record.versions):
        return None
    models: list[Model] = []
    for entry in record.versions.values():
        model = entry.model
        if entry.state is not ModelState.READY or model is None or not model.updatable():
            return None
        models.append(model)
    return models


def _signature(group: ModelInstanceGroup) -> bytes:
    """An instance's group settings but for its name and count (Triton's instance
    signature, device 0: every instance here is on the CPU)."""
    own = ModelConfig().instance_group.add()
    own.CopyFrom(group)
    own.ClearField("name")
    own.ClearField("count")
    serialized: bytes = own.SerializeToString(deterministic=True)
    return serialized


def _slots(spec: ModelSpec) -> list[tuple[bytes, str]]:
    """Each instance of ``spec``'s groups: its signature and name, in the config's order."""
    return [
        (_signature(group), f"{group.name}_{i}")
        for group in spec.config.instance_group
        for i in range(group.count)
    ]


def plan(model: Model, spec: ModelSpec) -> tuple[list[ModelInstance | None], list[str]]:
    """The new instance list (an existing instance where one matches, None where one is to
    be created) and the names of those to create, both in ``spec``'s order."""
    pool: dict[bytes, deque[ModelInstance]] = {}
    for (signature, _), instance in zip(_slots(model.spec), model.instances, strict=False):
        pool.setdefault(signature, deque()).append(instance)
    chosen: list[ModelInstance | None] = []
    names: list[str] = []
    for signature, name in _slots(spec):
        free = pool.get(signature)
        if free:
            chosen.append(free.popleft())
        else:
            chosen.append(None)
            names.append(name)
    return chosen, names


async def update_version(
    model: Model,
    groups: ModelConfig,
    backend: Backend,
    make_context: Callable[[ModelConfig], LoadContext],
    model_dir: Path,
) -> tuple[int, int]:
    """Give ``model`` the instance groups of ``groups``; raises ServerError (the version
    then serves on as it was). Returns how many instances were added and removed."""
    merged = ModelConfig()
    merged.CopyFrom(model.spec.config)  # completed: no auto-complete runs again
    merged.ClearField("instance_group")
    merged.instance_group.extend(groups.instance_group)
    probe = make_context(merged)
    spec = probe.finalize(probe.config)
    chosen, names = plan(model, spec)
    fresh: list[ModelInstance] = []
    if names:
        ctx = make_context(merged)
        ctx.auto_complete, ctx.only = False, frozenset(names)
        _, fresh = await backend.load(ctx)
        await warm_up(spec, fresh, model_dir, model.version)  # closes them on failure
    made = iter(fresh)
    instances = [i if i is not None else next(made) for i in chosen]
    before = len(model.instances)
    try:
        await model.update_instances(spec, instances, fresh)
    except ServerError:  # the rate limiter cannot serve them: nothing changed
        await asyncio.gather(*(i.close() for i in fresh), return_exceptions=True)
        raise
    return len(fresh), before - (len(instances) - len(fresh))
