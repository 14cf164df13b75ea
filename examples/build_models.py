#!/usr/bin/env python3
"""Generate the ONNX files of the example model repository.

No model binaries are committed: the text files (``config.pbtxt``, ``model.py``)
live in ``examples/model_repository/`` and this script writes the ``.onnx`` files
next to them with the ``onnx`` package (``pip install onnx`` or ``.[models]``).

    python examples/build_models.py                      # in place
    python examples/build_models.py --repository /tmp/r  # copy the tree, then build there
    python examples/build_models.py --check              # also run each model once

Importable: ``from build_models import build_examples; build_examples(path)``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

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

    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(
        graph,
        producer_name="tritium-examples",
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
    )
    return model


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


def _mlp_model(name: str = "mlp", sizes=MLP_SIZES, seed=MLP_SEED):
    """OUTPUT0 = dense(...relu(dense(INPUT0))) over FP32 [batch, sizes[0]] -> [batch, sizes[-1]].

    Each layer is MatMul + Add with the weights as initializers; Relu between layers, none
    after the last.
    """
    from onnx import TensorProto, helper, numpy_helper

    nodes, initializers = [], []
    previous = "INPUT0"
    layers = _mlp_weights(sizes, seed)
    for i, (w, b) in enumerate(layers):
        last = i == len(layers) - 1
        initializers += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        nodes.append(helper.make_node("MatMul", [previous, f"W{i}"], [f"mm{i}"], name=f"mm{i}"))
        out = "OUTPUT0" if last else f"dense{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"B{i}"], [out], name=f"bias{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
            previous = f"relu{i}"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", sizes[-1]])],
        initializers,
    )
    return helper.make_model(
        graph,
        producer_name="tritium-examples",
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
    )


def mlp_reference(x):
    """The MLP in numpy (float64 accumulation), to check the ONNX file against."""
    import numpy as np

    h = np.asarray(x, dtype=np.float64)
    layers = _mlp_weights()
    for i, (w, b) in enumerate(layers):
        h = h @ w.astype(np.float64) + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy the committed text files of the example repository to ``dst``."""
    shutil.copytree(
        src,
        dst,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("*.onnx", "__pycache__", "*.pyc"),
    )


def build_examples(repo_dir: Path = DEFAULT_REPOSITORY) -> list[Path]:
    """Write the example ONNX models into ``repo_dir``; return the files written.

    When ``repo_dir`` is not the committed ``examples/model_repository`` the
    committed tree (configs, Python models, README) is copied there first.
    """
    import onnx

    repo_dir = Path(repo_dir).resolve()
    if repo_dir != DEFAULT_REPOSITORY:
        _copy_tree(DEFAULT_REPOSITORY, repo_dir)

    written = []
    for name, triton_type in ONNX_MODELS.items():
        model = _add_sub_model(name, triton_type)
        onnx.checker.check_model(model, full_check=True)
        path = repo_dir / name / "1" / "model.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(model, str(path))
        written.append(path)

    built: dict[str, Path] = {}
    for name, source in MLP_MODELS.items():
        path = repo_dir / name / "1" / "model.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        if source in built:
            shutil.copyfile(built[source], path)
        else:
            model = _mlp_model(source)
            onnx.checker.check_model(model, full_check=True)
            onnx.save_model(model, str(path))
            built[source] = path
        written.append(path)
    return written


def check_examples(repo_dir: Path = DEFAULT_REPOSITORY) -> None:
    """Run each generated ONNX model once with onnxruntime and check the answers."""
    import numpy as np
    import onnxruntime as ort

    repo_dir = Path(repo_dir)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    for name, triton_type in ONNX_MODELS.items():
        sess = ort.InferenceSession(
            str(repo_dir / name / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
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

    # The MLPs: a batch of 5 against numpy, and each row alone equal to its row in the batch.
    x = np.random.default_rng(7).standard_normal((5, MLP_SIZES[0]), dtype=np.float32)
    want = mlp_reference(x)
    for name in MLP_MODELS:
        sess = ort.InferenceSession(
            str(repo_dir / name / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        (got,) = sess.run(["OUTPUT0"], {"INPUT0": x})
        if got.shape != (5, MLP_SIZES[-1]) or got.dtype != np.float32:
            raise AssertionError(f"{name}: OUTPUT0 {got.dtype} {got.shape}, FP32 (5, 10) expected")
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"{name}: max |error| {np.abs(got - want).max()} vs numpy")
        for row in range(len(x)):
            (alone,) = sess.run(["OUTPUT0"], {"INPUT0": x[row : row + 1]})
            if not np.allclose(alone[0], got[row], rtol=1e-5, atol=1e-5):
                raise AssertionError(f"{name}: row {row} alone differs from its batched row")


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
        print(f"wrote {path}")
    if args.check:
        check_examples(args.repository)
        print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
