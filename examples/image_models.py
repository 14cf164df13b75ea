"""The image-classification examples with Triton's contracts (built by ``build_models.py``).

Triton's own image examples (``image_client.py``, ``grpc_image_client.py``,
``ensemble_image_client.py``) talk to ``densenet_onnx`` and ``preprocess_inception_ensemble``.
Their real weights cannot be downloaded here, so these are small CNNs with **random weights**
(fixed seeds) and Triton's exact inputs, outputs, reshapes and label files: the clients run
unmodified and print "score (index) = label", but the classes mean nothing.

- ``densenet_onnx``: data_0 FP32 [1, 3, 224, 224] (the config's reshape of [3, 224, 224])
  -> Conv 3->8 (8x8, stride 8) -> Relu -> GlobalAveragePool -> Conv 1x1 8->1000 -> fc6_1 FP32
  [1, 1000, 1, 1] (reshaped back to [1000]); no softmax, as DenseNet-121's fc6_1.
- ``inception_classifier``: input FP32 [batch, 299, 299, 3] (NHWC) -> Transpose -> Conv 3->8
  (13x13, stride 13) -> Relu -> GlobalAveragePool -> Gemm 8->1001 -> Softmax ->
  "InceptionV3/Predictions/Softmax" FP32 [batch, 1001] (Inception v3's contract, class 0 the
  unused background class).

Labels (``densenet_labels.txt``: 1000 lines; ``inception_labels.txt``: 1001 lines) are written
here too: ``class_<i>`` for ImageNet class i (Triton's files hold the ImageNet names, fetched by
its script; they are not reproduced here), and "UNUSED BACKGROUND" first for Inception.
"""

from __future__ import annotations

from pathlib import Path

DENSENET_SEED = 20240801
INCEPTION_SEED = 20240802
DENSENET = {"size": 224, "kernel": 8, "channels": 8, "classes": 1000}
INCEPTION = {"size": 299, "kernel": 13, "channels": 8, "classes": 1001}

DENSENET_LABELS = tuple(f"class_{i}" for i in range(1000))
INCEPTION_LABELS = ("UNUSED BACKGROUND", *DENSENET_LABELS)
# model folder -> (label file, labels)
LABEL_FILES = {
    "densenet_onnx": ("densenet_labels.txt", DENSENET_LABELS),
    "inception_classifier": ("inception_labels.txt", INCEPTION_LABELS),
    "preprocess_inception_ensemble": ("inception_labels.txt", INCEPTION_LABELS),
}


def _weights(seed: int, shape: dict[str, int]):
    """(conv W [O, 3, k, k], conv b, dense W [O, classes], dense b): He-scaled, fixed seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    k, c, n = shape["kernel"], shape["channels"], shape["classes"]
    conv_w = rng.standard_normal((c, 3, k, k), dtype=np.float32) * np.float32(
        np.sqrt(2.0 / (3 * k * k))
    )
    conv_b = rng.standard_normal(c, dtype=np.float32) * np.float32(0.1)
    dense_w = rng.standard_normal((c, n), dtype=np.float32) * np.float32(np.sqrt(2.0 / c))
    dense_b = rng.standard_normal(n, dtype=np.float32) * np.float32(0.1)
    return conv_w, conv_b, dense_w, dense_b


def _graph(name: str, nodes, io, tensors: dict):
    from onnx import helper, numpy_helper

    from build_models import _onnx_model

    initializers = [numpy_helper.from_array(v, k) for k, v in tensors.items()]
    return _onnx_model(name, [helper.make_node(*n[:3], **n[3]) for n in nodes], *io, initializers)


def densenet_model(name: str = "densenet_onnx"):
    """DenseNet-121's contract (ONNX model zoo densenet-7): data_0 -> fc6_1, batch 1."""
    from build_models import _fp32

    conv_w, conv_b, dense_w, dense_b = _weights(DENSENET_SEED, DENSENET)
    k = DENSENET["kernel"]
    tensors = {"CW": conv_w, "CB": conv_b, "FW": dense_w.T.reshape(-1, DENSENET["channels"], 1, 1)}
    tensors["FB"] = dense_b
    conv = {"kernel_shape": [k, k], "strides": [k, k]}
    nodes = [
        ("Conv", ["data_0", "CW", "CB"], ["conv"], conv),
        ("Relu", ["conv"], ["relu"], {}),
        ("GlobalAveragePool", ["relu"], ["pooled"], {}),
        ("Conv", ["pooled", "FW", "FB"], ["fc6_1"], {"kernel_shape": [1, 1]}),
    ]
    size, classes = DENSENET["size"], DENSENET["classes"]
    io = ([_fp32("data_0", [1, 3, size, size])], [_fp32("fc6_1", [1, classes, 1, 1])])
    return _graph(name, nodes, io, tensors)


