"""A loaded model version's generation: what the response cache puts first in every key
(``extensions/cache.py:cache_key``), so that answers of one generation are never served for
another.

The generation is a digest of what the model is: its completed config (auto-complete and a
load request's override included) and the contents of its files — every file under the model
directory (``config.pbtxt``, label files, an execution environment's archive) except other
versions' directories and ``__pycache__``, and this version's directory whole. A reload with
new code, even at the same version, is a new generation; a reload of the same bytes is the
same model and keeps its entries. Contents, not modification times: replicas sharing one Redis
each load their own copy of the repository (an init container, a volume per pod), and they
must agree on the generation to share entries. An ensemble's generation also covers the
files of the models its steps name, found where the repository has them (a reload of one of
them reloads the ensemble, which computes its generation again).

Hashing reads every byte of the model's files once per load, in a thread (blake2b: about
1 GB/s), and only for a model with ``response_cache { enable: true }`` when a cache is
configured. What a model imports from outside its directory is not covered: a change there
needs a new version, a ``ttl``, or the cache emptied."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

_CHUNK = 1 << 20


def model_generation(config: bytes, files: Iterable[bytes]) -> bytes:
    """The generation of a version whose completed config serializes to ``config``, whose
    files (and its composing models') have the ``files_digest``s ``files``."""
    digest = hashlib.blake2b(digest_size=16, person=b"tritium-gen-v1")
    digest.update(len(config).to_bytes(8, "little") + config)
    for part in files:
        digest.update(part)
    return digest.digest()


def files_digest(model_dir: Path, version_dir: Path | None) -> bytes:
    """A digest of every file under ``model_dir`` (relative path, size and contents, in path
    order), less ``__pycache__`` and, given ``version_dir``, other versions' directories;
    symbolic links followed (once: a loop of links is not walked twice)."""
    digest = hashlib.blake2b(digest_size=16)
    for relative, path in sorted(_files(model_dir, version_dir)):
        name = relative.encode("utf-8", "surrogateescape")
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                digest.update(b"%d\0%s\0%d\0" % (len(name), name, size))
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
        except OSError as exc:  # gone or unreadable meanwhile: part of what the load saw
            digest.update(b"%d\0%s\0error %d\0" % (len(name), name, exc.errno or 0))
    return digest.digest()


def _files(model_dir: Path, version_dir: Path | None) -> Iterator[tuple[str, str]]:
    keep = None if version_dir is None else version_dir.name
    seen: set[str] = set()
    for top, dirs, files in os.walk(model_dir, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:
            dirs.clear()
            continue
        seen.add(real)
        at_root = os.path.samefile(top, model_dir)
        dirs[:] = [
            d for d in dirs
            if d != "__pycache__" and not (at_root and keep and d.isdigit() and d != keep)
        ]  # fmt: skip
        for name in files:
            path = os.path.join(top, name)
            yield os.path.relpath(path, model_dir), path
