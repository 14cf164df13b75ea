"""Unit tests for tritium's triton_python_backend_utils implementation."""

import gc
import json
import os
import re
import struct
import sys
import textwrap
import types

import numpy as np
import pytest

from tritium.backends.python import pb_metrics
from tritium.backends.python import pb_utils as pb

ALL_TYPES = [
    ("TYPE_BOOL", 1, np.bool_),
    ("TYPE_UINT8", 2, np.uint8),
    ("TYPE_UINT16", 3, np.uint16),
    ("TYPE_UINT32", 4, np.uint32),
    ("TYPE_UINT64", 5, np.uint64),
    ("TYPE_INT8", 6, np.int8),
    ("TYPE_INT16", 7, np.int16),
    ("TYPE_INT32", 8, np.int32),
    ("TYPE_INT64", 9, np.int64),
    ("TYPE_FP16", 10, np.float16),
    ("TYPE_FP32", 11, np.float32),
    ("TYPE_FP64", 12, np.float64),
    ("TYPE_STRING", 13, np.object_),
]


def _bf16():
    return pytest.importorskip("ml_dtypes").bfloat16


# ------------------------------------------------------------------ bytes tensors


@pytest.mark.parametrize(
    "values",
    [
        [b"hello", b"", b"a\x00b", b"\x00\x00", b"\xff" * 300],
        [b""],
        [b"", b""],
        ["caf\u00e9", "", "x\x00y"],
    ],
)
def test_bytes_round_trip(values):
    arr = np.array(values, dtype=np.object_)
    encoded = pb.serialize_byte_tensor(arr)
    assert isinstance(encoded, bytes)
    expected = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    assert encoded == b"".join(struct.pack("<I", len(v)) + v for v in expected)
    decoded = pb.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_ and decoded.shape == (len(values),)
    assert list(decoded) == expected


def test_serialize_is_c_order_and_stringifies_objects():
    arr = np.array([[b"a", 1], ["b", 2.5]], dtype=np.object_)
    decoded = pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(arr.T))
    assert list(decoded) == [b"a", b"b", b"1", b"2.5"]


def test_serialize_bytes_dtype_empty_and_other_dtypes():
    assert pb.deserialize_bytes_tensor(
        pb.serialize_byte_tensor(np.array([b"ab", b"c"]))
    ).tolist() == [b"ab", b"c"]
    assert pb.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""
    assert pb.serialize_byte_tensor(np.zeros((2, 0), dtype=np.object_)) == b""
    assert pb.serialize_byte_tensor(np.arange(3)) is None


def test_deserialize_accepts_buffers_and_rejects_truncation():
    encoded = pb.serialize_byte_tensor(np.array([b"xy", b""], dtype=np.object_))
    for buf in (bytearray(encoded), memoryview(encoded), np.frombuffer(encoded, np.uint8)):
        assert pb.deserialize_bytes_tensor(buf).tolist() == [b"xy", b""]
    assert pb.deserialize_bytes_tensor(b"").shape == (0,)
    with pytest.raises(pb.TritonModelException):
        pb.deserialize_bytes_tensor(encoded[:-1] + b"\x05")
    with pytest.raises(pb.TritonModelException):
        pb.deserialize_bytes_tensor(b"\x01\x00")


# ------------------------------------------------------------------ dtype tables


@pytest.mark.parametrize("name,code,np_type", ALL_TYPES)
def test_dtype_tables(name, code, np_type):
    assert getattr(pb, name) == code
    assert pb.triton_to_numpy_type(code) is np_type
    assert pb.numpy_to_triton_type(np_type) == code
    assert pb.numpy_to_triton_type(np.dtype(np_type)) == code
    expected = bool if name == "TYPE_BOOL" else np_type  # Triton maps TYPE_BOOL to bool
    assert pb.triton_string_to_numpy(name) is expected


def test_bf16_and_unknown_types():
    bf16 = _bf16()
    assert pb.TYPE_BF16 == 14 and pb.TYPE_INVALID == 0 and pb.TYPE_BYTES == 13
    assert pb.triton_to_numpy_type(14) is bf16
    assert pb.numpy_to_triton_type(bf16) == 14
    assert pb.triton_string_to_numpy("TYPE_BF16") is bf16
    assert pb.triton_to_numpy_type(99) is None
    assert pb.numpy_to_triton_type(np.complex64) is None
    assert pb.numpy_to_triton_type(np.dtype("U4")) is None
    assert pb.numpy_to_triton_type(np.dtype("S7")) == 13
    with pytest.raises(KeyError):
        pb.triton_string_to_numpy("TYPE_NOPE")


