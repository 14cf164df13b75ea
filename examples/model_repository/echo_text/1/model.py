"""echo_text: text_output = "echo: " + text_input, one response per request (the plain
request format of the OpenAI API, docs/openai.md)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            answer = b"echo: " + text.reshape(-1)[0]
            out = pb_utils.Tensor("text_output", np.array([answer], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
