"""``Tensor`` and ``MemoryBuffer`` of Triton's in-process API, over numpy.

A tensor's memory is a ``MemoryBuffer``: an address, a size and the ``owner`` object that
holds the memory (a numpy array, or the object a DLPack import came from). The tensor holds
its owner, and every array made from it (``numpy.from_dlpack(tensor)``, ``to_bytes_array``)
holds a view whose base chain ends at the owner: the memory lives as long as any of them.
tritium's tensors are in CPU memory; BYTES tensors are stored serialized (Triton's format:
each element a little-endian u32 length, then its bytes), as Triton's are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..datatypes import DataType as _Wire
from ..tensor_codec import bytes_array, serialize_bytes
from ._enums import FROM_WIRE, TO_WIRE, DataType, DLDeviceType, MemoryType
from ._errors import InvalidArgumentError, UnsupportedError

DeviceOrMemoryType = tuple[MemoryType, int] | MemoryType | tuple[DLDeviceType, int] | str
_MEMORY_NAMES = {"CPU": MemoryType.CPU, "CPU_PINNED": MemoryType.CPU_PINNED, "GPU": MemoryType.GPU}


@dataclass
class MemoryBuffer:
    """Memory of a tensor: it does not own the memory, it holds ``owner``, which does."""

    data_ptr: int
    memory_type: MemoryType
    memory_type_id: int
    size: int
    owner: Any

    @staticmethod
    def from_dlpack(owner: Any) -> MemoryBuffer:
        if not hasattr(owner, "__dlpack__"):
            raise InvalidArgumentError("Object does not support DLpack protocol")
        return _buffer(_host_array(owner))

    def _bytes(self) -> np.ndarray:
        """The memory as a 1-D uint8 view whose base chain holds the owner."""
        owner = self.owner
        array = owner if isinstance(owner, np.ndarray) else _host_array(owner)
        return array.reshape(-1).view(np.uint8)[: self.size]


@dataclass
class Tensor:
    """A tensor: ``data_type``, ``shape`` and the ``memory_buffer`` holding its data."""

    data_type: DataType
    shape: Sequence[int]
    memory_buffer: MemoryBuffer

    @property
    def data_ptr(self) -> int:
        return self.memory_buffer.data_ptr

    @property
    def memory_type(self) -> MemoryType:
        return self.memory_buffer.memory_type

    @property
    def memory_type_id(self) -> int:
        return self.memory_buffer.memory_type_id

    @property
    def size(self) -> int:
        return self.memory_buffer.size

    # -- DLPack ------------------------------------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule over the tensor's memory (no copy), with its current data type and
        shape; the capsule holds the memory's owner."""
        if stream not in (None, 0, -1):
            raise UnsupportedError(
                f"DLPack stream synchronization on memory type {self.memory_type!r} and "
                f"stream {stream} not supported"
            )
        return self._array().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return (DLDeviceType.kDLCPU, 0)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """numpy interop (``numpy.asarray(tensor)``): a view for numeric tensors, the
        elements (``to_bytes_array``) for BYTES."""
        if self.data_type == DataType.BYTES:
            array = self.to_bytes_array()
        else:
            array = self._array(dlpack=False)
        return array if dtype is None else array.astype(dtype, copy=bool(copy))

    def _array(self, dlpack: bool = True) -> np.ndarray:
        """A view of the data in the tensor's type and shape (``dlpack``: one numpy can
        export: BF16 cannot be, numpy has no DLPack bfloat16)."""
        wire = TO_WIRE.get(self.data_type)
        if wire is None or wire is _Wire.BYTES:
            raise InvalidArgumentError(
                f"Unsupported Triton server data type. Can't convert {self.data_type!r} to "
                "DLPack data type"
            )
        if dlpack and wire is _Wire.BF16:
            raise UnsupportedError("DLPack export of BF16 tensors is not supported by tritium")
        view = self.memory_buffer._bytes().view(wire.dtype)
        return view.reshape(tuple(int(d) for d in self.shape))

    # -- BYTES -------------------------------------------------------------------------------
    def to_bytes_array(self) -> np.ndarray:
        """The elements of a BYTES tensor: an object array of ``bytes`` in the tensor's shape."""
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(
                f"Tensor has data type {self.data_type!r} not {DataType.BYTES!r}"
            )
        try:
            items = bytes_array(self.memory_buffer._bytes().data, "tensor")
        except Exception as exc:  # a malformed buffer (ServerError from the codec)
            raise InvalidArgumentError(f"malformed BYTES tensor: {exc}") from None
        return items.reshape(tuple(int(d) for d in self.shape))

    def to_string_array(self) -> np.ndarray:
        """The elements of a BYTES tensor decoded as UTF-8 (a numpy ``str_`` array)."""
        return self.to_bytes_array().astype(str)

    @staticmethod
    def from_bytes_array(bytes_array: Any) -> Tensor:
        result = Tensor._from_object(bytes_array)
        if result.data_type != DataType.BYTES:
            raise InvalidArgumentError(
                f"Unsupported conversion from {bytes_array} to Triton BYTES Tensor. "
                f"Got {result.data_type!r}"
            )
        return result

    @staticmethod
    def from_string_array(string_array: Any) -> Tensor:
        return Tensor.from_bytes_array(string_array)

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def from_dlpack(obj: Any) -> Tensor:
        """A tensor over a DLPack object's memory (no copy; it holds ``obj``)."""
        if not hasattr(obj, "__dlpack__"):
            raise InvalidArgumentError("Object does not support DLpack protocol")
        array = obj if isinstance(obj, np.ndarray) else _host_array(obj)
        if not array.flags.c_contiguous:
            raise InvalidArgumentError("Only contiguous memory is supported")
        data_type = _numeric_type(array.dtype)
        buffer = MemoryBuffer(_address(array), MemoryType.CPU, 0, array.nbytes, obj)
        return Tensor(data_type, list(array.shape), buffer)

    @staticmethod
    def _from_object(obj: Any) -> Tensor:
        """A tensor from a value given as an input: a Tensor, a numpy array or scalar, a
        list, or any object with ``__dlpack__``."""
        if isinstance(obj, Tensor):
            return obj
        if isinstance(obj, list):
            try:
                obj = np.array(obj)
            except Exception as exc:
                raise InvalidArgumentError(
                    f"Conversion from {obj} to tensor not supported."
                ) from exc
        if isinstance(obj, np.generic):
            obj = np.asarray(obj)
        if isinstance(obj, np.ndarray):
            return _from_numpy(obj)
        if hasattr(obj, "__dlpack__"):
            return Tensor.from_dlpack(obj)
        raise InvalidArgumentError(
            f"Input type {type(obj)} not supported. Must be one of [numpy.ndarray, "
            "numpy.generic, list] or the type must support __dlpack__"
        )

    def to_host(self) -> Tensor:
        return self

    def to_device(self, device: DeviceOrMemoryType) -> Tensor:
        """This tensor when ``device`` is host memory; any other device is refused (tritium
        has no GPU memory)."""
        memory_type, memory_type_id = parse_device_or_memory_type(device)
        if memory_type in (MemoryType.CPU, MemoryType.CPU_PINNED) and memory_type_id == 0:
            return self
        raise UnsupportedError(
            f"Conversion from {(self.memory_type, self.memory_type_id)} to "
            f"{(memory_type, memory_type_id)} not supported."
        )

    # -- tritium's side ------------------------------------------------------------------------
    def _values(self) -> np.ndarray:
        """The tensor as tritium's request path holds it: a numpy view (numeric) or an
        object array of bytes (BYTES)."""
        if self.data_type == DataType.BYTES:
            return self.to_bytes_array()
        return self._array(dlpack=False)

    @staticmethod
    def _from_values(data_type: _Wire, shape: Sequence[int], data: np.ndarray) -> Tensor:
        """A response output from tritium's tensor (no copy for numeric data)."""
        if data_type is _Wire.BYTES:
            raw = np.frombuffer(serialize_bytes(data), dtype=np.uint8)
        else:
            raw = np.ascontiguousarray(data)
        buffer = MemoryBuffer(_address(raw), MemoryType.CPU, 0, raw.nbytes, raw)
        return Tensor(FROM_WIRE[data_type], list(shape), buffer)


