"""tritium's implementation of Triton's ``triton_python_backend_utils`` module.

The Python-backend stub installs this module as
``sys.modules["triton_python_backend_utils"]`` before importing an unmodified
Triton ``model.py``, so names, signatures, behaviour and error messages follow
triton-inference-server/python_backend (``triton_python_backend_utils.py`` plus
the pybind11 ``c_python_backend_utils`` classes). Standalone: numpy only
(``ml_dtypes`` optional, for BF16); it must not import anything from tritium.
It is longer than our modules usually are on purpose: Triton ships this API as one module,
and models import it as one.

Private hooks for the stub (not part of Triton's API):

* ``InferenceRequest._attach(sender, is_cancelled=None)``: attach the response
  sender and the cancellation probe to a request the stub built.
* ``InferenceRequest._release_flags()``: what the model passed to ``set_release_flags``.
* ``InferenceResponseSender(send, is_cancelled=None, decoupled=True)``: ``send`` is
  called as ``send(response_or_None, flags)``; ``_is_closed()``, ``_responses_sent()``.
* ``Tensor._create(name, array, triton_dtype)``: tensor with an explicit dtype (BF16
  held as ``uint16`` when ml_dtypes is missing); ``Tensor._as_array()``: stored array.
* ``_set_log_sink(fn)``: ``fn(level_name, message, "file.py:line")`` receives ``Logger``
  output with the model's call site.
* ``MetricFamily`` / ``Metric`` come from ``pb_metrics`` (its ``_set_backend`` hook: where the
  values live; in a stub, the server's registry, shown on ``/metrics``).
* ``_set_bls(client)``: the stub's BLS client (``bls_client.BlsClient``) behind
  ``InferenceRequest.exec/async_exec``, ``load_model``, ``unload_model``, ``is_model_ready``.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

# Re-exported: Triton's names. MetricFamily and Metric live in pb_metrics (values in the
# server's registry, see there), the error types in pb_errors (which pb_metrics raises too).
from . import pb_dlpack
from .pb_errors import TritonError as TritonError
from .pb_errors import TritonModelException as TritonModelException
from .pb_metrics import Metric as Metric
from .pb_metrics import MetricFamily as MetricFamily

try:  # numpy has no native bfloat16
    import ml_dtypes as _ml_dtypes

    _BF16: np.dtype[Any] | None = np.dtype(_ml_dtypes.bfloat16)
except Exception:  # pragma: no cover - depends on the environment
    _BF16 = None

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_GPU = 0  # PreferredMemory kinds (BLS)
TRITONSERVER_MEMORY_CPU = 1

# TRITONSERVER_DataType codes.
TYPE_INVALID, TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64 = 0, 1, 2, 3, 4, 5
TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64 = 6, 7, 8, 9
TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_STRING, TYPE_BF16 = 10, 11, 12, 13, 14
TYPE_BYTES = TYPE_STRING

_CODE_TO_NUMPY: dict[int, type[np.generic]] = {
    TYPE_BOOL: np.bool_,
    TYPE_UINT8: np.uint8,
    TYPE_UINT16: np.uint16,
    TYPE_UINT32: np.uint32,
    TYPE_UINT64: np.uint64,
    TYPE_INT8: np.int8,
    TYPE_INT16: np.int16,
    TYPE_INT32: np.int32,
    TYPE_INT64: np.int64,
    TYPE_FP16: np.float16,
    TYPE_FP32: np.float32,
    TYPE_FP64: np.float64,
    TYPE_STRING: np.object_,
}
_NUMPY_TO_CODE = {np.dtype(t): c for c, t in _CODE_TO_NUMPY.items()}

TRITON_STRING_TO_NUMPY: dict[str, type[Any]] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
if _BF16 is not None:
    TRITON_STRING_TO_NUMPY["TYPE_BF16"] = _BF16.type


# ------------------------------------------------------------------------------ dtypes


def _require_bf16() -> type[Any]:
    if _BF16 is None:
        raise TritonModelException("TYPE_BF16 requires the 'ml_dtypes' package.")
    return _BF16.type


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    """TRITONSERVER_DataType code -> numpy type (None when unknown, as Triton)."""
    if data_type == TYPE_BF16:
        return _require_bf16()
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy type or dtype -> TRITONSERVER_DataType code (None when unsupported)."""
    code = _NUMPY_TO_CODE.get(data_type) if isinstance(data_type, np.dtype) else None
    if code is not None:  # the common case: an array's dtype (Tensor(name, array))
        return code
    try:
        dt = np.dtype(data_type)
    except TypeError:
        return None
    if dt.type is np.bytes_:
        return TYPE_STRING
    if _BF16 is not None and dt == _BF16:
        return TYPE_BF16
    return _NUMPY_TO_CODE.get(dt)


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    if triton_type_string == "TYPE_BF16":
        return _require_bf16()
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | None:
    """Flatten an object/bytes_ array (C order) into elements each prefixed with
    its 4-byte little-endian length. Returns ``bytes`` as Triton does (``b""``
    for an empty tensor, None for other dtypes); non-bytes objects are stored
    as ``str(obj)`` encoded in UTF-8."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts = []
    for obj in input_tensor.ravel(order="C"):
        s = bytes(obj) if isinstance(obj, (bytes, bytearray)) else str(obj).encode("utf-8")
        parts.append(struct.pack("<I", len(s)))
        parts.append(s)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: Any) -> npt.NDArray[np.object_]:
    """Inverse of ``serialize_byte_tensor``: a 1-D ``np.object_`` array of bytes."""
    buf = memoryview(encoded_tensor).cast("B")
    items: list[bytes] = []
    offset, total = 0, len(buf)
    while offset < total:
        if offset + 4 > total:
            raise TritonModelException("Malformed BYTES tensor: truncated element length.")
        (length,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        if offset + length > total:
            raise TritonModelException("Malformed BYTES tensor: element exceeds the buffer.")
        items.append(bytes(buf[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


# ------------------------------------------------------------------------------ Tensor


def _check_tensor_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError("Tensor name must be a str")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")


class Tensor:
    """``Tensor(name, numpy_array)``: a named tensor, always in CPU memory.

    BYTES tensors hold ``np.object_`` (or ``np.bytes_``) arrays; ``str`` arrays
    are rejected as in Triton. BF16 tensors hold ``ml_dtypes.bfloat16`` arrays
    (Triton cannot show BF16 through numpy; tritium can when ml_dtypes exists)."""

    _name: str
    _array: npt.NDArray[Any]
    _dtype: int

    def __init__(self, name: str, numpy_array: Any) -> None:
        # Triton's binding takes (str, numpy.ndarray): anything else is a TypeError, checked
        # before the name's value.
        if not isinstance(name, str) or not isinstance(numpy_array, np.ndarray):
            raise TypeError("Tensor() arguments must be (name: str, numpy_array: numpy.ndarray)")
        _check_tensor_name(name)
        dtype = numpy_to_triton_type(numpy_array.dtype)
        if dtype is None:
            raise TritonModelException("NumPy dtype is not supported.")
        if not numpy_array.flags["C_CONTIGUOUS"]:
            numpy_array = np.ascontiguousarray(numpy_array)
        self._name, self._array, self._dtype = name, numpy_array, dtype

    @classmethod
    def _wrap(cls, name: str, array: npt.NDArray[Any], triton_dtype: int) -> Tensor:
        """Stub hook: wrap a contiguous array received from the server, unchecked."""
        self = cls.__new__(cls)
        self._name, self._array, self._dtype = name, array, triton_dtype
        return self

    @classmethod
    def _create(cls, name: str, array: Any, triton_dtype: int) -> Tensor:
        """Stub hook: a tensor with an explicit Triton dtype code."""
        _check_tensor_name(name)
        self = cls.__new__(cls)
        self._name, self._array, self._dtype = name, np.ascontiguousarray(array), triton_dtype
        return self

    def _as_array(self) -> npt.NDArray[Any]:
        """Stub hook: the stored array, whatever the dtype."""
        return self._array

    def name(self) -> str:
        return self._name

    def triton_dtype(self) -> int:
        return self._dtype

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def is_cpu(self) -> bool:
        return True

    def as_numpy(self) -> npt.NDArray[Any]:
        if self._dtype == TYPE_BF16 and (_BF16 is None or self._array.dtype != _BF16):
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. "
                "Use to_dlpack() and from_dlpack() instead."
            )
        return self._array

    def to_dlpack(self) -> Any:
        return self.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._dtype == TYPE_STRING:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._dtype == TYPE_BF16:  # numpy cannot export it: the capsule is written here
            return pb_dlpack.export_bf16(self._array.view(np.uint16))
        # numpy refuses to export read-only arrays (e.g. views of request buffers).
        array = self._array if self._array.flags.writeable else self._array.copy()
        return array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # (kDLCPU, device 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """Tensor from a DLPack capsule or an object with ``__dlpack__``/``__dlpack_device__``."""
        _check_tensor_name(name)
        if type(tensor).__name__ == "PyCapsule":
            tensor = _Capsule(tensor)
        elif not hasattr(tensor, "__dlpack__") or not hasattr(tensor, "__dlpack_device__"):
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        device_type = tensor.__dlpack_device__()[0]
        if device_type == 2:
            raise TritonModelException(
                "DLPack capsule passed pointer to memory allocated on GPU "
                "device, when GPU is not available"
            )
        if device_type not in (1, 3):
            raise TritonModelException(
                f"DLDevice type {device_type} is not support by Python backend."
            )
        try:
            array = np.from_dlpack(tensor)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            bf16 = _bf16_from_dlpack(tensor)  # a dtype numpy does not know: BF16?
            if bf16 is None:
                raise TritonModelException(f"Failed to convert the DLPack tensor: {e}") from None
            return Tensor._create(name, bf16 if _BF16 is None else bf16.view(_BF16), TYPE_BF16)
        if not _inner_dims_c_contiguous(array):
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack "
                "tensors that are stored in C-Order are supported."
            )
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, triton_dtype={self._dtype}, shape={self.shape()})"


def _bf16_from_dlpack(tensor: Any) -> npt.NDArray[Any] | None:
    """A BF16 DLPack tensor's elements (uint16, copied), or None for another dtype."""
    try:
        capsule = tensor.__dlpack__()
    except (BufferError, TypeError, ValueError, RuntimeError):
        return None
    return pb_dlpack.import_bf16(capsule)


