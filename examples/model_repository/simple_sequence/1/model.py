"""simple_sequence: Triton's example sequence model written as a Python-backend model.

Triton ships it as a four-node ONNX graph (server repository,
docs/examples/model_repository/simple_sequence/1/model.onnx):

    OUTPUT = READY * (INPUT + START)

so the first request of a sequence answers INPUT + 1 and every later one answers its INPUT;
the official client examples (simple_*_sequence_*_client.py) expect exactly that (1, 11, 7, ...
for the values 0, 11, 7, ...). START and READY are control inputs the sequence batcher adds
(config.pbtxt ``sequence_batching.control_input``), INT32 [1] per request.

Direct strategy: each request of ``requests`` is one batch slot; a slot whose sequence has no
request waiting gets a filler with READY = 0, whose answer (0 here, as in Triton's graph) the
server drops.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        output_config = pb_utils.get_output_config_by_name(config, "OUTPUT")
        self.output_dtype = pb_utils.triton_string_to_numpy(output_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            # The graph's Add then Mul, on INT32 (wrap-around) values.
            output = np.multiply(ready, np.add(value, start, dtype=np.int32), dtype=np.int32)
            out = pb_utils.Tensor("OUTPUT", output.astype(self.output_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
