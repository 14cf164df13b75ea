"""Large tensors between the server and a stub through POSIX shared memory, copied once.

A BLS request or response carries its tensors in the frame (``ipc``) when they are small. A
tensor of ``SHM_MIN_BYTES`` or more is written by the sender into a segment of its own under
``/dev/shm`` (the one copy) and only the segment's name travels; the receiver maps it and
unlinks the name at once, so the array it gets is a view of the pages the sender wrote and the
kernel frees them when that view goes away. Segment names are made here, never from client
input: ``tritium-bls-<server pid>-<stub pid>-<counter>-<random>``; a receiver accepts only
names of its own peer (``SegmentNames.owns``). A process that dies between writing and the
peer's mapping leaves a name behind: the server sweeps a stub's names when the stub stops or
dies (``sweep``).
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import secrets
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


def write_segment(name: str, data: Any, nbytes: int) -> None:
    """Create segment ``name`` holding ``data`` (any buffer of ``nbytes`` bytes): the copy."""
    fd = os.open(_DIR / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        mapped = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    except BaseException:
        os.close(fd)
        os.unlink(_DIR / name)
        raise
    os.close(fd)
    view = np.frombuffer(mapped, dtype=np.uint8)
    view[:] = np.frombuffer(data, dtype=np.uint8)
    del view
    mapped.close()


def map_segment(name: str, nbytes: int) -> mmap.mmap:
    """Map segment ``name`` (read-write, private to us from now on) and unlink its name."""
    path = _DIR / name
    fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.unlink(path)
        if os.fstat(fd).st_size != nbytes:
            raise ValueError(f"shared-memory segment '{name}' is not {nbytes} bytes")
        return mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
    finally:
        os.close(fd)


def pack(array: Any, buffers: list[Any], names: SegmentNames | None) -> PackedTensor:
    """Describe ``array`` for a frame: inline (an out-of-band buffer) or in a segment."""
    array = np.asarray(array)
    datatype = DataType.from_numpy(array.dtype)
    if datatype is None:
        raise TypeError(f"unsupported numpy dtype {array.dtype}")
    data = raw_bytes(array, datatype)
    nbytes = len(data) if isinstance(data, bytes) else data.nbytes
    if names is not None and names.enabled and nbytes >= SHM_MIN_BYTES:
        name = names.new()
        write_segment(name, data, nbytes)
        return (datatype.wire, tuple(array.shape), (name, nbytes))
    buffers.append(data)
    return (datatype.wire, tuple(array.shape), len(buffers) - 1)


def unpack(packed: PackedTensor, buffers: list[Any], names: SegmentNames | None) -> np.ndarray:
    """The array a packed tensor describes; a segment is mapped (no copy) if ``names`` owns
    it, refused otherwise."""
    wire, shape, where = packed
    datatype = DataType.from_wire(wire)
    if datatype is None:
        raise ValueError(f"unknown datatype '{wire}'")
    if isinstance(where, int):
        buf = buffers[where]
    else:
        name, nbytes = where
        if names is None or not names.owns(name) or not isinstance(nbytes, int):
            raise ValueError("a tensor names a shared-memory segment that is not its peer's")
        buf = map_segment(name, nbytes)
    if datatype is DataType.BYTES:
        return object_array(deserialize_bytes(buf, "tensor"), tuple(shape))
    return np.frombuffer(buf, dtype=datatype.dtype).reshape(shape)
