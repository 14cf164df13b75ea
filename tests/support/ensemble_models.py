"""Ensemble test models, generated at test time into a model repository.

    from tests.support.ensemble_models import build_ensemble_repository
    repo = build_ensemble_repository(tmp_path / "repo")

Ensembles (``platform: "ensemble"``) and the small Python models only they use. Some
ensembles also step through models from elsewhere: the example ``add_sub_python``
(examples/model_repository) and the test models ``identity_fp32`` and ``raises``
(tests/support/models.py, written here too by ``build_ensemble_repository``). Lower-case tensor
names are an ensemble's internal tensors.

sum_diff             ensemble, max_batch_size 8: ``A``, ``B`` INT32 [16] -> ``add_sub_python``
                     -> ``SUM`` = A + B and ``DIFF`` = A - B (two outputs).
nested_sum_diff      ensemble, max_batch_size 8, whose first step is the ensemble ``sum_diff``:
                     ``A``, ``B`` -> sum_diff -> ``s``, ``d`` -> add_sub_python ->
                     ``TWICE_A`` = s + d, ``TWICE_B`` = s - d.
window_a, window_b   python, max_batch_size 0: ``X`` FP32 [1] -> ``WINDOW`` FP64 [2] =
                     [start, end] of ``time.time()`` around a sleep of WINDOW_SLEEP_S.
parallel_windows     ensemble: ``X`` -> window_a -> ``WINDOW_A`` and ``X`` -> window_b ->
                     ``WINDOW_B``: two independent steps.
failing_chain        ensemble: ``INPUT0`` FP32 [-1] -> identity_fp32 -> ``copy`` -> raises
                     (execute raises ValueError("boom from model")) -> ``OUTPUT0``.
batch_affine         python, max_batch_size 8, dynamic batching (max_queue_delay
                     BATCH_QUEUE_DELAY_US, preferred batch size 4), sleeps BATCH_SLEEP_S per
                     execution: ``X`` FP32 [4] -> ``Y`` = X * 2 + 1.
batched_affine       ensemble, max_batch_size 8: ``X`` -> batch_affine -> ``Y``.
count_up             python, **decoupled**: ``N`` INT32 [1] -> N responses from execute, the
                     i-th with ``INDEX`` = [i] INT32 [1], then a flag-only final.
square_int           python: ``VALUE`` INT32 [1] -> ``SQUARE`` = VALUE * VALUE.
streamed_squares     ensemble (decoupled, since its first step is): ``N`` -> count_up ->
                     ``INDEX`` (an ensemble output, also read by the next step) -> square_int
                     -> ``SQUARE``; one response per index, then the final flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .models import build_test_repository

WINDOW_SLEEP_S = 0.4
BATCH_SLEEP_S = 0.05
BATCH_QUEUE_DELAY_US = 20000
BATCH_PREFERRED = 4

# Models from tests/support/models.py that the ensembles below step through.
TEST_MODEL_DEPENDENCIES = ("identity_fp32", "raises")
# Models from examples/model_repository that the ensembles below step through.
EXAMPLE_MODEL_DEPENDENCIES = ("add_sub_python",)


# ------------------------------------------------------------------------- config helpers


def _io(kind: str, tensors: Iterable[tuple[str, str, list[int]]]) -> str:
    entries = ",\n".join(
        f'  {{ name: "{name}", data_type: {dtype}, dims: [ {", ".join(map(str, dims))} ] }}'
        for name, dtype, dims in tensors
    )
    return f"{kind} [\n{entries}\n]"


def _python_config(
    name: str,
    max_batch_size: int,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    extra: str = "",
) -> str:
    lines = [f'name: "{name}"', 'backend: "python"', f"max_batch_size: {max_batch_size}"]
    lines += [_io("input", inputs), _io("output", outputs)]
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """One ``ensemble_scheduling`` step: {model tensor: ensemble tensor} maps."""
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    body = "\n      ".join(maps)
    return f'    {{\n      model_name: "{model}"\n      model_version: -1\n      {body}\n    }}'


def _ensemble_config(
    name: str,
    max_batch_size: int,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    steps: list[str],
) -> str:
    lines = [f'name: "{name}"', 'platform: "ensemble"', f"max_batch_size: {max_batch_size}"]
    lines += [_io("input", inputs), _io("output", outputs)]
    lines.append("ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- model.py sources
# Two optional inputs; answers only the outputs of the inputs it got (a negative value fails).
_OPTIONAL_ECHO_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ], optional: true },
        { name: "INPUT1", data_type: TYPE_FP32, dims: [ 1 ], optional: true } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] },
         { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
_OPTIONAL_ECHO_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            outs = []
            for i in ("0", "1"):
                t = pb_utils.get_input_tensor_by_name(r, "INPUT" + i)
                if t is not None:
                    if (t.as_numpy() < 0).any():
                        raise ValueError("negative input")
                    outs.append(pb_utils.Tensor("OUTPUT" + i, t.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outs))
        return responses
"""
# Two optional_echo steps connected on both tensors, and no "name:" (Triton names it after its
# directory): a tensor the first step does not produce is left out of the second's request.
_OPTIONAL_CHAIN = """\
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ], optional: true },
        { name: "INPUT1", data_type: TYPE_FP32, dims: [ 1 ], optional: true } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] },
         { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "optional_echo" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
    output_map { key: "OUTPUT0" value: "mid0" } output_map { key: "OUTPUT1" value: "mid1" } },
  { model_name: "optional_echo" model_version: -1
    input_map { key: "INPUT0" value: "mid0" } input_map { key: "INPUT1" value: "mid1" }
    output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }
] }
"""

