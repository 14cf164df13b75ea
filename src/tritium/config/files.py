"""The one rule for the files a model's configuration names (label files, warm-up data,
initial state): each must be inside the model's directory once every symbolic link on its
way is followed, so neither ``..`` nor a link (the file, or a folder such as ``warmup/``,
pointing at ``/etc``) makes the server read outside it."""

from __future__ import annotations

from pathlib import Path


def model_file(model_dir: Path, *parts: str) -> Path | None:
    """``<model_dir>/<parts...>`` with every link followed, or None when that leaves the
    model's directory (or is the directory itself)."""
    root = model_dir.resolve()
    path = model_dir.joinpath(*parts).resolve()
    return path if path.is_relative_to(root) and path != root else None


def folder_file(model_dir: Path, folder: str, filename: str) -> Path | None:
    """``<model_dir>/<folder>/<filename>``, links followed, or None unless both the folder
    and the file in it stay inside the model's directory and the file inside the folder."""
    if not filename or Path(filename).is_absolute():
        return None
    inside = model_file(model_dir, folder)
    path = model_file(model_dir, folder, filename)
    if inside is None or path is None or path == inside or not path.is_relative_to(inside):
        return None
    return path
