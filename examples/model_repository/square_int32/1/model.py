"""square_int32: Triton's decoupled "square" example contract, answered from execute.

Input IN INT32 [1] holds N; the model sends N responses, each with OUT INT32 [1] = [N], then
closes the request with a flag-only COMPLETE_FINAL send. N = 0 sends only the final flag (a
client that asked for ``enable_empty_final_response`` sees one empty response). A negative N is
an INVALID_ARG error response.

Unlike Triton's python_backend examples/decoupled/square_model.py, which starts a thread per
request, this one sends everything from ``execute`` itself and returns None: the simplest
decoupled model there is.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise pb_utils.TritonModelException(
                f"the model `{args['model_name']}` can generate any number of responses per "
                "request, enable decoupled transaction policy in model configuration to "
                "serve this model"
            )

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            if n < 0:
                error = pb_utils.TritonError(
                    f"IN must be >= 0, got {n}", pb_utils.TritonError.INVALID_ARG
                )
                sender.send(pb_utils.InferenceResponse(error=error), flags=_FINAL)
                continue
            for _ in range(n):
                out = pb_utils.Tensor("OUT", np.array([n], np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=_FINAL)
        return None
