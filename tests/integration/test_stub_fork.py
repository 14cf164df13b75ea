"""Synchronous BLS from processes a Python model forks (``multiprocessing.Pool`` workers), as
Triton's ``qa/python_models/bls`` ``test_multiprocess`` does: the model first makes BLS calls
in its own process, then runs a pool of 10 workers, each making a synchronous
``InferenceRequest.exec()`` of an add/sub model. Every worker gets its right answer and
nothing hangs (the clients' timeouts bound the test), with small tensors and with tensors
over what one frame carries inline (shared memory on the parent's side)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess

_ADD_SUB = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)
            ]))
        return responses
"""

_REPEAT = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]
                ))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_POOL = """\
import multiprocessing

import numpy as np
import triton_python_backend_utils as pb_utils


def add_sub(args):
    value, size = args
    pb_utils.Logger.log_info("fork worker %d of size %d" % (value, size))
    a = np.full(size, value, dtype=np.float32)
    b = np.ones(size, dtype=np.float32)
    request = pb_utils.InferenceRequest(
        model_name="fork_add_sub",
        inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
        requested_output_names=["OUTPUT0", "OUTPUT1"],
    )
    response = request.exec()
    if response.has_error():
        return response.error().message()
    total = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
    diff = pb_utils.get_output_tensor_by_name(response, "OUTPUT1").as_numpy()
    if not (np.array_equal(total, a + b) and np.array_equal(diff, a - b)):
        return "wrong values"
    return "ok %d %d" % (total[0], diff[0])


def repeat(n):
    request = pb_utils.InferenceRequest(
        model_name="fork_repeat",
        inputs=[pb_utils.Tensor("N", np.array([n], dtype=np.int32))],
        requested_output_names=["OUT"],
    )
    got = []
    for response in request.exec(decoupled=True):
        if response.has_error():
            return response.error().message()
        out = pb_utils.get_output_tensor_by_name(response, "OUT")
        if out is not None:
            got.append(int(out.as_numpy()[0]))
    return "ok " + ",".join(map(str, got))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if pb_utils.get_input_tensor_by_name(request, "SIZE").as_numpy()[0] < 0:
                with multiprocessing.get_context("fork").Pool(10) as pool:
                    answers = pool.map(repeat, range(10))
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("ANSWERS", np.array(answers, dtype=np.object_))
                ]))
                continue
            size = int(pb_utils.get_input_tensor_by_name(request, "SIZE").as_numpy()[0])
            for i in range(100):  # BLS calls in the stub's own process first
                assert add_sub((i, 16)).startswith("ok"), "a BLS call of the parent failed"
            with multiprocessing.get_context("fork").Pool(10) as pool:
                answers = pool.map(add_sub, [(i, size) for i in range(10)])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("ANSWERS", np.array(answers, dtype=np.object_))
            ]))
        return responses
"""

_CONFIGS = {
    "fork_add_sub": """
        name: "fork_add_sub"
        backend: "python"
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
                { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
                 { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
    """,
    "fork_repeat": """
        name: "fork_repeat"
        backend: "python"
        max_batch_size: 0
        model_transaction_policy { decoupled: true }
        input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
    """,
    "fork_pool_bls": """
        name: "fork_pool_bls"
        backend: "python"
        max_batch_size: 0
        input [ { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "ANSWERS" data_type: TYPE_STRING dims: [ 10 ] } ]
    """,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("fork_repo")
    for name, source in (
        ("fork_add_sub", _ADD_SUB),
        ("fork_repeat", _REPEAT),
        ("fork_pool_bls", _POOL),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(_CONFIGS[name]))
        (root / name / "1" / "model.py").write_text(source)
    proc = ServerProcess([Path(root)])
    yield proc
    proc.stop()


# 16 values inline; 3 Mi values (12 MiB a tensor: over a frame's inline bound, so through
# shared memory between the parent and the server).
@pytest.mark.parametrize("size", [16, 3 << 20])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_pool_workers_make_sync_bls_calls(server: ServerProcess, protocol: str, size: int) -> None:
    timeout = {"network_timeout": 120.0} if protocol == "http" else {}
    c = client(protocol, server.url(protocol), **timeout)
    inputs = [make_input(protocol, "SIZE", np.array([size], dtype=np.int32), "INT32")]
    extra = {"client_timeout": 120.0} if protocol == "grpc" else {}
    result = c.infer("fork_pool_bls", inputs, **extra)
    answers = [a.decode() for a in result.as_numpy("ANSWERS")]
    assert answers == [f"ok {i + 1} {i - 1}" for i in range(10)]
    log = server.log_text()  # what the workers logged came through their parent
    assert all(f"fork worker {i} of size {size}" in log for i in range(10)), log[-3000:]


def test_pool_workers_iterate_decoupled_bls_calls(server: ServerProcess) -> None:
    """Each worker's ``exec(decoupled=True)`` yields its n responses, then the final one
    (Triton's own test leaves this case out: DLIS-4630)."""
    c = client("grpc", server.grpc_url)
    inputs = [make_input("grpc", "SIZE", np.array([-1], dtype=np.int32), "INT32")]
    result = c.infer("fork_pool_bls", inputs, client_timeout=120.0)
    answers = [a.decode() for a in result.as_numpy("ANSWERS")]
    assert answers == ["ok " + ",".join(map(str, range(n))) for n in range(10)]
