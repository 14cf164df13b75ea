"""Sequence-batching test models (``sequence_batching`` in config.pbtxt), registered in
tests/support/models.py (``build_test_repository``), which documents each of them.

Every Python one runs the ``seq_probe`` source below: a model that reports, per request, what
the sequence batcher gave it (control values, slot, correlation ID, flags, batch size,
fillers), so the tests can observe the scheduler from the outside. ``SEEN_FIELDS`` names the
fields of its SEEN output, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SEEN_FIELDS: tuple[str, ...] = (
    "start",  # START control value (int32_false_true [0, 1])
    "end",  # END control value (fp32_false_true [0, 1])
    "ready",  # READY control value (bool_false_true [false, true]); 1 when absent
    "corrid",  # CORRID control value; -1 when a string or >= 2**63, 0 when absent
    "slot",  # index of the request in ``requests``
    "correlation_id",  # request.correlation_id(); -1 when a string or >= 2**63
    "flags",  # request.flags(): 1 START, 2 END
    "batch_size",  # len(requests), fillers included
    "filler_mask",  # bit i set: requests[i] had READY false
    "bad_fillers",  # fillers whose START/END/CORRID/INPUT0 were not all zero
    "acc",  # the model's accumulator for this request's key, after this step
    "pid",  # the stub process (one per instance)
    "execution",  # the instance's execution counter (pid + execution names one batch)
)
SEQ_IDLE_US = 30_000_000  # sequences of the ordinary models never idle out during a test
SEQ_SHORT_IDLE_US = 200_000
SEQ_X2_INSTANCES = 2
SEQ_INITIAL_STATE = 100
SEQ_ABANDON_CANDIDATES = 2048
SEQ_DIRECT_DELAY_US = 5_000_000

_SEQ_PROBE_PY = '''\
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

BIG = 2**63


def _value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _as_int(value):
    if isinstance(value, (bytes, str)):
        return -1
    value = int(value)
    return value if value < BIG else -1


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    """Reports what the sequence batcher gave each request (tests/support/sequence_models.py)."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.key = params.get("ACC_KEY", {}).get("string_value", "slot")
        self.sleep = float(params.get("SLEEP_MS", {}).get("string_value", "0")) / 1000
        self.batched = int(config.get("max_batch_size", 0)) > 0
        states = config.get("sequence_batching", {}).get("state", [])
        self.state = (states[0]["input_name"], states[0]["output_name"]) if states else None
        self.acc, self.executions = {}, 0

    def execute(self, requests):
        self.executions += 1
        if self.sleep:
            time.sleep(self.sleep)
        ready = [bool(_value(r, "READY", True)) for r in requests]
        mask = sum(1 << i for i, ok in enumerate(ready) if not ok)
        bad = sum(1 for r, ok in zip(requests, ready) if not ok and not self._clean(r))
        batch = (len(requests), mask, bad)
        return [self._respond(i, r, ready[i], batch) for i, r in enumerate(requests)]

    def _clean(self, request):
        x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        corrid = _value(request, "CORRID", 0)
        return (
            not np.any(x)
            and not _value(request, "START", 0)
            and not _value(request, "END", 0)
            and corrid in (0, b"", "")
        )

    def _accumulate(self, slot, start, end, corrid, x):
        if self.key == "none":
            return 0
        key = slot if self.key == "slot" else _text(corrid)
        total = x + (0 if start else self.acc.get(key, 0))
        self.acc[key] = total
        if end and self.key != "slot":
            del self.acc[key]
        return total

    def _respond(self, slot, request, ready, batch):
        x_array = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        x = int(x_array.reshape(-1)[0])
        start, end = int(_value(request, "START", 0)), int(_value(request, "END", 0))
        corrid = _value(request, "CORRID", 0)
        acc = self._accumulate(slot, start, end, corrid, x) if ready else 0
        corr = request.correlation_id()
        seen = [start, end, int(ready), _as_int(corrid), slot, _as_int(corr), request.flags(),
                *batch, acc, os.getpid(), self.executions]
        outputs = [
            self._out("SEEN", np.array(seen, dtype=np.int64)),
            self._out("CORRID_OUT", np.array([_text(corrid).encode()], dtype=object)),
            self._out("ID_OUT", np.array([str(corr).encode()], dtype=object)),
        ]
        total = x_array
        if self.state is not None:
            state = pb_utils.get_input_tensor_by_name(request, self.state[0])
            if state is None and ready:  # only a filler may come without one
                error = pb_utils.TritonError(f"no state input {self.state[0]!r}")
                return pb_utils.InferenceResponse(output_tensors=[], error=error)
            if state is not None:
                total = (x_array + state.as_numpy()).astype(np.int32)
            outputs.append(pb_utils.Tensor(self.state[1], total))
        outputs.append(pb_utils.Tensor("OUTPUT0", total))
        return pb_utils.InferenceResponse(output_tensors=outputs)

    def _out(self, name, array):
        return pb_utils.Tensor(name, array.reshape(1, -1) if self.batched else array)