def test_flag_constants():
    assert pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


# ------------------------------------------------------------------ Tensor


def test_tensor_basics():
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = pb.Tensor("IN", arr)
    assert t.name() == "IN" and t.triton_dtype() == pb.TYPE_INT32
    assert t.shape() == [2, 3] and t.is_cpu() is True
    assert t.as_numpy() is arr


@pytest.mark.parametrize("name,code,np_type", ALL_TYPES)
def test_tensor_dtype_for_every_type(name, code, np_type):
    arr = (
        np.array([b"x", "y"], dtype=np.object_)
        if np_type is np.object_
        else np.zeros(2, dtype=np_type)
    )
    assert pb.Tensor("t", arr).triton_dtype() == code


def test_tensor_makes_non_contiguous_arrays_contiguous():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = pb.Tensor("T", base.T)
    out = t.as_numpy()
    assert out.flags["C_CONTIGUOUS"] and t.shape() == [4, 3]
    np.testing.assert_array_equal(out, base.T)
    t2 = pb.Tensor("S", base[:, ::2])
    assert t2.as_numpy().flags["C_CONTIGUOUS"] and t2.shape() == [3, 2]


def test_tensor_bytes_and_rejections():
    t = pb.Tensor("S", np.array(["a", b"b"], dtype=np.object_))
    assert t.triton_dtype() == pb.TYPE_STRING
    assert pb.Tensor("B", np.array([b"a\x00"])).triton_dtype() == pb.TYPE_STRING
    with pytest.raises(pb.TritonModelException, match="NumPy dtype is not supported."):
        pb.Tensor("U", np.array(["a", "b"]))
    with pytest.raises(pb.TritonModelException, match="NumPy dtype is not supported."):
        pb.Tensor("C", np.zeros(2, dtype=np.complex64))
    with pytest.raises(pb.TritonModelException, match="Tensor name cannot be an empty string."):
        pb.Tensor("", np.zeros(1))
    with pytest.raises(pb.TritonModelException, match="string tensors"):
        t.to_dlpack()


def test_tensor_dlpack_round_trips():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = pb.Tensor("X", arr)
    back = pb.Tensor.from_dlpack("Y", t.to_dlpack())
    assert back.name() == "Y" and back.triton_dtype() == pb.TYPE_FP32
    np.testing.assert_array_equal(back.as_numpy(), arr)
    np.testing.assert_array_equal(np.from_dlpack(t), arr)  # __dlpack__ protocol
    np.testing.assert_array_equal(pb.Tensor.from_dlpack("Z", arr).as_numpy(), arr)
    readonly = np.frombuffer(np.arange(3, dtype=np.int64).tobytes(), dtype=np.int64)
    assert not readonly.flags.writeable
    np.testing.assert_array_equal(
        pb.Tensor.from_dlpack("R", pb.Tensor("R", readonly).to_dlpack()).as_numpy(), [0, 1, 2]
    )
    with pytest.raises(pb.TritonModelException, match="Provided tensor is not supported"):
        pb.Tensor.from_dlpack("bad", [1, 2, 3])


def test_tensor_bf16():
    bf16 = _bf16()
    arr = np.array([1.5, -2.0], dtype=bf16)
    t = pb.Tensor("BF", arr)
    assert t.triton_dtype() == pb.TYPE_BF16 and t.as_numpy().dtype == np.dtype(bf16)
    raw = pb.Tensor._create("RAW", arr.view(np.uint16), pb.TYPE_BF16)
    assert raw.triton_dtype() == pb.TYPE_BF16 and raw._as_array().dtype == np.uint16
    with pytest.raises(pb.TritonModelException, match="Tensor dtype is BF16"):
        raw.as_numpy()


@pytest.mark.parametrize("stored", ["bfloat16", "uint16"])
def test_tensor_bf16_dlpack_to_and_from_torch(stored: str) -> None:
    """BF16 crosses DLPack both ways (numpy cannot: the stub writes the capsule), as the
    Python backend's users do with torch."""
    torch = pytest.importorskip("torch")
    bf16 = _bf16()
    arr = np.array([[1.5, -2.0, 3.25], [0.5, 8.0, -1.0]], dtype=bf16)
    t = (
        pb.Tensor("BF", arr)
        if stored == "bfloat16"
        else pb.Tensor._create("RAW", arr.view(np.uint16), pb.TYPE_BF16)
    )
    as_torch = torch.utils.dlpack.from_dlpack(t.to_dlpack())
    assert as_torch.dtype == torch.bfloat16 and list(as_torch.shape) == [2, 3]
    assert as_torch.float().tolist() == arr.astype(np.float32).tolist()
    back = pb.Tensor.from_dlpack("BACK", as_torch.t())  # strided: read right, copied
    assert back.triton_dtype() == pb.TYPE_BF16 and back.shape() == [3, 2]
    assert back.as_numpy().astype(np.float32).tolist() == arr.T.astype(np.float32).tolist()
    unconsumed = t.to_dlpack()
    del unconsumed  # freed without a consumer: what it kept alive goes with it


