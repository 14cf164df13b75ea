"""Test-only behaviour models, generated at test time into a model repository.

    from tests.support.models import build_test_repository
    repo = build_test_repository(tmp_path / "repo", ["identity_fp32", "raises"])

Every model is written from Python strings below (Triton-style ``config.pbtxt``
and ``<version>/model.py``); the ONNX ones are generated with the ``onnx``
package (imported only when an ONNX model is requested).

Unless stated otherwise a model takes ``INPUT0`` and returns ``OUTPUT0`` with
``max_batch_size: 0``:

identity_<dtype>     python; INPUT0 -> OUTPUT0 unchanged, dims [-1], one model per
                     Triton data type: identity_bool, identity_uint8, identity_uint16,
                     identity_uint32, identity_uint64, identity_int8, identity_int16,
                     identity_int32, identity_int64, identity_fp16, identity_fp32,
                     identity_fp64, identity_bf16, identity_bytes (TYPE_STRING).
                     ``IDENTITY_MODELS`` maps wire datatype ("FP32", "BYTES", ...) -> name.
identity_onnx_fp32   onnxruntime; ONNX Identity, FP32 [-1].
identity_onnx_queued onnxruntime; ONNX Identity, FP32 [-1] with max_batch_size 8 and dynamic
                     batching (preferred batch 8, max_queue_delay 2 s): a lone request waits
                     2 s in the queue.
identity_onnx_nocfg  onnxruntime, NO config.pbtxt: INPUT0 FP32 [batch, 4] ->
                     OUTPUT0 = INPUT0 * 2 (ONNX shapes ["batch", 4]).
onnx_partial_cfg     the same ONNX model; config.pbtxt is only
                     ``backend: "onnxruntime"`` + ``max_batch_size: 2``.
raises               python; execute raises ValueError("boom from model"). FP32 [-1].
error_response       python; every response is
                     InferenceResponse(error=TritonError("bad things")). FP32 [-1].
crash_exit           python; execute calls os._exit(3). FP32 [-1].
crash_segv           python; execute segfaults (ctypes.string_at(0)). FP32 [-1].
async_add_sub        python, ``async def execute``; INPUT0/INPUT1 INT32 [16] ->
                     OUTPUT0 = sum, OUTPUT1 = difference, max_batch_size 8.
bad_config           config.pbtxt syntax error on line BAD_CONFIG_LINE (3):
                     ``max_batch_size: "x"``.
bad_field            config.pbtxt with unknown field ``foo_bar: 1`` on line
                     BAD_FIELD_LINE (4).
bad_init             python; initialize raises RuntimeError("init failed on purpose").
versioned_latest     python, versions 1, 2, 3; INPUT0 INT32 [1] -> OUTPUT0 = INPUT0 *
                     version. Default version policy (latest 1 -> only 3 served).
versioned_all        same, ``version_policy: { all: {} }`` (1, 2, 3 served).
versioned_specific   same, ``version_policy: { specific: { versions: [1, 3] } }``.
slow                 python; sleeps SLOW_SECONDS (0.5 s), then echoes. FP32 [-1].
is_ready_false       python; identity FP32 [-1] whose ``is_ready()`` returns False.
sender_two_step      python, not decoupled; answers OUTPUT0 = INPUT0 * 3 through the response
                     sender (response, then a flag-only final); FP32 [-1].
scalar_reshape       python; INPUT0/OUTPUT0 FP32 dims [1] with ``reshape: { shape: [] }``:
                     the model sees and returns scalars, clients send and get shape [1].
autocomplete_py      python; config.pbtxt names only the backend, the model's
                     ``auto_complete_config`` adds max_batch_size 4, INPUT0/OUTPUT0 FP32 [3]
                     and dynamic batching; OUTPUT0 = INPUT0 + 1.

Streaming and decoupled models (``model_transaction_policy { decoupled: true }``):

decoupled_raises     python, decoupled; execute raises ValueError("decoupled boom").
                     INT32 [-1].
decoupled_error_response
                     python, decoupled; per request one response carrying
                     TritonError("stream bad"), then a flag-only final. INT32 [-1].
slow_identity_int32  python, NOT decoupled, SLOW_IDENTITY_INSTANCES (4) instances;
                     INPUT0 INT32 [-1] -> OUTPUT0 unchanged after sleeping INPUT0[0] ms, so
                     a later request can finish before an earlier one.
text_echo            python; ``text_input`` STRING [1] -> ``text_output`` STRING [1] = the
                     input reversed (bytes). For HTTP ``generate``.
text_stream          python, decoupled; ``text_input`` STRING [1] -> one response per
                     whitespace-separated word, ``text_output`` = that word, then a
                     flag-only final. For HTTP ``generate_stream``.
parameters_echo      python; INPUT0 INT32 [-1] -> OUTPUT0 STRING [1] = the request's
                     ``parameters()`` JSON text as the model sees it (custom parameters and
                     forwarded headers).

Stub supervision (restarts, execution timeout, shutdown of a stuck model):

stuck                python; execute never returns (sleeps forever). FP32 [-1].
crash_on_negative    python; identity FP32 [-1], except that a request whose INPUT0[0] is
                     negative kills its own stub with SIGKILL, after sleeping INPUT0[1]
                     seconds when given ([-1] dies at once, [-1, 2] after 2 s).
crash_on_negative_x2 the same with CRASH_X2_INSTANCES (2) instances.
hang_on_negative     python; identity FP32 [-1] with config parameter EXECUTION_TIMEOUT_SECS
                     = HANG_TIMEOUT_SECS (1); a request whose INPUT0[0] is negative never
                     returns from execute.

Sequence batching (``sequence_batching``; every one is the python ``seq_probe`` source below,
except ``seq_state_onnx``). INPUT0 INT32 [1]; outputs OUTPUT0 INT32 [1] (= INPUT0, plus the
implicit state when the model has one), SEEN INT64 [13] (the fields ``SEEN_FIELDS`` name:
the START / END / READY / CORRID control values the request got, its slot (= index in
``requests``), ``correlation_id()`` and ``flags()``, len(requests), a bit mask of the batch
positions holding READY=false fillers, how many fillers were not clean (START/END/CORRID/INPUT0
not all zero), the model's accumulator after this step, the stub's pid, the execution number),
CORRID_OUT STRING [1] (the CORRID control as text) and ID_OUT STRING [1]
(``str(correlation_id())``). Integer fields that do not fit (string IDs, ids >= 2**63) are -1.
The accumulator sums INPUT0 per key (``ACC_KEY``: the slot, or the CORRID value), reset by
START=1, skipped for fillers. Controls unless said: START int32_false_true, END
fp32_false_true, READY bool_false_true, CORRID TYPE_UINT64; max_sequence_idle_microseconds
SEQ_IDLE_US (30 s) unless said.

seq_echo_direct      direct, max_batch_size 4, one instance, ACC_KEY slot.
seq_echo_string      the same with CORRID TYPE_STRING.
seq_echo_oldest      oldest (max_candidate_sequences 8, preferred_batch_size [4],
                     max_queue_delay_microseconds 100000), ACC_KEY corrid, sleeps 10 ms an
                     execution so batches form.
seq_echo_x2          direct, max_batch_size 2, SEQ_X2_INSTANCES (2) instances, sleeps 10 ms.
seq_echo_idle        seq_echo_direct with max_sequence_idle_microseconds SEQ_SHORT_IDLE_US
                     (200 ms).
seq_echo_delay       seq_echo_direct with direct { max_queue_delay_microseconds
                     SEQ_DIRECT_DELAY_US (5 s), minimum_slot_utilization 0.5 }: a batch waits
                     until two of the four slots have a request.
seq_one_slot         direct, max_batch_size 0: one slot, so a second sequence waits in the
                     backlog.
seq_abandon          oldest (max_candidate_sequences 2048, preferred_batch_size [64],
                     max_queue_delay_microseconds 2000), max_batch_size 64, idle
                     SEQ_SHORT_IDLE_US, no accumulator, INT32 implicit state: for the test of
                     thousands of abandoned sequences.
seq_state_py         direct, max_batch_size 4, no CORRID control; implicit state STATE_IN ->
                     STATE_OUT INT32 [1], initial_state zero_data: OUTPUT0 = INPUT0 + STATE_IN,
                     STATE_OUT = OUTPUT0 (a running sum kept by the server).
seq_state_file       the same with max_batch_size 0 and initial_state data_file
                     ``initial_state/init.bin`` = SEQ_INITIAL_STATE (100) as INT32.
seq_state_onnx       onnxruntime, direct, max_batch_size 4, no controls; INPUT0 FP32 [1];
                     the graph computes OUTPUT0 = INPUT0 + STATE_IN and STATE_OUT = OUTPUT0
                     (implicit state FP32 [1], zero_data).

classify_batched     the classification extension's model with a label file: see
                     tests/support/classify_models.py.
BLS (Python models calling other models: ``bls_*``): tests/support/bls_models.py documents them.
Hostile models (``hostile_*``: each may only hurt itself): testkit/hostile_models.py.
What Triton's Python-backend QA relies on (``qa_*``): tests/support/qa_models.py documents them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from .classify_models import CLASSIFY_SPECS
from testkit.hostile_models import HOSTILE_SPECS
from .bls_models import BLS_SPECS
from .qa_models import QA_SPECS
from .sequence_models import SEQUENCE_SPECS

# ----------------------------------------------------------------------------------
# Public constants
# ----------------------------------------------------------------------------------

# wire datatype -> (config data_type, model name)
_IDENTITY_TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
    "BF16": "TYPE_BF16",
    "BYTES": "TYPE_STRING",
}
IDENTITY_MODELS: dict[str, str] = {dt: f"identity_{dt.lower()}" for dt in _IDENTITY_TYPES}

BAD_CONFIG_LINE = 3  # line of the syntax error in bad_config/config.pbtxt
BAD_FIELD_LINE = 4  # line of the unknown field in bad_field/config.pbtxt
SLOW_SECONDS = 0.5
VERSIONS = (1, 2, 3)
SLOW_IDENTITY_INSTANCES = 4
CRASH_X2_INSTANCES = 2
HANG_TIMEOUT_SECS = 1

ONNX_OPSET = 17
ONNX_IR_VERSION = 8

# ----------------------------------------------------------------------------------
# config.pbtxt helpers
# ----------------------------------------------------------------------------------


def _tensor(name: str, data_type: str, dims: Iterable[int]) -> str:
    dims_text = ", ".join(str(d) for d in dims)
    return f'  {{\n    name: "{name}"\n    data_type: {data_type}\n    dims: [ {dims_text} ]\n  }}'


def _config(
    name: str,
    backend: str,
    max_batch_size: int,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    extra: str = "",
) -> str:
    lines = [
        f'name: "{name}"',
        f'backend: "{backend}"',
        f"max_batch_size: {max_batch_size}",
    ]
    if extra:
        lines.append(extra.rstrip("\n"))
    lines.append("input [\n" + ",\n".join(_tensor(*t) for t in inputs) + "\n]")
    lines.append("output [\n" + ",\n".join(_tensor(*t) for t in outputs) + "\n]")
    return "\n".join(lines) + "\n"


def _unary_config(
    name: str,
    data_type: str,
    dims: list[int],
    backend: str = "python",
    max_batch_size: int = 0,
    extra: str = "",
) -> str:
    return _config(
        name,
        backend,
        max_batch_size,
        [("INPUT0", data_type, dims)],
        [("OUTPUT0", data_type, dims)],
        extra,
    )


def _add_sub_config(name: str) -> str:
    io = ("TYPE_INT32", [16])
    return _config(
        name,
        "python",
        8,
        [("INPUT0", *io), ("INPUT1", *io)],
        [("OUTPUT0", *io), ("OUTPUT1", *io)],
    )


# ----------------------------------------------------------------------------------
# model.py sources
# ----------------------------------------------------------------------------------

_IDENTITY_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns INPUT0 unchanged as OUTPUT0 (same array, same dtype)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out_0 = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
'''

_RAISES_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("boom from model")
"""