'''

_CONTROLS = {
    "START": "kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]",
    "END": "kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ]",
    "READY": "kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ]",
}

_ZERO_STATE = (
    '{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] '
    'initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" } }'
)
_FILE_STATE = (
    '{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] '
    'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "init.bin" name: "init" } }'
)
_OLDEST = (
    "oldest {{ max_candidate_sequences: {candidates} preferred_batch_size: [ {preferred} ] "
    "max_queue_delay_microseconds: {delay_us} }}"
)


@dataclass(frozen=True)
class _Seq:
    """One probe model's configuration."""

    max_batch_size: int = 4
    strategy: str = "direct { }"
    corrid: str | None = "TYPE_UINT64"  # CORRID control data_type; None: no CORRID control
    idle_us: int = SEQ_IDLE_US
    instances: int = 1
    acc_key: str = "slot"
    sleep_ms: int = 0
    state: str = ""  # one ``state`` entry, or none

    def config(self, name: str) -> str:
        controls = [f'{{ name: "{n}" control [ {{ {c} }} ] }}' for n, c in _CONTROLS.items()]
        if self.corrid:
            kind = f"kind: CONTROL_SEQUENCE_CORRID data_type: {self.corrid}"
            controls.append(f'{{ name: "CORRID" control [ {{ {kind} }} ] }}')
        batching = [
            f"  max_sequence_idle_microseconds: {self.idle_us}",
            f"  {self.strategy}",
            "  control_input [\n    " + ",\n    ".join(controls) + "\n  ]",
        ]
        if self.state:
            batching.append(f"  state [ {self.state} ]")
        params = (("ACC_KEY", self.acc_key), ("SLEEP_MS", str(self.sleep_ms)))
        outputs = (
            ("OUTPUT0", "TYPE_INT32"),
            ("SEEN", "TYPE_INT64", len(SEEN_FIELDS)),
            ("CORRID_OUT", "TYPE_STRING"),
            ("ID_OUT", "TYPE_STRING"),
        )
        return (
            "\n".join(
                [
                    f'name: "{name}"',
                    'backend: "python"',
                    f"max_batch_size: {self.max_batch_size}",
                    f"instance_group [ {{ count: {self.instances}, kind: KIND_CPU }} ]",
                    *(
                        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                        for k, v in params
                    ),
                    "sequence_batching {\n" + "\n".join(batching) + "\n}",
                    'input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ] } ]',
                    "output [\n  " + ",\n  ".join(_output(*o) for o in outputs) + "\n]",
                ]
            )
            + "\n"
        )

    def files(self, name: str) -> dict[str, str | bytes]:
        files: dict[str, str | bytes] = {
            "config.pbtxt": self.config(name),
            "1/model.py": _SEQ_PROBE_PY,
        }
        if self.state == _FILE_STATE:
            files["initial_state/init.bin"] = np.array([SEQ_INITIAL_STATE], np.int32).tobytes()
        return files


def _output(name: str, data_type: str, size: int = 1) -> str:
    return f'{{ name: "{name}", data_type: {data_type}, dims: [ {size} ] }}'


# ----------------------------------------------------------------------------------
# ONNX: a running sum kept in implicit state
# ----------------------------------------------------------------------------------

_ONNX_STATE_CONFIG = """\
name: "{name}"
backend: "onnxruntime"
max_batch_size: 4
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  direct {{ }}
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state {{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zeros" }} }} ]
}}
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
"""


def _onnx_running_sum() -> bytes:
    """OUTPUT0 = INPUT0 + STATE_IN, STATE_OUT = OUTPUT0; all FP32 ["batch", 1]."""
    import onnx
    from onnx import TensorProto, helper

    def io(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", 1])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "STATE_IN"], ["OUTPUT0"]),
            helper.make_node("Identity", ["OUTPUT0"], ["STATE_OUT"]),
        ],
        "running_sum",
        [io("INPUT0"), io("STATE_IN")],
        [io("OUTPUT0"), io("STATE_OUT")],
    )
    model = helper.make_model(
        graph, producer_name="tritium-tests", opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _onnx_state(name: str) -> dict[str, str | bytes | Callable[[], bytes]]:
    return {
        "config.pbtxt": _ONNX_STATE_CONFIG.format(name=name, idle_us=SEQ_IDLE_US),
        "1/model.onnx": _onnx_running_sum,
    }


def _probe(seq: _Seq) -> Callable[[str], dict[str, str | bytes | Callable[[], bytes]]]:
    return lambda name: dict(seq.files(name))


SEQUENCE_SPECS: dict[str, Callable[[str], dict[str, str | bytes | Callable[[], bytes]]]] = {
    "seq_echo_direct": _probe(_Seq()),
    "seq_echo_string": _probe(_Seq(corrid="TYPE_STRING")),
    "seq_echo_oldest": _probe(
        _Seq(
            strategy=_OLDEST.format(candidates=8, preferred=4, delay_us=100_000),
            acc_key="corrid",
            sleep_ms=10,
        )
    ),
    "seq_echo_x2": _probe(_Seq(max_batch_size=2, instances=SEQ_X2_INSTANCES, sleep_ms=10)),
    "seq_echo_idle": _probe(_Seq(idle_us=SEQ_SHORT_IDLE_US)),
    "seq_echo_delay": _probe(
        _Seq(
            strategy=(
                f"direct {{ max_queue_delay_microseconds: {SEQ_DIRECT_DELAY_US} "
                "minimum_slot_utilization: 0.5 }"
            )
        )
    ),
    "seq_one_slot": _probe(_Seq(max_batch_size=0)),
    "seq_abandon": _probe(
        _Seq(
            max_batch_size=64,
            strategy=_OLDEST.format(candidates=SEQ_ABANDON_CANDIDATES, preferred=64, delay_us=2000),
            idle_us=SEQ_SHORT_IDLE_US,
            acc_key="none",
            state=_ZERO_STATE,
        )
    ),
    "seq_state_py": _probe(_Seq(corrid=None, acc_key="none", state=_ZERO_STATE)),
    "seq_state_file": _probe(
        _Seq(max_batch_size=0, corrid=None, acc_key="none", state=_FILE_STATE)
    ),
    "seq_state_onnx": _onnx_state,
}
