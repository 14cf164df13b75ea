"""Packed Python execution environments (conda-pack ``.tar.gz``), unpacked once into a cache.

The cache is keyed by the CONTENT of the archive (its SHA-256), not by its path and mtime as in
Triton: two models pointing at copies of one archive share one unpacked environment, a touched
but unchanged archive is not unpacked again, and a changed archive never reuses a stale tree.
Entries survive a restart of the server (the next start reuses them); delete the directory while
the server is stopped to reclaim the space.

The archive names an operator's file, not a client's, but it is still treated with care: a
member that would land outside the environment (an absolute name, ``..``, a link whose target
leaves the tree, a device file) refuses the whole archive before anything is written, and the
extraction itself runs through ``tarfile``'s ``data`` filter, which resolves links on disk.
The cache directory must be private to the server's user (created 0700); an archive is unpacked
into a temporary sibling and renamed into place under an ``flock``, so two loads (or two
servers) unpacking the same archive at once wait for each other and one tree results.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path

_CHUNK = 1 << 20
_TMP_PREFIX = ".unpacking-"


class ArchiveError(Exception):
    """The archive cannot be used; the message says why (the server's log shows it; the
    load's reason does not, see ``execenv.py``)."""


class CacheError(ArchiveError):
    """The cache directory cannot be used (the operator's ``--python-env-cache-dir``, not
    the model's path: its message is the load's reason)."""


def default_cache_dir() -> Path:
    """``<system temp>/tritium-python-envs-<uid>``: per user, so servers of two users never
    share (or fight over) one directory."""
    return Path(tempfile.gettempdir()) / f"tritium-python-envs-{os.geteuid()}"


def unsafe_member(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` may not be extracted into the environment's directory, or None.

    Lexical checks on the names in the archive (the ``data`` filter re-checks on disk)."""
    name = member.name
    if name.startswith("/") or posixpath.isabs(name):
        return f"member '{name}' has an absolute path"
    if _escapes(posixpath.normpath(name)):
        return f"member '{name}' would be extracted outside the environment"
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/"):
            return f"member '{name}' links to the absolute path '{target}'"
        # a symlink's target is relative to the link's directory; a hard link's to the root
        base = posixpath.dirname(name) if member.issym() else ""
        if _escapes(posixpath.normpath(posixpath.join(base, target))):
            return f"member '{name}' links to '{target}', outside the environment"
    elif not (member.isfile() or member.isdir()):
        return f"member '{name}' is a special file (device, FIFO)"
    return None


def _escapes(normalized: str) -> bool:
    return normalized == ".." or normalized.startswith("../")


def check_members(members: Iterable[tarfile.TarInfo]) -> None:
    """Raise ArchiveError naming the first member that ``unsafe_member`` refuses."""
    for member in members:
        reason = unsafe_member(member)
        if reason is not None:
            raise ArchiveError(reason)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (0700) or check that an existing one is a directory owned by this user
    that no one else can write to: an environment unpacked there is code the server runs."""
    try:
        if not path.is_symlink() and not path.exists():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise CacheError(f"cannot create the environment cache '{path}': {exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise CacheError(f"the environment cache '{path}' is not a directory (or a link)")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise CacheError(
            f"the environment cache '{path}' must be owned by the server's user and not "
            "writable by group or others"
        )


class ArchiveCache:
    """Unpacked archives under ``root``: ``<root>/<sha256>/`` is one complete environment."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._digests: dict[tuple[str, int, int, int, int], str] = {}
        self._digests_lock = threading.Lock()

    def unpacked(self, archive: Path) -> Path:
        """The directory of ``archive``'s environment, unpacking it first if no server has.
        Blocking (hashing, unpacking): call it in a thread."""
        ensure_private_dir(self.root)
        digest = self.digest(archive)
        target = self.root / digest
        with open(self.root / f"{digest}.lock", "a+b") as lock:  # noqa: PTH123 - a lock fd
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not target.is_dir():
                    self._unpack(archive, digest, target)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return target

    def digest(self, archive: Path) -> str:
        """SHA-256 of the archive; remembered per (file, size, mtime) so a reload of a big
        environment does not hash it again."""
        try:
            info = archive.stat()
            key = (str(archive), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            with self._digests_lock:
                known = self._digests.get(key)
            if known is not None:
                return known
            sha = hashlib.sha256()
            with archive.open("rb") as file:
                while chunk := file.read(_CHUNK):
                    sha.update(chunk)
        except OSError as exc:
            raise ArchiveError(f"cannot read '{archive}': {exc}") from None
        with self._digests_lock:
            self._digests[key] = sha.hexdigest()
        return sha.hexdigest()

    def _unpack(self, archive: Path, digest: str, target: Path) -> None:
        for stale in self.root.glob(f"{_TMP_PREFIX}{digest}-*"):  # a crash mid-unpack
            shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{digest}-", dir=self.root))
        try:
            extract(archive, scratch)
            scratch.rename(target)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise


def extract(archive: Path, destination: Path) -> None:
    """Unpack a ``.tar``/``.tar.gz`` into ``destination`` after ``check_members``."""
    if not hasattr(tarfile, "data_filter"):  # Python < 3.11.4: no safe extraction filter
        raise ArchiveError("unpacking an environment archive needs Python 3.11.4 or newer")
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            check_members(members)
            tar.extractall(destination, members=members, filter="data")
    except ArchiveError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        detail = " ".join(str(exc).split())  # tarfile's reasons span lines
        raise ArchiveError(f"cannot unpack '{archive}': {detail}") from None
