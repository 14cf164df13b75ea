"""TorchScript test models for the PyTorch backend (tests/integration/test_pytorch_backend.py),
scripted here with random-free arithmetic so every answer is computed by the test too.

Each model is (config.pbtxt, module); ``write_model`` saves the module as ``1/model.pt``.
Needs torch (the ``pytorch`` extra).
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import Any

import torch

# Every data type Triton's PyTorch backend maps, by config name -> (wire name, numpy kind).
TYPES = (
    ("TYPE_BOOL", "BOOL"),
    ("TYPE_UINT8", "UINT8"),
    ("TYPE_INT8", "INT8"),
    ("TYPE_INT16", "INT16"),
    ("TYPE_INT32", "INT32"),
    ("TYPE_INT64", "INT64"),
    ("TYPE_FP16", "FP16"),
    ("TYPE_FP32", "FP32"),
    ("TYPE_FP64", "FP64"),
    ("TYPE_STRING", "BYTES"),
)
BATCH_MODEL = "pt_batching"
BATCH_PREFERRED = 4
INSTANCES = 2


class AllTypes(torch.nn.Module):
    """INPUT__i -> OUTPUT__i for each type: numbers + 1, booleans negated, strings upper-cased."""

    def forward(  # noqa: PLR0913 - one argument per data type
        self,
        b: torch.Tensor,
        u8: torch.Tensor,
        i8: torch.Tensor,
        i16: torch.Tensor,
        i32: torch.Tensor,
        i64: torch.Tensor,
        f16: torch.Tensor,
        f32: torch.Tensor,
        f64: torch.Tensor,
        s: list[str],
    ) -> tuple[
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        list[str],
    ]:
        return (
            torch.logical_not(b),
            u8 + 1,
            i8 + 1,
            i16 + 1,
            i32 + 1,
            i64 + 1,
            f16 + 1,
            f32 + 1,
            f64 + 1,
            [v.upper() for v in s],
        )


class AddSub(torch.nn.Module):
    """forward() argument names as the config's input names; outputs in config order."""

    def forward(
        self, INPUT0: torch.Tensor, INPUT1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: N803
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class DictInput(torch.nn.Module):
    """One Dict[str, Tensor] argument, keyed by the configured input names."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["A"] * inputs["B"]


class Counter(torch.nn.Module):
    """Counts its own executions: instances that load their own module count apart."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count += 1
        seen = self.count
        # ~1 ms of matrix products: too slow to run on the event loop, so each execution goes
        # to an instance thread and concurrent requests use both instances.
        w = torch.ones(192, 192)
        for _ in range(6):
            w = torch.mm(w, w) / 192.0
        return torch.full_like(x, seen, dtype=torch.int64) + (w.sum() * 0).to(torch.int64)


class Modes(torch.nn.Module):
    """Reports whether gradients are on and whether it runs in inference mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        return torch.tensor([int(torch.is_grad_enabled()), int(y.is_inference())])


class Doubles(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class RunningSum(torch.nn.Module):
    """OUTPUT__0 = OUTPUT_STATE__1 = INPUT__0 + INPUT_STATE__1 (the server keeps the state)."""

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = x + state
        return total, total


class Raises(torch.nn.Module):
    """Fails for a negative first element, as a model's own check would."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x[0] < 0):
            raise RuntimeError("negative input")
        return x


class TakesInt(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n


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
    platform: bool = False,
) -> str:
    head = 'platform: "pytorch_libtorch"' if platform else 'backend: "pytorch"'
    return (
        f'name: "{name}"\n{head}\nmax_batch_size: {max_batch_size}\n'
        f"{_io('input', inputs)}\n{_io('output', outputs)}\n{extra}\n"
    )


def _params(**values: str) -> str:
    return "\n".join(
        f'parameters: {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items()
    )


def good_models() -> dict[str, tuple[str, torch.nn.Module]]:
    """The models that load."""
    types_in = [(f"INPUT__{i}", t, "-1") for i, (t, _) in enumerate(TYPES)]
    types_out = [(f"OUTPUT__{i}", t, "-1") for i, (t, _) in enumerate(TYPES)]
    fp32 = [("INPUT0", "TYPE_FP32", "4"), ("INPUT1", "TYPE_FP32", "4")]
    fp32_out = [("OUTPUT0", "TYPE_FP32", "4"), ("OUTPUT1", "TYPE_FP32", "4")]
    one_in, one_out = [("INPUT__0", "TYPE_FP32", "-1")], [("OUTPUT__0", "TYPE_INT64", "-1")]
    counted = f"instance_group [ {{ count: {INSTANCES} kind: KIND_CPU }} ]"
    running = """sequence_batching {
  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 1000 }
  state [ { input_name: "INPUT_STATE__1" output_name: "OUTPUT_STATE__1" data_type: TYPE_FP32
            dims: [ 4 ]
            initial_state { name: "zeros" data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } ]
}"""
    return {
        "pt_running_sum": (
            config(
                "pt_running_sum",
                [("INPUT__0", "TYPE_FP32", "4")],
                [("OUTPUT__0", "TYPE_FP32", "4")],
                running,
                max_batch_size=8,
            ),
            RunningSum(),
        ),
        "pt_types": (config("pt_types", types_in, types_out), AllTypes()),
        "pt_add_sub": (
            config("pt_add_sub", fp32, fp32_out, counted, max_batch_size=8, platform=True),
            AddSub(),
        ),
        BATCH_MODEL: (
            config(
                BATCH_MODEL,
                fp32,
                fp32_out,
                f"dynamic_batching {{ preferred_batch_size: [ {BATCH_PREFERRED} ] "
                "max_queue_delay_microseconds: 30000000 }",
                max_batch_size=8,
            ),
            AddSub(),
        ),
        "pt_raises": (config("pt_raises", one_in, [("OUTPUT__0", "TYPE_FP32", "-1")]), Raises()),
        # the config says INT64 for what forward() returns as FP32: each request fails
        "pt_wrong_output_type": (config("pt_wrong_output_type", one_in, one_out), Doubles()),
        "pt_named_file": (
            config(
                "pt_named_file",
                [("INPUT__0", "TYPE_FP32", "-1")],
                [("OUTPUT__0", "TYPE_FP32", "-1")],
                'default_model_filename: "doubles.pt"',
            ),
            Doubles(),
        ),
        "pt_dict": (
            config(
                "pt_dict",
                [("A", "TYPE_FP32", "-1"), ("B", "TYPE_FP32", "-1")],
                [("OUTPUT__0", "TYPE_FP32", "-1")],
            ),
            DictInput(),
        ),
        "pt_counter": (config("pt_counter", one_in, one_out, counted), Counter()),
        "pt_counter_shared": (
            config(
                "pt_counter_shared",
                one_in,
                one_out,
                counted + "\n" + _params(ENABLE_WEIGHT_SHARING="true"),
            ),
            Counter(),
        ),
        "pt_modes": (
            config("pt_modes", one_in, [("OUTPUT__0", "TYPE_INT64", "2")]),
            Modes(),
        ),
        "pt_modes_grad": (
            config(
                "pt_modes_grad",
                one_in,
                [("OUTPUT__0", "TYPE_INT64", "2")],
                _params(
                    INFERENCE_MODE="false",
                    DISABLE_OPTIMIZED_EXECUTION="true",
                    ENABLE_JIT_EXECUTOR="false",
                    ENABLE_JIT_PROFILING="false",
                    ENABLE_TENSOR_FUSER="false",
                    INTRA_OP_THREAD_COUNT="1",
                    INTER_OP_THREAD_COUNT="1",
                    DISABLE_CUDNN="true",
                    ENABLE_CACHE_CLEANING="true",
                ),
            ),
            Modes(),
        ),
        # the pytorch_backend README's PyTorch 2 names, which Triton loads on TorchScript
        "pt_pt2_names": (
            config(
                "pt_pt2_names",
                one_in,
                [("OUTPUT__0", "TYPE_INT64", "2")],
                _params(
                    NUM_THREADS="1",
                    NUM_INTEROP_THREADS="1",
                    TORCH_COMPILE_OPTIONAL_PARAMETERS='{\\"disable\\": true}',
                ),
            ),
            Modes(),
        ),
    }


def bad_models() -> dict[str, tuple[str, torch.nn.Module | bytes | None]]:
    """Models whose load fails: name -> (config, module, raw bytes, or None for no file)."""
    one_in = [("INPUT__0", "TYPE_FP32", "-1")]
    one_out = [("OUTPUT__0", "TYPE_FP32", "-1")]

    def plain(
        name: str, inputs: Any = one_in, outputs: Any = one_out, extra: str = "", mbs: int = 0
    ) -> str:
        return config(name, inputs, outputs, extra, max_batch_size=mbs)

    return {
        "pt_bad_count": (
            plain("pt_bad_count", [*one_in, ("INPUT__1", "TYPE_FP32", "-1")]),
            Doubles(),
        ),
        "pt_bad_type": (plain("pt_bad_type", [("INPUT__0", "TYPE_UINT32", "-1")]), Doubles()),
        "pt_bad_string_dims": (
            plain("pt_bad_string_dims", [("INPUT__0", "TYPE_STRING", "2, 2")]),
            Doubles(),
        ),
        "pt_bad_index": (plain("pt_bad_index", [("INPUT__3", "TYPE_FP32", "-1")]), Doubles()),
        "pt_bad_argument": (
            plain("pt_bad_argument", [*one_in, ("INPUT__1", "TYPE_INT64", "1")]),
            TakesInt(),
        ),
        "pt_bad_no_file": (plain("pt_bad_no_file"), None),
        "pt_bad_not_torchscript": (plain("pt_bad_not_torchscript"), b"not a TorchScript archive"),
        "pt_bad_aoti": (
            plain("pt_bad_aoti").replace('backend: "pytorch"', 'platform: "torch_aoti"'),
            Doubles(),
        ),
        "pt_bad_runtime": (plain("pt_bad_runtime", extra='runtime: "model.py"'), Doubles()),
        "pt_bad_bool": (
            plain("pt_bad_bool", extra=_params(INFERENCE_MODE="maybe")),
            Doubles(),
        ),
        "pt_bad_no_inputs": ('name: "pt_bad_no_inputs"\nbackend: "pytorch"\n', Doubles()),
    }


def module_bytes(module: torch.nn.Module) -> bytes:
    """The module scripted and saved as TorchScript, Triton's format for the PyTorch backend
    (torch 2.13 calls TorchScript deprecated, in favour of torch.export, which Triton's
    libtorch backend does not load)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def write_model(root: Path, name: str, text: str, model: torch.nn.Module | bytes | None) -> None:
    """The model's folder; the file is named as the config's default_model_filename says."""
    (root / name / "1").mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(text)
    named = re.search(r'default_model_filename: "([^"]+)"', text)
    if model is not None:
        data = model if isinstance(model, bytes) else module_bytes(model)
        (root / name / "1" / (named[1] if named else "model.pt")).write_bytes(data)


def build(root: Path, models: dict[str, tuple[str, Any]]) -> Path:
    for name, (text, model) in models.items():
        write_model(root, name, text, model)
    return root
