"""image_classifier_bls: the `image_classifier` ensemble's pipeline as ONE Python model (BLS).

IMAGE TYPE_STRING [1] -> LABELS TYPE_STRING [3], the ensemble's contract, so the same client
requests work on both. execute() calls the ensemble's three composing models itself with
Business Logic Scripting: `preprocess` (Python) -> `classifier` (ONNX, dynamic batching) ->
`postprocess` (Python), each step's output tensor passed as the next step's input (the names
match: PIXELS, PROBABILITIES). The requests of a batch (dynamic batching, no delay) run their
pipelines at the same time with `async_exec`, so their `classifier` calls can be batched as
the ensemble's are. A failing step answers that request with the step's own error.
"""

import asyncio

import triton_python_backend_utils as pb_utils

# (model, output): each step's output is the next step's input of the same name
STEPS = (("preprocess", "PIXELS"), ("classifier", "PROBABILITIES"), ("postprocess", "LABELS"))


async def classify(image):
    """One request's IMAGE tensor through the three models -> its response."""
    tensor = image
    for model, output in STEPS:
        response = await pb_utils.InferenceRequest(
            model_name=model, inputs=[tensor], requested_output_names=[output]
        ).async_exec()
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        tensor = pb_utils.get_output_tensor_by_name(response, output)
    return pb_utils.InferenceResponse(output_tensors=[tensor])


class TritonPythonModel:
    async def execute(self, requests):
        images = [pb_utils.get_input_tensor_by_name(r, "IMAGE") for r in requests]
        return list(await asyncio.gather(*(classify(image) for image in images)))
