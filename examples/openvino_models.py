"""The OpenVINO example, written whole by ``build_models.py``: ``mlp_small_openvino``, the
shared MLP (examples/torch_models.py: 256 -> 1024 -> 1024 -> 16, the same weights and tensor
names as ``mlp_small_onnx`` and ``mlp_small_pytorch``) converted from its ONNX file to
OpenVINO IR (``model.xml`` + ``model.bin``) with ``openvino.convert_model``, served by the
``openvino`` backend. Its config asks OpenVINO for float32 (INFERENCE_PRECISION_HINT), which
otherwise computes in bfloat16 where the CPU has it, so the three backends' answers compare.

Needs openvino (``pip install 'tritium[openvino]'``); without it the example is skipped and
``build_models.py`` says so. The folder is generated, not committed (.gitignore).
"""

from __future__ import annotations

from pathlib import Path

from torch_models import NET_ONNX, NET_SIZES, net_config

NET_OPENVINO = "mlp_small_openvino"
# The backend's lines of the shared config: OpenVINO's float32, as the other copies compute.
OPENVINO_LINES = (
    'backend: "openvino"\n'
    'parameters: { key: "INFERENCE_PRECISION_HINT" value: { string_value: "F32" } }'
)


def write_openvino_example(repo_dir: Path) -> list[Path]:
    """The IR of the ONNX twin (which must be written first) and its config."""
    import openvino as ov

    model = ov.convert_model(str(repo_dir / NET_ONNX / "1" / "model.onnx"))
    model_dir = repo_dir / NET_OPENVINO
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    xml = model_dir / "1" / "model.xml"
    ov.save_model(model, str(xml), compress_to_fp16=False)
    config = model_dir / "config.pbtxt"
    config.write_text(net_config(NET_OPENVINO, OPENVINO_LINES))
    return [config, xml, xml.with_suffix(".bin")]


def check_openvino_twin(repo_dir: Path) -> float:
    """The largest difference between the ONNX Runtime and the OpenVINO (float32) answers
    of the MLP on one batch."""
    import numpy as np
    import onnxruntime as ort
    import openvino as ov

    x = np.random.default_rng(1).standard_normal((8, NET_SIZES[0]), dtype=np.float32)
    session = ort.InferenceSession(
        str(repo_dir / NET_ONNX / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (onnx_out,) = session.run(None, {"INPUT__0": x})
    compiled = ov.Core().compile_model(
        str(repo_dir / NET_OPENVINO / "1" / "model.xml"),
        "CPU",
        {"INFERENCE_PRECISION_HINT": "f32"},
    )
    ov_out = compiled({"INPUT__0": x})["OUTPUT__0"]
    return float(np.abs(onnx_out - ov_out).max())
