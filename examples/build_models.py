#!/usr/bin/env python3
"""Generate the ONNX files of the example model repository.

No model binaries are committed: the text files (``config.pbtxt``, ``model.py``)
live in ``examples/model_repository/`` and this script writes the ``.onnx`` files
next to them with the ``onnx`` package (``pip install onnx`` or ``.[models]``).

    python examples/build_models.py                      # in place
    python examples/build_models.py --repository /tmp/r  # copy the tree, then build there
    python examples/build_models.py --check              # also run each model once

The ensembles' composing ONNX models (``classifier``, ``user_tower``, ``item_tower``,
``tower_join``, ``cheap_scorer``, ``expensive_ranker``) are built here too, and every
``platform: "ensemble"`` model gets its (empty) version folder ``1/`` if it has none. The
image examples with Triton's contracts (``densenet_onnx``, ``inception_classifier``) and
their label files come from ``image_models.py``.

Importable: ``from build_models import build_examples; build_examples(path)``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from image_models import IMAGE_MODELS, check_image_models, write_labels
from openvino_models import NET_OPENVINO, check_openvino_twin, write_openvino_example
from torch_models import NET_SEED, NET_SIZES, TORCH_EXAMPLES, check_twins, write_onnx_twin

EXAMPLES_DIR = Path(__file__).resolve().parent
DEFAULT_REPOSITORY = EXAMPLES_DIR / "model_repository"

# Opset 17 / IR 8 (onnx 1.12 era): modest, and loadable by any onnxruntime >= 1.13.
OPSET = 17
IR_VERSION = 8

# model name -> Triton data type of all four tensors
ONNX_MODELS = {
    "simple": "TYPE_INT32",
    "simple_int8": "TYPE_INT8",
    "simple_string": "TYPE_STRING",
}

# The dense MLP (issue 4, dynamic batching): model name -> the folder whose model.onnx it
# shares. ``mlp`` and ``mlp_nobatch`` hold the same file (same seed, same bytes); only their
# configs differ (``mlp_nobatch`` has no ``dynamic_batching``).
MLP_MODELS = {"mlp": "mlp", "mlp_nobatch": "mlp"}
# 256 -> 2048 -> 2048 -> 2048 -> 10, Relu between the layers (MatMul + Add each): ~8.9 M
# weights (36 MB of FP32). Sized for a 2-core CPU with 2 intra-op threads: batch 1 is a
# memory-bound GEMV chain (~0.6 ms), batch 32 runs at ~0.1 ms per sample (GEMM), so batching
# requests pays several-fold. See examples/model_repository/README.md.
MLP_SIZES = (256, 2048, 2048, 2048, 10)
MLP_SEED = 20240604

# The ensembles' composing models (examples/model_repository/README.md, "Ensembles"): small
# graphs with random weights from fixed seeds, cheap enough that the pipeline, not the
# arithmetic, is what a request measures.
IMAGE_SIZE = 64  # classifier input: FP32 [3, 64, 64] (preprocess's PIXELS)
NUM_CLASSES = 10
CLASSIFIER_SEED = 20240701
TOWER_SEEDS = {"user_tower": 20240702, "item_tower": 20240703}
TOWER_SIZES = (16, 8)  # FEATURES [16] -> EMBEDDING [8]
CHEAP_SCORER_SEED = 20240704
CHEAP_SCORER_SIZES = (16, 1)
RANKER_SEED = 20240705
RANKER_SIZES = (16, 64, 64, 1)

# The implicit-state example (issue 13): model name -> the folder whose model.onnx it shares.
# Both serve OUTPUT = OUTPUT_STATE = INPUT + INPUT_STATE; only their sequence_batching differs.
RUNNING_SUM_MODELS = {
    "running_sum_onnx": "running_sum_onnx",
    "running_sum_onnx_direct": "running_sum_onnx",
}
RUNNING_SUM_DIMS = 4
# running_sum_onnx_direct's initial_state data_file (raw little-endian FP32 [4]), written under
# <model>/initial_state/ where Triton looks for it.
INITIAL_STATE_FILES = {
    ("running_sum_onnx_direct", "running_sum_start"): (100.0, 200.0, 300.0, 400.0),
}


def _add_sub_model(name: str, triton_type: str, dims: int = 16):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over [batch, dims].

    For TYPE_STRING the tensors hold decimal integers; they are parsed with
    Cast(STRING->INT32), added/subtracted, and formatted back with
    Cast(INT32->STRING).
    """
    from onnx import TensorProto, helper

    elem = {
        "TYPE_INT32": TensorProto.INT32,
        "TYPE_INT8": TensorProto.INT8,
        "TYPE_STRING": TensorProto.STRING,
    }[triton_type]
    shape = ["batch", dims]  # first dimension symbolic: the Triton batch dimension
    inputs = [helper.make_tensor_value_info(n, elem, shape) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, elem, shape) for n in ("OUTPUT0", "OUTPUT1")]

    if elem == TensorProto.STRING:
        i32 = TensorProto.INT32
        nodes = [
            helper.make_node("Cast", ["INPUT0"], ["in0_i32"], to=i32, name="parse0"),
            helper.make_node("Cast", ["INPUT1"], ["in1_i32"], to=i32, name="parse1"),
            helper.make_node("Add", ["in0_i32", "in1_i32"], ["sum_i32"], name="add"),
            helper.make_node("Sub", ["in0_i32", "in1_i32"], ["diff_i32"], name="sub"),
            helper.make_node(
                "Cast", ["sum_i32"], ["OUTPUT0"], to=TensorProto.STRING, name="format0"
            ),
            helper.make_node(
                "Cast", ["diff_i32"], ["OUTPUT1"], to=TensorProto.STRING, name="format1"
            ),
        ]
    else:
        nodes = [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ]

    return _onnx_model(name, nodes, inputs, outputs)


