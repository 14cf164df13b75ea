"""BLS test models (Python models that call other models with ``pb_utils.InferenceRequest``),
registered in tests/support/models.py (``build_test_repository``). They call the examples ``simple``
(ONNX add/sub) and ``square_int32`` (decoupled), the test models ``raises``,
``identity_fp32``, ``identity_onnx_fp32``, ``seq_echo_direct`` and each other:

bls_double           python; INPUT0 INT32 [-1] -> OUTPUT0 = 2 * INPUT0 (a plain child).
bls_batch_probe      python, max_batch_size 8, dynamic batching (preferred 4, 2 s delay);
                     INPUT0 INT32 [1] -> OUTPUT0 = 2 * INPUT0, OUTPUT1 = len(requests).
bls_pipeline         INPUT0, INPUT1 INT32 [16] -> ``simple`` -> ``bls_double`` on its OUTPUT0:
                     OUTPUT0 = 2 * (INPUT0 + INPUT1), OUTPUT1 = INPUT0 - INPUT1.
bls_fanout_async     ``async def execute``; INPUT0 INT32 [-1]: one ``async_exec`` per value
                     into ``bls_batch_probe``, gathered: OUTPUT0 = doubled values, OUTPUT1 =
                     the batch size each child ran in.
bls_fanout_threads   the same with ``exec`` from a thread pool of the model's own.
bls_decoupled        INPUT0 INT32 [1] = n -> ``square_int32`` with ``exec(decoupled=True)``:
                     OUTPUT0 INT32 [-1] = the OUT of each response, OUTPUT1 INT32 [1] = the
                     number of responses iterated (the empty final one included).
bls_probe            CASE STRING [1] -> MESSAGE STRING [1] = the child response's error text
                     (or the exception's), CODE INT32 [1] = its code (-1: an exception).
bls_cancel_parent    IN INT32 [1] + request parameter ``marker`` -> ``bls_cancel_child``.
bls_cancel_child     IN INT32 [1]: waits up to 30 s for ``is_cancelled()``, then writes
                     "cancelled" to the file ``marker`` names; OUT = IN.
bls_sequence         INPUT0 INT32 [-1] + parameter ``corrid``: one request per value into
                     ``seq_echo_direct`` (START on the first, END on the last), SEEN INT64
                     [-1, 13] = the rows it reported.
bls_control          ACTION STRING [1] = "load|unload|ready <model> [version]" -> MESSAGE
                     STRING [1]; "init x" answers what ``initialize`` saw: is_model_ready
                     of ``bls_double`` and the refusal of an ``exec`` there.
bls_by_name          INPUT0, INPUT1 INT32 [16], MODEL_NAME STRING [1] -> the model it names
                     (``simple``), called with the name and output names as the bytes a BYTES
                     input gives (Triton's binding takes bytes where it takes str): its
                     OUTPUT0, OUTPUT1.
bls_forward_fp32     INPUT0 FP32 [-1] + parameter ``target`` (default ``identity_onnx_fp32``)
                     -> OUTPUT0 = the target's OUTPUT0 (large-tensor round trips); with
                     parameter ``repeat`` = n it calls the target n times and OUTPUT1 FP64 [1]
                     = mean microseconds per call.
"""

from __future__ import annotations

from collections.abc import Callable

_Spec = Callable[[str], dict[str, str]]

_HEAD = """\
import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils


def _in(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


def _out(response, name):
    return pb_utils.get_output_tensor_by_name(response, name).as_numpy()


def _text(request, name):
    value = _in(request, name).reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else str(value)


def _reply(*tensors):
    return pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in tensors])
"""

_DOUBLE = """
class TritonPythonModel:
    def execute(self, requests):
        return [_reply(("OUTPUT0", (_in(r, "INPUT0") * 2).astype(np.int32))) for r in requests]
"""

_BATCH_PROBE = """
class TritonPythonModel:
    def execute(self, requests):
        size = np.array([len(requests)], dtype=np.int32)
        return [
            _reply(("OUTPUT0", (_in(r, "INPUT0") * 2).astype(np.int32)), ("OUTPUT1", size))
            for r in requests
        ]
"""

