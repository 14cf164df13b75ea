"""Large tensors between the server and a stub through POSIX shared memory, copied once.

A BLS request or response carries its tensors in the frame (``ipc``) when they are small. A
tensor of ``SHM_MIN_BYTES`` or more is written by the sender into a segment under ``/dev/shm``
(the one copy) and only the segment's name travels; the receiver maps it, so the array it gets
is a view of the pages the sender wrote. Segments are reused (``SegmentPool``). Their names are
made here, never from client input:
``tritium-bls-<server pid>.<server token>-<stub pid>-<counter>-<random>``; a receiver accepts
only names of its own pair (``SegmentNames.owns``). The token (random, one per server process,
handed to its stubs on their command line) keeps the names of servers apart that share this
``/dev/shm`` from different pid namespaces (containers, pid-namespaced test harnesses), where
two servers, and their stubs, may have the same pids: without it, one server's sweep of a
stub's segments removed another's in flight. The server unlinks a stub's segments when the
stub stops or dies (``SegmentNames.sweep``), and at start the leftovers of servers that died
(``sweep_dead_servers``). Whether a server still runs is told by a lock, not by its pid
alone: each server holds ``tritium-bls-<pid>.<token>.lock`` (flock) for its life, which any
process sharing this ``/dev/shm`` sees, also from another pid namespace, where the pid check
would lie. It is made under a temporary name, locked, then renamed into place, so no sweeper
ever sees it unlocked. (Names without a token, of older servers, are swept by the same rules
with ``tritium-bls-<pid>.lock``.)

The model in a stub may be hostile or broken, and it can truncate any segment of its pair at
any time; touching a mapped page past the end of a file raises SIGBUS. So the server never
maps a stub's segment (``SegmentPool(..., peer_trusted=False)``): it copies a tensor out with
``pread`` the moment it receives it (a truncated segment gives a short read: an error for
that request) and writes with ``pwrite`` (which never faults; a full ``/dev/shm`` is ENOSPC).
Only the stub maps what the server wrote, so a truncation hurts only the model that did it.
A stub sends a tensor inline only while its frame's buffers stay within
``ipc.MAX_INLINE_BYTES`` (``FrameTensors``), the bound the server holds its frames to.
"""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
import re
import secrets
import stat
import threading
import weakref
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, Final

import numpy as np

from ...tensor_codec import deserialize_bytes, object_array, raw_bytes
from ...types import DataType
from . import ipc

SHM_MIN_BYTES = 1 << 20
_DIR = Path("/dev/shm")
_PREFIX = "tritium-bls"

# A tensor in a BLS frame: (datatype, shape, where); where is the index of an out-of-band
# buffer of the frame, or (segment name, byte size) for a tensor in shared memory.
PackedTensor = tuple[str, tuple[int, ...], Any]
# A BLS_RESPONSE's response: (outputs, None, parameters JSON or None), or (None, error
# message, error code); ipc.ResponseWire with tensors that may lie in shared memory.
ResponseWire = tuple[list[tuple[str, PackedTensor]] | None, str | None, Any]


def available() -> bool:
    return _DIR.is_dir() and os.access(_DIR, os.W_OK)


_TOKEN = re.compile(r"[0-9a-f]{8}\Z")
_server_token = ""  # this server's (made on first use; a stub is given its server's)


def server_token() -> str:
    """This process's token, as a server: in its segment names and its lock's name."""
    global _server_token
    if not _server_token:
        _server_token = secrets.token_hex(4)
    return _server_token