# ------------------------------------------------------------------ errors


def test_triton_error():
    codes = [
        "UNKNOWN",
        "INTERNAL",
        "NOT_FOUND",
        "INVALID_ARG",
        "UNAVAILABLE",
        "UNSUPPORTED",
        "ALREADY_EXISTS",
        "CANCELLED",
    ]
    assert [getattr(pb.TritonError, c) for c in codes] == list(range(8))
    err = pb.TritonError("boom")
    assert err.message() == "boom" and err.code() == pb.TritonError.INTERNAL
    err = pb.TritonError("gone", pb.TritonError.NOT_FOUND)
    assert err.code() == 2
    err = pb.TritonError(message="bad", code=pb.TritonError.INVALID_ARG)
    assert (err.message(), err.code()) == ("bad", 3)
    with pytest.raises(TypeError):
        pb.TritonError("x", 42)
    assert issubclass(pb.TritonModelException, Exception)
    assert str(pb.TritonModelException("m")) == "m"


# ------------------------------------------------------------------ InferenceResponse


def test_inference_response_accessors():
    out = pb.Tensor("OUT", np.zeros(2, dtype=np.float32))
    resp = pb.InferenceResponse([out])
    assert resp.output_tensors() == [out]
    assert not resp.has_error() and resp.error() is None
    assert json.loads(resp.parameters()) == {}
    assert pb.get_output_tensor_by_name(resp, "OUT") is out
    assert pb.get_output_tensor_by_name(resp, "NOPE") is None
    err = pb.TritonError("failed")
    resp = pb.InferenceResponse(output_tensors=[], error=err)
    assert resp.has_error() and resp.error() is err
    assert pb.InferenceResponse().output_tensors() == []
    params = {"bool": True, "str": "s", "int": 3}
    resp = pb.InferenceResponse([out], parameters=params)
    assert json.loads(resp.parameters()) == params


