"""In-process baselines: the bare backend call in this process, before the server starts, as
a one-thread closed loop; and the loaders the scenario lists' own baselines and reference
answers use (the server's onnxruntime session options, a Python model's ``model.py``)."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import make_inputs


def closed_loop(call: Callable[[int], None], seconds: float) -> dict[str, float]:
    for i in range(50):  # warm-up
        call(i)
    calls, wall0, cpu0 = 0, time.perf_counter(), time.process_time()
    deadline = wall0 + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            call(calls)
            calls += 1
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {
        "calls": calls,
        "calls_per_s": calls / wall,
        "us_per_call": wall * 1e6 / calls,
        "cpu_us_per_call": cpu * 1e6 / calls,
    }


def load_config(model_dir: Path) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = model_config_pb2.ModelConfig()
    text_format.Parse((model_dir / "config.pbtxt").read_text(), config)
    return config


def onnx_session_options(config: Any) -> tuple[Any, str]:
    """The server's own session options when importable, else a copy of its defaults."""
    try:
        from tritium.backends.onnxruntime import _session_options

        return _session_options(config), "tritium.backends.onnxruntime._session_options"
    except ImportError:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return options, "bench copy (1 intra-op thread, no spinning)"


def onnx_session(model_dir: Path) -> tuple[Any, str]:
    """An onnxruntime session on the model's ``1/model.onnx`` with the server's options."""
    import onnxruntime as ort

    options, source = onnx_session_options(load_config(model_dir))
    session = ort.InferenceSession(
        str(model_dir / "1" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return session, source


def baseline_onnx(model_dir: Path, seconds: float) -> dict[str, Any]:
    session, source = onnx_session(model_dir)
    data = make_inputs(0, 1)
    feeds = [{"INPUT0": a, "INPUT1": b} for a, b in data]
    out0, _ = session.run(None, feeds[0])
    assert np.array_equal(out0, data[0][0] + data[0][1]), "baseline: wrong answer"
    result = closed_loop(lambda i: session.run(None, feeds[i % len(feeds)]), seconds)
    return {"what": f"onnxruntime InferenceSession.run, options from {source}", **result}


def load_python_model(model_dir: Path) -> tuple[Any, Any]:
    from google.protobuf import json_format
    from tritium.backends.python import pb_utils

    sys.modules["triton_python_backend_utils"] = pb_utils
    spec = importlib.util.spec_from_file_location(
        f"bench_{model_dir.name}", model_dir / "1" / "model.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config_json = json_format.MessageToJson(
        load_config(model_dir), preserving_proto_field_name=True
    )
    model = module.TritonPythonModel()
    if hasattr(model, "initialize"):  # optional, as in Triton's Python backend
        model.initialize(
            {
                "model_config": config_json,
                "model_instance_kind": "CPU",
                "model_instance_name": f"{model_dir.name}_0",
                "model_instance_device_id": "0",
                "model_repository": str(model_dir),
                "model_version": "1",
                "model_name": model_dir.name,
            }
        )
    return model, pb_utils


def baseline_python(model_dir: Path, seconds: float) -> dict[str, Any]:
    model, pb = load_python_model(model_dir)
    data = make_inputs(0, 1)

    def call(i: int) -> np.ndarray:
        a, b = data[i % len(data)]
        request = pb.InferenceRequest(
            inputs=[pb.Tensor("INPUT0", a), pb.Tensor("INPUT1", b)],
            requested_output_names=["OUTPUT0", "OUTPUT1"],
            model_name=model_dir.name,
        )
        (response,) = model.execute([request])
        return pb.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()

    assert np.array_equal(call(0), data[0][0] + data[0][1]), "baseline: wrong answer"
    result = closed_loop(call, seconds)
    return {"what": "model.py execute() in-process (request built per call, pb_utils)", **result}


def add_ratios(row: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    if not baseline or "infer_per_s" not in row:
        return
    row["throughput_ratio"] = row["infer_per_s"] / baseline["calls_per_s"]
    row["baseline_us"] = baseline["us_per_call"]
    row["cpu_ratio"] = (row["server_cpu_us"] + row["stub_cpu_us"]) / baseline["cpu_us_per_call"]
