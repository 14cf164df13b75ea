"""The PyTorch examples (TorchScript ``model.pt``, Triton's PyTorch backend contract) and the
ONNX twin of one of them, written whole (config.pbtxt, model file, labels) by
``build_models.py``; weights are made here from fixed seeds, nothing is downloaded.

- ``pytorch_classifier``: a small convolutional classifier named as Triton's PyTorch examples
  are (``INPUT__0`` FP32 [3, 32, 32] -> ``OUTPUT__0`` FP32 [10]), with a label file, so the
  classification extension answers top-N labels.
- ``mlp_small_pytorch`` (TorchScript, dynamic batching) and ``mlp_small_onnx`` (ONNX): the
  same network with the same weights (256 -> 1024 -> 1024 -> 16, Relu between) and the same
  tensor names, so one request gives both backends' answers to compare (``--check`` does;
  ``python -m bench backends`` measures them).

The PyTorch ones need torch (``pip install 'tritium[pytorch]'``); without it they are skipped
and ``build_models.py`` says so. The folders are generated, not committed (.gitignore).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

CLASSIFIER = "pytorch_classifier"
NET_PYTORCH = "mlp_small_pytorch"
NET_ONNX = "mlp_small_onnx"
NET_SIZES = (256, 1024, 1024, 16)
NET_SEED = 20261202
CLASSIFIER_SEED = 20261203
CLASSES = ("cat", "dog", "bird", "fish", "horse", "frog", "ship", "truck", "plane", "car")
IMAGE = (3, 32, 32)
TORCH_EXAMPLES = (CLASSIFIER, NET_PYTORCH)

_NET_CONFIG = """\
name: "{name}"
{backend}
max_batch_size: 64
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {classes} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""
_CLASSIFIER_CONFIG = f"""\
name: "{CLASSIFIER}"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {", ".join(map(str, IMAGE))} ] }} ]
output [
  {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {len(CLASSES)} ]
     label_filename: "labels.txt" }}
]
"""


def net_config(name: str, backend: str) -> str:
    """The MLP's config under one backend; ``backend`` is its line (``platform: "..."`` or
    ``backend: "..."``): every copy of the network has the same tensors and batching."""
    return _NET_CONFIG.format(name=name, backend=backend, width=NET_SIZES[0], classes=NET_SIZES[-1])


def _write(repo_dir: Path, name: str, config: str, files: dict[str, bytes]) -> list[Path]:
    model_dir = repo_dir / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    written = [model_dir / "config.pbtxt"]
    written[0].write_text(config)
    for relative, data in files.items():
        path = model_dir / relative
        path.write_bytes(data)
        written.append(path)
    return written


def write_onnx_twin(repo_dir: Path, onnx_bytes: bytes) -> list[Path]:
    return _write(
        repo_dir,
        NET_ONNX,
        net_config(NET_ONNX, 'platform: "onnxruntime_onnx"'),
        {"1/model.onnx": onnx_bytes},
    )


def write_torch_examples(repo_dir: Path, net_layers: list[tuple[Any, Any]]) -> list[Path]:
    """The TorchScript examples (ImportError without torch). ``net_layers``: the MLP's
    [(W [in, out], b [out])], the ONNX twin's weights."""
    net = _scripted(_mlp(net_layers))
    classifier = _scripted(_classifier())
    labels = ("\n".join(CLASSES) + "\n").encode()
    return _write(
        repo_dir,
        NET_PYTORCH,
        net_config(NET_PYTORCH, 'platform: "pytorch_libtorch"'),
        {"1/model.pt": net},
    ) + _write(
        repo_dir, CLASSIFIER, _CLASSIFIER_CONFIG, {"1/model.pt": classifier, "labels.txt": labels}
    )


def _scripted(module: Any) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():  # torch 2.13 calls TorchScript deprecated; Triton loads it
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module.eval()), buffer)
    return buffer.getvalue()


def _mlp(layers: list[tuple[Any, Any]]) -> Any:
    import torch

    modules: list[torch.nn.Module] = []
    for i, (w, b) in enumerate(layers):
        linear = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        modules.append(linear)
        if i < len(layers) - 1:
            modules.append(torch.nn.ReLU())
    return torch.nn.Sequential(*modules)


def _classifier() -> Any:
    import torch

    torch.manual_seed(CLASSIFIER_SEED)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, len(CLASSES)),
    )


def check_twins(repo_dir: Path) -> float:
    """Run both copies of the MLP on one batch: the largest difference between the ONNX
    Runtime and the TorchScript answers (float32 rounding only)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    x = np.random.default_rng(1).standard_normal((8, NET_SIZES[0]), dtype=np.float32)
    session = ort.InferenceSession(
        str(repo_dir / NET_ONNX / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (onnx_out,) = session.run(None, {"INPUT__0": x})
    module = torch.jit.load(str(repo_dir / NET_PYTORCH / "1" / "model.pt"))
    with torch.inference_mode():
        torch_out = module(torch.from_numpy(x)).numpy()
        classes = module_classes(repo_dir)
    assert classes.shape == (2, len(CLASSES)), classes.shape
    return float(np.abs(onnx_out - torch_out).max())


def module_classes(repo_dir: Path) -> Any:
    import torch

    classifier = torch.jit.load(str(repo_dir / CLASSIFIER / "1" / "model.pt"))
    return classifier(torch.zeros((2, *IMAGE))).numpy()
