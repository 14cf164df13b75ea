"""Request rescheduling (Triton's iterative sequences): a Python model releases a request with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` and the sequence batcher
(``sequence_batching { iterative_sequence: true }``) runs it again.

- ``generate``: decoupled, generative style. Each execution emits one token for each request
  and reschedules it until it has produced as many as it asked for; the state lives in the
  model, keyed by the correlation ID the batcher gave the request (the client sent none).
- ``add_sub_twice``: not decoupled; a request is rescheduled once (``None`` in the returned
  list), and answered by its second execution.
- ``no_iterative`` reschedules without ``iterative_sequence``; ``wrong_return`` reschedules
  and returns a response: both are errors with Triton's text.

Its server also serves ``c_utils``, a model that imports ``c_python_backend_utils`` (Triton's
C++ module, which Triton's QA models use, as ``restart``'s does): its classes are
``triton_python_backend_utils``'s and ``shared_memory.free_memory()`` answers.
"""

from __future__ import annotations

import queue
import textwrap
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

PROTOCOLS = ("http", "grpc")

_GENERATE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.left = {}  # correlation ID -> tokens still to produce
        self.step = {}

    def execute(self, requests):
        for request in requests:
            cid = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
                self.left[cid], self.step[cid] = count, 0
            self.left[cid] -= 1
            self.step[cid] += 1
            token = np.array([cid * 1000 + self.step[cid]], dtype=np.int64)
            response = pb_utils.InferenceResponse([pb_utils.Tensor("TOKEN", token)])
            sender = request.get_response_sender()
            if self.left[cid] > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
            else:
                del self.left[cid], self.step[cid]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_ADD_SUB_TWICE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.seen = set()

    def execute(self, requests):
        responses = []
        for request in requests:
            cid = request.correlation_id()
            if cid not in self.seen:
                self.seen.add(cid)
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            self.seen.discard(cid)
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

_RESCHEDULE_ALWAYS_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            outputs = [pb_utils.Tensor("OUTPUT0", tensor.as_numpy())]
            responses.append(RESULT)
        return responses
"""

_C_UTILS_PY = """
import numpy as np
import c_python_backend_utils as c_utils
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        same = c_utils.Tensor is pb_utils.Tensor
        same = same and c_utils.InferenceResponse is pb_utils.InferenceResponse
        free = c_utils.shared_memory.free_memory()
        out = np.array([int(same), free], dtype=np.int64)
        return [c_utils.InferenceResponse([c_utils.Tensor("OUT", out)]) for _ in requests]
"""

_ADD_SUB_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_IDENTITY_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
_ITERATIVE = "sequence_batching { iterative_sequence: true }"

MODELS = {
    "generate": (
        _GENERATE_PY,
        """
        model_transaction_policy { decoupled: true }
        input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "TOKEN" data_type: TYPE_INT64 dims: [ 1 ] } ]
        """
        + _ITERATIVE,
    ),
    "add_sub_twice": (_ADD_SUB_TWICE_PY, _ADD_SUB_IO + _ITERATIVE),
    "c_utils": (
        _C_UTILS_PY,
        """
        input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 2 ] } ]
        """,
    ),
    "no_iterative": (_RESCHEDULE_ALWAYS_PY.replace("RESULT", "None"), _IDENTITY_IO),
    "wrong_return": (
        _RESCHEDULE_ALWAYS_PY.replace("RESULT", "pb_utils.InferenceResponse(outputs)"),
        _IDENTITY_IO + _ITERATIVE,
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("rescheduling") / "repo"
    for name, (code, config) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))
        header = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        (repo / name / "config.pbtxt").write_text(header + textwrap.dedent(config))
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


def _tokens(server: ServerProcess, counts: list[int]) -> list[list[int]]:
    """Stream one ``generate`` request per count (all sent before any answer), each without
    a correlation ID; the tokens each one received, in order, until its final response."""
    answers: queue.Queue[Any] = queue.Queue()

    def callback(result: Any, error: Any) -> None:
        answers.put(error if error is not None else result)

    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        c.start_stream(callback=partial(callback))
        for index, count in enumerate(counts):
            inp = make_input("grpc", "COUNT", np.array([count], dtype=np.int32), "INT32")
            c.async_stream_infer("generate", [inp], request_id=str(index))
        received: dict[str, list[int]] = {str(i): [] for i in range(len(counts))}
        for _ in range(sum(counts)):
            item = answers.get(timeout=60)
            assert not isinstance(item, InferenceServerException), item
            received[item.get_response().id].append(int(item.as_numpy("TOKEN")[0]))
        c.stop_stream()
    finally:
        c.close()
    return [received[str(i)] for i in range(len(counts))]


def test_a_rescheduled_decoupled_request_generates_until_done(server: ServerProcess) -> None:
    counts = [3, 1, 5]
    got = _tokens(server, counts)
    ids = [tokens[0] // 1000 for tokens in got]
    assert len(set(ids)) == len(ids) and all(i > 0 for i in ids), got  # a sequence each
    for tokens, cid, count in zip(got, ids, counts, strict=True):
        assert tokens == [cid * 1000 + step for step in range(1, count + 1)], got
    # the sequences ended (their slots were released): later requests run too
    assert [len(t) for t in _tokens(server, [2, 2])] == [2, 2]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rescheduled_request_is_answered_by_its_next_execution(
    server: ServerProcess, protocol: str
) -> None:
    a = np.arange(4, dtype=np.float32)
    b = np.full(4, 0.5, dtype=np.float32)
    c = client(protocol, server.http_url if protocol == "http" else server.grpc_url)
    try:
        for _ in range(2):
            inputs = [make_input(protocol, n, v, "FP32") for n, v in (("INPUT0", a), ("INPUT1", b))]
            result = c.infer("add_sub_twice", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    finally:
        c.close()


def _identity_error(server: ServerProcess, protocol: str, model: str) -> InferenceServerException:
    c = client(protocol, server.http_url if protocol == "http" else server.grpc_url)
    try:
        inputs = [make_input(protocol, "INPUT0", np.ones(4, dtype=np.float32), "FP32")]
        with pytest.raises(InferenceServerException) as info:
            c.infer(model, inputs)
    finally:
        c.close()
    return info.value


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rescheduling_needs_an_iterative_sequence(server: ServerProcess, protocol: str) -> None:
    error = _identity_error(server, protocol, "no_iterative")
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT"), error
    assert (
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
        "not configured to handle such a flag."
    ) in error.message()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rescheduled_request_must_get_none(server: ServerProcess, protocol: str) -> None:
    error = _identity_error(server, protocol, "wrong_return")
    assert (
        "Failed to process the request(s) for model 'wrong_return_0_0', message: Expected a "
        "None object in the execute function return list for reschduled request, found type"
    ) in error.message(), error.message()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_may_import_c_python_backend_utils(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.http_url if protocol == "http" else server.grpc_url)
    try:
        inputs = [make_input(protocol, "IN", np.array([1], dtype=np.int32), "INT32")]
        same, free = c.infer("c_utils", inputs).as_numpy("OUT").tolist()
    finally:
        c.close()
    assert same == 1 and free > 0