_ERROR_RESPONSE_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for _request in requests:
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError("bad things")
                )
            )
        return responses
"""

_CRASH_EXIT_PY = """\
import os

import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        os._exit(3)
"""

_CRASH_SEGV_PY = """\
import ctypes

import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        ctypes.string_at(0)  # reads address 0: a real SIGSEGV
        return []
"""

_ASYNC_ADD_SUB_PY = """\
import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    async def execute(self, requests):
        await asyncio.sleep(0)
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out_0 = pb_utils.Tensor("OUTPUT0", (in_0 + in_1).astype(self.output0_dtype))
            out_1 = pb_utils.Tensor("OUTPUT1", (in_0 - in_1).astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0, out_1]))
        return responses
"""

_BAD_INIT_PY = """\
import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("init failed on purpose")

    def execute(self, requests):
        return []
"""

_VERSIONED_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils

VERSION = {version}


class TritonPythonModel:
    """Version {version}: OUTPUT0 = INPUT0 * {version}."""

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out_0 = pb_utils.Tensor("OUTPUT0", (in_0 * VERSION).astype(np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
'''

_SLOW_PY = f"""\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLOW_SECONDS!r})
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out_0 = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
"""

_IS_READY_FALSE_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def is_ready(self):
        return False

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out_0 = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
"""