def _inner_dims_c_contiguous(array: npt.NDArray[Any]) -> bool:
    """Triton's check of a DLPack tensor's strides: every dimension but the outermost one
    (and those of size 1) must have its C-order stride. An outermost stride that is not (rows
    taken with a step) Triton does not check; tritium copies such a tensor, read right."""
    expected = 1
    for dim, stride in reversed(list(zip(array.shape[1:], array.strides[1:], strict=True))):
        if dim != 1:
            if stride != expected * array.itemsize:
                return False
            expected *= dim
    return True


class _Capsule:
    """Lets ``np.from_dlpack`` consume a bare (legacy, CPU) DLPack capsule."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


# ------------------------------------------------------------------------------ responses


def _parameters_to_json(parameters: object) -> str:
    """Triton's PyParametersToJSON: None or a dict of str -> bool/int/str."""
    if parameters is None or (type(parameters) is dict and not parameters):
        return "{}"  # the common case, without json (every response of most models)
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


class InferenceResponse:
    """``InferenceResponse(output_tensors=[], error=None, parameters=None)``;
    ``parameters()`` returns the parameters as a JSON string."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor | None] = (),
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        if not isinstance(output_tensors, (list, tuple)) or not all(
            t is None or isinstance(t, Tensor) for t in output_tensors
        ):
            raise TypeError("output_tensors must be a list of pb_utils.Tensor")
        if any(t is None for t in output_tensors):
            raise TritonModelException("Output tensor for inference response should not be empty.")
        if error is not None and not isinstance(error, TritonError):
            raise TypeError("error must be a pb_utils.TritonError or None")
        self._parameters = _parameters_to_json(parameters)
        self._output_tensors = [t for t in output_tensors if t is not None]
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return list(self._output_tensors)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class InferenceResponseSender:
    """Sends the responses of one request. ``send_callable(response_or_None,
    flags)`` delivers them; ``is_cancelled_callable()`` reports cancellation.
    ``decoupled=False`` applies Triton's one-response rules for models that
    are not decoupled."""

    def __init__(
        self,
        send_callable: Callable[[InferenceResponse | None, int], None] | None = None,
        is_cancelled_callable: Callable[[], object] | None = None,
        decoupled: bool = True,
    ) -> None:
        self._send, self._is_cancelled = send_callable, is_cancelled_callable
        self._decoupled, self._closed, self._sent = decoupled, False, 0
        self._lock = threading.Lock()  # decoupled models often send from their own threads

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError("response must be a pb_utils.InferenceResponse or None")
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not final and flags != 0:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if self._send is None:
            raise TritonModelException(
                "Unable to send response. Response sender has no "
                "reference to the decoupled state of the model."
            )
        with self._lock:
            if not self._decoupled and response is not None and self._sent > 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model "
                    "cannot send more than one response."
                )
            if not self._decoupled and response is None and final and self._sent == 0:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model "
                    "cannot send complete final before sending a "
                    "response."
                )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._closed = self._closed or final
            self._sent += 1
        self._send(response, flags)

    def is_cancelled(self) -> bool:
        return bool(self._is_cancelled()) if self._is_cancelled is not None else False

    def _is_closed(self) -> bool:
        return self._closed

    def _responses_sent(self) -> int:
        return self._sent


# ------------------------------------------------------------------------------ requests


class PreferredMemory:
    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    def __init__(self, context: str | None = None) -> None:
        self._context = context

    def get_context(self) -> str | None:
        return self._context or None


_DEFAULT_MEMORY = PreferredMemory(2, 0)  # kDefault
_NO_TRACE = InferenceTrace()


def _as_std_string(value: object) -> str | None:
    """A ``std::string`` argument as Triton's pybind11 binding takes it: ``str``, or ``bytes``
    (UTF-8; a model's BYTES input read with ``as_numpy()[0]`` is bytes); None for any other
    type."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None


def _refuse_none_arguments(**arguments: object) -> None:
    """Triton binds every InferenceRequest argument but ``parameters`` with ``none(false)``:
    None (given, or a required one left out) is a TypeError."""
    for name, value in arguments.items():
        if value is None:
            raise TypeError(f"InferenceRequest(): argument '{name}' is required, not None")


class InferenceRequest:
    """An inference request, built by the stub for ``execute`` or by a model for
    BLS (``exec``/``async_exec``, run by the stub's ``bls_client``).

    ``parameters`` is None or a dict validated as in Triton (str keys,
    bool/int/str values), or, as a tritium extension for the stub, a JSON
    object string kept as-is (server-side parameters may hold doubles)."""

    _sender: InferenceResponseSender | None
    _cancelled: Callable[[], object] | None
    _sender_factory: Callable[[], InferenceResponseSender] | None
    _parameters: str

    def __init__(
        self,
        request_id: str | bytes = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Sequence[str | bytes] | None = None,
        model_name: str | bytes | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory = _DEFAULT_MEMORY,
        trace: InferenceTrace = _NO_TRACE,
        parameters: dict[str, bool | int | str] | str | bytes | None = None,
    ) -> None:
        _refuse_none_arguments(
            request_id=request_id,
            correlation_id=correlation_id,
            inputs=inputs,
            requested_output_names=requested_output_names,
            model_name=model_name,
            model_version=model_version,
            flags=flags,
            timeout=timeout,
            preferred_memory=preferred_memory,
            trace=trace,
        )
        assert inputs is not None and requested_output_names is not None
        given_id, given_name = _as_std_string(request_id), _as_std_string(model_name)
        if given_id is None or given_name is None:
            raise TypeError("request_id and model_name must be str")
        request_id, model_name = given_id, given_name
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        for arg, number in (
            ("model_version", model_version),
            ("flags", flags),
            ("timeout", timeout),
        ):
            if isinstance(number, bool) or not isinstance(number, int):
                raise TypeError(f"{arg} must be an int")
        where = f"for request with id '{request_id}' and model name '{model_name}'"
        tensors = list(inputs)
        for tensor in tensors:
            if tensor is None:
                raise TritonModelException(f"Input tensor {where} should not be empty.")
            if not isinstance(tensor, Tensor):
                raise TypeError("inputs must be a list of pb_utils.Tensor")
        if isinstance(requested_output_names, (str, bytes)):
            raise TypeError("requested_output_names must be a list of str")
        names = [_as_std_string(name) for name in requested_output_names]
        if None in names:
            raise TypeError("requested_output_names must be a list of str")
        wanted = [name for name in names if name is not None]
        if "" in wanted:
            raise TritonModelException(f"Requested output name {where} should not be empty.")
        if isinstance(parameters, (str, bytes)):
            parameters = parameters.decode() if isinstance(parameters, bytes) else parameters
            try:
                parsed = json.loads(parameters or "{}")
            except ValueError as e:
                raise TritonModelException(f"Failed to parse request parameters: {e}") from None
            if not isinstance(parsed, dict):
                raise TritonModelException(f"Expect dict, got {type(parsed)}")
            self._parameters = parameters or "{}"
        else:
            self._parameters = _parameters_to_json(parameters)
        self._request_id, self._correlation_id, self._inputs = request_id, correlation_id, tensors
        self._requested_output_names = list(dict.fromkeys(wanted))
        self._model_name, self._model_version = model_name, model_version
        self._flags, self._timeout = flags, timeout
        self._preferred_memory = preferred_memory
        self._trace = trace
        self._release = TRITONSERVER_REQUEST_RELEASE_ALL
        self._sender, self._cancelled = InferenceResponseSender(), None
        self._sender_factory = None

    @classmethod
    def _from_server(
        cls,
        request_id: str,
        correlation_id: int | str,
        flags: int,
        inputs: list[Tensor],
        requested_output_names: list[str],
        parameters: str,
        model_name: str,
        model_version: int,
        sender_factory: Callable[[], InferenceResponseSender],
    ) -> InferenceRequest:
        """Stub hook: a request decoded from the server, already validated there, so none of
        the constructor's checks run; the response sender is made on first use."""
        self = cls.__new__(cls)
        self._request_id, self._correlation_id, self._inputs = request_id, correlation_id, inputs
        self._requested_output_names = requested_output_names
        self._model_name, self._model_version = model_name, model_version
        self._flags, self._timeout, self._parameters = flags, 0, parameters
        self._preferred_memory, self._trace = PreferredMemory(2, 0), InferenceTrace()
        self._release = TRITONSERVER_REQUEST_RELEASE_ALL
        self._sender, self._cancelled, self._sender_factory = None, None, sender_factory
        return self

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            assert self._sender_factory is not None  # a request has a sender or its factory
            self._sender = self._sender_factory()
        return self._sender

    def _attach(
        self,
        sender: InferenceResponseSender | Callable[[InferenceResponse | None, int], None],
        is_cancelled: Callable[[], object] | None = None,
    ) -> None:
        """Stub hook. ``sender`` is an ``InferenceResponseSender`` (a bare
        ``send(response, flags)`` callable is wrapped into one); ``is_cancelled``
        is a zero-argument callable backing ``is_cancelled()``."""
        if not isinstance(sender, InferenceResponseSender):
            sender = InferenceResponseSender(sender, is_cancelled)
        self._sender, self._cancelled = sender, is_cancelled

    def _release_flags(self) -> int:
        """Stub hook: flags from set_release_flags()."""
        return self._release

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """Request parameters as a JSON string."""
        return self._parameters

    def trace(self) -> InferenceTrace:
        return self._trace

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def requested_output_names(self) -> set[str]:
        return set(self._requested_output_names)  # Triton returns a (pybind std::set) set

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def is_cancelled(self) -> bool:
        if self._cancelled is not None:
            return bool(self._cancelled())
        return self.get_response_sender().is_cancelled()

    def set_release_flags(self, flags: int) -> None:
        if isinstance(flags, bool) or not isinstance(flags, int):
            raise TypeError("flags must be an int")
        self._release = flags

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on the server (BLS); blocks until its response, or with
        ``decoupled=True`` returns an iterator over its responses. Errors come back as a
        response with ``has_error()``, as in Triton."""
        return _bls_client().exec(self, decoupled)

    def async_exec(self, decoupled: bool = False) -> Awaitable[Any]:
        """``exec`` as an awaitable, so many requests run at once (``asyncio.gather``)."""
        return _bls_client().async_exec(self, decoupled)  # type: ignore[no-any-return]


# BLS and model control go through the stub's client (backends/python/bls_client.py); it
# refuses ``exec`` outside the model's initialized lifetime, as Triton does.
_BLS: Any = None


def _set_bls(client: Any) -> None:
    """Stub hook: the BLS client (None: not running in a stub)."""
    global _BLS
    _BLS = client


def _bls_client() -> Any:
    if _BLS is None:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return _BLS


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model; the server must run in explicit model-control mode."""
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of file "
                "paths and file contents"
            )
        files = {str(k): bytes(v) for k, v in files.items()}
    try:
        _bls_client().control("load", [model_name, config or "", files or {}])
    except TritonModelException as exc:
        raise TritonModelException(f"Failed to load model: {exc}") from None


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model (and, if asked, the ensembles that use it); explicit mode only."""
    try:
        _bls_client().control("unload", [model_name, bool(unload_dependents)])
    except TritonModelException as exc:
        raise TritonModelException(f"Failed to unload model: {exc}") from None


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the model (the given version, or any) is ready."""
    try:
        return bool(_bls_client().control("ready", [model_name, str(model_version)]))
    except TritonModelException as exc:
        raise TritonModelException(f"Failed to check model readiness: {exc}") from None