_WINDOW_PY = f'''\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """WINDOW = [start, end]: time.time() before and after sleeping {WINDOW_SLEEP_S} s."""

    def execute(self, requests):
        responses = []
        for _request in requests:
            started = time.time()
            time.sleep({WINDOW_SLEEP_S!r})
            window = np.array([started, time.time()], dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("WINDOW", window)]))
        return responses
'''

_BATCH_AFFINE_PY = f'''\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Y = X * 2 + 1 for every request of the batch, after one sleep per execution."""

    def execute(self, requests):
        time.sleep({BATCH_SLEEP_S!r})
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = (x * np.float32(2) + np.float32(1)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
'''

_COUNT_UP_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled: N responses, the i-th with INDEX = [i], then a flag-only final."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            for i in range(n):
                index = pb_utils.Tensor("INDEX", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([index]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

_STAMP_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """STAMP = WINDOW (an identity: its statistics tell whether it ran)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            window = pb_utils.get_input_tensor_by_name(request, "WINDOW").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("STAMP", window)]))
        return responses
'''

_SQUARE_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """SQUARE = VALUE * VALUE."""

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            square = pb_utils.Tensor("SQUARE", (value * value).astype(np.int32))
            responses.append(pb_utils.InferenceResponse([square]))
        return responses
'''

# ------------------------------------------------------------------------- model table

_INT32_16 = ("TYPE_INT32", [16])
_FP32_4 = ("TYPE_FP32", [4])


def _python_models() -> dict[str, dict[str, str]]:
    def window(name: str) -> dict[str, str]:
        io = ([("X", "TYPE_FP32", [1])], [("WINDOW", "TYPE_FP64", [2])])
        return {"config.pbtxt": _python_config(name, 0, *io), "1/model.py": _WINDOW_PY}

    batching = (
        "dynamic_batching {\n"
        f"  preferred_batch_size: [ {BATCH_PREFERRED} ]\n"
        f"  max_queue_delay_microseconds: {BATCH_QUEUE_DELAY_US}\n"
        "}"
    )
    return {
        "window_a": window("window_a"),
        "window_b": window("window_b"),
        "batch_affine": {
            "config.pbtxt": _python_config(
                "batch_affine", 8, [("X", *_FP32_4)], [("Y", *_FP32_4)], batching
            ),
            "1/model.py": _BATCH_AFFINE_PY,
        },
        "count_up": {
            "config.pbtxt": _python_config(
                "count_up",
                0,
                [("N", "TYPE_INT32", [1])],
                [("INDEX", "TYPE_INT32", [1])],
                "model_transaction_policy { decoupled: true }",
            ),
            "1/model.py": _COUNT_UP_PY,
        },
        "stamp": {
            "config.pbtxt": _python_config(
                "stamp", 0, [("WINDOW", "TYPE_FP64", [2])], [("STAMP", "TYPE_FP64", [2])]
            ),
            "1/model.py": _STAMP_PY,
        },
        "optional_echo": {"config.pbtxt": _OPTIONAL_ECHO_CONFIG, "1/model.py": _OPTIONAL_ECHO_PY},
        "square_int": {
            "config.pbtxt": _python_config(
                "square_int", 0, [("VALUE", "TYPE_INT32", [1])], [("SQUARE", "TYPE_INT32", [1])]
            ),
            "1/model.py": _SQUARE_PY,
        },
    }


def _ensembles() -> dict[str, str]:
    add_sub = "add_sub_python"
    return {
        "sum_diff": _ensemble_config(
            "sum_diff",
            8,
            [("A", *_INT32_16), ("B", *_INT32_16)],
            [("SUM", *_INT32_16), ("DIFF", *_INT32_16)],
            [
                _step(
                    add_sub,
                    {"INPUT0": "A", "INPUT1": "B"},
                    {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"},
                )
            ],
        ),
        "nested_sum_diff": _ensemble_config(
            "nested_sum_diff",
            8,
            [("A", *_INT32_16), ("B", *_INT32_16)],
            [("TWICE_A", *_INT32_16), ("TWICE_B", *_INT32_16)],
            [
                _step("sum_diff", {"A": "A", "B": "B"}, {"SUM": "s", "DIFF": "d"}),
                _step(
                    add_sub,
                    {"INPUT0": "s", "INPUT1": "d"},
                    {"OUTPUT0": "TWICE_A", "OUTPUT1": "TWICE_B"},
                ),
            ],
        ),
        "parallel_windows": _ensemble_config(
            "parallel_windows",
            0,
            [("X", "TYPE_FP32", [1])],
            [("WINDOW_A", "TYPE_FP64", [2]), ("WINDOW_B", "TYPE_FP64", [2])],
            [
                _step("window_a", {"X": "X"}, {"WINDOW": "WINDOW_A"}),
                _step("window_b", {"X": "X"}, {"WINDOW": "WINDOW_B"}),
            ],
        ),
        "slow_chain": _ensemble_config(
            "slow_chain",
            0,
            [("X", "TYPE_FP32", [1])],
            [("STAMP", "TYPE_FP64", [2])],
            [
                _step("window_a", {"X": "X"}, {"WINDOW": "w"}),
                _step("stamp", {"WINDOW": "w"}, {"STAMP": "STAMP"}),
            ],
        ),
        "failing_chain": _ensemble_config(
            "failing_chain",
            0,
            [("INPUT0", "TYPE_FP32", [-1])],
            [("OUTPUT0", "TYPE_FP32", [-1])],
            [
                _step("identity_fp32", {"INPUT0": "INPUT0"}, {"OUTPUT0": "copy"}),
                _step("raises", {"INPUT0": "copy"}, {"OUTPUT0": "OUTPUT0"}),
            ],
        ),
        "batched_affine": _ensemble_config(
            "batched_affine",
            8,
            [("X", *_FP32_4)],
            [("Y", *_FP32_4)],
            [_step("batch_affine", {"X": "X"}, {"Y": "Y"})],
        ),
        "optional_chain": _OPTIONAL_CHAIN,
        "streamed_squares": _ensemble_config(
            "streamed_squares",
            0,
            [("N", "TYPE_INT32", [1])],
            [("INDEX", "TYPE_INT32", [1]), ("SQUARE", "TYPE_INT32", [1])],
            [
                _step("count_up", {"N": "N"}, {"INDEX": "INDEX"}),
                _step("square_int", {"VALUE": "INDEX"}, {"SQUARE": "SQUARE"}),
            ],
        ),
    }


PYTHON_MODELS: tuple[str, ...] = tuple(_python_models())
ENSEMBLES: tuple[str, ...] = tuple(_ensembles())


def build_ensemble_repository(root: Path) -> Path:
    """Write every model of this module, plus TEST_MODEL_DEPENDENCIES, under ``root``.

    The ensembles also need EXAMPLE_MODEL_DEPENDENCIES: serve an example repository next to
    this one. Each ensemble gets an empty version folder ``1/``. Returns ``root``."""
    root = Path(root)
    build_test_repository(root, TEST_MODEL_DEPENDENCIES)
    for name, files in _python_models().items():
        for rel, text in files.items():
            path = root / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for name, config in _ensembles().items():
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(config, encoding="utf-8")
    return root
