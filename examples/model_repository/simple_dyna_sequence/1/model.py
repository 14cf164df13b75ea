"""simple_dyna_sequence: Triton's oldest-strategy example sequence model as a Python model.

Triton ships it as an ONNX graph (server repository,
docs/examples/model_repository/simple_dyna_sequence/1/model.onnx):

    OUTPUT = READY * (INPUT + START + END * int32(CORRID))

so the first request of a sequence answers INPUT + 1, the last one INPUT + its correlation ID
(truncated to 32 bits, as the graph's Cast UINT64 -> INT32), and the others their INPUT; the
official client examples with ``-d`` expect exactly that. START, END, READY (INT32) and CORRID
(UINT64) are control inputs the sequence batcher adds (config.pbtxt
``sequence_batching.control_input``), [1] per request.

Oldest strategy: a batch holds the next request of several sequences, at most one each, in no
particular slot order; there are no fillers. Each execution first sleeps the config's
``execute_delay_ms`` parameter (3 ms, as Triton's config says), which lets batches form.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _control(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        delay = config.get("parameters", {}).get("execute_delay_ms", {})
        self.delay_s = int(delay.get("string_value", "0")) / 1000.0

    def execute(self, requests):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            value, start = _control(request, "INPUT"), _control(request, "START")
            end, ready = _control(request, "END"), _control(request, "READY")
            corrid = _control(request, "CORRID").astype(np.int32)  # wraps, as Cast does
            total = value + start + end * corrid  # all INT32: wrap-around arithmetic
            output = (ready * total).astype(np.int32)
            out = pb_utils.Tensor("OUTPUT", output)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