# ------------------------------------------------------------------------------ lookups


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():  # a loop: cheaper than next(genexpr) per call
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((p for p in model_config.get("input", []) if p.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((p for p in model_config.get("output", []) if p.get("name") == name), None)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


# ------------------------------------------------------------------------------ auto-complete


class ModelConfig:
    """The configuration given to ``auto_complete_config``: a JSON string (as in
    Triton) or a dict (copied), using protobuf field names. Unset message
    fields (e.g. ``model_transaction_policy``) should be absent, as in Triton."""

    def __init__(self, model_config: str | bytes | dict[str, Any]) -> None:
        config: dict[str, Any]
        if isinstance(model_config, (str, bytes)):
            config = json.loads(model_config)
        else:
            config = json.loads(json.dumps(model_config))
        for key, default in (("name", ""), ("max_batch_size", 0), ("input", []), ("output", [])):
            config.setdefault(key, default)
        self._model_config = config

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        cfg = self._model_config
        if cfg["max_batch_size"] > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {cfg['max_batch_size']}, but in "
                f"auto-complete-config function for model '{cfg['name']}' specified "
                f"max_batch_size {max_batch_size}"
            )
        cfg["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        cfg = self._model_config
        for found in ("sequence_batching", "ensemble_scheduling"):
            if found in cfg:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{found}', but "
                    f"auto-complete-config function for model '{cfg['name']}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        cfg.setdefault("dynamic_batching", {})

    def _add_tensor(self, kind: str, tensor: dict[str, Any], valid: list[str]) -> None:
        cfg = self._model_config
        model = cfg["name"]
        where = f"in auto-complete-config function for model '{model}'"
        if any(prop not in valid for prop in tensor):
            allowed = ", ".join(f"'{p}'" for p in valid[:-1]) + f" and '{valid[-1]}'"
            raise ValueError(
                f"{kind} '{tensor.get('name')}' {where} contains property other than {allowed}."
            )
        if "name" not in tensor:
            raise ValueError(f"{kind} {where} is missing 'name' property.")
        name = tensor["name"]
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(f"{kind} '{name}' {where} is missing '{prop}' property.")
        for current in cfg[kind]:
            if current.get("name") != name:
                continue
            cur_type = current.get("data_type", "TYPE_INVALID")
            if cur_type != "TYPE_INVALID" and cur_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{cur_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            cur_dims = current.get("dims") or []
            if cur_dims and list(cur_dims) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims {cur_dims}"
                )
            if current.get("optional", tensor.get("optional")) != tensor.get(
                "optional", current.get("optional")
            ):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"], current["dims"] = tensor["data_type"], tensor["dims"]
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        cfg[kind].append(tensor)

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's parameter name
        """Add (or complete) an input: keys 'name', 'data_type', 'dims', 'optional'."""
        self._add_tensor("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output: dict[str, Any]) -> None:
        """Add (or complete) an output: keys 'name', 'data_type', 'dims'."""
        self._add_tensor("output", output, ["name", "data_type", "dims"])

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        cfg = self._model_config
        if any(prop != "decoupled" for prop in transaction_policy_dict):
            raise ValueError(
                "model transaction property in auto-complete-config function for model "
                f"'{cfg['name']}' contains property other than 'decoupled'."
            )
        policy = cfg.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            new = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != new:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{cfg['name']}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = new


# ------------------------------------------------------------------------------ logging


class LogLevel(IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


def _default_log_sink(level_name: str, message: str, where: str) -> None:
    """Outside a stub: Triton's format on stderr (``I0101 12:00:00.000000 pid file.py:42] m``)."""
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(now))
    usec = int((now % 1) * 1_000_000)
    char = "I" if level_name == "VERBOSE" else level_name[0]
    print(f"{char}{stamp}.{usec:06d} {os.getpid()} {where}] {message}", file=sys.stderr, flush=True)


_log_sink: Callable[[str, str, str], None] = _default_log_sink


def _set_log_sink(sink: Callable[[str, str, str], None] | None) -> None:
    """Stub hook: route Logger output to ``sink(level_name, message, "file.py:line")`` (the
    model's call site, as Triton's stub reports it); None resets."""
    global _log_sink
    _log_sink = sink if sink is not None else _default_log_sink


def _log(message: object, level: object, depth: int) -> None:
    # Triton's binding takes (str, LogLevel): a plain int is no LogLevel there.
    if not isinstance(message, str):
        raise TypeError(f"Logger: message must be a str, not {type(message).__name__}")
    if not isinstance(level, LogLevel):
        raise TypeError(f"Logger: level must be a pb_utils.LogLevel, not {type(level).__name__}")
    frame = sys._getframe(depth + 1)
    where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    _log_sink(LogLevel(level).name, str(message), where)


class Logger:
    """``pb_utils.Logger.log_info("msg")`` or ``Logger.log("msg", Logger.WARNING)``."""

    LogLevel = LogLevel
    INFO, WARNING, ERROR, VERBOSE = (
        LogLevel.INFO,
        LogLevel.WARNING,
        LogLevel.ERROR,
        LogLevel.VERBOSE,
    )

    @staticmethod
    def log(message: object, level: int = LogLevel.INFO) -> None:
        _log(message, level, 1)

    @staticmethod
    def log_info(message: object) -> None:
        _log(message, LogLevel.INFO, 1)

    @staticmethod
    def log_warn(message: object) -> None:
        _log(message, LogLevel.WARNING, 1)

    @staticmethod
    def log_error(message: object) -> None:
        _log(message, LogLevel.ERROR, 1)

    @staticmethod
    def log_verbose(message: object) -> None:
        _log(message, LogLevel.VERBOSE, 1)
