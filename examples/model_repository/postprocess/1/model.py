"""postprocess: class probabilities to top-3 labels (the last step of `image_classifier`).

PROBABILITIES TYPE_FP32 [10] -> LABELS TYPE_STRING [3]: per batch row the three most
probable classes, highest first (ties: lower index first), each in Triton's classification
format b"<probability %.6f>:<index>:<label>". The labels are the lines of labels.txt in
the model's folder (args["model_repository"]).
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        classes = int(pb_utils.get_input_config_by_name(config, "PROBABILITIES")["dims"][-1])
        self.top_k = int(pb_utils.get_output_config_by_name(config, "LABELS")["dims"][-1])
        path = os.path.join(args["model_repository"], "labels.txt")
        with open(path, encoding="utf-8") as f:
            self.labels = [line.strip() for line in f if line.strip()]
        if len(self.labels) != classes:
            raise ValueError(f"{path} has {len(self.labels)} labels, {classes} expected")

    def execute(self, requests):
        responses = []
        for request in requests:
            probs = pb_utils.get_input_tensor_by_name(request, "PROBABILITIES").as_numpy()
            rows = probs.reshape(-1, probs.shape[-1])
            best = np.argsort(-rows, axis=1, kind="stable")[:, : self.top_k]
            labels = np.array(
                [
                    [f"{row[i]:.6f}:{i}:{self.labels[i]}".encode() for i in top]
                    for row, top in zip(rows, best, strict=True)
                ],
                dtype=np.object_,
            ).reshape(*probs.shape[:-1], self.top_k)
            out = pb_utils.Tensor("LABELS", labels)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
