"""Models for the model-warm-up tests (``model_warmup`` in config.pbtxt), written at test time.

warm_counter     python, max_batch_size 4, WARM_INSTANCES (2) instances; INPUT0 FP32 [4],
                 INPUT1 STRING [2] -> OUTPUT0 = INPUT0, RUNS INT64 [1] = how many executions
                 this instance ran before this one. Every execution appends one JSON line to
                 the file named by its LOG_PATH parameter: instance name, pid, number of
                 requests, each request's INPUT0 and INPUT1. With GATE_PATH set, an execution
                 creates ``<LOG_PATH>.waiting``, then waits (bounded) until GATE_PATH exists.
                 Warm-up (WARM_SAMPLES): "zeros" (batch_size 2, count 3, zero_data), "random"
                 (random_data), "file" (input_data_file warmup/in0.bin = FILE_INPUT0,
                 warmup/sub/in1.bin = FILE_INPUT1).
warm_fails       python; every response is TritonError("An Error Occurred") (Triton's
                 L0_warmup failing_infer), one sample "zero sample".
warm_raises      python; execute raises ValueError("warm-up boom").
warm_short_file  identity; INPUT0's data file holds 3 bytes where 16 are needed.
warm_escape      identity; input_data_file "../config.pbtxt".
warm_linked      identity; its warmup/ is a symbolic link to a folder outside the repository
                 (``<root>/../outside-warmup``) holding the sample's 16-byte data file.
warm_bad_dtype   identity; the sample gives INPUT0 as TYPE_INT32 (the model takes FP32).
warm_onnx        onnxruntime (tests/support/models.py ``onnx_partial_cfg``: INPUT0 FP32 [4] -> x2,
                 max_batch_size 2) with a batch_size 2 random_data sample.
warm_decoupled   python, decoupled: two responses then a flag-only final per request, with a
                 "decoupled sample" (Triton's L0_warmup decoupled case).
warm_seq         tests/support/sequence_models.py ``seq_echo_x2`` (direct, 2 instances) with a
                 sample naming INPUT0 and the START and READY controls, count 2.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from .models import model_files

WARM_INSTANCES = 2
WARM_COUNT = 3  # count of the "zeros" sample
FILE_INPUT0 = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
FILE_INPUT1 = [b"ab", b"cde"]
# What each instance of warm_counter runs before READY: (sample, requests per execution) x runs
WARM_SAMPLES = [("zeros", 2)] * WARM_COUNT + [("random", 1), ("file", 1)]
FAILING = (
    "warm_fails",
    "warm_raises",
    "warm_short_file",
    "warm_escape",
    "warm_linked",
    "warm_bad_dtype",
)

_COUNTER_PY = """\
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.log = params["LOG_PATH"]["string_value"]
        self.gate = params.get("GATE_PATH", {}).get("string_value", "")
        self.instance = args["model_instance_name"]
        self.runs = 0

    def execute(self, requests):
        if self.gate:
            open(self.log + ".waiting", "a").close()  # the test sees a warm-up has begun
            deadline = time.monotonic() + 60
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.01)
        entry = {"instance": self.instance, "pid": os.getpid(), "n": len(requests), "in0": [],
                 "in1": []}
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            s = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            entry["in0"].append(x.reshape(-1).tolist())
            entry["in1"].append([v.decode("latin-1") for v in s.reshape(-1)])
            runs = np.array([[self.runs]], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("RUNS", runs)]))
        with open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\\n")
        self.runs += 1
        return responses
"""

_FAILS_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        error = pb_utils.TritonError("An Error Occurred")
        return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
"""

_RAISES_PY = """\
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("warm-up boom")
"""

_IDENTITY_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                                 .as_numpy())])
            for r in requests
        ]