# ----------------------------------------------------------------------------------
# ONNX models
# ----------------------------------------------------------------------------------


def _onnx_identity_fp32() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_onnx_fp32",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N"])],
    )
    return _onnx_bytes(graph)


def _onnx_identity_fp32_batched() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_onnx_queued",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["B", "N"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["B", "N"])],
    )
    return _onnx_bytes(graph)


def _onnx_times_two() -> bytes:
    """INPUT0 FP32 [batch, 4] -> OUTPUT0 = INPUT0 * 2 (for auto-complete tests)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT0"])],
        "times_two",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 4])],
        initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    return _onnx_bytes(graph)


def _onnx_bytes(graph) -> bytes:
    import onnx
    from onnx import helper

    model = helper.make_model(
        graph,
        producer_name="tritium-tests",
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=ONNX_IR_VERSION,
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


# ----------------------------------------------------------------------------------
# Model table
# ----------------------------------------------------------------------------------

# A model is {relative path: text or bytes (or a zero-arg callable producing them)}.
_Content = str | bytes | Callable[[], bytes]
_Spec = Callable[[str], dict[str, _Content]]


def _python(config: str, source: str) -> dict[str, _Content]:
    return {"config.pbtxt": config, "1/model.py": source}


def _fp32_python(source: str) -> _Spec:
    return lambda name: _python(_unary_config(name, "TYPE_FP32", [-1]), source)


def _identity(data_type: str) -> _Spec:
    return lambda name: _python(_unary_config(name, data_type, [-1]), _IDENTITY_PY)


def _versioned(extra: str) -> _Spec:
    def spec(name: str) -> dict[str, _Content]:
        files: dict[str, _Content] = {
            "config.pbtxt": _unary_config(name, "TYPE_INT32", [1], extra=extra),
        }
        for v in VERSIONS:
            files[f"{v}/model.py"] = _VERSIONED_PY.format(version=v)
        return files

    return spec


def _bad_config(name: str) -> dict[str, _Content]:
    config = f'name: "{name}"\nbackend: "python"\nmax_batch_size: "x"\n'
    assert config.splitlines()[BAD_CONFIG_LINE - 1].startswith("max_batch_size")
    return _python(config, _IDENTITY_PY)


def _bad_field(name: str) -> dict[str, _Content]:
    good = _unary_config(name, "TYPE_FP32", [-1]).splitlines(keepends=True)
    config = "".join(good[: BAD_FIELD_LINE - 1] + ["foo_bar: 1\n"] + good[BAD_FIELD_LINE - 1 :])
    assert config.splitlines()[BAD_FIELD_LINE - 1] == "foo_bar: 1"
    return _python(config, _IDENTITY_PY)


_SCALAR_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Receives INPUT0 as a true scalar (config reshape: []) and answers a scalar too."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.shape != ():
                raise ValueError(f"expected a scalar, got shape {x.shape}")
            out = np.asarray(x * 2, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''

_AUTOCOMPLETE_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Its config.pbtxt names only the backend: everything else comes from here."""

    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + 1)])
            for r in requests
        ]