def _onnx_model(name: str, nodes, inputs, outputs, initializers=()):
    """The graph as a model with this repository's opset, IR version and producer."""
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    return helper.make_model(
        graph,
        producer_name="tritium-examples",
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
    )


def _fp32(name: str, shape):
    """A FLOAT graph input or output; a str in ``shape`` is a symbolic dimension."""
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _mlp_weights(sizes=MLP_SIZES, seed=MLP_SEED):
    """[(W, b)] per dense layer: He-scaled normal weights and small biases, fixed seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        w = rng.standard_normal((fan_in, fan_out), dtype=np.float32) * np.float32(
            np.sqrt(2.0 / fan_in)
        )
        b = rng.standard_normal(fan_out, dtype=np.float32) * np.float32(0.1)
        layers.append((w, b))
    return layers


def _dense_nodes(source: str, layers, output: str):
    """(nodes, initializers): MatMul + Add per ``(W, b)`` layer, Relu between, none after."""
    from onnx import helper, numpy_helper

    nodes, initializers = [], []
    previous = source
    for i, (w, b) in enumerate(layers):
        last = i == len(layers) - 1
        initializers += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        nodes.append(helper.make_node("MatMul", [previous, f"W{i}"], [f"mm{i}"], name=f"mm{i}"))
        out = output if last else f"dense{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"B{i}"], [out], name=f"bias{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
            previous = f"relu{i}"
    return nodes, initializers


def _mlp_model(name: str = "mlp", sizes=MLP_SIZES, seed=MLP_SEED):
    """OUTPUT0 = dense(...relu(dense(INPUT0))) over FP32 [batch, sizes[0]] -> [batch, sizes[-1]].

    Each layer is MatMul + Add with the weights as initializers; Relu between layers, none
    after the last.
    """
    nodes, initializers = _dense_nodes("INPUT0", _mlp_weights(sizes, seed), "OUTPUT0")
    inputs = [_fp32("INPUT0", ["batch", sizes[0]])]
    outputs = [_fp32("OUTPUT0", ["batch", sizes[-1]])]
    return _onnx_model(name, nodes, inputs, outputs, initializers)


def dense_reference(x, sizes, seed):
    """``_mlp_weights(sizes, seed)`` applied in numpy (float64): MatMul + Add, Relu between."""
    import numpy as np

    h = np.asarray(x, dtype=np.float64)
    layers = _mlp_weights(sizes, seed)
    for i, (w, b) in enumerate(layers):
        h = h @ w.astype(np.float64) + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h


def mlp_reference(x):
    """The MLP in numpy (float64 accumulation), to check the ONNX file against."""
    return dense_reference(x, MLP_SIZES, MLP_SEED)


# ------------------------------------------------------------------ ensemble composing models


def _conv_weights(rng, c_out: int, c_in: int, k: int = 3):
    """He-scaled normal OIHW kernel and a small bias for one convolution."""
    import numpy as np

    fan_in = c_in * k * k
    w = rng.standard_normal((c_out, c_in, k, k), dtype=np.float32) * np.float32(
        np.sqrt(2.0 / fan_in)
    )
    return w, rng.standard_normal(c_out, dtype=np.float32) * np.float32(0.1)


def _classifier_weights(seed=CLASSIFIER_SEED):
    """(conv1, conv2, (W, b) of the Gemm): 3 -> 16 -> 32 channels, then 32 -> 10 classes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    conv1 = _conv_weights(rng, 16, 3)
    conv2 = _conv_weights(rng, 32, 16)
    return conv1, conv2, _mlp_weights((32, NUM_CLASSES), seed + 1)[0]