_PIPELINE = """
class TritonPythonModel:
    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        a, b = _in(request, "INPUT0"), _in(request, "INPUT1")
        first = pb_utils.InferenceRequest(
            model_name="simple",
            inputs=[pb_utils.Tensor("INPUT0", a.reshape(1, 16)),
                    pb_utils.Tensor("INPUT1", b.reshape(1, 16))],
            requested_output_names=["OUTPUT0", "OUTPUT1"],
        ).exec()
        if first.has_error():
            return pb_utils.InferenceResponse(error=first.error())
        second = pb_utils.InferenceRequest(
            model_name="bls_double",
            inputs=[pb_utils.Tensor("INPUT0", _out(first, "OUTPUT0").reshape(16))],
            requested_output_names=["OUTPUT0"],
        ).exec()
        if second.has_error():
            return pb_utils.InferenceResponse(error=second.error())
        return _reply(("OUTPUT0", _out(second, "OUTPUT0")),
                      ("OUTPUT1", _out(first, "OUTPUT1").reshape(16)))
"""

_FANOUT_COMMON = """
def _child(value):
    return pb_utils.InferenceRequest(
        model_name="bls_batch_probe",
        inputs=[pb_utils.Tensor("INPUT0", np.array([[value]], dtype=np.int32))],
        requested_output_names=["OUTPUT0", "OUTPUT1"],
    )


def _collect(responses):
    for response in responses:
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
    doubled = np.array([_out(r, "OUTPUT0").item() for r in responses], dtype=np.int32)
    sizes = np.array([_out(r, "OUTPUT1").item() for r in responses], dtype=np.int32)
    return _reply(("OUTPUT0", doubled), ("OUTPUT1", sizes))
"""

_FANOUT_ASYNC = (
    _FANOUT_COMMON
    + """
class TritonPythonModel:
    async def execute(self, requests):
        out = []
        for request in requests:
            values = _in(request, "INPUT0").tolist()
            responses = await asyncio.gather(*(_child(v).async_exec() for v in values))
            out.append(_collect(responses))
        return out
"""
)

_FANOUT_THREADS = (
    _FANOUT_COMMON
    + """
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            values = _in(request, "INPUT0").tolist()
            with ThreadPoolExecutor(len(values)) as pool:
                responses = list(pool.map(lambda v: _child(v).exec(), values))
            out.append(_collect(responses))
        return out
"""
)

_DECOUPLED = """
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            n = _in(request, "INPUT0").reshape(1).astype(np.int32)
            responses = pb_utils.InferenceRequest(
                model_name="square_int32",
                inputs=[pb_utils.Tensor("IN", n)],
                requested_output_names=["OUT"],
            ).exec(decoupled=True)
            values, count = [], 0
            for response in responses:
                count += 1
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if response.output_tensors():
                    values.append(_out(response, "OUT").item())
            out.append(_reply(("OUTPUT0", np.array(values, dtype=np.int32)),
                              ("OUTPUT1", np.array([count], dtype=np.int32))))
        return out
"""

_PROBE = """
def _case(name):
    int32 = np.array([1], dtype=np.int32)
    if name == "unknown_model":
        return "no_such_model", [pb_utils.Tensor("INPUT0", int32)], False
    if name == "bad_input":
        return "bls_double", [pb_utils.Tensor("WRONG", int32)], False
    if name == "raises":
        return "raises", [pb_utils.Tensor("INPUT0", np.ones(2, np.float32))], False
    if name == "decoupled":
        return "square_int32", [pb_utils.Tensor("IN", int32)], False
    raise ValueError(name)


class TritonPythonModel:
    def execute(self, requests):
        return [self._one(_text(r, "CASE")) for r in requests]

    def _one(self, case):
        try:
            if case == "load":
                pb_utils.load_model("bls_double")
                message, code = "loaded", 0
            else:
                model, inputs, decoupled = _case(case)
                response = pb_utils.InferenceRequest(
                    model_name=model, inputs=inputs, requested_output_names=[]
                ).exec(decoupled=decoupled)
                error = response.error()
                message, code = (error.message(), error.code()) if error else ("ok", 0)
        except pb_utils.TritonModelException as exc:
            message, code = str(exc), -1
        return _reply(("MESSAGE", np.array([message.encode()], dtype=object)),
                      ("CODE", np.array([code], dtype=np.int32)))
"""

