"""One FP32 identity Python model (INPUT0 -> OUTPUT0, dims [-1]) as model.py source and a
load-request config, for tests that deliver a model through the model-control API."""

from __future__ import annotations

from typing import Any

IDENTITY_FP32_PY = b"""\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
"""
IDENTITY_FP32_CONFIG: dict[str, Any] = {
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}