"""


_DECOUPLED_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for _ in range(2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def _input(name: str, data_type: str, dims: list[int], source: str) -> str:
    return f'inputs {{ key: "{name}" value: {{ data_type: {data_type} dims: {dims} {source} }} }}'


def _sample(name: str, inputs: list[str], batch_size: int = 1, count: int = 0) -> str:
    return (
        f'{{ name: "{name}" batch_size: {batch_size} count: {count}\n  '
        + "\n  ".join(inputs)
        + "\n}"
    )


def _warmup(*samples: str) -> str:
    return "model_warmup [\n" + ",\n".join(samples) + "\n]\n"


def _counter(log: Path, gate: Path | None) -> dict[str, str | bytes]:
    params = [("LOG_PATH", str(log))] + ([("GATE_PATH", str(gate))] if gate else [])
    warmup = _warmup(
        _sample(
            "zeros",
            [
                _input("INPUT0", "TYPE_FP32", [4], "zero_data: true"),
                _input("INPUT1", "TYPE_STRING", [2], "zero_data: true"),
            ],
            batch_size=2,
            count=WARM_COUNT,
        ),
        _sample(
            "random",
            [
                _input("INPUT0", "TYPE_FP32", [4], "random_data: true"),
                _input("INPUT1", "TYPE_STRING", [2], "random_data: true"),
            ],
        ),
        _sample(
            "file",
            [
                _input("INPUT0", "TYPE_FP32", [4], 'input_data_file: "in0.bin"'),
                _input("INPUT1", "TYPE_STRING", [2], 'input_data_file: "sub/in1.bin"'),
            ],
        ),
    )
    config = "\n".join(
        [
            'name: "warm_counter"',
            'backend: "python"',
            "max_batch_size: 4",
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },',
            '        { name: "INPUT1" data_type: TYPE_STRING dims: [ 2 ] } ]',
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },',
            '         { name: "RUNS" data_type: TYPE_INT64 dims: [ 1 ] } ]',
            f"instance_group [ {{ count: {WARM_INSTANCES} kind: KIND_CPU }} ]",
            *(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params),
            warmup,
        ]
    )
    in1 = b"".join(struct.pack("<I", len(v)) + v for v in FILE_INPUT1)
    return {
        "config.pbtxt": config,
        "1/model.py": _COUNTER_PY,
        "warmup/in0.bin": FILE_INPUT0.tobytes(),
        "warmup/sub/in1.bin": in1,
    }


def _fp32_model(name: str, source: str, sample: str) -> dict[str, str | bytes]:
    config = "\n".join(
        [
            f'name: "{name}"',
            'backend: "python"',
            "max_batch_size: 0",
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            _warmup(sample),
        ]
    )
    return {"config.pbtxt": config, "1/model.py": source}


def _failing() -> dict[str, dict[str, str | bytes]]:
    zero = _sample("zero sample", [_input("INPUT0", "TYPE_FP32", [4], "zero_data: true")])
    short = _sample("short", [_input("INPUT0", "TYPE_FP32", [4], 'input_data_file: "s.bin"')])
    escape = _sample(
        "escape", [_input("INPUT0", "TYPE_FP32", [4], 'input_data_file: "../config.pbtxt"')]
    )
    dtype = _sample("dtype", [_input("INPUT0", "TYPE_INT32", [4], "zero_data: true")])
    linked = _sample("linked", [_input("INPUT0", "TYPE_FP32", [4], 'input_data_file: "l.bin"')])
    models = {
        "warm_fails": _fp32_model("warm_fails", _FAILS_PY, zero),
        "warm_raises": _fp32_model("warm_raises", _RAISES_PY, zero),
        "warm_short_file": _fp32_model("warm_short_file", _IDENTITY_PY, short),
        "warm_escape": _fp32_model("warm_escape", _IDENTITY_PY, escape),
        "warm_bad_dtype": _fp32_model("warm_bad_dtype", _IDENTITY_PY, dtype),
        "warm_linked": _fp32_model("warm_linked", _IDENTITY_PY, linked),
    }
    models["warm_short_file"]["warmup/s.bin"] = b"\x00\x01\x02"
    return models


def _renamed(source: str, name: str, extra: str) -> dict[str, str | bytes]:
    files = model_files(source)
    config = str(files["config.pbtxt"]).replace(f'name: "{source}"', f'name: "{name}"')
    if 'name: "' not in config:
        config = f'name: "{name}"\n' + config
    files["config.pbtxt"] = config + "\n" + extra
    return files


def _onnx_and_sequence() -> dict[str, dict[str, str | bytes]]:
    onnx = _warmup(
        _sample("random", [_input("INPUT0", "TYPE_FP32", [4], "random_data: true")], 2, 2)
    )
    seq = _warmup(
        _sample(
            "sequence sample",
            [
                _input("INPUT0", "TYPE_INT32", [1], "zero_data: true"),
                _input("START", "TYPE_INT32", [1], "zero_data: true"),
                _input("READY", "TYPE_BOOL", [1], "zero_data: true"),
            ],
            batch_size=2,
            count=2,
        )
    )
    zero = _sample("decoupled sample", [_input("INPUT0", "TYPE_FP32", [4], "zero_data: true")])
    decoupled = _fp32_model("warm_decoupled", _DECOUPLED_PY, zero)
    decoupled["config.pbtxt"] += "model_transaction_policy { decoupled: true }\n"
    return {
        "warm_decoupled": decoupled,
        "warm_onnx": _renamed("onnx_partial_cfg", "warm_onnx", onnx),
        "warm_seq": _renamed("seq_echo_x2", "warm_seq", seq),
    }


def write_model(root: Path, name: str, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def build_warmup_repository(root: Path, log: Path, gate: Path | None = None) -> Path:
    """Every model above (``gate``: warm_counter's GATE_PATH, for a load to hold)."""
    write_model(root, "warm_counter", _counter(log, gate))
    for name, files in {**_failing(), **_onnx_and_sequence()}.items():
        write_model(root, name, files)
    outside = root.parent / "outside-warmup"  # what a hostile model's link points at
    outside.mkdir(exist_ok=True)
    (outside / "l.bin").write_bytes(bytes(16))
    (root / "warm_linked" / "warmup").symlink_to(outside)
    return root


def read_log(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