def inception_model(name: str = "inception_classifier"):
    """Inception v3's contract: input NHWC [batch, 299, 299, 3] -> softmax over 1001."""
    from build_models import _fp32

    conv_w, conv_b, dense_w, dense_b = _weights(INCEPTION_SEED, INCEPTION)
    k = INCEPTION["kernel"]
    tensors = {"CW": conv_w, "CB": conv_b, "FW": dense_w, "FB": dense_b}
    nodes = [
        ("Transpose", ["input"], ["nchw"], {"perm": [0, 3, 1, 2]}),
        ("Conv", ["nchw", "CW", "CB"], ["conv"], {"kernel_shape": [k, k], "strides": [k, k]}),
        ("Relu", ["conv"], ["relu"], {}),
        ("GlobalAveragePool", ["relu"], ["pooled"], {}),
        ("Flatten", ["pooled"], ["features"], {}),
        ("Gemm", ["features", "FW", "FB"], ["logits"], {}),
        ("Softmax", ["logits"], ["InceptionV3/Predictions/Softmax"], {"axis": -1}),
    ]
    size, classes = INCEPTION["size"], INCEPTION["classes"]
    io = (
        [_fp32("input", ["batch", size, size, 3])],
        [_fp32("InceptionV3/Predictions/Softmax", ["batch", classes])],
    )
    return _graph(name, nodes, io, tensors)


def _features(nchw, seed: int, shape: dict[str, int]):
    """Conv (stride = kernel) -> Relu -> global average, in numpy (float64): [n, channels]."""
    import numpy as np

    conv_w, conv_b, _, _ = _weights(seed, shape)
    x = np.asarray(nchw, dtype=np.float64)
    n, c, h, w = x.shape
    k = shape["kernel"]
    patches = x.reshape(n, c, h // k, k, w // k, k)
    conv = np.einsum("nchiwj,ocij->nohw", patches, conv_w.astype(np.float64))
    return np.maximum(conv + conv_b[None, :, None, None], 0.0).mean(axis=(2, 3))


def densenet_reference(pixels):
    """densenet_onnx in numpy: data_0 FP32 [3, 224, 224] -> fc6_1 [1000] (float64)."""
    import numpy as np

    _, _, dense_w, dense_b = _weights(DENSENET_SEED, DENSENET)
    features = _features(np.asarray(pixels)[None], DENSENET_SEED, DENSENET)
    return (features @ dense_w.astype(np.float64) + dense_b)[0]


def inception_reference(images):
    """inception_classifier in numpy: input [n, 299, 299, 3] -> probabilities [n, 1001]."""
    import numpy as np

    _, _, dense_w, dense_b = _weights(INCEPTION_SEED, INCEPTION)
    nchw = np.asarray(images).transpose(0, 3, 1, 2)
    logits = _features(nchw, INCEPTION_SEED, INCEPTION) @ dense_w.astype(np.float64) + dense_b
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


IMAGE_MODELS = {"densenet_onnx": densenet_model, "inception_classifier": inception_model}


def write_labels(repo_dir: Path) -> list[Path]:
    """Each model's label file, one label per line."""
    written = []
    for model, (file_name, labels) in LABEL_FILES.items():
        path = repo_dir / model / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(labels) + "\n", encoding="utf-8")
        written.append(path)
    return written


def check_image_models(session) -> None:
    """Each model once with onnxruntime (``session(name)``) against its numpy reference."""
    import numpy as np

    rng = np.random.default_rng(17)
    pixels = rng.uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
    (got,) = session("densenet_onnx").run(None, {"data_0": pixels})
    want = densenet_reference(pixels[0])
    if got.shape != (1, 1000, 1, 1) or not np.allclose(got.reshape(-1), want, atol=1e-4):
        raise AssertionError(f"densenet_onnx: {got.shape}, differs from numpy")
    images = rng.uniform(-1, 1, (2, 299, 299, 3)).astype(np.float32)
    (got,) = session("inception_classifier").run(None, {"input": images})
    if got.shape != (2, 1001) or not np.allclose(got, inception_reference(images), atol=1e-6):
        raise AssertionError(f"inception_classifier: {got.shape}, differs from numpy")
