"""inception_preprocess: encoded images to Inception's input (the first step of
`preprocess_inception_ensemble`).

INPUT TYPE_STRING [1] (the bytes of a JPEG or PNG file) -> OUTPUT TYPE_FP32 [299, 299, 3]:
decoded with Pillow, converted to RGB, resized to 299x299 (bilinear) and scaled to [-1, 1]
(``x / 127.5 - 1``, the "INCEPTION" scaling of Triton's image clients), channel-last as
Inception's ``input`` wants it. This is what Triton's old ``image_preprocess`` custom backend
did for its ``preprocess_inception_ensemble`` example. max_batch_size 8: each request may carry
several images. A request with an image that does not decode is answered with an error; the
other requests of the batch are still answered.
"""

import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

SIZE = 299


def to_input(data):
    """The bytes of one JPEG or PNG image -> FP32 [SIZE, SIZE, 3] in [-1, 1]."""
    with Image.open(io.BytesIO(data), formats=("JPEG", "PNG")) as image:
        rgb = image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    return np.asarray(rgb, dtype=np.float32) / np.float32(127.5) - np.float32(1.0)


def decode_error(index, data, exc):
    """The error message for INPUT[index] that did not decode."""
    what = f"inception_preprocess: INPUT[{index}] ({len(data)} bytes)"
    if isinstance(exc, UnidentifiedImageError):
        return f"{what} is not a JPEG or PNG image"
    return f"{what} could not be decoded: {type(exc).__name__}: {exc}"


class TritonPythonModel:
    def execute(self, requests):
        # One response per request, in the same order.
        return [self._one(request) for request in requests]

    def _one(self, request):
        images = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        pixels = []
        for i, data in enumerate(images.reshape(-1)):
            try:
                pixels.append(to_input(bytes(data)))
            except Exception as exc:  # Pillow raises several kinds for bad or truncated data
                error = pb_utils.TritonError(
                    decode_error(i, data, exc), pb_utils.TritonError.INVALID_ARG
                )
                return pb_utils.InferenceResponse(error=error)
        batch = np.stack(pixels) if pixels else np.zeros((0, SIZE, SIZE, 3), np.float32)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", batch)])
