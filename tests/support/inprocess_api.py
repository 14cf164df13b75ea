"""The repository the in-process API's tests serve (tests/integration/test_inprocess_api.py,
test_inprocess_doors.py): ``simple`` (the examples' ONNX add/sub), ``add_sub_python`` (the
examples' Python add/sub), ``square_int32`` (the examples' decoupled Python model: IN=n sends
n responses), ``text_echo`` (BYTES), ``parameters_echo``, ``error_response`` (an INTERNAL error
response), ``identity_bf16`` and ``identity_fp16``, and ``cancellable``: a decoupled
Python model that sends a response every 20 ms until it is cancelled (then a CANCELLED error)
or 10 s have passed."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.inprocess import write_repository
from tests.support.models import build_test_repository

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"

CANCELLABLE_CONFIG = """\
name: "cancellable"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

CANCELLABLE_PY = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for count in range(500):
                if request.is_cancelled():
                    error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                    sender.send(
                        pb_utils.InferenceResponse(error=error),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                    )
                    break
                out = pb_utils.Tensor("OUT", np.array([count], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
                time.sleep(0.02)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def api_repository(root: Path) -> Path:
    """The repository above, written under ``root``."""
    write_repository(root)  # simple, split
    for name in ("add_sub_python", "square_int32"):
        shutil.copytree(EXAMPLES / name, root / name)
    build_test_repository(
        root, ["text_echo", "parameters_echo", "error_response", "identity_bf16", "identity_fp16"]
    )
    (root / "cancellable" / "1").mkdir(parents=True)
    (root / "cancellable" / "config.pbtxt").write_text(CANCELLABLE_CONFIG)
    (root / "cancellable" / "1" / "model.py").write_text(CANCELLABLE_PY)
    return root
