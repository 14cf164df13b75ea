"""System shared memory regions registered by clients (Triton's shared-memory extension).

A region is a window ``[offset, offset + byte_size)`` of a POSIX shared-memory object that the
client created with ``shm_open``. The key is a POSIX shm name (one path component, as
``shm_open`` takes it), never a path: the server opens it relative to a descriptor of the shm
directory with ``O_NOFOLLOW`` and accepts only a regular file, so no key reaches another file
of the host. The server maps the object with ``mmap`` (never ``multiprocessing.shared_memory``,
whose resource tracker would unlink the client's object when the server exits), reads inputs
from it as numpy views (no copy) and writes outputs into it with ``pwrite``. As in Triton, a
region that a request is using cannot be unregistered until that request finishes.

The client owns the object and may shrink it at any time; touching a mapped page past its end
raises SIGBUS, which would kill the server. So the region keeps its descriptor open and checks
the object's current size (``fstat``) every time a request uses it (see ``ShmRegion.view``).
"""

from __future__ import annotations

import mmap
import os
import stat
from math import prod
from typing import Any

import numpy as np

from ..errors import ErrorKind, ServerError, invalid_arg, not_found, unsupported
from ..tensor_codec import deserialize_bytes, object_array, raw_bytes
from ..request import InferenceRequest
from ..types import DataType, InferenceResponse, ShmRef, Tensor

DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
# Triton's GPU build on a machine without a GPU (the usual container) answers INVALID_ARG
# "failed to register shared memory region: invalid args" (cudaIpcOpenMemHandle fails).
CUDA_UNSUPPORTED = (
    "failed to register shared memory region: invalid args (CUDA shared memory is not "
    "supported on this server: it has no GPU)"
)
SHM_DIR = "/dev/shm"  # where glibc's shm_open keeps its objects
NAME_MAX = 255  # the longest file name (bytes) the shm directory holds
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"  # Triton's, for its Python backend
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def posix_shm_name(key: str) -> str | None:
    """The file name that ``shm_open(key)`` opens in the shm directory, or None when ``key`` is
    not a POSIX shm name. Like glibc: leading slashes are dropped and what remains must be one
    non-empty path component of at most NAME_MAX bytes, without NUL; ``.`` and ``..`` are
    refused too (they name directories, never a shm object)."""
    name = key.lstrip("/")
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        return None
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no file has that name
        return None
    return name if len(encoded) <= NAME_MAX else None