def _from_numpy(array: np.ndarray) -> Tensor:
    if array.dtype.kind in "OSU":
        raw = np.frombuffer(serialize_bytes(array), dtype=np.uint8)
        buffer = MemoryBuffer(_address(raw), MemoryType.CPU, 0, raw.nbytes, raw)
        return Tensor(DataType.BYTES, list(array.shape), buffer)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    data_type = _numeric_type(array.dtype)
    buffer = MemoryBuffer(_address(array), MemoryType.CPU, 0, array.nbytes, array)
    return Tensor(data_type, list(array.shape), buffer)


def _numeric_type(dtype: np.dtype) -> DataType:
    wire = _Wire.from_numpy(dtype)
    if wire is None or wire is _Wire.BYTES:
        raise InvalidArgumentError(
            f"Unsupported Numpy data type. Can't convert {dtype.type} to Triton server data type"
        )
    return FROM_WIRE[wire]


def _host_array(obj: Any) -> np.ndarray:
    """A numpy view of a DLPack object in host memory (its base holds ``obj``)."""
    try:
        device = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else 1
    except Exception:  # noqa: BLE001 - the object's own failure: try the import itself
        device = 1
    if int(device) not in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost):
        raise UnsupportedError(
            f"DLPack device {device!r} not supported: tritium's tensors are in host memory"
        )
    try:
        return np.from_dlpack(obj)
    except (BufferError, TypeError, RuntimeError) as exc:
        raise InvalidArgumentError(f"DLPack import failed: {exc}") from None


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _buffer(array: np.ndarray) -> MemoryBuffer:
    return MemoryBuffer(_address(array), MemoryType.CPU, 0, array.nbytes, array)


def parse_device_or_memory_type(device: DeviceOrMemoryType) -> tuple[MemoryType, int]:
    """(memory type, id) of a device given as Triton accepts it: a string ("cpu", "gpu:1"),
    a MemoryType, or a (MemoryType | DLDeviceType, id) pair."""
    if isinstance(device, tuple):
        kind, number = device
        if isinstance(kind, MemoryType):
            return kind, int(number)
        if isinstance(kind, DLDeviceType):
            found = {DLDeviceType.kDLCPU: MemoryType.CPU, DLDeviceType.kDLCUDA: MemoryType.GPU}
            if kind not in found:
                raise InvalidArgumentError(f"Unsupported DLPack device type {kind!r}")
            return found[kind], int(number)
        raise InvalidArgumentError(f"Invalid memory type {device}")
    if isinstance(device, MemoryType):
        return device, 0
    if isinstance(device, str):
        name, _, index = device.partition(":")
        memory_type = _MEMORY_NAMES.get(name.upper())
        if memory_type is None:
            raise InvalidArgumentError(
                f"Unsupported Memory Type String. Can't convert {name} to Triton server memory type"
            )
        try:
            return memory_type, int(index) if index else 0
        except ValueError:
            raise InvalidArgumentError(f"Invalid memory type string {device}") from None
    raise InvalidArgumentError(f"Invalid memory type {device}")