def _classifier_model(name: str = "classifier"):
    """PROBABILITIES = softmax(gemm(gap(relu(conv(relu(conv(PIXELS))))))).

    PIXELS FP32 [batch, 3, 64, 64] -> PROBABILITIES FP32 [batch, 10]; both convolutions are
    3x3, stride 2, padding 1 (64 -> 32 -> 16), about 1.6 M multiply-adds per image.
    """
    from onnx import helper, numpy_helper

    conv1, conv2, (w, b) = _classifier_weights()
    tensors = {"C1W": conv1[0], "C1B": conv1[1], "C2W": conv2[0], "C2B": conv2[1]}
    tensors |= {"FCW": w, "FCB": b}
    initializers = [numpy_helper.from_array(v, k) for k, v in tensors.items()]
    conv = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["PIXELS", "C1W", "C1B"], ["conv1"], name="conv1", **conv),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("Conv", ["relu1", "C2W", "C2B"], ["conv2"], name="conv2", **conv),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["relu2"], ["pooled"], name="gap"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["features", "FCW", "FCB"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["PROBABILITIES"], name="softmax", axis=-1),
    ]
    inputs = [_fp32("PIXELS", ["batch", 3, IMAGE_SIZE, IMAGE_SIZE])]
    outputs = [_fp32("PROBABILITIES", ["batch", NUM_CLASSES])]
    return _onnx_model(name, nodes, inputs, outputs, initializers)


def _tower_model(name: str):
    """EMBEDDING = tanh(FEATURES @ W + b): FP32 [batch, 16] -> [batch, 8], one seed per tower."""
    from onnx import helper, numpy_helper

    ((w, b),) = _mlp_weights(TOWER_SIZES, TOWER_SEEDS[name])
    initializers = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")]
    nodes = [
        helper.make_node("Gemm", ["FEATURES", "W", "B"], ["dense"], name="dense"),
        helper.make_node("Tanh", ["dense"], ["EMBEDDING"], name="tanh"),
    ]
    inputs = [_fp32("FEATURES", ["batch", TOWER_SIZES[0]])]
    outputs = [_fp32("EMBEDDING", ["batch", TOWER_SIZES[-1]])]
    return _onnx_model(name, nodes, inputs, outputs, initializers)


