"""tritium's ``c_python_backend_utils``: the module Triton's stub builds in C++ (pybind11)
and ``triton_python_backend_utils`` draws its classes from. The stub installs it as
``sys.modules["c_python_backend_utils"]``, so a model that imports it (as Triton's QA
models do) finds the same classes as in ``pb_utils`` and ``shared_memory``.

``shared_memory.free_memory()`` is Triton's test hook on the stub's shared-memory pool (the
bytes still free in it). tritium's stubs have no pool: a large tensor gets a segment of its
own under ``/dev/shm`` (``shm_tensors``), so the bytes free there are what a stub can still
hand out; 0 where there is no ``/dev/shm``. Standalone: standard library only, plus
``pb_utils``.
"""

from __future__ import annotations

import os

from .pb_metrics import Metric as Metric
from .pb_metrics import MetricFamily as MetricFamily
from .pb_utils import InferenceRequest as InferenceRequest
from .pb_utils import InferenceResponse as InferenceResponse
from .pb_utils import InferenceResponseSender as InferenceResponseSender
from .pb_utils import InferenceTrace as InferenceTrace
from .pb_utils import Logger as Logger
from .pb_utils import LogLevel as LogLevel
from .pb_utils import PreferredMemory as PreferredMemory
from .pb_utils import Tensor as Tensor
from .pb_utils import TritonError as TritonError
from .pb_utils import TritonModelException as TritonModelException
from .pb_utils import is_model_ready as is_model_ready
from .pb_utils import load_model as load_model
from .pb_utils import unload_model as unload_model

SHM_ROOT = "/dev/shm"


class SharedMemory:
    """Triton's ``c_python_backend_utils.SharedMemory`` (internal testing API)."""

    def __init__(self, root: str = SHM_ROOT) -> None:
        self._root = root

    def free_memory(self) -> int:
        """Bytes free for shared-memory segments (those an unprivileged process may use)."""
        try:
            stats = os.statvfs(self._root)
        except OSError:
            return 0
        return stats.f_bavail * stats.f_frsize


shared_memory = SharedMemory()
