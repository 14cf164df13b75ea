"""System shared memory regions registered by clients (Triton's shared-memory extension).

A region is a window ``[offset, offset + byte_size)`` of a POSIX shared-memory object
(``/dev/shm/<key>``) that the client created. The server maps it with ``os.open`` + ``mmap``
(never ``multiprocessing.shared_memory``, whose resource tracker would unlink the client's
object when the server exits), reads inputs from it as numpy views (no copy) and writes
outputs into it. A region in use by a request stays mapped until that request finishes,
even if it is unregistered meanwhile.
"""

from __future__ import annotations

import mmap
import os
from math import prod
from typing import Any

import numpy as np

from .errors import ErrorKind, ServerError, invalid_arg, not_found, unsupported
from .tensor_codec import deserialize_bytes, object_array, raw_bytes
from .types import DataType, InferenceRequest, InferenceResponse, ShmRef, Tensor

DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
CUDA_UNSUPPORTED = "CUDA shared memory is not supported on this server: it has no GPU"


class _Region:
    __slots__ = ("name", "key", "offset", "byte_size", "map", "users", "closing")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, mapped: mmap.mmap):
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self.map = mapped
        self.users = 0
        self.closing = False

    def view(self, ref: ShmRef) -> memoryview:
        """The bytes ``[offset, offset + byte_size)`` of the region (Triton's checks)."""
        if ref.offset < 0 or ref.offset >= max(self.byte_size, 1):
            raise invalid_arg(f"Invalid offset for shared memory region: '{self.name}'")
        if ref.byte_size < 0 or ref.offset + ref.byte_size > self.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{self.name}'")
        start = self.offset + ref.offset
        return memoryview(self.map)[start : start + ref.byte_size]

    def release(self) -> None:
        self.users -= 1
        if self.closing and self.users == 0:
            self.close()

    def close(self) -> None:
        """Unmap now, or, while numpy views of a finished request are still alive, when the
        last of them goes (the mapping closes itself then)."""
        try:
            self.map.close()
        except BufferError:
            pass


def _shm_path(key: str) -> str:
    return "/dev/shm/" + key.lstrip("/")


class SharedMemoryManager:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self._regions: dict[str, _Region] = {}

    # -- the extension's endpoints --------------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not self.allowed:
            raise unsupported(DISABLED)
        if name in self._regions:
            raise ServerError(
                ErrorKind.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )
        if name.startswith("triton_python_backend_shm_region_"):
            raise invalid_arg(f"shared memory region name '{name}' is reserved")
        try:
            fd = os.open(_shm_path(key), os.O_RDWR)
        except OSError as exc:
            raise invalid_arg(f"Unable to open shared memory region: '{key}': {exc}") from None
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or byte_size <= 0 or offset + byte_size > size:
                raise invalid_arg(
                    f"failed to register shared memory region '{name}': offset {offset} + "
                    f"byte_size {byte_size} exceeds the size {size} of '{key}'"
                )
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._regions[name] = _Region(name, key, offset, byte_size, mapped)

    def unregister(self, name: str = "") -> None:
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                region.closing = True
                if region.users == 0:
                    region.close()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        if name and name not in self._regions:
            raise not_found(f"Unable to find system shared memory region: '{name}'")
        regions = [self._regions[name]] if name else list(self._regions.values())
        return [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in regions
        ]

    # -- inference ---------------------------------------------------------------------------
    def _acquire(self, request: InferenceRequest, ref: ShmRef) -> _Region:
        if not self.allowed:
            raise unsupported(DISABLED)
        region = self._regions.get(ref.region)
        if region is None:
            raise not_found(f"Unable to find shared memory region: '{ref.region}'")
        region.view(ref)  # the bounds, checked before anything runs
        region.users += 1
        if request.shm_held is None:
            request.shm_held = []
        request.shm_held.append(region)
        return region

    def resolve_inputs(self, request: InferenceRequest) -> None:
        """Point every input that lives in shared memory at a view of its region."""
        for tensor in request.inputs:
            ref = tensor.shm
            if ref is None:
                continue
            view = self._acquire(request, ref).view(ref)
            tensor.data = _array(tensor, view, request.model_name)

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
            region.view(ShmRef(ref.region, ref.offset, size))[:] = data
            response.outputs[index] = Tensor(
                tensor.name, tensor.datatype, tensor.shape, _EMPTY, shm=ref
            )

    @staticmethod
    def release(request: InferenceRequest) -> None:
        for region in request.shm_held or ():
            region.release()
        request.shm_held = None


_EMPTY = np.empty(0, dtype=np.uint8)


def _held(request: InferenceRequest, name: str) -> _Region:
    for region in request.shm_held or ():
        if region.name == name:
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
