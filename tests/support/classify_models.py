"""Classification-extension test models, registered in tests/support/models.py
(``build_test_repository``).

classify_batched   python, ``max_batch_size: 8``: INPUT0 FP32 [5] -> OUTPUT0 FP32 [5] (INPUT0
                   unchanged, ``label_filename: "labels.txt"``) and OUTPUT1 INT32 [5] (INPUT0
                   cast to int32, no labels). The labels file holds ``CLASSIFY_LABELS``: four
                   lines for five classes, the third one empty, so class 2 and class 4 have no
                   label (Triton then leaves out the ``:label`` part).
"""

from __future__ import annotations

from collections.abc import Callable

CLASSIFY_LABELS = ("cat", "dog", "", "bird")

_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 5 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 5 ] label_filename: "labels.txt" }},
  {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 5 ] }}
]
"""

_BATCHED_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0; OUTPUT1 = INPUT0 as int32."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("OUTPUT1", x.astype(np.int32))]
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses
'''


def _batched(name: str) -> dict[str, str]:
    return {
        "config.pbtxt": _CONFIG.format(name=name),
        "labels.txt": "\n".join(CLASSIFY_LABELS) + "\n",
        "1/model.py": _BATCHED_PY,
    }


CLASSIFY_SPECS: dict[str, Callable[[str], dict[str, str]]] = {"classify_batched": _batched}