def _join_model(name: str = "tower_join"):
    """SCORE = sum(USER * ITEM, axis=-1, keepdims): FP32 [batch, 8] x2 -> [batch, 1]."""
    import numpy as np
    from onnx import helper, numpy_helper

    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("Mul", ["USER", "ITEM"], ["product"], name="mul"),
        helper.make_node("ReduceSum", ["product", "axes"], ["SCORE"], name="sum", keepdims=1),
    ]
    dims = TOWER_SIZES[-1]
    inputs = [_fp32("USER", ["batch", dims]), _fp32("ITEM", ["batch", dims])]
    return _onnx_model(name, nodes, inputs, [_fp32("SCORE", ["batch", 1])], [axes])


def _squeezed_mlp(name: str, tensors: tuple[str, str], sizes, seed):
    """``tensors[1]`` FP32 [n] = the MLP of ``tensors[0]`` FP32 [n, sizes[0]] (sizes[-1] == 1),
    its last axis squeezed away; n may be 0."""
    import numpy as np
    from onnx import helper, numpy_helper

    source, output = tensors
    nodes, initializers = _dense_nodes(source, _mlp_weights(sizes, seed), "column")
    initializers.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"))
    nodes.append(helper.make_node("Squeeze", ["column", "axes"], [output], name="squeeze"))
    inputs, outputs = [_fp32(source, ["n", sizes[0]])], [_fp32(output, ["n"])]
    return _onnx_model(name, nodes, inputs, outputs, initializers)


def _cheap_scorer_model(name: str = "cheap_scorer"):
    """SCORES FP32 [n] = CANDIDATES FP32 [n, 16] @ W + b: one linear layer, no batching."""
    return _squeezed_mlp(name, ("CANDIDATES", "SCORES"), CHEAP_SCORER_SIZES, CHEAP_SCORER_SEED)


def _ranker_model(name: str = "expensive_ranker"):
    """RELEVANCE FP32 [n] = MLP 16 -> 64 -> 64 -> 1 (Relu between) of SELECTED FP32 [n, 16]."""
    return _squeezed_mlp(name, ("SELECTED", "RELEVANCE"), RANKER_SIZES, RANKER_SEED)


def _running_sum_model(name: str = "running_sum_onnx"):
    """OUTPUT = OUTPUT_STATE = INPUT + INPUT_STATE, FP32 [batch, 4].

    INPUT_STATE / OUTPUT_STATE are graph inputs/outputs that the config does not list: they are
    ``sequence_batching.state``, which the server feeds and keeps per sequence. The graph needs
    no START input: the server resets the state to its initial value at START.
    """
    from onnx import helper

    shape = ["batch", RUNNING_SUM_DIMS]
    inputs = [_fp32("INPUT", shape), _fp32("INPUT_STATE", shape)]
    outputs = [_fp32("OUTPUT", shape), _fp32("OUTPUT_STATE", shape)]
    nodes = [
        helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["sum"], name="add"),
        helper.make_node("Identity", ["sum"], ["OUTPUT"], name="output"),
        helper.make_node("Identity", ["sum"], ["OUTPUT_STATE"], name="output_state"),
    ]
    return _onnx_model(name, nodes, inputs, outputs)


def _initial_state_files(repo_dir: Path) -> list[Path]:
    """Write each ``INITIAL_STATE_FILES`` entry as raw little-endian FP32 bytes."""
    import numpy as np

    written = []
    for (model, file_name), values in INITIAL_STATE_FILES.items():
        path = repo_dir / model / "initial_state" / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(np.asarray(values, dtype="<f4").tobytes())
        written.append(path)
    return written


# model name -> builder(name) for the ensembles' ONNX composing models
COMPOSING_MODELS = {
    "classifier": _classifier_model,
    "user_tower": _tower_model,
    "item_tower": _tower_model,
    "tower_join": _join_model,
    "cheap_scorer": _cheap_scorer_model,
    "expensive_ranker": _ranker_model,
}