class ShmRegion:
    """One registered system shared-memory region (what a request holds while it uses it)."""

    __slots__ = ("name", "key", "offset", "byte_size", "fd", "map", "users", "closing")

    def __init__(self, name: str, key: str, window: tuple[int, int], fd: int, size: int) -> None:
        self.name, self.key = name, key
        self.offset, self.byte_size = window
        self.fd = fd  # kept open while registered: the object's current size comes from it
        self.map = mmap.mmap(fd, size)
        self.users = 0
        self.closing = False

    def view(self, ref: ShmRef) -> memoryview:
        """The bytes ``[offset, offset + byte_size)`` of the region (Triton's checks), after
        checking that the client has not shrunk the object under them since it registered.

        The check narrows but cannot close a race: a client that truncates the object after
        this check and before the bytes are read (a view of an input is read when the model
        runs, possibly after a wait in a queue) still makes that read raise SIGBUS. Outputs do
        not have that race: ``write`` uses ``pwrite``, which never faults."""
        start, end = self._bounds(ref)
        return memoryview(self.map)[start:end]

    def write(self, ref: ShmRef, data: bytes | memoryview) -> None:
        """Copy ``data`` to ``[offset, offset + byte_size)`` of the region with ``pwrite``,
        which extends a file truncated meanwhile instead of faulting like a store into the
        mapping would."""
        start, end = self._bounds(ref)
        written = 0
        with memoryview(data) as src, src.cast("B") as raw:
            while start + written < end:
                written += os.pwrite(self.fd, raw[written : end - start], start + written)

    def _bounds(self, ref: ShmRef) -> tuple[int, int]:
        if ref.offset < 0 or ref.offset >= max(self.byte_size, 1):
            raise invalid_arg(f"Invalid offset for shared memory region: '{self.name}'")
        if ref.byte_size < 0 or ref.offset + ref.byte_size > self.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{self.name}'")
        start = self.offset + ref.offset
        end = start + ref.byte_size
        size = os.fstat(self.fd).st_size
        if size < end:
            raise invalid_arg(
                f"shared memory region '{self.name}' is no longer usable: its object "
                f"'{self.key}' was truncated to {size} bytes, {end} bytes are needed"
            )
        return start, end

    def release(self) -> None:
        self.users -= 1
        if self.closing and self.users == 0:
            self.close()

    def close(self) -> None:
        """Close the descriptor and unmap now, or, while numpy views of a finished request are
        still alive, when the last of them goes (the mapping closes itself then)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            self.map.close()
        except BufferError:
            pass


class SharedMemoryManager:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self._regions: dict[str, ShmRegion] = {}
        self._dir_fd = -1  # the shm directory, opened on the first registration

    # -- the extension's endpoints --------------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.require_allowed()
        file_name = _check_key(name, key)
        if name in self._regions:
            raise ServerError(
                ErrorKind.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )
        fd = self._open(file_name, key)
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or byte_size <= 0 or offset + byte_size > size:
                raise invalid_arg(  # Triton's text, then which bound was broken
                    f"failed to register shared memory region '{name}': invalid args (offset "
                    f"{offset} + byte_size {byte_size} exceeds the size {size} of '{key}')"
                )
            region = ShmRegion(name, key, (offset, byte_size), fd, size)
        except OSError as exc:  # mmap: no address space left
            os.close(fd)
            raise invalid_arg(
                f"failed to register shared memory region '{name}': unable to map it: "
                f"{exc.strerror}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._regions[name] = region

    def _open(self, file_name: str, key: str) -> int:
        """A read-write descriptor of the regular file ``file_name`` in the shm directory;
        symbolic links, directories, FIFOs and devices are refused."""
        unable = invalid_arg(f"Unable to open shared memory region: '{key}'")
        try:
            if self._dir_fd < 0:
                self._dir_fd = os.open(SHM_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fd = os.open(file_name, _OPEN_FLAGS, dir_fd=self._dir_fd)
        except OSError:
            raise unable from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise unable
        return fd

    def unregister(self, name: str = "") -> None:
        """Triton's: a region a request is using stays registered and the call fails; without
        a name, every other region is unregistered and the failure lists the ones in use."""
        self.require_allowed()
        if name:
            if not self._unregister_one(name):
                raise ServerError(
                    ErrorKind.INTERNAL,
                    f"Cannot unregister shared memory region '{name}', it is currently in use.",
                )
            return
        busy = [each for each in sorted(self._regions) if not self._unregister_one(each)]
        if busy:
            listed = "".join(f"{each} ," for each in busy)
            raise ServerError(
                ErrorKind.INTERNAL,
                f"Failed to unregister the following system shared memory regions: {listed}",
            )

    def _unregister_one(self, name: str) -> bool:
        """Unregister ``name`` (nothing to do if it is not registered); False if in use."""
        region = self._regions.get(name)
        if region is None:
            return True
        if region.users:
            return False
        del self._regions[name]
        region.closing = True
        region.close()
        return True

    def require_allowed(self) -> None:
        """Triton refuses registering and unregistering (system and CUDA regions alike) while
        client shared memory is disabled; status is answered (nothing is registered)."""
        if not self.allowed:
            raise unsupported(DISABLED)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        # Triton answers status even while client shm is disabled; issue 10 asks that no
        # shm route answers OK then, so a probe learns nothing about the extension's state.
        self.require_allowed()
        if name and name not in self._regions:
            raise not_found(f"Unable to find system shared memory region: '{name}'")
        regions = [self._regions[name]] if name else list(self._regions.values())
        return [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in regions
        ]

    # -- inference ---------------------------------------------------------------------------
    def _acquire(self, request: InferenceRequest, ref: ShmRef) -> memoryview:
        """The bytes ``ref`` names (bounds and size checked before anything runs); the region
        is held by the request until it is released."""
        if not self.allowed:
            raise unsupported(DISABLED)
        region = self._regions.get(ref.region)
        if region is None:
            raise not_found(f"Unable to find shared memory region: '{ref.region}'")
        view = region.view(ref)
        region.users += 1
        if request.shm_held is None:
            request.shm_held = []
        request.shm_held.append(region)
        return view

    def resolve_inputs(self, request: InferenceRequest) -> None:
        """Point every input that lives in shared memory at a view of its region."""
        tensors = request.inputs  # the request's own list: the client's tensors stay as sent
        for index, tensor in enumerate(tensors):
            ref = tensor.shm
            if ref is None:
                continue
            data = _array(tensor, self._acquire(request, ref), request.model_name)
            tensors[index] = tensor.with_data(data)

    def check_outputs(self, request: InferenceRequest) -> None:
        """Fail early when a requested output names a region that is not there."""
        for output in request.outputs:
            region = output.parameters.get("shared_memory_region")
            if region is not None:
                self._acquire(request, _output_ref(output.parameters))

    def write_outputs(self, request: InferenceRequest, response: InferenceResponse) -> None:
        """Copy outputs requested in shared memory into their regions; they then travel
        without data."""
        wanted = {
            o.name: o.parameters for o in request.outputs if "shared_memory_region" in o.parameters
        }
        for index, tensor in enumerate(response.outputs):
            params = wanted.get(tensor.name)
            if params is None:
                continue
            ref = _output_ref(params)
            data = raw_bytes(tensor.data, tensor.datatype)
            size = len(data) if isinstance(data, bytes) else data.nbytes
            if size > ref.byte_size:
                raise invalid_arg(
                    f"shared memory size specified with the request for output '{tensor.name}'"
                    f" ({ref.byte_size} bytes) should be at least {size} bytes to hold the "
                    "results"
                )
            region = self._regions.get(ref.region) or _held(request, ref.region)
            region.write(ShmRef(ref.region, ref.offset, size), data)
            response.outputs[index] = Tensor(
                tensor.name, tensor.datatype, tensor.shape, _EMPTY, shm=ref
            )

    @staticmethod
    def release(request: InferenceRequest) -> None:
        for region in request.shm_held or ():
            region.release()
        request.shm_held = None


_EMPTY = np.empty(0, dtype=np.uint8)


def _check_key(name: str, key: str) -> str:
    """Triton's ValidateSharedMemoryKey, and a POSIX shm name (``posix_shm_name``)."""
    file_name = posix_shm_name(key)
    if file_name is None:
        if len(key) > 2 * NAME_MAX:  # echo a bounded part (a gRPC status travels in a header)
            key = key[: 2 * NAME_MAX] + "..."
        raise invalid_arg(
            f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )
    if file_name.startswith(RESERVED_KEY_PREFIX):
        raise invalid_arg(
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{RESERVED_KEY_PREFIX}'"
        )
    return file_name


def _held(request: InferenceRequest, name: str) -> ShmRegion:
    for region in request.shm_held or ():
        if isinstance(region, ShmRegion) and region.name == name:
            return region
    raise not_found(f"Unable to find shared memory region: '{name}'")


def _output_ref(params: dict[str, Any]) -> ShmRef:
    return ShmRef(
        str(params["shared_memory_region"]),
        int(params.get("shared_memory_offset", 0)),
        int(params.get("shared_memory_byte_size", 0)),
    )


def _array(tensor: Tensor, view: memoryview, model: str) -> np.ndarray:
    count = prod(tensor.shape)
    if tensor.datatype is DataType.BYTES:
        items = deserialize_bytes(view, tensor.name)
        if len(items) != count:
            raise invalid_arg(
                f"input '{tensor.name}' got unexpected elements count {len(items)}, "
                f"expected {count}"
            )
        return object_array(items, tensor.shape)
    expected = count * tensor.datatype.size
    if view.nbytes != expected:
        raise invalid_arg(
            f"input byte size mismatch for input '{tensor.name}' for model '{model}'. "
            f"Expected {expected}, got {view.nbytes}"
        )
    return np.frombuffer(view, dtype=tensor.datatype.dtype).reshape(tensor.shape)