@pytest.mark.parametrize(
    "params,msg",
    [
        ([], "Expect dict, got <class 'list'>"),
        ({1: "x"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        (
            {"f": 0.5},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        ({"n": None}, "found type <class 'NoneType'>"),
        ({"l": ["x"]}, "found type <class 'list'>"),
    ],
)
def test_inference_response_parameter_validation(params, msg):
    with pytest.raises(pb.TritonModelException) as info:
        pb.InferenceResponse([], parameters=params)
    assert msg in str(info.value)


def test_inference_response_type_checks():
    with pytest.raises(TypeError):
        pb.InferenceResponse([np.zeros(1)])
    with pytest.raises(TypeError):
        pb.InferenceResponse([], error="not a TritonError")


# ------------------------------------------------------------------ InferenceRequest


def _request(**kwargs):
    args = dict(
        inputs=[pb.Tensor("IN", np.zeros(1, dtype=np.float32))],
        requested_output_names=["OUT"],
        model_name="m",
    )
    args.update(kwargs)
    return pb.InferenceRequest(**args)


def test_inference_request_defaults_and_accessors():
    req = _request()
    assert req.request_id() == "" and req.correlation_id() == 0
    assert req.flags() == 0 and req.timeout() == 0
    assert req.model_name() == "m" and req.model_version() == -1
    assert req.requested_output_names() == {"OUT"}
    assert json.loads(req.parameters()) == {}
    assert [t.name() for t in req.inputs()] == ["IN"]
    assert pb.get_input_tensor_by_name(req, "IN") is req.inputs()[0]
    assert pb.get_input_tensor_by_name(req, "X") is None
    assert req.is_cancelled() is False
    assert req.trace().get_context() is None
    assert req._release_flags() == pb.TRITONSERVER_REQUEST_RELEASE_ALL
    req.set_release_flags(pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert req._release_flags() == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    req.set_flags(pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
    assert req.flags() == 2


def test_inference_request_keywords():
    req = _request(
        request_id="r1",
        correlation_id="seq-7",
        model_version=3,
        flags=pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        timeout=1000,
        parameters={"k": "v", "n": 1, "b": False},
        requested_output_names=["A", "B", "A"],
    )
    assert req.request_id() == "r1" and req.correlation_id() == "seq-7"
    assert req.model_version() == 3 and req.flags() == 1 and req.timeout() == 1000
    assert json.loads(req.parameters()) == {"k": "v", "n": 1, "b": False}
    assert req.requested_output_names() == {"A", "B"}
    # JSON-string parameters (stub path) are kept as-is, doubles included.
    req = _request(parameters='{"temperature": 0.7}')
    assert req.parameters() == '{"temperature": 0.7}'


def test_inference_request_validation():
    with pytest.raises(pb.TritonModelException, match="Correlation ID must be integer or string"):
        _request(correlation_id=1.5)
    with pytest.raises(
        pb.TritonModelException,
        match="Requested output name for request with "
        "id 'r' and model name 'm' should not be empty.",
    ):
        _request(request_id="r", requested_output_names=[""])
    with pytest.raises(pb.TritonModelException, match="should not be empty"):
        _request(inputs=[None])
    with pytest.raises(pb.TritonModelException, match="bool/int/str"):
        _request(parameters={"f": 1.5})
    with pytest.raises(pb.TritonModelException):
        _request(parameters="[1, 2]")
    with pytest.raises(TypeError):
        pb.InferenceRequest(inputs=[], requested_output_names=[])  # model_name missing


def test_inference_request_takes_bytes_where_triton_takes_a_std_string():
    """pybind11 binds std::string from str or bytes: a BYTES input's value can name the model
    (qa/L0_trace's bls_simple does)."""
    req = _request(model_name=b"simple", request_id=b"r1", requested_output_names=[b"OUT", "X"])
    assert req.model_name() == "simple" and req.request_id() == "r1"
    assert req.requested_output_names() == {"OUT", "X"}
    for bad in ({"model_name": 3}, {"request_id": 1.5}, {"requested_output_names": [1]}):
        with pytest.raises(TypeError):
            _request(**bad)
    with pytest.raises(TypeError):
        _request(requested_output_names=b"OUT")  # a name, not a list of names


def test_bls_outside_a_stub_is_refused_with_tritons_text():
    """Outside a running stub there is no server to call (Triton: only within execute)."""
    req = _request()
    calls = (
        req.exec,
        req.async_exec,
        lambda: pb.load_model("m"),
        lambda: pb.unload_model("m"),
        lambda: pb.is_model_ready("m"),
    )
    for call in calls:
        with pytest.raises(pb.TritonModelException, match="BLS is only supported during"):
            call()


def test_inference_request_attach_sender_and_cancellation():
    sent = []
    cancelled = [False]
    req = _request()
    req._attach(lambda r, f: sent.append((r, f)), lambda: cancelled[0])
    sender = req.get_response_sender()
    assert isinstance(sender, pb.InferenceResponseSender)
    resp = pb.InferenceResponse([])
    sender.send(resp)
    sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sent == [(resp, 0), (None, 1)]
    assert not req.is_cancelled() and not sender.is_cancelled()
    cancelled[0] = True
    assert req.is_cancelled() and sender.is_cancelled()
    explicit = pb.InferenceResponseSender(lambda r, f: None)
    req._attach(explicit, lambda: False)
    assert req.get_response_sender() is explicit


def test_unattached_sender_cannot_send():
    with pytest.raises(pb.TritonModelException, match="no reference to the decoupled state"):
        _request().get_response_sender().send(pb.InferenceResponse([]))


# ------------------------------------------------------------------ response sender


def test_sender_final_flag_closes():
    sent = []
    sender = pb.InferenceResponseSender(lambda r, f: sent.append(f), lambda: False)
    sender.send(pb.InferenceResponse([]))
    sender.send(pb.InferenceResponse([]), flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sender._is_closed() and sender._responses_sent() == 2
    for args in ((pb.InferenceResponse([]),), (None, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)):
        with pytest.raises(
            pb.TritonModelException,
            match="Unable to send response. Response sender has been closed.",
        ):
            sender.send(*args)
    assert sent == [0, 1]


def test_sender_argument_checks():
    sender = pb.InferenceResponseSender(lambda r, f: None, lambda: False)
    with pytest.raises(pb.TritonModelException, match="Unsupported flag provided."):
        sender.send(pb.InferenceResponse([]), flags=2)
    with pytest.raises(
        pb.TritonModelException,
        match="Inference Response object must be provided when the response flags is set to zero.",
    ):
        sender.send()
    with pytest.raises(TypeError):
        sender.send("response")
    assert not sender._is_closed()


def test_sender_non_decoupled_rules():
    sender = pb.InferenceResponseSender(lambda r, f: None, None, decoupled=False)
    with pytest.raises(pb.TritonModelException, match="cannot send complete final before"):
        sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(pb.InferenceResponse([]))
    with pytest.raises(pb.TritonModelException, match="cannot send more than one response"):
        sender.send(pb.InferenceResponse([]))
    sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sender._is_closed() and sender.is_cancelled() is False


# ------------------------------------------------------------------ config helpers

CONFIG = {
    "name": "m",
    "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
}


def test_config_lookups():
    assert pb.get_input_config_by_name(CONFIG, "IN")["dims"] == [4]
    assert pb.get_output_config_by_name(CONFIG, "OUT")["data_type"] == "TYPE_FP32"
    assert pb.get_input_config_by_name(CONFIG, "OUT") is None
    assert pb.get_output_config_by_name({}, "OUT") is None
    assert not pb.using_decoupled_model_transaction_policy(CONFIG)
    assert pb.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )


def test_model_config_from_json_and_dict():
    cfg = pb.ModelConfig(json.dumps(CONFIG))
    assert cfg.as_dict() == CONFIG
    cfg = pb.ModelConfig(CONFIG)
    cfg.as_dict()["input"].append({"name": "X"})
    assert len(CONFIG["input"]) == 1  # the dict is copied
    bare = pb.ModelConfig({"name": "b"}).as_dict()
    assert bare["input"] == [] and bare["output"] == [] and bare["max_batch_size"] == 0


def test_model_config_max_batch_size_and_batching():
    cfg = pb.ModelConfig({"name": "m", "max_batch_size": 0})
    cfg.set_max_batch_size(16)
    assert cfg.as_dict()["max_batch_size"] == 16
    with pytest.raises(
        ValueError,
        match="configuration specified max_batch_size 16, but in "
        "auto-complete-config function for model 'm' specified max_batch_size 4",
    ):
        cfg.set_max_batch_size(4)
    cfg.set_dynamic_batching()
    cfg.set_dynamic_batching()
    assert cfg.as_dict()["dynamic_batching"] == {}
    seq = pb.ModelConfig({"name": "s", "sequence_batching": {}})
    with pytest.raises(
        ValueError,
        match="Configuration specified scheduling_choice as "
        "'sequence_batching', but auto-complete-config function for model 's' "
        "tries to set scheduling_choice as 'dynamic_batching'",
    ):
        seq.set_dynamic_batching()


def test_model_config_add_input_output():
    cfg = pb.ModelConfig(
        {"name": "m", "input": [{"name": "A", "data_type": "TYPE_INVALID", "dims": []}]}
    )
    cfg.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [2], "optional": True})
    cfg.add_input({"name": "B", "data_type": "TYPE_STRING", "dims": [-1]})
    cfg.add_output({"name": "C", "data_type": "TYPE_FP32", "dims": [1]})
    cfg.add_output({"name": "C", "data_type": "TYPE_FP32", "dims": [1]})
    d = cfg.as_dict()
    assert d["input"] == [
        {"name": "A", "data_type": "TYPE_INT32", "dims": [2], "optional": True},
        {"name": "B", "data_type": "TYPE_STRING", "dims": [-1]},
    ]
    assert d["output"] == [{"name": "C", "data_type": "TYPE_FP32", "dims": [1]}]


@pytest.mark.parametrize(
    "method,tensor,msg",
    [
        (
            "add_input",
            {"name": "IN", "data_type": "TYPE_INT8", "dims": [4]},
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for input 'IN', "
            "model provides TYPE_INT8",
        ),
        (
            "add_input",
            {"name": "IN", "data_type": "TYPE_FP32", "dims": [5]},
            "model 'm', tensor 'IN': the model expects dims [5] but the model configuration "
            "specifies dims [4]",
        ),
        (
            "add_output",
            {"name": "OUT", "data_type": "TYPE_FP16", "dims": [4]},
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for output 'OUT', "
            "model provides TYPE_FP16",
        ),
        (
            "add_input",
            {"name": "X", "data_type": "TYPE_FP32", "dims": [1], "format": "x"},
            "input 'X' in auto-complete-config function for model 'm' contains property other than "
            "'name', 'data_type', 'dims' and 'optional'.",
        ),
        (
            "add_output",
            {"name": "Y", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
            "output 'Y' in auto-complete-config function for model 'm' contains property "
            "other than 'name', 'data_type' and 'dims'.",
        ),
        (
            "add_input",
            {"data_type": "TYPE_FP32", "dims": [1]},
            "input in auto-complete-config function for model 'm' is missing 'name' property.",
        ),
        (
            "add_output",
            {"name": "Z", "dims": [1]},
            "output 'Z' in auto-complete-config function for model 'm' is missing 'data_type' "
            "property.",
        ),
        (
            "add_input",
            {"name": "Z", "data_type": "TYPE_FP32"},
            "input 'Z' in auto-complete-config function for model 'm' is missing 'dims' property.",
        ),
    ],
)
def test_model_config_add_errors(method, tensor, msg):
    cfg = pb.ModelConfig(CONFIG)
    with pytest.raises(ValueError) as info:
        getattr(cfg, method)(tensor)
    assert str(info.value) == msg


def test_model_config_optional_conflict():
    cfg = pb.ModelConfig(
        {
            "name": "m",
            "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [1], "optional": False}],
        }
    )
    with pytest.raises(
        ValueError,
        match="the model expects optional True but the model "
        "configuration specifies optional False",
    ):
        cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [1], "optional": True})


def test_model_config_transaction_policy():
    cfg = pb.ModelConfig({"name": "m"})
    cfg.set_model_transaction_policy({"decoupled": True})
    cfg.set_model_transaction_policy(dict(decoupled=True))
    assert cfg.as_dict()["model_transaction_policy"] == {"decoupled": True}
    with pytest.raises(
        ValueError,
        match="trying to change decoupled property in "
        "auto-complete-config for model 'm', which is already set to 'True'.",
    ):
        cfg.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'."):
        cfg.set_model_transaction_policy({"other": 1})


# ------------------------------------------------------------------ logging


def test_logger_sink_gets_level_message_and_call_site():
    records = []
    pb._set_log_sink(lambda level, msg, where: records.append((level, msg, where)))
    try:
        logger = pb.Logger
        line = sys._getframe().f_lineno
        logger.log_info("i")
        logger.log_warn("w")
        logger.log_error("e")
        logger.log_verbose("v")
        logger.log("specific", logger.ERROR)
        logger.log("default")
        pb.Logger.log("enum", pb.LogLevel.WARNING)
    finally:
        pb._set_log_sink(None)
    expected = [
        ("INFO", "i"),
        ("WARNING", "w"),
        ("ERROR", "e"),
        ("VERBOSE", "v"),
        ("ERROR", "specific"),
        ("INFO", "default"),
        ("WARNING", "enum"),
    ]
    assert [(level, msg) for level, msg, _ in records] == expected
    # The model's own line, as Triton's stub reports it (not pb_utils' internals).
    assert [where for _, _, where in records] == [
        f"test_pb_utils.py:{line + n}" for n in range(1, 8)
    ]
    assert pb.Logger.LogLevel.VERBOSE == pb.LogLevel.VERBOSE


def test_logger_default_sink_writes_triton_format_to_stderr(capsys):
    pb.Logger.log_warn("to stderr")
    line = sys._getframe().f_lineno - 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        rf"W\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} {os.getpid()} test_pb_utils\.py:{line}\] to stderr\n",
        err,
    ), err


# ------------------------------------------------------------------ metrics
# The in-process backend (outside a stub); the stub's, through the server, is tested in
# tests/integration/test_model_observability.py.


def _family(name):
    registry = pb_metrics._local_registry()
    return next(f for f in registry.families() if f.name == name)


def test_metric_counter_and_gauge():
    counters = pb.MetricFamily("t_counter", "c", pb.MetricFamily.COUNTER)
    counter = counters.Metric(labels={"a": "1"})
    assert counter.value() == 0.0
    counter.increment(2.5)
    assert counter.value() == 2.5
    with pytest.raises(
        pb.TritonModelException,
        match="Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only "
        "be incremented monotonically by non-negative values.",
    ):
        counter.increment(-1)
    with pytest.raises(
        pb.TritonModelException,
        match="Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
    ):
        counter.set(1)
    with pytest.raises(pb.TritonModelException, match="does not support Observe"):
        counter.observe(1)
    with pytest.raises(TypeError):
        counter.increment("1")
    gauges = pb.MetricFamily("t_gauge", "g", pb.MetricFamily.GAUGE)  # keep the family alive
    gauge = gauges.Metric()
    gauge.increment(3)
    gauge.increment(-1)
    assert gauge.value() == 2.0
    gauge.set(9.5)
    assert gauge.value() == 9.5
    with pytest.raises(pb.TritonModelException):
        gauge.observe(1)
    with pytest.raises(
        pb.TritonModelException, match="Failed to create metric. Unexpected buckets found."
    ):
        gauges.Metric(labels={}, buckets=[1.0])


def test_metric_histogram():
    family = pb.MetricFamily("t_hist", "h", pb.MetricFamily.HISTOGRAM)
    with pytest.raises(
        pb.TritonModelException, match="Failed to create metric. Missing required buckets."
    ):
        family.Metric(labels={})
    with pytest.raises(
        pb.TritonModelException,
        match="Error when creating Metric: Bucket Boundaries must be strictly sorted",
    ):
        family.Metric(labels={}, buckets=[2.5, 0.1])
    with pytest.raises(pb.TritonModelException, match="strictly sorted"):
        family.Metric(labels={}, buckets=[1, 1, 2])
    with pytest.raises(pb.TritonModelException, match="Buckets must be a list."):
        family.Metric(labels={}, buckets=(1, 2))
    with pytest.raises(pb.TritonModelException, match="Invalid label name"):
        family.Metric(labels={"le": "x"}, buckets=[1])
    empty = family.Metric(labels={"empty": "1"}, buckets=[])
    empty.observe(3)
    hist = family.Metric(labels={"k": "v"}, buckets=[0.1, 1.0, 2.5])
    for value in (0.05, 1.0, 1.5, 6.0):
        hist.observe(value)
    child = _family("t_hist").children[(("k", "v"),)]
    assert child.count == 4 and child.sum == pytest.approx(8.55)
    assert child.counts == [1, 1, 1, 1]  # per bucket; the last is +Inf
    assert _family("t_hist").children[(("empty", "1"),)].counts == [1]
    for bad, verb in ((hist.value, "Value"), (lambda: hist.increment(1), "Increment")):
        with pytest.raises(pb.TritonModelException, match=f"HISTOGRAM does not support {verb}"):
            bad()
    with pytest.raises(pb.TritonModelException, match="does not support Set"):
        hist.set(1)


def test_metric_family_errors():
    with pytest.raises(
        pb.TritonModelException, match="Error when creating MetricFamily: Invalid metric name"
    ):
        pb.MetricFamily("bad name", "d", pb.MetricFamily.COUNTER)
    with pytest.raises(pb.TritonModelException, match="Unknown metric kind"):
        pb.MetricFamily("t_kind", "d", 7)
    with pytest.raises(TypeError):
        pb.MetricFamily(1, "d", pb.MetricFamily.COUNTER)


def test_metric_duplicates_labels_and_lifetime():
    fam1 = pb.MetricFamily("t_dup", "first", pb.MetricFamily.COUNTER)
    fam2 = pb.MetricFamily("t_dup", "second", pb.MetricFamily.COUNTER)
    m1, m2 = fam1.Metric(labels={"x": "1"}), fam2.Metric(labels={"x": "1"})
    m1.increment(7.5)
    assert m2.value() == 7.5
    assert _family("t_dup").description == "first"  # prometheus-cpp merges: the first stays
    with pytest.raises(
        pb.TritonModelException,
        match="Error when creating MetricFamily: Family name already exists with different type",
    ):
        pb.MetricFamily("t_dup", "d", pb.MetricFamily.GAUGE)
    with pytest.raises(pb.TritonModelException, match="Labels must be a dictionary"):
        fam1.Metric(labels=["x"])
    del fam1
    gc.collect()
    with pytest.raises(
        pb.TritonModelException,
        match="Invalid metric operation as the corresponding 'MetricFamily' has been deleted.",
    ):
        m1.increment(1)
    m2.increment(1)
    assert m2.value() == 8.5  # the metric lives on through fam2's reference


def test_metric_and_family_vanish_when_collected():
    family = pb.MetricFamily("t_gone", "d", pb.MetricFamily.GAUGE)
    metric = family.Metric(labels={"a": "b"})
    metric.set(3)
    assert _family("t_gone").children
    del metric
    gc.collect()
    assert not any(f.name == "t_gone" for f in pb_metrics._local_registry().families())
    family.Metric(labels={"a": "b"}).set(1)  # a new one starts again from zero... and is
    gc.collect()  # collected at once, being unreferenced
    del family
    gc.collect()
    # The name is free again: another kind may take it.
    pb.MetricFamily("t_gone", "d", pb.MetricFamily.COUNTER)


# ------------------------------------------------------------------ as an installed module


def test_triton_model_file_runs_against_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    source = textwrap.dedent("""
        import json
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(auto_complete_model_config):
                auto_complete_model_config.add_input(
                    {"name": "IN", "data_type": "TYPE_STRING", "dims": [-1]})
                auto_complete_model_config.add_output(
                    {"name": "OUT", "data_type": "TYPE_STRING", "dims": [-1]})
                auto_complete_model_config.set_max_batch_size(0)
                return auto_complete_model_config

            def initialize(self, args):
                config = json.loads(args["model_config"])
                out = pb_utils.get_output_config_by_name(config, "OUT")
                self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])

            def execute(self, requests):
                responses = []
                for request in requests:
                    data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                    out = np.array([s.upper() for s in data], dtype=self.dtype)
                    responses.append(pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUT", out)]))
                return responses
    """)
    module = types.ModuleType("model")
    exec(compile(source, "model.py", "exec"), module.__dict__)
    config = module.TritonPythonModel.auto_complete_config(pb.ModelConfig({"name": "up"}))
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config.as_dict())})
    wire = pb.serialize_byte_tensor(np.array([b"ab", b""], dtype=np.object_))
    request = _request(inputs=[pb.Tensor("IN", pb.deserialize_bytes_tensor(wire))])
    (response,) = model.execute([request])
    out = pb.get_output_tensor_by_name(response, "OUT")
    assert out.triton_dtype() == pb.TYPE_STRING
    assert pb.deserialize_bytes_tensor(pb.serialize_byte_tensor(out.as_numpy())).tolist() == [
        b"AB",
        b"",
    ]


