"""The on-disk layout of model repositories: model directories and numeric version folders."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..config.model_config import ModelConfig
from .names import is_version_dir


class ModelId(NamedTuple):
    """A model's identity (Triton's ModelIdentifier): with --model-namespacing the namespace
    is the path of the repository that holds it, else '' for every model."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class ModelLocation:
    name: str
    path: Path | None  # None when the name is ambiguous
    problem: str = ""
    # A model materialised from a load request's ``file:`` overrides: the directory that holds
    # it, removed once no model uses it (unload, or a reload that replaced it).
    scratch: Path | None = None
    namespace: str = ""  # its repository's path under --model-namespacing

    @property
    def key(self) -> ModelId:
        return ModelId(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class RepositoryLayout:
    """How the repositories are read (Triton's flags): ``auto_complete`` completes configs
    from the model files (not --disable-auto-complete-config), ``load_threads`` models load
    at once (--model-load-thread-count), ``config_name`` picks
    ``<model>/configs/<name>.pbtxt`` over config.pbtxt (--model-config-name),
    ``load_retries`` tries a version that failed to load again (--model-load-retry-count)."""

    auto_complete: bool = True
    load_threads: int = 4
    config_name: str = ""
    load_retries: int = 0
    namespacing: bool = False  # --model-namespacing: one model per (repository, name)


# Triton's cloud file systems (``s3://``, ``gs://``, ``as://``): tritium reads local paths only.
CLOUD_PREFIXES = ("s3://", "gs://", "as://")


def repository_text_problem(text: str) -> str:
    """Why a --model-repository value cannot be served, judged on the flag's text ('' when it
    may be a local path): an empty one, or a cloud URL (checked before ``Path`` folds the '//'
    away and turns '' into '.')."""
    if not text:
        return "the path is empty"
    if text.lower().startswith(CLOUD_PREFIXES):
        return (
            "cloud model repositories (s3://, gs://, as://) are not supported by tritium: it "
            "runs on the CPU and serves local directories only"
        )
    return ""


def repository_problem(path: Path) -> str:
    """Why ``path`` cannot be a model repository ('' when it can). Triton's
    ModelRepositoryManager::Create checks every path before any model loads, in every model
    control mode: a missing one fails with "failed to stat file", a file with "repository path
    is not a valid directory". tritium also checks that the directory can be listed."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"failed to stat file {path}: {exc.strerror}"
    if not stat.S_ISDIR(mode):
        return "repository path is not a valid directory"
    try:
        with os.scandir(path):
            pass
    except OSError as exc:
        return f"cannot list the directory {path}: {exc.strerror}"
    return ""


def scan(repositories: list[Path], namespacing: bool = False) -> dict[ModelId, ModelLocation]:
    """Every model directory across the repositories. Without namespacing every model is in
    the namespace '' and a name found twice is unavailable; with it, each repository is a
    namespace of its own (Triton's ``Poll``)."""
    found: dict[ModelId, list[Path]] = {}
    for repo in dict.fromkeys(p.resolve() for p in repositories):  # the same one twice is one
        if not repo.is_dir():
            continue
        namespace = str(repo) if namespacing else ""
        for entry in sorted(repo.iterdir()):
            if entry.is_dir() and not entry.name.startswith("."):
                found.setdefault(ModelId(namespace, entry.name), []).append(entry)
    locations = {}
    for key, paths in found.items():
        name = key.name
        if len(paths) == 1:
            locations[key] = ModelLocation(name, paths[0], namespace=key.namespace)
        else:
            where = ", ".join(str(p.parent) for p in paths)
            locations[key] = ModelLocation(
                name, None, f"model '{name}' appears in multiple repositories: {where}"
            )
    return locations


def version_dirs(model_dir: Path) -> dict[int, Path]:
    """Numeric version folders; names that are not ASCII numbers or start with '0' are
    ignored (as Triton's ``std::stoll`` would; Python's ``int()`` also reads '١' as 1)."""
    versions = {}
    for entry in model_dir.iterdir():
        if is_version_dir(entry.name) and entry.is_dir():
            versions[int(entry.name)] = entry
    return dict(sorted(versions.items()))


def select_versions(config: ModelConfig, available: list[int]) -> list[int]:
    """The versions the version policy serves, ascending."""
    policy = config.version_policy
    if policy.HasField("all"):
        return sorted(available)
    if policy.HasField("specific"):
        wanted = set(policy.specific.versions)
        return sorted(v for v in available if v in wanted)
    count = policy.latest.num_versions if policy.HasField("latest") else 1
    return sorted(available)[-max(count, 1) :] if available else []