def classifier_reference(pixels):
    """The classifier in numpy (float64): PIXELS [n, 3, 64, 64] -> PROBABILITIES [n, 10]."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    def conv_relu(x, w, b):  # 3x3, stride 2, padding 1
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
        out = np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64))
        return np.maximum(out + b[None, :, None, None], 0.0)

    conv1, conv2, (w, b) = _classifier_weights()
    h = conv_relu(conv_relu(np.asarray(pixels, dtype=np.float64), *conv1), *conv2)
    logits = h.mean(axis=(2, 3)) @ w.astype(np.float64) + b
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def composing_reference(name: str, *inputs):
    """The numpy answer of one ONNX composing model (float64), inputs in config order."""
    import numpy as np

    if name == "classifier":
        return classifier_reference(*inputs)
    if name in TOWER_SEEDS:
        return np.tanh(dense_reference(inputs[0], TOWER_SIZES, TOWER_SEEDS[name]))
    if name == "tower_join":
        user, item = (np.asarray(t, dtype=np.float64) for t in inputs)
        return (user * item).sum(axis=-1, keepdims=True)
    if name == "cheap_scorer":
        return dense_reference(inputs[0], CHEAP_SCORER_SIZES, CHEAP_SCORER_SEED)[:, 0]
    if name == "expensive_ranker":
        return dense_reference(inputs[0], RANKER_SIZES, RANKER_SEED)[:, 0]
    raise KeyError(name)


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy the committed text files of the example repository to ``dst``."""
    shutil.copytree(
        src,
        dst,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("*.onnx", "__pycache__", "*.pyc"),
    )


def _save(model, path: Path) -> Path:
    """Check ``model`` and write it to ``path`` (folders created); return ``path``."""
    import onnx

    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


_ENSEMBLE_PLATFORM = re.compile(r'^\s*platform\s*:\s*"ensemble"', re.MULTILINE)


def _ensemble_version_dirs(repo_dir: Path) -> list[Path]:
    """Make ``1/`` in each ``platform: "ensemble"`` model folder that has no version folder.

    An ensemble has no model file, but Triton (and tritium) still serve only the versions
    that have a numbered folder; git keeps the committed ones through ``1/.gitkeep``.
    """
    made = []
    for config in sorted(repo_dir.glob("*/config.pbtxt")):
        model_dir = config.parent
        if not _ENSEMBLE_PLATFORM.search(config.read_text()):
            continue
        if not any(p.is_dir() and p.name.isdigit() for p in model_dir.iterdir()):
            (model_dir / "1").mkdir()
            made.append(model_dir / "1")
    return made


def build_examples(repo_dir: Path = DEFAULT_REPOSITORY) -> list[Path]:
    """Write the example ONNX models into ``repo_dir``; return the files (and any ensemble
    version folders) written.

    When ``repo_dir`` is not the committed ``examples/model_repository`` the
    committed tree (configs, Python models, README) is copied there first.
    """
    repo_dir = Path(repo_dir).resolve()
    if repo_dir != DEFAULT_REPOSITORY:
        _copy_tree(DEFAULT_REPOSITORY, repo_dir)

    def onnx_path(name: str) -> Path:
        return repo_dir / name / "1" / "model.onnx"

    written = [_save(_add_sub_model(n, t), onnx_path(n)) for n, t in ONNX_MODELS.items()]
    built: dict[str, Path] = {}
    shared = [(MLP_MODELS, _mlp_model), (RUNNING_SUM_MODELS, _running_sum_model)]
    for models, build_model in shared:
        for name, source in models.items():
            path = onnx_path(name)
            if source in built:
                path.parent.mkdir(parents=True, exist_ok=True)  # git keeps no empty folder
                shutil.copyfile(built[source], path)
            else:
                built[source] = _save(build_model(source), path)
            written.append(path)
    written += [_save(build(name), onnx_path(name)) for name, build in COMPOSING_MODELS.items()]
    written += [_save(build(name), onnx_path(name)) for name, build in IMAGE_MODELS.items()]
    written += write_labels(repo_dir)
    written += torch_examples(repo_dir)
    return written + _initial_state_files(repo_dir) + _ensemble_version_dirs(repo_dir)