class SegmentNames:
    """The names of one server/stub pair's segments (either side makes and checks them):
    the server's pid and token (``server_token``; "" for none), the stub's pid."""

    def __init__(self, server_pid: int, stub_pid: int, token: str = "") -> None:
        if token and not _TOKEN.match(token):
            raise ValueError(f"not a server token: {token!r}")
        server = f"{server_pid}.{token}" if token else str(server_pid)
        self.prefix = f"{_PREFIX}-{server}-{stub_pid}-"
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
    ``keep_bytes`` of free segments are kept; others are unlinked. The writer keeps its
    mapping of each segment it wrote (at most ``keep_bytes`` of them, the least recently used
    unmapped beyond), so a segment that comes back is written again without a new mapping
    (``mmap`` with MAP_POPULATE and ``munmap`` cost about as much as the copy itself).

    ``peer_trusted=False`` (the server's pool: the peer is a model): reads copy the tensor
    into the reader's own memory with ``pread`` (the segment is free again at once) and
    writes use ``pwrite``; nothing of the peer's is ever mapped."""

    def __init__(
        self, names: SegmentNames, keep_bytes: int = 128 << 20, peer_trusted: bool = True
    ) -> None:
        self.names = names
        self._keep = keep_bytes
        self._trusted = peer_trusted
        self._free: list[tuple[int, str, mmap.mmap | None]] = []
        self._free_bytes = 0
        self._returned: list[str] = []  # read with keep=False: to give back to the peer
        self._lock = threading.Lock()
        self._closed = False
        # Written, kept mapped, with the file's inode: a segment removed or replaced since
        # (by the model, by someone cleaning /dev/shm) is mapped anew, as before the cache.
        self._maps: OrderedDict[str, tuple[mmap.mmap, int]] = OrderedDict()
        self._mapped = 0

    def write(self, data: Any, nbytes: int) -> tuple[str, int]:
        """Copy ``data`` (a buffer of ``nbytes``) into a segment: (its name, byte size)."""
        if not self._trusted:
            return self._pwrite(data, nbytes)
        entry = self._take(nbytes)
        if entry is None:
            name = self.names.new()
            mapped = _create(name, max(nbytes, SHM_MIN_BYTES))
        else:
            name = entry[0]
            mapped = entry[1] if entry[1] is not None else self._mapping(name, nbytes)
        target = np.frombuffer(mapped, dtype=np.uint8, count=nbytes)
        target[:] = np.frombuffer(data, dtype=np.uint8)
        del target
        self._keep_mapped(name, mapped)  # the reader owns it now; our mapping waits for it
        return name, nbytes

    def _mapping(self, name: str, nbytes: int) -> mmap.mmap:
        """The mapping kept of a segment this side wrote before (if it still fits), else a
        new one (``_map_or_create``)."""
        with self._lock:
            kept = self._maps.pop(name, None)
            if kept is not None:
                self._mapped -= len(kept[0])
        if kept is not None:
            if len(kept[0]) >= nbytes and _inode(name, nbytes) == kept[1]:
                return kept[0]
            _unmap(kept[0])
        return _map_or_create(name, nbytes)

    def _keep_mapped(self, name: str, mapped: mmap.mmap) -> None:
        dropped = []
        inode = _inode(name, 0)
        with self._lock:
            if self._closed or inode is None:
                dropped.append(mapped)
            else:
                previous = self._maps.pop(name, None)  # mapped again since (a read)
                if previous is not None:
                    self._mapped -= len(previous[0])
                    if previous[0] is not mapped:
                        dropped.append(previous[0])
                self._maps[name] = (mapped, inode)
                self._mapped += len(mapped)
                while self._mapped > self._keep and len(self._maps) > 1:
                    oldest = self._maps.popitem(last=False)[1][0]
                    self._mapped -= len(oldest)
                    dropped.append(oldest)
        for old in dropped:
            _unmap(old)

    def forget(self, name: str) -> None:
        """Unmap the kept mapping of ``name`` (a segment being unlinked)."""
        with self._lock:
            kept = self._maps.pop(name, None)
            if kept is not None:
                self._mapped -= len(kept[0])
        if kept is not None:
            _unmap(kept[0])

    def _pwrite(self, data: Any, nbytes: int) -> tuple[str, int]:
        """``write`` without a mapping: a free segment the peer may have truncated, removed
        or replaced since is dropped for a new one; ``pwrite`` extends a truncated file."""
        entry = self._take(nbytes)
        fd = None
        if entry is not None:
            name = entry[0]
            fd = _open_regular(name, os.O_RDWR)
        if fd is None:
            name = self.names.new()
            fd = os.open(_DIR / name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, max(nbytes, SHM_MIN_BYTES, os.fstat(fd).st_size))
            with memoryview(data) as view, view.cast("B") as raw:
                done = 0
                while done < nbytes:
                    done += os.pwrite(fd, raw[done:nbytes], done)
        except BaseException:
            _unlink(name)
            raise
        finally:
            os.close(fd)
        return name, nbytes

    def _take(self, nbytes: int) -> tuple[str, mmap.mmap | None] | None:
        with self._lock:
            fits = [e for e in self._free if e[0] >= nbytes]
            if not fits:
                return None
            best = min(fits, key=lambda e: e[0])
            self._free.remove(best)
            self._free_bytes -= best[0]
            return best[1], best[2]

    def read(self, name: str, nbytes: int, keep: bool = True) -> np.ndarray:
        """A writable uint8 view of the ``nbytes`` written into segment ``name`` (a copy in
        the reader's own memory when the peer is not trusted; then the segment is free at
        once: kept for this side's writes, or with ``keep=False`` given back to the peer)."""
        if not self._trusted:
            return self._pread(name, nbytes, keep)
        fd = os.open(_DIR / name, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise ValueError(f"shared-memory segment '{name}' is smaller than {nbytes} bytes")
            mapped = _map(fd, size, name)
        finally:
            os.close(fd)
        view = np.frombuffer(mapped, dtype=np.uint8, count=nbytes)
        weakref.finalize(view, self._release, name, size, mapped)
        return view

    def _pread(self, name: str, nbytes: int, keep: bool) -> np.ndarray:
        fd = _open_regular(name, os.O_RDONLY)
        if fd is None:
            raise ValueError(f"shared-memory segment '{name}' is not a regular file")
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise ValueError(
                    f"shared-memory segment '{name}' holds {size} bytes, not the {nbytes} "
                    "of its tensor (it was truncated)"
                )
            try:
                out = np.empty(nbytes, dtype=np.uint8)
            except MemoryError:
                raise ValueError(f"no memory for the {nbytes} bytes of segment '{name}'") from None
            view, done = out.data, 0
            while done < nbytes:
                got = os.preadv(fd, [view[done:]], done)
                if got == 0:
                    raise ValueError(
                        f"shared-memory segment '{name}' was truncated while it was read"
                    )
                done += got
        finally:
            os.close(fd)
        if keep:
            self._release(name, size, None)
        else:
            with self._lock:
                self._returned.append(name)
        return out

    def discard(self, name: object) -> None:
        """A segment handed over but never read (an output nobody asked for, a request that
        failed first) goes back to the peer (``take_returned``)."""
        if not self.names.owns(name):
            return
        with self._lock:
            if not any(entry[1] == name for entry in self._free):
                self._returned.append(str(name))

    def take_returned(self) -> list[str]:
        """The segments read with ``keep=False`` (or discarded) since the last call: the
        server hands them back to the stub, which wrote them (``adopt``), so a stub that
        sends large outputs reuses its segments instead of making new ones."""
        if not self._returned:  # the common case, without the lock
            return []
        with self._lock:
            returned, self._returned = self._returned, []
        return returned

    def adopt(self, names: Any) -> None:
        """Segments the peer gave back: free for this side's next writes."""
        for name in names if isinstance(names, (list, tuple)) else ():
            if not self.names.owns(name):
                continue
            fd = _open_regular(name, os.O_RDONLY)
            if fd is None:
                continue
            try:
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            self._release(name, size, None)

    def _release(self, name: str, size: int, mapped: mmap.mmap | None) -> None:
        with self._lock:
            if not self._closed and self._free_bytes + size <= self._keep:
                self._free.append((size, name, mapped))
                self._free_bytes += size
                return
        if mapped is not None:
            _unmap(mapped)
        self.forget(name)
        _unlink(name)

    def close(self) -> None:
        """Unlink the free segments (the pair is done)."""
        with self._lock:
            self._closed = True
            free, self._free, self._free_bytes = self._free, [], 0
            kept, self._maps, self._mapped = list(self._maps.values()), OrderedDict(), 0
        for old, _ in kept:
            _unmap(old)
        for _, name, mapped in free:
            if mapped is not None:
                _unmap(mapped)
            _unlink(name)


class FrameTensors:
    """The tensors of one frame a stub sends, and its out-of-band ``buffers``: a tensor goes
    inline while the frame's buffers stay within ``ipc.MAX_INLINE_BYTES`` and it is below
    ``SHM_MIN_BYTES``, else into a segment of ``pool`` (when there is /dev/shm). A frame
    that is not sent after all gives its segments back with ``rollback``."""

    __slots__ = ("buffers", "inline", "pool", "written")

    def __init__(self, pool: SegmentPool | None) -> None:
        self.buffers: list[Any] = []
        self.inline = 0
        self.pool = pool
        self.written: list[str] = []

    def pack(self, array: Any) -> PackedTensor:
        buffers = self.buffers
        packed = ipc.pack_array(array, buffers)  # the small-array fast path, unchanged
        last = buffers[-1]
        nbytes = len(last) if isinstance(last, bytes) else last.nbytes
        pool = self.pool
        if (
            pool is not None
            and pool.names.enabled
            and (nbytes >= SHM_MIN_BYTES or self.inline + nbytes > ipc.MAX_INLINE_BYTES)
        ):
            buffers.pop()
            where = pool.write(last, nbytes)
            self.written.append(where[0])
            return (packed[0], packed[1], where)
        self.inline += nbytes
        return packed

    def mark(self) -> tuple[int, int, int]:
        return len(self.buffers), self.inline, len(self.written)

    def rollback(self, mark: tuple[int, int, int] = (0, 0, 0)) -> None:
        """Forget what was packed since ``mark`` (everything by default)."""
        del self.buffers[mark[0] :]
        self.inline = mark[1]
        if self.pool is not None:
            for name in self.written[mark[2] :]:
                self.pool.forget(name)
                _unlink(name)
        del self.written[mark[2] :]


def discard_segments(tensors: Any, pool: SegmentPool | None) -> None:
    """Give back the segments of packed ``(name, tensor)`` pairs that will not be read."""
    if pool is None or not isinstance(tensors, (list, tuple)):
        return
    for entry in tensors:
        where = entry[1][2] if isinstance(entry, (list, tuple)) and len(entry) == 2 else None
        if isinstance(where, (list, tuple)) and where:
            pool.discard(where[0])


# A request's input tensor of INPUT_MIN_BYTES or more goes to the stub in a segment the
# server lends it (``InputSegments`` / ``InputMaps``), smaller ones inline in the frame.
INPUT_MIN_BYTES: Final = SHM_MIN_BYTES


class InputSegments:
    """The server's segments for a stub's large inputs: written by the server, lent to the
    stub for one request, given back by it (``INPUTS_FREE``) and written again.

    The server keeps each segment's descriptor and never reads one back (nothing the stub
    can change there reaches the server), and writes with ``pwrite`` (a segment the stub
    truncated is extended; one it unlinked is written through the descriptor, so only the
    stub's own request misses it). The total size of the segments is bounded (``cap_bytes``,
    counted whether lent or free): a stub that never gives its inputs back only makes later
    inputs travel inline. Full ``/dev/shm`` (ENOSPC): inline too. A segment is a power of
    two in size, so segments fit the next tensors; free ones are dropped (unlinked) to make
    room for a size that none fits."""

    def __init__(self, names: SegmentNames, cap_bytes: int = 128 << 20) -> None:
        self.names = names
        self._cap = cap_bytes
        self._fds: dict[str, tuple[int, int]] = {}  # name → (descriptor, size)
        self._free: list[tuple[int, str]] = []  # (size, name)
        self._lent: set[str] = set()
        self._total = 0
        self._closed = False

    @property
    def lent(self) -> int:
        return len(self._lent)

    @property
    def total_bytes(self) -> int:
        return self._total

    def write(self, data: Any, nbytes: int) -> tuple[str, int] | None:
        """Copy ``data`` (``nbytes``) into a segment lent to the stub: (its name, byte
        size); None when it must go inline (no room under the cap, no /dev/shm)."""
        if self._closed or not self.names.enabled:
            return None
        name = self._take(nbytes)
        if name is None:
            return None
        fd = self._fds[name][0]
        try:
            with memoryview(data) as view, view.cast("B") as raw:
                done = 0
                while done < nbytes:
                    done += os.pwrite(fd, raw[done:nbytes], done)
        except OSError:  # /dev/shm is full: this one goes inline, and the segment away
            self._drop(name)
            return None
        self._lent.add(name)
        return name, nbytes

    def _take(self, nbytes: int) -> str | None:
        fits = [entry for entry in self._free if entry[0] >= nbytes]
        if fits:
            best = min(fits)
            self._free.remove(best)
            return best[1]
        size = max(1 << (nbytes - 1).bit_length(), INPUT_MIN_BYTES)
        self._free.sort()
        while self._free and self._total + size > self._cap:
            self._drop(self._free.pop(0)[1])
        if self._total + size > self._cap:
            return None
        name = self.names.new()
        try:
            fd = os.open(_DIR / name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o600)
        except OSError:
            return None
        try:
            os.ftruncate(fd, size)  # sparse: the pages come with the first write
        except OSError:
            os.close(fd)
            _unlink(name)
            return None
        self._fds[name] = (fd, size)
        self._total += size
        return name

    def _drop(self, name: str) -> None:
        fd, size = self._fds.pop(name)
        self._total -= size
        self._lent.discard(name)
        os.close(fd)
        _unlink(name)

    def free(self, names: Any) -> None:
        """The stub is done with these segments (its INPUTS_FREE): free for the next inputs.
        Names that are not lent (anything a stub makes up) are ignored."""
        for name in names if isinstance(names, (list, tuple)) else ():
            if type(name) is str and name in self._lent:
                self._lent.remove(name)
                self._free.append((self._fds[name][1], name))

    def close(self) -> None:
        """Close and unlink every segment (the stub stopped or died)."""
        self._closed = True
        for name in list(self._fds):
            self._drop(name)
        self._free.clear()


def pack_input(array: Any, buffers: list[Any], segments: InputSegments) -> PackedTensor:
    """A request's input for an EXECUTE frame: in a lent segment when it is large (and
    one can be had), else inline (an out-of-band buffer of the frame)."""
    datatype = DataType.from_numpy(array.dtype)
    if datatype is None:
        raise TypeError(f"unsupported numpy dtype {array.dtype}")
    data = raw_bytes(array, datatype)
    nbytes = len(data) if isinstance(data, bytes) else data.nbytes
    if nbytes >= INPUT_MIN_BYTES:
        where = segments.write(data, nbytes)
        if where is not None:
            return (datatype.wire, tuple(array.shape), where)
    buffers.append(data)
    return (datatype.wire, tuple(array.shape), len(buffers) - 1)


class InputMaps:
    """The stub's side of ``InputSegments``: each lent segment is mapped once and the
    mapping kept (reused each time the server lends it again; at most ``keep_bytes`` of
    mappings, the least recently used unmapped beyond); an input is a view of it. When the
    model has let go of the view, the segment's name is queued for the server
    (``take_free``), which may then write it again."""

    def __init__(self, names: SegmentNames, keep_bytes: int = 256 << 20) -> None:
        self.names = names
        self._keep = keep_bytes
        self._maps: OrderedDict[str, mmap.mmap] = OrderedDict()
        self._mapped = 0
        self._free: deque[str] = deque()  # appended by finalizers, in any thread

    def unpack(self, packed: PackedTensor, buffers: list[Any]) -> np.ndarray:
        """The array of an input: inline (``ipc.unpack_array``) or a view of its segment."""
        where = packed[2]
        if type(where) is int:
            return ipc.unpack_array(packed, buffers)
        wire, shape, (name, nbytes) = packed
        datatype = DataType.from_wire(wire)
        if datatype is None or not self.names.owns(name):
            self._free.append(name)
            raise ValueError(f"an input names '{name}', not a segment of this stub's server")
        view = np.frombuffer(self._mapping(name, nbytes), dtype=np.uint8, count=nbytes)
        if datatype is DataType.BYTES:  # copied out as Python objects: free at once
            self._free.append(name)
            return object_array(deserialize_bytes(view.data, "tensor"), tuple(shape))
        weakref.finalize(view, self._free.append, name)
        return view.view(datatype.dtype).reshape(shape)

    def _mapping(self, name: str, nbytes: int) -> mmap.mmap:
        mapped = self._maps.get(name)
        if mapped is not None and len(mapped) >= nbytes:
            self._maps.move_to_end(name)
            return mapped
        if mapped is not None:
            self._unmap(name)
        fd = os.open(_DIR / name, os.O_RDWR | _NO_FOLLOW)
        try:
            size = os.fstat(fd).st_size
            if size < nbytes:
                raise ValueError(f"shared-memory segment '{name}' is smaller than {nbytes} bytes")
            mapped = _map(fd, size, name)
        finally:
            os.close(fd)
        self._maps[name] = mapped
        self._mapped += size
        while self._mapped > self._keep and len(self._maps) > 1:
            self._unmap(next(iter(self._maps)))
        return mapped

    def _unmap(self, name: str) -> None:
        mapped = self._maps.pop(name)
        self._mapped -= len(mapped)
        _unmap(mapped)  # a view still alive keeps its pages mapped until it goes

    def skip(self, inputs: Any) -> None:
        """Inputs of a request that is not run (cancelled while queued): their segments
        are free at once."""
        for _, packed in inputs:
            if type(packed[2]) is not int:
                self._free.append(packed[2][0])

    def take_free(self) -> list[str]:
        """The names freed since the last call (to send to the server)."""
        free = self._free
        taken = []
        while free:
            taken.append(free.popleft())
        return taken


_SERVER = r"-([0-9]+)(?:\.([0-9a-f]{8}))?"  # a server's pid, and its token (older: none)
_ANY_SEGMENT = re.compile(re.escape(_PREFIX) + _SERVER + r"-[0-9]+-[0-9]+-[0-9a-f]{8}\Z")
_ANY_LOCK = re.compile(re.escape(_PREFIX) + _SERVER + r"\.lock\Z")
_held_lock: int | None = None  # this server's liveness lock (a descriptor), held for its life
_Server = tuple[int, str | None]  # (pid, token) of the server a name belongs to


def _lock_path(pid: int, token: str | None) -> Path:
    return _DIR / (f"{_PREFIX}-{pid}.{token}.lock" if token else f"{_PREFIX}-{pid}.lock")


def hold_server_lock() -> bool:
    """Take this server's liveness lock (once; kept until the process ends): made under a
    temporary name, locked, then renamed into place. False when it cannot be had."""
    global _held_lock
    if _held_lock is not None:
        return True
    path = _lock_path(os.getpid(), server_token())
    making = path.with_name(path.name + ".new")  # a name no sweeper matches
    try:
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(making, path)
    except OSError:
        os.close(fd)
        _unlink(making.name)
        return False
    _held_lock = fd
    return True


def _server_alive(pid: int, token: str | None) -> bool:
    """Whether the server ``pid`` (with ``token``) may still run: its lock is held (by a
    process in any pid namespace); without a lock file, whether the pid runs here. Unsure
    counts as alive."""
    try:
        fd = os.open(_lock_path(pid, token), os.O_RDONLY | _NO_FOLLOW)
    except FileNotFoundError:
        return _running(pid)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True  # held
    finally:
        os.close(fd)  # and with it the shared lock just taken
    return False


def sweep_dead_servers() -> int:
    """Take this server's liveness lock, then unlink the segments (and locks) left by
    servers that died (killed, crashed) before sweeping their own: only names of tritium's
    pattern, owned by this user, regular files, whose server holds no lock (or, for a server
    that left no lock file, whose pid no longer runs). Segments of live servers and other
    names stay; without its own lock a server sweeps nothing."""
    if not _DIR.is_dir() or not hold_server_lock():
        return 0
    uid = os.getuid()
    removed = 0
    me: _Server = (os.getpid(), server_token())
    alive: dict[_Server, bool] = {}
    with os.scandir(_DIR) as entries:
        for entry in entries:
            match = _ANY_SEGMENT.match(entry.name) or _ANY_LOCK.match(entry.name)
            if match is None:
                continue
            server: _Server = (int(match.group(1)), match.group(2))
            if server not in alive:
                alive[server] = server == me or _server_alive(*server)
            if alive[server]:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if info.st_uid != uid or not stat.S_ISREG(info.st_mode):
                    continue
                os.unlink(entry.path)
                removed += 1
            except OSError:
                continue
    return removed


def _running(pid: int) -> bool:
    """Whether ``pid`` may be a live process (unsure counts as running)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or not a pid at all
        return True
    return True


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_regular(name: str, flags: int) -> int | None:
    """A descriptor of segment ``name`` if it is a regular file (never a link or a FIFO the
    peer put in its place), else None."""
    try:
        fd = os.open(_DIR / name, flags | _NO_FOLLOW)
    except OSError:
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _map(fd: int, size: int, name: str) -> mmap.mmap:
    """``size`` bytes of segment ``name`` (open as ``fd``), whose size was just read or set;
    a clear ValueError if it was cut since (a model truncating its segments: mmap's own
    error would be "mmap length is greater than file size")."""
    try:
        return mmap.mmap(fd, size, flags=_MAP_FLAGS)
    except ValueError:
        raise ValueError(
            f"shared-memory segment '{name}' was truncated while it was mapped"
        ) from None


def _inode(name: str, nbytes: int) -> int | None:
    """The inode of segment ``name`` if it is a regular file of ``nbytes`` or more."""
    try:
        info = os.stat(_DIR / name, follow_symlinks=False)
    except OSError:
        return None
    return info.st_ino if stat.S_ISREG(info.st_mode) and info.st_size >= nbytes else None


def _map_or_create(name: str, nbytes: int) -> mmap.mmap:
    """A mapping of ``name``, a segment the peer gave back (``SegmentPool.adopt``); a new
    segment under the same name if it is gone or too small."""
    fd = _open_regular(name, os.O_RDWR)
    if fd is not None:
        try:
            size = os.fstat(fd).st_size
            if size >= nbytes:
                return _map(fd, size, name)
        except ValueError:  # truncated since fstat: made anew below
            pass
        finally:
            os.close(fd)
    _unlink(name)
    return _create(name, max(nbytes, SHM_MIN_BYTES))


def _create(name: str, size: int) -> mmap.mmap:
    fd = os.open(_DIR / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        return _map(fd, size, name)
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


def unpack(
    packed: PackedTensor, buffers: list[Any], pool: SegmentPool | None, keep: bool = True
) -> np.ndarray:
    """The array a packed tensor describes; a segment is read (``SegmentPool.read``: mapped,
    or copied when the peer is not trusted) if it is one of the pair's, refused otherwise."""
    wire, shape, where = packed
    datatype = DataType.from_wire(wire)
    if datatype is None:
        raise ValueError(f"unknown datatype '{wire}'")
    if isinstance(where, int):
        buf = buffers[where]
    else:
        name, nbytes = where
        if pool is None or not pool.names.owns(name) or type(nbytes) is not int or nbytes < 0:
            raise ValueError("a tensor names a shared-memory segment that is not its peer's")
        buf = pool.read(name, nbytes, keep)
    if datatype is DataType.BYTES:  # a memoryview: the compiled codec checks what it is given
        return object_array(deserialize_bytes(memoryview(buf), "tensor"), tuple(shape))
    return np.frombuffer(buf, dtype=datatype.dtype).reshape(shape)
