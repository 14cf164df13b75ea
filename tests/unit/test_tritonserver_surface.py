"""The public surface of tritium.tritonserver and tritium.tritonfrontend, pinned (other
packages build on it: docs/inprocess.md). A change here is a change of the public API."""

from __future__ import annotations

import dataclasses

import tritium.tritonfrontend as tf
import tritium.tritonserver as ts

SERVER_NAMES = {
    "AlreadyExistsError", "AsyncResponseIterator", "CancelledError", "DLDeviceType", "DataType",
    "InferenceRequest", "InferenceResponse", "InstanceGroupKind", "InternalError",
    "InvalidArgumentError", "LogFormat", "LogLevel", "MemoryBuffer", "MemoryType", "Metric",
    "MetricFamily", "MetricFormat", "MetricKind", "Model", "ModelBatchFlag", "ModelControlMode",
    "ModelDictionary", "ModelLoadDeviceLimit", "ModelTxnPropertyFlag", "NotFoundError",
    "Options", "RateLimitMode", "RateLimiterResource", "ResponseIterator", "Server", "Tensor",
    "TritonError", "UnavailableError", "UnknownError", "UnsupportedError",
}  # fmt: skip
MEMBERS = {
    ts.Server: {
        "start", "stop", "live", "ready", "metadata", "metrics", "model", "models", "load",
        "unload", "poll_model_repository", "register_model_repository",
        "unregister_model_repository",
    },
    ts.Model: {
        "create_request", "infer", "async_infer", "metadata", "ready", "batch_properties",
        "transaction_properties", "statistics", "config",
    },
    ts.Tensor: {
        "data_ptr", "memory_type", "memory_type_id", "size", "__dlpack__", "__dlpack_device__",
        "to_bytes_array", "to_string_array", "from_bytes_array", "from_string_array",
        "from_dlpack", "to_host", "to_device",
    },
    ts.ResponseIterator: {"cancel", "__iter__", "__next__"},
    ts.Metric: {"value", "increment", "set_value", "kind"},
    ts.AsyncResponseIterator: {"cancel", "__aiter__", "__anext__"},
}  # fmt: skip


def test_tritonserver_names() -> None:
    assert set(ts.__all__) == SERVER_NAMES
    for name in SERVER_NAMES:
        assert getattr(ts, name) is not None


def test_members() -> None:
    for cls, members in MEMBERS.items():
        missing = {m for m in members if not hasattr(cls, m)}
        assert not missing, f"{cls.__name__} lacks {missing}"


def test_fields_under_tritons_names() -> None:
    request = {f.name for f in dataclasses.fields(ts.InferenceRequest)}
    assert request == {
        "model", "request_id", "flags", "correlation_id", "priority", "timeout", "inputs",
        "parameters", "output_memory_type", "response_queue",
    }  # fmt: skip
    response = {f.name for f in dataclasses.fields(ts.InferenceResponse)}
    assert response == {
        "model", "request_id", "parameters", "outputs", "error", "classification_label", "final",
    }  # fmt: skip
    options = {f.name for f in dataclasses.fields(ts.Options)}
    assert {"model_repository", "model_control_mode", "startup_models", "strict_model_config",
            "exit_on_error", "log_verbose", "exit_timeout"} <= options  # fmt: skip


def test_errors_are_one_hierarchy() -> None:
    for name in SERVER_NAMES:
        value = getattr(ts, name)
        if name.endswith("Error") and name != "TritonError":
            assert issubclass(value, ts.TritonError), name


def test_tritonfrontend_names() -> None:
    assert set(tf.__all__) == {"KServeGrpc", "KServeHttp", "Metrics"}
    for service in (tf.KServeHttp, tf.KServeGrpc, tf.Metrics):
        assert {"start", "stop", "__enter__", "__exit__"} <= set(dir(service))
        assert dataclasses.is_dataclass(service.Options)
    assert tf.KServeGrpc.Grpc_compression_level.HIGH == 3
