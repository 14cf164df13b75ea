"""select_candidates: keep the best-scored candidates (the middle step of `cascade`).

CANDIDATES TYPE_FP32 [-1, 16] and SCORES TYPE_FP32 [-1] (one score per row) ->
SELECTED TYPE_FP32 [-1, 16] and INDICES TYPE_INT64 [-1]: the rows whose score is above the
THRESHOLD parameter, by descending score (ties: lower index first), at most MAX_KEEP of them;
INDICES are their row numbers in CANDIDATES. Zero rows may come out (nothing above the
threshold). max_batch_size 0: one candidate list per request.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.threshold = float(parameters["THRESHOLD"]["string_value"])
        self.max_keep = int(parameters["MAX_KEEP"]["string_value"])
        if self.max_keep < 0:
            raise ValueError(f"MAX_KEEP must be >= 0, got {self.max_keep}")

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        candidates = pb_utils.get_input_tensor_by_name(request, "CANDIDATES").as_numpy()
        scores = pb_utils.get_input_tensor_by_name(request, "SCORES").as_numpy()
        if scores.shape != candidates.shape[:1]:
            message = (
                f"select_candidates: SCORES has shape {list(scores.shape)}, one score per "
                f"CANDIDATES row ({candidates.shape[0]}) expected"
            )
            error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
            return pb_utils.InferenceResponse(error=error)
        above = np.flatnonzero(scores > self.threshold)
        order = above[np.argsort(-scores[above], kind="stable")][: self.max_keep]
        selected = pb_utils.Tensor("SELECTED", candidates[order].astype(np.float32))
        indices = pb_utils.Tensor("INDICES", order.astype(np.int64))
        return pb_utils.InferenceResponse(output_tensors=[selected, indices])
