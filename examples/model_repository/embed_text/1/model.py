"""embed_text: a 32-dimensional text embedding from hashed words, for /v1/embeddings.

Each lower-cased word (a run of letters and digits) adds +1 or -1 (from its BLAKE2b digest)
to one of 32 coordinates (from the same digest); the vector is scaled to length 1 (all zeros
for a text without words). ``dimensions`` (optional, 1..32) keeps the first N coordinates and
scales them to length 1 again, as Matryoshka embeddings are shortened. ``num_input_tokens`` is
the number of words. Texts that share words point the same way: enough to test retrieval code
without a download.
"""

import hashlib
import re

import numpy as np
import triton_python_backend_utils as pb_utils

SIZE = 32
_WORD = re.compile(r"[0-9a-z]+")


def embed(text, dimensions=SIZE):
    vector = np.zeros(SIZE, dtype=np.float32)
    words = _WORD.findall(text.lower())
    for word in words:
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[digest[0] % SIZE] += 1.0 if digest[1] & 1 else -1.0
    vector = vector[:dimensions]
    norm = float(np.linalg.norm(vector))
    return (vector / norm if norm else vector), len(words)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            size = pb_utils.get_input_tensor_by_name(request, "dimensions")
            dimensions = SIZE if size is None else int(size.as_numpy().reshape(-1)[0])
            if not 1 <= dimensions <= SIZE:
                error = pb_utils.TritonError(
                    f"dimensions must be between 1 and {SIZE}, got {dimensions}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            vector, words = embed(text.reshape(-1)[0].decode("utf-8", "replace"), dimensions)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", vector),
                        pb_utils.Tensor("num_input_tokens", np.array([words], dtype=np.int32)),
                    ]
                )
            )
        return responses
