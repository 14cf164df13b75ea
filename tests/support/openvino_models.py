"""OpenVINO test models for the OpenVINO backend (tests/integration/test_openvino_backend.py),
built here with OpenVINO's opset API (arithmetic only, so every answer is computed by the
test too) and saved as IR (``model.xml`` + ``model.bin``).

Each model is (config.pbtxt, ov.Model or None, file name). Needs openvino (the ``openvino``
extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from openvino import opset13 as ops

# Every data type Triton's OpenVINO backend maps: config name, wire name, OpenVINO type.
TYPES = (
    ("TYPE_BOOL", "BOOL", ov.Type.boolean),
    ("TYPE_UINT8", "UINT8", ov.Type.u8),
    ("TYPE_UINT16", "UINT16", ov.Type.u16),
    ("TYPE_UINT32", "UINT32", ov.Type.u32),
    ("TYPE_UINT64", "UINT64", ov.Type.u64),
    ("TYPE_INT8", "INT8", ov.Type.i8),
    ("TYPE_INT16", "INT16", ov.Type.i16),
    ("TYPE_INT32", "INT32", ov.Type.i32),
    ("TYPE_INT64", "INT64", ov.Type.i64),
    ("TYPE_FP16", "FP16", ov.Type.f16),
    ("TYPE_FP32", "FP32", ov.Type.f32),
)
BATCH_MODEL = "ov_batching"
BATCH_PREFERRED = 4
INSTANCES = 2


def _named(node: Any, name: str) -> Any:
    node.output(0).get_tensor().set_names({name})
    return node


def all_types() -> Any:
    """INPUT_<i> -> OUTPUT_<i> per type: numbers plus one, booleans negated."""
    params, results = [], []
    for index, (_, _, element) in enumerate(TYPES):
        p = ops.parameter(ov.PartialShape([3]), element, name=f"INPUT_{index}")
        if element == ov.Type.boolean:
            out = ops.logical_not(p)
        else:
            one = ops.constant(np.array([1], dtype=_numpy(element)))
            out = ops.add(p, one)
        params.append(p)
        results.append(_named(out, f"OUTPUT_{index}"))
    return ov.Model(results, params, "all_types")


def _numpy(element: Any) -> Any:
    return {
        "u8": np.uint8,
        "u16": np.uint16,
        "u32": np.uint32,
        "u64": np.uint64,
        "i8": np.int8,
        "i16": np.int16,
        "i32": np.int32,
        "i64": np.int64,
        "f16": np.float16,
        "f32": np.float32,
    }[element.get_type_name()]


def doubler(shape: list[int], layout: str = "") -> Any:
    """INPUT0 (FP32) -> OUTPUT0 = 2 * INPUT0; ``layout`` (e.g. ``N?``) marks the batch
    dimension, which auto-complete reads."""
    p = ops.parameter(ov.PartialShape(shape), ov.Type.f32, name="INPUT0")
    out = _named(ops.multiply(p, ops.constant(np.array([2], dtype=np.float32))), "OUTPUT0")
    if layout:
        p.set_layout(ov.Layout(layout))
    model = ov.Model([out], [p], "doubler")
    if layout:
        model.outputs[0].get_node().set_layout(ov.Layout(layout))
    return model


def _io(kind: str, entries: list[tuple[str, str, str]]) -> str:
    body = ", ".join(
        f'{{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}' for name, dtype, dims in entries
    )
    return f"{kind} [ {body} ]"


def config(
    name: str,
    inputs: list[tuple[str, str, str]],
    outputs: list[tuple[str, str, str]],
    extra: str = "",
    max_batch_size: int = 0,
) -> str:
    return (
        f'name: "{name}"\nbackend: "openvino"\nmax_batch_size: {max_batch_size}\n'
        f"{_io('input', inputs)}\n{_io('output', outputs)}\n{extra}\n"
    )


def params(**values: str) -> str:
    return "\n".join(
        f'parameters: {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items()
    )


def _doubler_config(name: str, extra: str = "", max_batch_size: int = 8, dims: str = "4") -> str:
    return config(
        name,
        [("INPUT0", "TYPE_FP32", dims)],
        [("OUTPUT0", "TYPE_FP32", dims)],
        extra,
        max_batch_size,
    )


Models = dict[str, tuple[str, Any, str]]


def good_models() -> Models:
    """The models that load."""
    types_io = [(f"INPUT_{i}", t[0], "3") for i, t in enumerate(TYPES)]
    types_out = [(f"OUTPUT_{i}", t[0], "3") for i, t in enumerate(TYPES)]
    batching = (
        f"dynamic_batching {{ preferred_batch_size: [ {BATCH_PREFERRED} ] "
        "max_queue_delay_microseconds: 2000000 }\n"
        f"instance_group [ {{ count: {INSTANCES} kind: KIND_CPU }} ]"
    )
    return {
        "ov_types": (config("ov_types", types_io, types_out), all_types(), "model.xml"),
        BATCH_MODEL: (_doubler_config(BATCH_MODEL, batching), doubler([-1, 4]), "model.xml"),
        # A batch-1 IR: the backend sets its batch dimension (Triton's set_batch).
        "ov_static_batch1": (_doubler_config("ov_static_batch1"), doubler([1, 4]), "model.xml"),
        "ov_no_batch": (
            _doubler_config("ov_no_batch", max_batch_size=0, dims="2, 4"),
            doubler([2, 4]),
            "model.xml",
        ),
        # The configured FP16 is converted to the model's FP32 and back (pre/post-processing).
        "ov_converted": (
            config(
                "ov_converted",
                [("INPUT0", "TYPE_FP16", "4")],
                [("OUTPUT0", "TYPE_FP16", "4")],
                max_batch_size=8,
            ),
            doubler([-1, 4]),
            "model.xml",
        ),
        "ov_fixed_batch": (
            _doubler_config(
                "ov_fixed_batch", params(SKIP_OV_DYNAMIC_BATCHSIZE="YES"), max_batch_size=4
            ),
            doubler([-1, 4]),
            "model.xml",
        ),
        "ov_padded": (
            _doubler_config(
                "ov_padded",
                params(SKIP_OV_DYNAMIC_BATCHSIZE="YES", ENABLE_BATCH_PADDING="yes"),
                max_batch_size=4,
            ),
            doubler([-1, 4]),
            "model.xml",
        ),
        "ov_reshaped": (
            _doubler_config("ov_reshaped", params(RESHAPE_IO_LAYERS="YES"), dims="-1"),
            doubler([-1, 4]),
            "model.xml",
        ),
        "ov_tuned": (
            _doubler_config(
                "ov_tuned",
                params(
                    NUM_STREAMS="1",
                    PERFORMANCE_HINT="LATENCY",
                    INFERENCE_NUM_THREADS="1",
                    INFERENCE_PRECISION_HINT="f32",
                ),
            ),
            doubler([-1, 4]),
            "model.xml",
        ),
        "ov_throughput": (
            _doubler_config(
                "ov_throughput",
                params(PERFORMANCE_HINT="THROUGHPUT", HINT_BF16="YES", TARGET_DEVICE="cpu"),
            ),
            doubler([-1, 4]),
            "model.xml",
        ),
        "ov_cached": (
            _doubler_config("ov_cached", params(CACHE_DIR="@CACHE@")),
            doubler([-1, 4]),
            "model.xml",
        ),
        # No config inputs/outputs: auto-complete reads them, and the N layout allows batching.
        "ov_auto": ('name: "ov_auto"\nbackend: "openvino"\n', doubler([-1, 4], "N?"), "model.xml"),
        "ov_onnx": (
            _doubler_config("ov_onnx", 'default_model_filename: "model.onnx"'),
            None,
            "model.onnx",
        ),
    }


def bad_models() -> Models:
    """The models whose load fails, each for one reason."""

    def bad(name: str, text: str, model: Any = None) -> tuple[str, Any, str]:
        return (text, doubler([-1, 4]) if model is None else model, "model.xml")

    return {
        "ov_bad_name": bad(
            "ov_bad_name",
            config(
                "ov_bad_name", [("IN", "TYPE_FP32", "4")], [("OUTPUT0", "TYPE_FP32", "4")], "", 8
            ),
        ),
        "ov_bad_output": bad(
            "ov_bad_output",
            config(
                "ov_bad_output", [("INPUT0", "TYPE_FP32", "4")], [("OUT", "TYPE_FP32", "4")], "", 8
            ),
        ),
        "ov_bad_count": bad(
            "ov_bad_count",
            config(
                "ov_bad_count",
                [("INPUT0", "TYPE_FP32", "4"), ("INPUT1", "TYPE_FP32", "4")],
                [("OUTPUT0", "TYPE_FP32", "4")],
                "",
                8,
            ),
        ),
        "ov_bad_type": bad(
            "ov_bad_type",
            config(
                "ov_bad_type",
                [("INPUT0", "TYPE_FP64", "4")],
                [("OUTPUT0", "TYPE_FP32", "4")],
                "",
                8,
            ),
        ),
        "ov_bad_dims": bad("ov_bad_dims", _doubler_config("ov_bad_dims", dims="5")),
        "ov_bad_rank": bad("ov_bad_rank", _doubler_config("ov_bad_rank", dims="2, 2")),
        "ov_bad_streams": bad(
            "ov_bad_streams", _doubler_config("ov_bad_streams", params(NUM_STREAMS="many"))
        ),
        "ov_bad_hint": bad(
            "ov_bad_hint", _doubler_config("ov_bad_hint", params(PERFORMANCE_HINT="fast"))
        ),
        "ov_bad_threads": bad(
            "ov_bad_threads", _doubler_config("ov_bad_threads", params(INFERENCE_NUM_THREADS="-2"))
        ),
        # OpenVINO 2026's CPU plugin has no such property: the load fails saying so.
        "ov_bad_compile_threads": bad(
            "ov_bad_compile_threads",
            _doubler_config("ov_bad_compile_threads", params(COMPILATION_NUM_THREADS="1")),
        ),
        "ov_bad_bf16": bad("ov_bad_bf16", _doubler_config("ov_bad_bf16", params(HINT_BF16="no"))),
        "ov_bad_gpu": bad(
            "ov_bad_gpu", _doubler_config("ov_bad_gpu", "instance_group [ { kind: KIND_GPU } ]")
        ),
        "ov_bad_device": bad(
            "ov_bad_device", _doubler_config("ov_bad_device", params(TARGET_DEVICE="NPU"))
        ),
        "ov_bad_extension": bad(
            "ov_bad_extension",
            _doubler_config(
                "ov_bad_extension", params(CPU_EXTENSION_PATH="/nonexistent/libext.so")
            ),
        ),
        "ov_bad_no_file": ('name: "ov_bad_no_file"\nbackend: "openvino"\n', None, "model.xml"),
        "ov_bad_not_ir": (_doubler_config("ov_bad_not_ir"), b"<not a model", "model.xml"),
    }


def onnx_doubler() -> bytes:
    """The doubler as ONNX (for ov_onnx), written with the onnx package."""
    from onnx import TensorProto, helper

    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT0"])],
        "doubler",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 4])],
        [two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def write_model(root: Path, name: str, entry: tuple[str, Any, str], cache: Path) -> None:
    text, model, filename = entry
    folder = root / name / "1"
    folder.mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(text.replace("@CACHE@", str(cache)))
    if filename == "model.onnx":
        (folder / filename).write_bytes(onnx_doubler())
    elif isinstance(model, bytes):
        (folder / filename).write_bytes(model)
    elif model is not None:
        ov.save_model(model, str(folder / filename), compress_to_fp16=False)


def build(root: Path, models: Models, cache: Path) -> Path:
    for name, entry in models.items():
        write_model(root, name, entry, cache)
    return root
