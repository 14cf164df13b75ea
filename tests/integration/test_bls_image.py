"""``image_classifier_bls`` (issue 14 item 11): the example image pipeline as ONE Python model
calling ``preprocess`` → ``classifier`` → ``postprocess`` with BLS answers exactly what the
``image_classifier`` ensemble answers, for the same requests, over HTTP and gRPC: one image,
a batch of images, many requests at once (the BLS model's dynamic batcher groups them and runs
their pipelines together), and a bad image (the preprocess step's error, as the ensemble's
names it)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from PIL import Image
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

ENSEMBLE, BLS = "image_classifier", "image_classifier_bls"


@pytest.fixture
def c(server: ServerProcess, protocol: str) -> Iterator[Any]:
    conn = client(protocol, server.url(protocol))
    yield conn
    conn.close()


def _images() -> list[bytes]:
    """Four different images: JPEG and PNG, RGB and grayscale, none of them 64×64."""
    rng = np.random.default_rng(14)
    images = []
    for k, (shape, fmt) in enumerate(
        (((90, 120, 3), "JPEG"), ((64, 40, 3), "PNG"), ((50, 50), "PNG"), ((128, 128, 3), "JPEG"))
    ):
        y = np.linspace(0, 255, shape[0])[:, None]
        base = np.broadcast_to(y, shape[:2]) if len(shape) == 2 else np.stack([y + 40 * k] * 3, -1)
        noise = rng.normal(0, 30, shape)
        array = np.clip(np.broadcast_to(base, shape) + noise, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, format=fmt)
        images.append(buffer.getvalue())
    return images


def _labels(c: Any, protocol: str, model: str, images: list[bytes]) -> np.ndarray:
    batch = np.array([[data] for data in images], dtype=np.object_)
    result = c.infer(model, [make_input(protocol, "IMAGE", batch, "BYTES")])
    labels = result.as_numpy("LABELS")
    assert labels.shape == (len(images), 3), labels.shape
    return labels


def test_same_labels_as_the_ensemble_one_image_and_a_batch(c: Any, protocol: str) -> None:
    images = _images()
    for chosen in ([images[0]], images):
        ensemble = _labels(c, protocol, ENSEMBLE, chosen)
        np.testing.assert_array_equal(_labels(c, protocol, BLS, chosen), ensemble)
    # the four images do not all get the same classes: the comparison means something
    assert len({tuple(row) for row in _labels(c, protocol, ENSEMBLE, images)}) > 1


def test_same_labels_as_the_ensemble_with_many_requests_at_once(
    server: ServerProcess, protocol: str
) -> None:
    images = _images() * 4

    def one(data: bytes) -> tuple[np.ndarray, np.ndarray]:
        conn = client(protocol, server.url(protocol))
        try:
            return _labels(conn, protocol, BLS, [data]), _labels(conn, protocol, ENSEMBLE, [data])
        finally:
            conn.close()

    with ThreadPoolExecutor(len(images)) as pool:
        for bls, ensemble in pool.map(one, images):
            np.testing.assert_array_equal(bls, ensemble)


def test_a_bad_image_gets_the_preprocess_error(c: Any, protocol: str) -> None:
    bad = np.array([[b"not an image"]], dtype=np.object_)
    with pytest.raises(InferenceServerException) as info:
        c.infer(BLS, [make_input(protocol, "IMAGE", bad, "BYTES")])
    assert "preprocess: IMAGE[0] (12 bytes) is not a JPEG or PNG image" in info.value.message()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    np.testing.assert_array_equal(  # and it keeps serving
        _labels(c, protocol, BLS, _images()[:1]), _labels(c, protocol, ENSEMBLE, _images()[:1])
    )
