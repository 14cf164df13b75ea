"""preprocess: encoded images to normalized pixels (the first step of `image_classifier`).

IMAGE TYPE_STRING [1] (the bytes of a JPEG or PNG file) -> PIXELS TYPE_FP32 [3, 64, 64]:
decoded with Pillow, converted to RGB, resized to 64x64 (bilinear), scaled to [0, 1],
normalized with the ImageNet mean and standard deviation, and laid out channel-first.
max_batch_size 8: each request may carry several images. A request with an image that does
not decode is answered with an error; the other requests of the batch are still answered.
"""

import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

SIZE = 64
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def to_pixels(data):
    """The bytes of one JPEG or PNG image -> FP32 [3, SIZE, SIZE], normalized."""
    with Image.open(io.BytesIO(data), formats=("JPEG", "PNG")) as image:
        rgb = image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    pixels = np.asarray(rgb, dtype=np.float32) / np.float32(255.0)
    return ((pixels - MEAN) / STD).transpose(2, 0, 1).astype(np.float32)


def decode_error(index, data, exc):
    """The error message for IMAGE[index] that did not decode."""
    what = f"preprocess: IMAGE[{index}] ({len(data)} bytes)"
    if isinstance(exc, UnidentifiedImageError):
        return f"{what} is not a JPEG or PNG image"
    return f"{what} could not be decoded: {type(exc).__name__}: {exc}"


class TritonPythonModel:
    def execute(self, requests):
        # One response per request, in the same order.
        return [self._one(request) for request in requests]

    def _one(self, request):
        images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
        pixels = []
        for i, data in enumerate(images.reshape(-1)):
            try:
                pixels.append(to_pixels(bytes(data)))
            except Exception as exc:  # Pillow raises several kinds for bad or truncated data
                error = pb_utils.TritonError(
                    decode_error(i, data, exc), pb_utils.TritonError.INVALID_ARG
                )
                return pb_utils.InferenceResponse(error=error)
        batch = np.stack(pixels) if pixels else np.zeros((0, 3, SIZE, SIZE), np.float32)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("PIXELS", batch)])
