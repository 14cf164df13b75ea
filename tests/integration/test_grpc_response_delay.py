"""TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N (Triton's testing hook, grpc_server.cc's
CommonHandler; its qa/L0_client_timeout sets it): every gRPC answer other than ModelInfer's
and ModelStreamInfer's, errors included, is written N seconds after the RPC ran, so a client
deadline shorter than N expires; a longer one gets the answer. Inference is not delayed, and
the server keeps serving while answers wait (the wait is a timer, not a sleep on the loop).
Real server, the official gRPC client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from testkit.server_process import ServerProcess

DELAY_S = 4
SHORT = 0.5  # a client deadline the delay always outlasts
MODEL_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""
CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 2 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 2 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("grpc_delay")
    (repo / "identity" / "1").mkdir(parents=True)
    (repo / "identity" / "1" / "model.py").write_text(MODEL_PY)
    (repo / "identity" / "config.pbtxt").write_text(CONFIG)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC", str(DELAY_S))
        proc = ServerProcess([repo])
    yield proc
    proc.stop()


def _deadline_exceeded(call: object) -> None:
    with pytest.raises(InferenceServerException) as info:
        call()  # type: ignore[operator]
    assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED", info.value
    assert "Deadline Exceeded" in str(info.value)  # what the QA suite checks


def _infer(client: grpcclient.InferenceServerClient, timeout: float | None) -> np.ndarray:
    data = np.array([3, 4], dtype=np.int32)
    inp = grpcclient.InferInput("INPUT0", [2], "INT32")
    inp.set_data_from_numpy(data)
    result = client.infer("identity", [inp], client_timeout=timeout)
    return result.as_numpy("OUTPUT0")


def test_non_inference_answers_outlast_a_short_deadline(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    _deadline_exceeded(lambda: client.is_server_live(client_timeout=SHORT))
    _deadline_exceeded(lambda: client.is_model_ready("identity", client_timeout=SHORT))
    _deadline_exceeded(lambda: client.get_model_config("identity", client_timeout=SHORT))
    # an error answer waits too: NOT_FOUND would come at once
    _deadline_exceeded(lambda: client.get_model_metadata("nope", client_timeout=SHORT))
    _deadline_exceeded(lambda: client.get_model_repository_index(client_timeout=SHORT))
    client.close()


def test_a_long_deadline_gets_the_answer_and_inference_is_not_delayed(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    started = time.perf_counter()
    assert client.is_server_ready(client_timeout=DELAY_S + 60)
    print(f"ServerReady answered in {time.perf_counter() - started:.2f} s (hook: {DELAY_S} s)")
    np.testing.assert_array_equal(_infer(client, None), [3, 4])  # warm
    # ModelInfer is not delayed: a deadline shorter than the hook's wait is met
    np.testing.assert_array_equal(_infer(client, DELAY_S - 1), [3, 4])
    client.close()


def test_waiting_answers_do_not_hold_up_the_server(server: ServerProcess) -> None:
    # Four answers waiting at once, and inference goes on meanwhile.
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    answers: list[bool] = []
    threads = [
        threading.Thread(target=lambda: answers.append(client.is_server_live())) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    np.testing.assert_array_equal(_infer(client, DELAY_S - 1), [3, 4])
    for thread in threads:
        thread.join()
    assert answers == [True] * 4
    client.close()