_CANCEL_PARENT = """
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            response = pb_utils.InferenceRequest(
                model_name="bls_cancel_child",
                inputs=[pb_utils.Tensor("IN", _in(request, "IN"))],
                requested_output_names=["OUT"],
                parameters={"marker": json.loads(request.parameters())["marker"]},
            ).exec()
            if response.has_error():
                out.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                out.append(_reply(("OUT", _out(response, "OUT"))))
        return out
"""

_CANCEL_CHILD = """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not request.is_cancelled():
                time.sleep(0.02)
            if request.is_cancelled():
                with open(json.loads(request.parameters())["marker"], "w") as handle:
                    handle.write("cancelled")
        return [_reply(("OUT", _in(r, "IN"))) for r in requests]
"""

_SEQUENCE = """
class TritonPythonModel:
    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        corrid = int(json.loads(request.parameters())["corrid"])
        values = _in(request, "INPUT0").tolist()
        rows = []
        for i, value in enumerate(values):
            flags = (1 if i == 0 else 0) | (2 if i == len(values) - 1 else 0)
            response = pb_utils.InferenceRequest(
                model_name="seq_echo_direct",
                inputs=[pb_utils.Tensor("INPUT0", np.array([[value]], dtype=np.int32))],
                requested_output_names=["SEEN"],
                correlation_id=corrid,
                flags=flags,
            ).exec()
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            rows.append(_out(response, "SEEN").reshape(-1))
        return _reply(("SEEN", np.stack(rows).astype(np.int64)))
"""

_CONTROL = """
class TritonPythonModel:
    def initialize(self, args):
        # Model control works from initialize (Triton's README loads models there); exec not.
        self.at_init = f"ready={pb_utils.is_model_ready('bls_double')}"
        try:
            pb_utils.InferenceRequest(
                model_name="bls_double", inputs=[], requested_output_names=[]
            ).exec()
        except pb_utils.TritonModelException as exc:
            self.at_init += f"; exec: {exc}"

    def execute(self, requests):
        return [self._one(_text(r, "ACTION").split()) for r in requests]

    def _one(self, words):
        action, target = words[0], words[1]
        if action == "init":
            return _reply(("MESSAGE", np.array([self.at_init.encode()], dtype=object)))
        try:
            if action == "load":
                pb_utils.load_model(model_name=target)
                message = "loaded"
            elif action == "unload":
                pb_utils.unload_model(target)
                message = "unloaded"
            else:
                version = words[2] if len(words) > 2 else ""
                message = f"ready={pb_utils.is_model_ready(target, version)}"
        except pb_utils.TritonModelException as exc:
            message = str(exc)
        return _reply(("MESSAGE", np.array([message.encode()], dtype=object)))
"""

_BY_NAME = """
class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = _in(request, "MODEL_NAME")[0]  # bytes, as qa/L0_trace's bls_simple uses it
            response = pb_utils.InferenceRequest(
                model_name=name,
                inputs=[pb_utils.Tensor(n, _in(request, n).reshape(1, 16))
                        for n in ("INPUT0", "INPUT1")],
                requested_output_names=[b"OUTPUT0", b"OUTPUT1"],
                request_id=b"by-name",
            ).exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                responses.append(_reply(*((n, _out(response, n).reshape(16))
                                          for n in ("OUTPUT0", "OUTPUT1"))))
        return responses
"""