def torch_examples(repo_dir: Path) -> list[Path]:
    """The PyTorch examples and the ONNX twin of their MLP (examples/torch_models.py); the
    PyTorch ones only where torch is installed, else skipped with a message."""
    import torch_models

    layers = _mlp_weights(NET_SIZES, NET_SEED)
    nodes, initializers = _dense_nodes("INPUT__0", layers, "OUTPUT__0")
    twin = _onnx_model(
        torch_models.NET_ONNX,
        nodes,
        [_fp32("INPUT__0", ["batch", NET_SIZES[0]])],
        [_fp32("OUTPUT__0", ["batch", NET_SIZES[-1]])],
        initializers,
    )
    written = write_onnx_twin(repo_dir, twin.SerializeToString())
    written += openvino_example(repo_dir)
    try:
        return written + torch_models.write_torch_examples(repo_dir, layers)
    except ImportError as exc:
        print(
            f"skipped the PyTorch examples ({', '.join(TORCH_EXAMPLES)}): {exc}; "
            "install them with: pip install 'tritium[pytorch]'",
            file=sys.stderr,
        )
        return written


def openvino_example(repo_dir: Path) -> list[Path]:
    """The OpenVINO IR copy of the MLP (examples/openvino_models.py), only where openvino is
    installed, else skipped with a message."""
    try:
        return write_openvino_example(repo_dir)
    except ImportError as exc:
        print(
            f"skipped the OpenVINO example ({NET_OPENVINO}): {exc}; "
            "install it with: pip install 'tritium[openvino]'",
            file=sys.stderr,
        )
        return []


def _session(repo_dir: Path, name: str):
    import onnxruntime as ort

    path = repo_dir / name / "1" / "model.onnx"
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _check_add_sub(repo_dir: Path) -> None:
    import numpy as np

    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    for name, triton_type in ONNX_MODELS.items():
        sess = _session(repo_dir, name)
        if triton_type == "TYPE_STRING":
            feeds = {"INPUT0": a.astype(str).astype(object), "INPUT1": b.astype(str).astype(object)}
            expected = [(a + b).astype(str).astype(object), (a - b).astype(str).astype(object)]
        else:
            dt = np.int8 if triton_type == "TYPE_INT8" else np.int32
            feeds = {"INPUT0": a.astype(dt), "INPUT1": b.astype(dt)}
            expected = [(a + b).astype(dt), (a - b).astype(dt)]
        out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], feeds)
        for got, want in ((out0, expected[0]), (out1, expected[1])):
            if got.shape != want.shape or not (got == want).all():
                raise AssertionError(f"{name}: got {got!r}, expected {want!r}")


def _check_mlp(repo_dir: Path) -> None:
    """A batch of 5 against numpy, and each row alone equal to its row in the batch."""
    import numpy as np

    x = np.random.default_rng(7).standard_normal((5, MLP_SIZES[0]), dtype=np.float32)
    want = mlp_reference(x)
    for name in MLP_MODELS:
        sess = _session(repo_dir, name)
        (got,) = sess.run(["OUTPUT0"], {"INPUT0": x})
        if got.shape != (5, MLP_SIZES[-1]) or got.dtype != np.float32:
            raise AssertionError(f"{name}: OUTPUT0 {got.dtype} {got.shape}, FP32 (5, 10) expected")
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"{name}: max |error| {np.abs(got - want).max()} vs numpy")
        for row in range(len(x)):
            (alone,) = sess.run(["OUTPUT0"], {"INPUT0": x[row : row + 1]})
            if not np.allclose(alone[0], got[row], rtol=1e-5, atol=1e-5):
                raise AssertionError(f"{name}: row {row} alone differs from its batched row")


