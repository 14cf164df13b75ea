"""The ``sequence`` list's models, written into the bench's copy of the repository only: each
base model under three configs, ``<base>_direct`` and ``<base>_oldest`` (``sequence_batching``
with that strategy, one instance), ``<base>_direct64`` (direct on 8 instances: 64 slots, every
lane's sequence holds one) and ``<base>_stateless`` (the same model file without sequence batching,
``dynamic_batching { }`` instead, the controls or the state as ordinary inputs the client
sends).

The model files come from the example repository when it has them (``simple_sequence``'s
``model.py``, ``running_sum_onnx``'s ``model.onnx``); until then the bench writes its own with
the same contract (``FALLBACK_MODEL_PY``, ``running_sum_graph``). ``SOURCES`` says which was
used (the report shows it)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

SIMPLE, RUNNING_SUM = "simple_sequence", "running_sum_onnx"
DIRECT, DIRECT64, OLDEST, STATELESS = "direct", "direct64", "oldest", "stateless"
VARIANTS = (DIRECT, DIRECT64, OLDEST, STATELESS)
MAX_BATCH = 8  # both models: 8 slots per instance (direct), batches of up to 8
WIDE = 8  # direct64's instances: 8 × 8 slots
CANDIDATES = 64  # oldest: max_candidate_sequences, every lane's sequence a candidate
IDLE_US = 5_000_000  # max_sequence_idle_microseconds
STATE_DIMS = 4  # running_sum_onnx: FP32 [4] input, output and state
# base model -> where its model file came from (filled by ``build_models``)
SOURCES: dict[str, str] = {}


@dataclass(frozen=True)
class Variant:
    base: str
    strategy: str  # one of VARIANTS

    @property
    def name(self) -> str:
        return f"{self.base}_{self.strategy}"

    @property
    def instances(self) -> int:
        return WIDE if self.strategy == DIRECT64 else 1

    def instance_group(self) -> str:
        return f"instance_group [ {{ kind: KIND_CPU count: {self.instances} }} ]\n"


def split_name(model: str) -> tuple[str, str]:
    """``simple_sequence_oldest`` → (``simple_sequence``, ``oldest``); a name of no variant →
    (model, "")."""
    base, _, strategy = model.rpartition("_")
    return (base, strategy) if base and strategy in VARIANTS else (model, "")


# ---------------------------------------------------------------------------------------------
# config.pbtxt of each variant
# ---------------------------------------------------------------------------------------------
def _tensor(name: str, dtype: str, dims: int) -> str:
    return f'  {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}'


def _tensors(kind: str, tensors: list[str]) -> str:
    return f"{kind} [\n" + ",\n".join(tensors) + "\n]\n"


def _control(name: str, kind: str) -> str:
    return f'    {{ name: "{name}" control [ {{ kind: {kind} int32_false_true: [ 0, 1 ] }} ] }}'


def strategy_block(strategy: str) -> str:
    """The strategy inside ``sequence_batching``: direct (``max_batch_size`` slots per
    instance, the other sequences in the backlog) or oldest (every lane's sequence a
    candidate, batches of what is ready, no queue delay)."""
    if strategy in (DIRECT, DIRECT64):
        return "  direct { }\n"
    return f"  oldest {{ max_candidate_sequences: {CANDIDATES} }}\n"


def simple_config(variant: Variant) -> str:
    """``simple_sequence``: INPUT INT32 [1] → OUTPUT INT32 [1], START and READY INT32 controls
    (Triton's contract); stateless: START and READY are inputs the client sends."""
    inputs = [_tensor("INPUT", "TYPE_INT32", 1)]
    head = f'name: "{variant.name}"\nbackend: "python"\nmax_batch_size: {MAX_BATCH}\n'
    if variant.strategy == STATELESS:
        inputs += [_tensor("START", "TYPE_INT32", 1), _tensor("READY", "TYPE_INT32", 1)]
        batching = "dynamic_batching { }\n"
    else:
        controls = [
            _control("START", "CONTROL_SEQUENCE_START"),
            _control("READY", "CONTROL_SEQUENCE_READY"),
        ]
        batching = (
            "sequence_batching {\n"
            f"  max_sequence_idle_microseconds: {IDLE_US}\n"
            + strategy_block(variant.strategy)
            + "  control_input [\n"
            + ",\n".join(controls)
            + "\n  ]\n}\n"
        )
    return (
        head
        + batching
        + _tensors("input", inputs)
        + _tensors("output", [_tensor("OUTPUT", "TYPE_INT32", 1)])
        + variant.instance_group()
    )


def running_sum_config(variant: Variant) -> str:
    """``running_sum_onnx``: OUTPUT = INPUT + state, FP32 [4]; the state INPUT_STATE →
    OUTPUT_STATE kept by the server (``sequence_batching.state``, zeros at START), or, stateless,
    an ordinary input and output the client sends and reads."""
    inputs = [_tensor("INPUT", "TYPE_FP32", STATE_DIMS)]
    outputs = [_tensor("OUTPUT", "TYPE_FP32", STATE_DIMS)]
    head = f'name: "{variant.name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {MAX_BATCH}\n'
    if variant.strategy == STATELESS:
        inputs.append(_tensor("INPUT_STATE", "TYPE_FP32", STATE_DIMS))
        outputs.append(_tensor("OUTPUT_STATE", "TYPE_FP32", STATE_DIMS))
        batching = "dynamic_batching { }\n"
    else:
        batching = (
            "sequence_batching {\n"
            f"  max_sequence_idle_microseconds: {IDLE_US}\n"
            + strategy_block(variant.strategy)
            + '  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE"\n'
            f"    data_type: TYPE_FP32 dims: [ {STATE_DIMS} ]\n"
            '    initial_state { name: "zeros" data_type: TYPE_FP32 '
            f"dims: [ {STATE_DIMS} ] zero_data: true }} }} ]\n"
            "}\n"
        )
    return (
        head
        + batching
        + _tensors("input", inputs)
        + _tensors("output", outputs)
        + variant.instance_group()
    )


# ---------------------------------------------------------------------------------------------
# The model files: the example's, or the bench's own with the same contract
# ---------------------------------------------------------------------------------------------
FALLBACK_MODEL_PY = '''"""simple_sequence's contract (Triton's example graph):
OUTPUT = READY * (INPUT + START), INT32; START and READY are the sequence batcher's controls
(or, stateless, inputs)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value, start, ready = (
                pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                for name in ("INPUT", "START", "READY")
            )
            output = np.multiply(ready, np.add(value, start, dtype=np.int32), dtype=np.int32)
            out = pb_utils.Tensor("OUTPUT", output)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


def running_sum_graph() -> object:
    """OUTPUT = OUTPUT_STATE = INPUT + INPUT_STATE, FP32 [batch, 4] (opset 17, IR 8 as
    examples/build_models.py)."""
    from onnx import TensorProto, checker, helper

    shape = ["batch", STATE_DIMS]

    def value(name: str) -> object:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["sum"]),
            helper.make_node("Identity", ["sum"], ["OUTPUT"]),
            helper.make_node("Identity", ["sum"], ["OUTPUT_STATE"]),
        ],
        RUNNING_SUM,
        [value("INPUT"), value("INPUT_STATE")],
        [value("OUTPUT"), value("OUTPUT_STATE")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    checker.check_model(model)
    return model


def _model_file(repo: Path, base: str, file_name: str, staging: Path) -> Path:
    """The example's model file, or the bench's own written to ``staging``."""
    example = repo / base / "1" / file_name
    if example.is_file():
        SOURCES[base] = f"examples/model_repository/{base}/1/{file_name}"
        return example
    staging.mkdir(parents=True, exist_ok=True)
    path = staging / file_name
    if base == SIMPLE:
        path.write_text(FALLBACK_MODEL_PY)
    else:
        from onnx import save_model

        save_model(running_sum_graph(), str(path))
    SOURCES[base] = f"the bench's own (bench/scenarios/sequence_models.py; no {base} example)"
    return path


CONFIGS = {SIMPLE: (simple_config, "model.py"), RUNNING_SUM: (running_sum_config, "model.onnx")}


def build_models(repo: Path) -> None:
    """Every variant of both base models, in the bench's repository only."""
    for base, (config, file_name) in CONFIGS.items():
        source = _model_file(repo, base, file_name, repo.parent / "sequence-staging" / base)
        for strategy in VARIANTS:
            variant = Variant(base, strategy)
            (repo / variant.name / "1").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, repo / variant.name / "1" / file_name)
            (repo / variant.name / "config.pbtxt").write_text(config(variant))
