"""Large tensors between the server and a stub through POSIX shared memory, copied once.

A BLS request or response carries its tensors in the frame (``ipc``) when they are small. A
tensor of ``SHM_MIN_BYTES`` or more is written by the sender into a segment under ``/dev/shm``
(the one copy) and only the segment's name travels; the receiver maps it, so the array it gets
is a view of the pages the sender wrote. Segments are reused (``SegmentPool``). Their names are
made here, never from client input: ``tritium-bls-<server pid>-<stub pid>-<counter>-<random>``;
a receiver accepts only names of its own pair (``SegmentNames.owns``). The server unlinks a
stub's segments when the stub stops or dies (``SegmentNames.sweep``).
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import secrets
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from ...tensor_codec import deserialize_bytes, object_array, raw_bytes
from ...types import DataType

SHM_MIN_BYTES = 1 << 20
_DIR = Path("/dev/shm")
_PREFIX = "tritium-bls"

# A tensor in a BLS frame: (datatype, shape, where); where is the index of an out-of-band
# buffer of the frame, or (segment name, byte size) for a tensor in shared memory.
PackedTensor = tuple[str, tuple[int, ...], Any]


def available() -> bool:
    return _DIR.is_dir() and os.access(_DIR, os.W_OK)


class SegmentNames:
    """The names of one server/stub pair's segments (either side makes and checks them)."""

    def __init__(self, server_pid: int, stub_pid: int) -> None:
        self.prefix = f"{_PREFIX}-{server_pid}-{stub_pid}-"
        self._pattern = re.compile(re.escape(self.prefix) + r"[0-9]+-[0-9a-f]{8}\Z")
        self._counter = itertools.count()
        self.enabled = available()

    def new(self) -> str:
        return f"{self.prefix}{next(self._counter)}-{secrets.token_hex(4)}"

    def owns(self, name: object) -> bool:
        return isinstance(name, str) and self._pattern.match(name) is not None

    def sweep(self) -> int:
        """Unlink every segment of this pair still named (a peer died before mapping it)."""
        removed = 0
        for path in _DIR.glob(self.prefix + "*"):
            if self.owns(path.name):
                try:
                    path.unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed


class SegmentPool:
    """One side's segments of a server/stub pair, reused so their pages stay warm.

    A segment belongs to one side at a time: the writer copies a tensor into it (one of its
    free segments, or a new one) and hands it over by name; the reader maps it and gives out
    a view; when that view is gone the segment joins the reader's free list, ready for the
    reader's next write in the other direction. Pages are faulted in once per segment, not
    once per tensor (first-touch faults cost more than the copy itself on a VM). At most
    ``keep_bytes`` of free segments are kept; others are unlinked."""

    def __init__(self, names: SegmentNames, keep_bytes: int = 128 << 20) -> None:
        self.names = names
        self._keep = keep_bytes
        self._free: list[tuple[int, str, mmap.mmap]] = []
        self._free_bytes = 0
        self._lock = threading.Lock()
        self._closed = False

    def write(self, data: Any, nbytes: int) -> tuple[str, int]:
        """Copy ``data`` (a buffer of ``nbytes``) into a segment: (its name, byte size)."""
        entry = self._take(nbytes)
        if entry is None:
            name = self.names.new()
            mapped = _create(name, max(nbytes, SHM_MIN_BYTES))
        else:
            name, mapped = entry
        target = np.frombuffer(mapped, dtype=np.uint8, count=nbytes)
        target[:] = np.frombuffer(data, dtype=np.uint8)
        del target
        _unmap(mapped)  # the reader owns it now
        return name, nbytes

    def _take(self, nbytes: int) -> tuple[str, mmap.mmap] | None:
        with self._lock:
            fits = [e for e in self._free if e[0] >= nbytes]
            if not fits:
                return None
            best = min(fits, key=lambda e: e[0])
            self._free.remove(best)
            self._free_bytes -= best[0]
            return best[1], best[2]

    def read(self, name: str, nbytes: int) -> np.ndarray:
        """A writable uint8 view of the ``nbytes`` written into segment ``name``."""
        fd = os.open(_DIR / name, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise ValueError(f"shared-memory segment '{name}' is smaller than {nbytes} bytes")
            mapped = mmap.mmap(fd, size, flags=_MAP_FLAGS)
        finally:
            os.close(fd)
        view = np.frombuffer(mapped, dtype=np.uint8, count=nbytes)
        weakref.finalize(view, self._release, name, size, mapped)
        return view

    def _release(self, name: str, size: int, mapped: mmap.mmap) -> None:
        with self._lock:
            if not self._closed and self._free_bytes + size <= self._keep:
                self._free.append((size, name, mapped))
                self._free_bytes += size
                return
        _unlink(name)

    def close(self) -> None:
        """Unlink the free segments (the pair is done)."""
        with self._lock:
            self._closed = True
            free, self._free, self._free_bytes = self._free, [], 0
        for _, name, mapped in free:
            _unmap(mapped)
            _unlink(name)


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def _create(name: str, size: int) -> mmap.mmap:
    fd = os.open(_DIR / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        return mmap.mmap(fd, size, flags=_MAP_FLAGS)
    except BaseException:
        _unlink(name)
        raise
    finally:
        os.close(fd)


def _unmap(mapped: mmap.mmap) -> None:
    try:
        mapped.close()
    except BufferError:  # a view is still being torn down: the mapping goes with it
        pass


def _unlink(name: str) -> None:
    try:
        os.unlink(_DIR / name)
    except FileNotFoundError:
        pass


def pack(array: Any, buffers: list[Any], pool: SegmentPool | None) -> PackedTensor:
    """Describe ``array`` for a frame: inline (an out-of-band buffer) or in a segment."""
    array = np.asarray(array)
    datatype = DataType.from_numpy(array.dtype)
    if datatype is None:
        raise TypeError(f"unsupported numpy dtype {array.dtype}")
    data = raw_bytes(array, datatype)
    nbytes = len(data) if isinstance(data, bytes) else data.nbytes
    if pool is not None and pool.names.enabled and nbytes >= SHM_MIN_BYTES:
        return (datatype.wire, tuple(array.shape), pool.write(data, nbytes))
    buffers.append(data)
    return (datatype.wire, tuple(array.shape), len(buffers) - 1)


def unpack(packed: PackedTensor, buffers: list[Any], pool: SegmentPool | None) -> np.ndarray:
    """The array a packed tensor describes; a segment is mapped (no copy) if it is one of
    the pair's, refused otherwise."""
    wire, shape, where = packed
    datatype = DataType.from_wire(wire)
    if datatype is None:
        raise ValueError(f"unknown datatype '{wire}'")
    if isinstance(where, int):
        buf = buffers[where]
    else:
        name, nbytes = where
        if pool is None or not pool.names.owns(name) or not isinstance(nbytes, int):
            raise ValueError("a tensor names a shared-memory segment that is not its peer's")
        buf = pool.read(name, nbytes)
    if datatype is DataType.BYTES:
        return object_array(deserialize_bytes(buf, "tensor"), tuple(shape))
    return np.frombuffer(buf, dtype=datatype.dtype).reshape(shape)