def _check_composing(repo_dir: Path) -> None:
    """Each composing model once against numpy; the cascade's models also with 0 rows."""
    import numpy as np

    rng = np.random.default_rng(11)

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    feeds = {
        "classifier": {"PIXELS": normal(3, 3, IMAGE_SIZE, IMAGE_SIZE)},
        "user_tower": {"FEATURES": normal(5, 16)},
        "item_tower": {"FEATURES": normal(5, 16)},
        "tower_join": {"USER": normal(5, 8), "ITEM": normal(5, 8)},
        "cheap_scorer": {"CANDIDATES": normal(6, 16)},
        "expensive_ranker": {"SELECTED": normal(6, 16)},
    }
    for name, feed in feeds.items():
        (got,) = _session(repo_dir, name).run(None, feed)
        want = composing_reference(name, *feed.values())
        if got.dtype != np.float32 or got.shape != want.shape:
            raise AssertionError(f"{name}: {got.dtype} {got.shape}, FP32 {want.shape} expected")
        if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            raise AssertionError(f"{name}: max |error| {np.abs(got - want).max()} vs numpy")
    for name, source in (("cheap_scorer", "CANDIDATES"), ("expensive_ranker", "SELECTED")):
        (got,) = _session(repo_dir, name).run(None, {source: normal(0, 16)})
        if got.shape != (0,):
            raise AssertionError(f"{name}: 0 rows gave shape {got.shape}, (0,) expected")


def _check_running_sum(repo_dir: Path) -> None:
    """Two sequences stepped together, the state carried by hand as the server carries it."""
    import numpy as np

    rng = np.random.default_rng(13)
    steps = rng.standard_normal((5, 2, RUNNING_SUM_DIMS), dtype=np.float32)
    for name in RUNNING_SUM_MODELS:
        sess = _session(repo_dir, name)
        state = np.zeros((2, RUNNING_SUM_DIMS), dtype=np.float32)
        for i, step in enumerate(steps):
            feeds = {"INPUT": step, "INPUT_STATE": state}
            output, state = sess.run(["OUTPUT", "OUTPUT_STATE"], feeds)
            want = steps[: i + 1].sum(axis=0, dtype=np.float64)
            if output.dtype != np.float32 or not np.allclose(output, want, atol=1e-5):
                raise AssertionError(f"{name}: step {i} gave {output!r}, {want!r} expected")
            if not np.array_equal(output, state):
                raise AssertionError(f"{name}: OUTPUT_STATE differs from OUTPUT at step {i}")
    for (model, file_name), values in INITIAL_STATE_FILES.items():
        data = np.fromfile(repo_dir / model / "initial_state" / file_name, dtype="<f4")
        if data.tolist() != list(values):
            raise AssertionError(f"{model}: initial state {data!r}, {values!r} expected")


def check_examples(repo_dir: Path = DEFAULT_REPOSITORY) -> None:
    """Run each generated ONNX model once with onnxruntime and check the answers."""
    repo_dir = Path(repo_dir)
    _check_add_sub(repo_dir)
    _check_mlp(repo_dir)
    _check_composing(repo_dir)
    _check_running_sum(repo_dir)
    check_image_models(lambda name: _session(repo_dir, name))
    if all((repo_dir / name).is_dir() for name in TORCH_EXAMPLES):
        difference = check_twins(repo_dir)
        assert difference < 1e-4, f"the ONNX and TorchScript MLPs differ by {difference}"
    if (repo_dir / NET_OPENVINO).is_dir():
        difference = check_openvino_twin(repo_dir)
        assert difference < 1e-4, f"the ONNX and OpenVINO MLPs differ by {difference}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help="target model repository (default: %(default)s); "
        "a different directory receives a copy of the committed tree first",
    )
    parser.add_argument(
        "--check", action="store_true", help="run every generated model once with onnxruntime"
    )
    args = parser.parse_args(argv)
    try:
        written = build_examples(args.repository)
    except ImportError as exc:
        print(f"error: {exc}; install the 'onnx' package (pip install onnx)", file=sys.stderr)
        return 1
    for path in written:
        print(f"{'made' if path.is_dir() else 'wrote'} {path}")
    if args.check:
        check_examples(args.repository)
        print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