_FORWARD = """
class TritonPythonModel:
    def execute(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        params = json.loads(request.parameters())
        target = params.get("target", "identity_onnx_fp32")
        repeat = int(params.get("repeat", 1))
        data = _in(request, "INPUT0")
        began = time.perf_counter()
        for _ in range(repeat):
            response = pb_utils.InferenceRequest(
                model_name=target,
                inputs=[pb_utils.Tensor("INPUT0", data)],
                requested_output_names=["OUTPUT0"],
            ).exec()
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
        micros = (time.perf_counter() - began) * 1e6 / repeat
        return _reply(("OUTPUT0", _out(response, "OUTPUT0")),
                      ("OUTPUT1", np.array([micros], dtype=np.float64)))
"""


def _tensors(entries: list[tuple[str, str, str]]) -> str:
    return ",\n".join(f'  {{ name: "{n}", data_type: {t}, dims: [ {d} ] }}' for n, t, d in entries)


def _spec(
    source: str,
    inputs: list[tuple[str, str, str]],
    outputs: list[tuple[str, str, str]],
    extra: str = "",
    max_batch_size: int = 0,
) -> _Spec:
    def spec(name: str) -> dict[str, str]:
        config = (
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n{extra}\n'
            f"input [\n{_tensors(inputs)}\n]\noutput [\n{_tensors(outputs)}\n]\n"
        )
        return {"config.pbtxt": config, "1/model.py": _HEAD + source}

    return spec


_I32 = "TYPE_INT32"
_STR = "TYPE_STRING"
_BATCHING = "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }"
_FANOUT_IO = ([("INPUT0", _I32, "-1")], [("OUTPUT0", _I32, "-1"), ("OUTPUT1", _I32, "-1")])

BLS_SPECS: dict[str, _Spec] = {
    "bls_double": _spec(_DOUBLE, [("INPUT0", _I32, "-1")], [("OUTPUT0", _I32, "-1")]),
    "bls_batch_probe": _spec(
        _BATCH_PROBE,
        [("INPUT0", _I32, "1")],
        [("OUTPUT0", _I32, "1"), ("OUTPUT1", _I32, "1")],
        _BATCHING,
        max_batch_size=8,
    ),
    "bls_pipeline": _spec(
        _PIPELINE,
        [("INPUT0", _I32, "16"), ("INPUT1", _I32, "16")],
        [("OUTPUT0", _I32, "16"), ("OUTPUT1", _I32, "16")],
    ),
    "bls_fanout_async": _spec(_FANOUT_ASYNC, *_FANOUT_IO),
    "bls_fanout_threads": _spec(_FANOUT_THREADS, *_FANOUT_IO),
    "bls_decoupled": _spec(
        _DECOUPLED, [("INPUT0", _I32, "1")], [("OUTPUT0", _I32, "-1"), ("OUTPUT1", _I32, "1")]
    ),
    "bls_probe": _spec(
        _PROBE, [("CASE", _STR, "1")], [("MESSAGE", _STR, "1"), ("CODE", _I32, "1")]
    ),
    "bls_cancel_parent": _spec(_CANCEL_PARENT, [("IN", _I32, "1")], [("OUT", _I32, "1")]),
    "bls_cancel_child": _spec(_CANCEL_CHILD, [("IN", _I32, "1")], [("OUT", _I32, "1")]),
    "bls_sequence": _spec(_SEQUENCE, [("INPUT0", _I32, "-1")], [("SEEN", "TYPE_INT64", "-1, -1")]),
    "bls_control": _spec(_CONTROL, [("ACTION", _STR, "1")], [("MESSAGE", _STR, "1")]),
    "bls_by_name": _spec(
        _BY_NAME,
        [("INPUT0", _I32, "16"), ("INPUT1", _I32, "16"), ("MODEL_NAME", _STR, "1")],
        [("OUTPUT0", _I32, "16"), ("OUTPUT1", _I32, "16")],
    ),
    "bls_forward_fp32": _spec(
        _FORWARD,
        [("INPUT0", "TYPE_FP32", "-1")],
        [("OUTPUT0", "TYPE_FP32", "-1"), ("OUTPUT1", "TYPE_FP64", "1")],
    ),
}