'''

_SCALAR_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } } ]
"""

_SENDER_TWO_STEP_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Not decoupled, but answers through the response sender: the response, then a
    flag-only final send; execute returns None."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 3)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

_SPECS: dict[str, _Spec] = {
    **{IDENTITY_MODELS[dt]: _identity(ct) for dt, ct in _IDENTITY_TYPES.items()},
    "identity_onnx_fp32": lambda name: {
        "config.pbtxt": _unary_config(name, "TYPE_FP32", [-1], backend="onnxruntime"),
        "1/model.onnx": _onnx_identity_fp32,
    },
    "identity_onnx_queued": lambda name: {
        "config.pbtxt": _unary_config(
            name,
            "TYPE_FP32",
            [-1],
            backend="onnxruntime",
            max_batch_size=8,
            extra="dynamic_batching { preferred_batch_size: [ 8 ] "
            "max_queue_delay_microseconds: 2000000 }",
        ),
        "1/model.onnx": _onnx_identity_fp32_batched,
    },
    "identity_onnx_nocfg": lambda name: {"1/model.onnx": _onnx_times_two},
    "onnx_partial_cfg": lambda name: {
        "config.pbtxt": 'backend: "onnxruntime"\nmax_batch_size: 2\n',
        "1/model.onnx": _onnx_times_two,
    },
    "raises": _fp32_python(_RAISES_PY),
    "error_response": _fp32_python(_ERROR_RESPONSE_PY),
    "crash_exit": _fp32_python(_CRASH_EXIT_PY),
    "crash_segv": _fp32_python(_CRASH_SEGV_PY),
    "async_add_sub": lambda name: _python(_add_sub_config(name), _ASYNC_ADD_SUB_PY),
    "bad_config": _bad_config,
    "bad_field": _bad_field,
    "bad_init": _fp32_python(_BAD_INIT_PY),
    "versioned_latest": _versioned(""),
    "versioned_all": _versioned("version_policy: { all: {} }"),
    "versioned_specific": _versioned("version_policy: { specific: { versions: [1, 3] } }"),
    "slow": _fp32_python(_SLOW_PY),
    "is_ready_false": _fp32_python(_IS_READY_FALSE_PY),
    "scalar_reshape": lambda name: _python(_SCALAR_CONFIG, _SCALAR_PY),
    "sender_two_step": _fp32_python(_SENDER_TWO_STEP_PY),
    "autocomplete_py": lambda name: _python('backend: "python"\n', _AUTOCOMPLETE_PY),
}

# ----------------------------------------------------------------------------------
# Streaming and decoupled models
# ----------------------------------------------------------------------------------

_DECOUPLED = "model_transaction_policy { decoupled: true }"

_DECOUPLED_RAISES_PY = """\
import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("decoupled boom")
"""

_DECOUPLED_ERROR_RESPONSE_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("stream bad")))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_SLOW_IDENTITY_PY = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"OUTPUT0 = INPUT0, after sleeping INPUT0[0] milliseconds.\"\"\"

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if in_0.size:
                time.sleep(max(int(in_0.reshape(-1)[0]), 0) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in_0)]))
        return responses
"""

_TEXT_ECHO_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"text_output = text_input reversed (each element, as bytes).\"\"\"

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            out = np.array([bytes(t)[::-1] for t in text.reshape(-1)], dtype=object)
            out = out.reshape(text.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", out)]))
        return responses
"""

_TEXT_STREAM_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"One response per word of text_input (text_output = the word), then the final flag.\"\"\"

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            for word in bytes(text.reshape(-1)[0]).split():
                out = pb_utils.Tensor("text_output", np.array([word], dtype=object))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


_REQUEST_OPTIONS_PY = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"OUTPUT0 = [flags(), timeout(), correlation_id() (-1 when a string), the number of
    parameters]: what the server tells a model of its request's options.\"\"\"

    def execute(self, requests):
        responses = []
        for request in requests:
            corr = request.correlation_id()
            values = [
                request.flags(),
                request.timeout(),
                corr if isinstance(corr, int) else -1,
                len(json.loads(request.parameters())),
            ]
            out = pb_utils.Tensor("OUTPUT0", np.array(values, dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


_PARAMETERS_ECHO_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"OUTPUT0 = [the request's parameters() JSON text].\"\"\"

    def execute(self, requests):
        responses = []
        for request in requests:
            text = request.parameters().encode("utf-8")
            out = pb_utils.Tensor("OUTPUT0", np.array([text], dtype=object))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


def _parameters_echo(name: str) -> dict[str, _Content]:
    config = _config(
        name, "python", 0, [("INPUT0", "TYPE_INT32", [-1])], [("OUTPUT0", "TYPE_STRING", [1])]
    )
    return _python(config, _PARAMETERS_ECHO_PY)


def _int32_python(source: str, extra: str = "") -> _Spec:
    return lambda name: _python(_unary_config(name, "TYPE_INT32", [-1], extra=extra), source)


def _text_python(source: str, extra: str = "") -> _Spec:
    def spec(name: str) -> dict[str, _Content]:
        config = _config(
            name,
            "python",
            0,
            [("text_input", "TYPE_STRING", [1])],
            [("text_output", "TYPE_STRING", [1])],
            extra,
        )
        return _python(config, source)

    return spec


_SPECS.update(
    {
        "decoupled_raises": _int32_python(_DECOUPLED_RAISES_PY, _DECOUPLED),
        "decoupled_error_response": _int32_python(_DECOUPLED_ERROR_RESPONSE_PY, _DECOUPLED),
        "slow_identity_int32": _int32_python(
            _SLOW_IDENTITY_PY,
            f"instance_group [ {{ count: {SLOW_IDENTITY_INSTANCES}, kind: KIND_CPU }} ]",
        ),
        "text_echo": _text_python(_TEXT_ECHO_PY),
        "request_options": _int32_python(_REQUEST_OPTIONS_PY),
        "parameters_echo": _parameters_echo,
        "text_stream": _text_python(_TEXT_STREAM_PY, _DECOUPLED),
    }
)

# ----------------------------------------------------------------------------------
# Stub supervision: models that crash on demand or never return
# ----------------------------------------------------------------------------------

_STUCK_PY = """\
import time

import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        while True:
            time.sleep(3600)
"""

_CRASH_ON_NEGATIVE_PY = """\
import os
import signal
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"Identity; INPUT0[0] < 0 kills this stub with SIGKILL (after INPUT0[1] s if given).\"\"\"

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if in_0.size and in_0[0] < 0:
                if in_0.size > 1:
                    time.sleep(float(in_0[1]))
                os.kill(os.getpid(), signal.SIGKILL)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in_0)]))
        return responses
"""

_HANG_ON_NEGATIVE_PY = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    \"\"\"Identity; INPUT0[0] < 0 never returns.\"\"\"

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            while in_0.size and in_0[0] < 0:
                time.sleep(3600)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", in_0)]))
        return responses
"""


def _fp32_python_extra(source: str, extra: str) -> _Spec:
    return lambda name: _python(_unary_config(name, "TYPE_FP32", [-1], extra=extra), source)


_SPECS.update(
    {
        "stuck": _fp32_python(_STUCK_PY),
        "crash_on_negative": _fp32_python(_CRASH_ON_NEGATIVE_PY),
        "crash_on_negative_x2": _fp32_python_extra(
            _CRASH_ON_NEGATIVE_PY,
            f"instance_group [ {{ count: {CRASH_X2_INSTANCES}, kind: KIND_CPU }} ]",
        ),
        "hang_on_negative": _fp32_python_extra(
            _HANG_ON_NEGATIVE_PY,
            'parameters { key: "EXECUTION_TIMEOUT_SECS" '
            f'value: {{ string_value: "{HANG_TIMEOUT_SECS}" }} }}',
        ),
    }
)

# Sequence batching: tests/support/sequence_models.py (documented above).
_SPECS.update(SEQUENCE_SPECS)
# The classification extension: tests/support/classify_models.py (documented there).
_SPECS.update(CLASSIFY_SPECS)


# Ragged batching (issue 14): INPUT is ragged (each request [1, n_i], any n_i); the server
# feeds the model INPUT as one 1-D tensor of every request's values plus INDEX
# (BATCH_ACCUMULATED_ELEMENT_COUNT: where each request's values end). SUM [batch, 1] is each
# request's sum; DOUBLED (INPUT * 2, flat) is scattered back by each request's INPUT shape.
RAGGED_MODEL = "ragged_sum_onnx"
RAGGED_PREFERRED_BATCH = 4
_RAGGED_CONFIG = f"""\
name: "{RAGGED_MODEL}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }} ]
batch_input [ {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX"
  data_type: TYPE_INT32 source_input: "INPUT" }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] }} ]
batch_output [ {{ target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
  source_input: "INPUT" }} ]
dynamic_batching {{ preferred_batch_size: [ {RAGGED_PREFERRED_BATCH} ]
  max_queue_delay_microseconds: 2000000 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def _onnx_ragged_sum() -> bytes:
    from onnx import TensorProto, helper

    def const(name: str, kind: int, values: list) -> object:  # noqa: ANN401
        return helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name, kind, [len(values)], values)
        )

    nodes = [
        const("axis", TensorProto.INT32, [0]),
        const("zero_f", TensorProto.FLOAT, [0.0]),
        const("zero_i", TensorProto.INT32, [0]),
        const("minus_one", TensorProto.INT64, [-1]),
        const("first", TensorProto.INT64, [0]),
        const("axes", TensorProto.INT64, [1]),
        const("two", TensorProto.FLOAT, [2.0]),
        helper.make_node("Squeeze", ["axis"], ["axis0"]),
        helper.make_node("CumSum", ["INPUT", "axis0"], ["running"]),
        helper.make_node("Concat", ["zero_f", "running"], ["running0"], axis=0),
        helper.make_node("Slice", ["INDEX", "first", "minus_one"], ["head"]),
        helper.make_node("Concat", ["zero_i", "head"], ["starts"], axis=0),
        helper.make_node("Gather", ["running0", "INDEX"], ["at_end"]),
        helper.make_node("Gather", ["running0", "starts"], ["at_start"]),
        helper.make_node("Sub", ["at_end", "at_start"], ["sums"]),
        helper.make_node("Unsqueeze", ["sums", "axes"], ["SUM"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"]),
    ]
    graph = helper.make_graph(
        nodes,
        RAGGED_MODEL,
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["total"]),
            helper.make_tensor_value_info("INDEX", TensorProto.INT32, ["batch"]),
        ],
        [
            helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["batch", 1]),
            helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, ["total"]),
        ],
    )
    return _onnx_bytes(graph)


_SPECS[RAGGED_MODEL] = lambda name: {
    "config.pbtxt": _RAGGED_CONFIG,
    "1/model.onnx": _onnx_ragged_sum,
}


# BLS (models calling models): tests/support/bls_models.py documents them.
_SPECS.update(BLS_SPECS)
# Hostile models (issue 22): testkit/hostile_models.py documents them.
_SPECS.update(HOSTILE_SPECS)
# What Triton's Python-backend QA relies on: tests/support/qa_models.py documents them.
_SPECS.update(QA_SPECS)

ALL_MODELS: tuple[str, ...] = tuple(_SPECS)
ONNX_MODELS: tuple[str, ...] = (
    "identity_onnx_fp32",
    "identity_onnx_queued",
    "identity_onnx_nocfg",
    "onnx_partial_cfg",
    "seq_state_onnx",
    RAGGED_MODEL,
)
# Models whose config.pbtxt is deliberately invalid.
INVALID_CONFIG_MODELS: tuple[str, ...] = ("bad_config", "bad_field")


def model_files(name: str) -> dict[str, str | bytes]:
    """The files of test model ``name`` as {relative path: content}."""
    try:
        spec = _SPECS[name]
    except KeyError:
        raise KeyError(f"unknown test model {name!r}; known: {', '.join(ALL_MODELS)}") from None
    return {path: (c() if callable(c) else c) for path, c in spec(name).items()}


def build_test_repository(root: Path, names: Iterable[str] | None = None) -> Path:
    """Write the test models ``names`` (default: all of them) under ``root``.

    ``root`` is created if needed and returned; existing files are overwritten.
    """
    if isinstance(names, str):
        raise TypeError("names must be an iterable of model names, not a str")
    root = Path(root)
    selected = ALL_MODELS if names is None else tuple(names)
    root.mkdir(parents=True, exist_ok=True)
    onnx_cache: dict[Callable[[], bytes], bytes] = {}
    for name in selected:
        if name not in _SPECS:
            raise KeyError(f"unknown test model {name!r}; known: {', '.join(ALL_MODELS)}")
        for rel, content in _SPECS[name](name).items():
            if callable(content):
                if content not in onnx_cache:
                    onnx_cache[content] = content()
                content = onnx_cache[content]
            path = root / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
    return root