# ------------------------------------------------------------------ Triton's argument binding


@pytest.mark.parametrize(
    "kwargs",
    [
        {"correlation_id": None},
        {"request_id": None},
        {"model_version": None},
        {"flags": None},
        {"timeout": None},
        {"preferred_memory": None},
        {"trace": None},
        {"requested_output_names": [None]},
        {"requested_output_names": None},
        {"inputs": None},
        {"model_name": None},
    ],
)
def test_request_arguments_bound_none_false_are_type_errors(kwargs):
    """Triton binds each InferenceRequest argument but ``parameters`` with none(false)."""
    args = {"inputs": [], "requested_output_names": ["OUT"], "model_name": "m"} | kwargs
    with pytest.raises(TypeError):
        pb.InferenceRequest(**args)


def test_response_with_a_none_tensor_is_tritons_model_exception():
    with pytest.raises(pb.TritonModelException, match="^Output tensor for inference response"):
        pb.InferenceResponse(output_tensors=[None])
    with pytest.raises(TypeError):
        pb.InferenceResponse(output_tensors=None)


@pytest.mark.parametrize("args", [(None, np.zeros(1)), ("OUT", None), ("", None), ("OUT", [1])])
def test_tensor_takes_a_str_and_an_ndarray(args):
    """Argument types are checked before the name's value, as pybind11 does."""
    with pytest.raises(TypeError):
        pb.Tensor(*args)


