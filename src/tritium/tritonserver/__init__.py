"""Triton's in-process Python API (the ``tritonserver`` package of Triton core,
``python/tritonserver``) over tritium: ``Server(model_repository=...).start()``,
``server.model(name).infer(inputs={...})`` / ``async_infer``, ``Tensor`` with DLPack, the
error classes. The server runs on an event loop of its own thread; see docs/inprocess.md.

``import tritium.compat; tritium.compat.install()`` makes ``import tritonserver`` find this
package when the real one is not installed."""

from ._enums import (
    DataType,
    DLDeviceType,
    InstanceGroupKind,
    LogFormat,
    LogLevel,
    MemoryType,
    MetricFormat,
    MetricKind,
    ModelBatchFlag,
    ModelControlMode,
    ModelTxnPropertyFlag,
    RateLimitMode,
)
from ._metrics import Metric, MetricFamily
from ._errors import (
    AlreadyExistsError,
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from ._model import Model
from ._options import ModelLoadDeviceLimit, Options, RateLimiterResource
from ._request import InferenceRequest
from ._response import AsyncResponseIterator, InferenceResponse, ResponseIterator
from ._server import ModelDictionary, Server
from ._tensor import MemoryBuffer, Tensor

# Triton's __init__ imports its classes from tritonserver._api.*, which binds ``_api`` (and
# ``_api._response``, ...) on the package: code written for Triton names
# ``tritonserver._api._response.InferenceResponse`` after a plain ``import tritonserver``.
from . import _api as _api  # after the classes its modules re-export

__all__ = [
    "AlreadyExistsError",
    "AsyncResponseIterator",
    "CancelledError",
    "DLDeviceType",
    "DataType",
    "InferenceRequest",
    "InferenceResponse",
    "InstanceGroupKind",
    "InternalError",
    "InvalidArgumentError",
    "LogFormat",
    "LogLevel",
    "MemoryBuffer",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricFormat",
    "MetricKind",
    "Model",
    "ModelBatchFlag",
    "ModelControlMode",
    "ModelDictionary",
    "ModelLoadDeviceLimit",
    "ModelTxnPropertyFlag",
    "NotFoundError",
    "Options",
    "RateLimitMode",
    "RateLimiterResource",
    "ResponseIterator",
    "Server",
    "Tensor",
    "TritonError",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
]
from .. import TRITON_VERSION

__version__ = TRITON_VERSION  # the Triton release tritium answers as