@pytest.mark.parametrize(
    "call",
    [
        lambda: pb.Logger.log("m", None),
        lambda: pb.Logger.log("m", 1),
        lambda: pb.Logger.log_info(None),
        lambda: pb.Logger.log_warn(None),
        lambda: pb.Logger.log_error(None),
        lambda: pb.Logger.log_verbose(None),
    ],
)
def test_logger_takes_a_str_and_a_log_level(call):
    with pytest.raises(TypeError):
        call()


def test_from_dlpack_refuses_what_triton_finds_not_contiguous():
    transposed = np.arange(6, dtype=np.float32).reshape(2, 3).T
    with pytest.raises(pb.TritonModelException) as info:
        pb.Tensor.from_dlpack("T", transposed)
    assert str(info.value) == (
        "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
        "in C-Order are supported."
    )
    column = np.arange(6, dtype=np.int32).reshape(3, 2)[:, :1]  # size-1 dimension: any stride
    assert pb.Tensor.from_dlpack("C", column).as_numpy().tolist() == [[0], [2], [4]]
    rows = np.arange(12, dtype=np.int32).reshape(4, 3)[::2]  # only the outermost stride is off
    assert pb.Tensor.from_dlpack("R", rows).as_numpy().tolist() == [[0, 1, 2], [6, 7, 8]]


def test_c_python_backend_utils_has_pb_utils_classes_and_the_shared_memory_hook(tmp_path):
    """Triton's C++ module, as models import it: the same classes, and
    ``shared_memory.free_memory()`` (here: the bytes free under /dev/shm)."""
    from tritium.backends.python import pb_c_utils as c_utils

    assert c_utils.Tensor is pb.Tensor and c_utils.InferenceRequest is pb.InferenceRequest
    assert c_utils.TritonModelException is pb.TritonModelException
    assert c_utils.MetricFamily is pb_metrics.MetricFamily
    stats = os.statvfs(tmp_path)
    free = c_utils.SharedMemory(str(tmp_path)).free_memory()
    assert isinstance(free, int) and free > 0
    assert abs(free - stats.f_bavail * stats.f_frsize) < 1 << 30  # the same filesystem's
    assert c_utils.SharedMemory(str(tmp_path / "absent")).free_memory() == 0
    assert isinstance(c_utils.shared_memory.free_memory(), int)
