"""A request of a few bytes that asks a model for seconds of work never runs on the event loop
(backends/data_dependence.py, backends/inline_policy.py ``ModelExecution``): after cheap
requests taught the instance that the model is fast, the costly one runs on the instance
thread, and another client's ``/v2/health/ready`` is answered while it runs. The server is
started with the execution forced inline (``TRITIUM_EXECUTION=inline``, and its older name):
even so, a model whose cost depends on input values stays on its threads. Also: the model's
own ``TRITIUM_EXECUTION`` parameter (a bad value fails its load, naming the choices), and a
PyTorch model whose output does not have its configured shape fails the request (Triton's
words) instead of answering it, over HTTP and gRPC."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.support import costly_models
from tests.support.clients import client, make_input
from testkit.server_process import ServerProcess

pytest.importorskip("torch")

SPIN_STEPS = 1_000_000  # seconds of a TorchScript loop on this machine, from 8 bytes
SQUARE_SIDE = 2500  # ConstantOfShape [2500, 2500], then a 2500^3 MatMul, from 16 bytes
CHEAP = 100  # cheap requests first: what teaches the instance that the model is fast
BAD = "onnx_bad_setting"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("costly") / "repo"
    costly_models.write_onnx(root)
    costly_models.write_torch(root)
    costly_models.write_onnx(root, BAD, costly_models.execution_parameter("sometimes"))
    return root


@pytest.fixture(scope="module")
def served(repo: Path) -> Iterator[ServerProcess]:
    env = {"TRITIUM_EXECUTION": "inline", "TRITIUM_ONNX_EXECUTION": "inline"}
    proc = ServerProcess(
        [repo], "--exit-on-error=false", "--strict-readiness=false", env=env, start_timeout=120
    )
    yield proc
    proc.stop()


def _request(model: str, costly: bool) -> tuple[str, np.ndarray]:
    if model == costly_models.SPIN:
        return "INPUT__0", np.array([SPIN_STEPS if costly else 1], dtype=np.int64)
    side = SQUARE_SIDE if costly else 1
    return "SHAPE", np.array([side, side], dtype=np.int64)


def _infer(proc: ServerProcess, protocol: str, model: str, name: str, data: np.ndarray) -> Any:
    c = client(protocol, proc.url(protocol))
    try:
        wire = "INT64" if data.dtype == np.int64 else "FP32"
        return c.infer(model, [make_input(protocol, name, data, wire)])
    finally:
        c.close()


def _health(url: str) -> float:
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    started = time.perf_counter()
    conn.request("GET", "/v2/health/ready")
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("model", [costly_models.SPIN, costly_models.SQUARE])
def test_a_costly_request_of_a_few_bytes_leaves_the_loop_free(
    served: ServerProcess, model: str
) -> None:
    for _ in range(CHEAP):
        _infer(served, "http", model, *_request(model, costly=False))
    done = threading.Event()
    answers: list[Any] = []

    def costly() -> None:
        answers.append(_infer(served, "http", model, *_request(model, costly=True)))
        done.set()

    worker = threading.Thread(target=costly)
    started = time.perf_counter()
    worker.start()
    time.sleep(0.3)  # let the costly request reach the model (not a timing assertion)
    waits = [_health(served.url("http")) for _ in range(2)]
    answered_first = not done.is_set()
    worker.join()
    took = time.perf_counter() - started
    print(
        f"{model}: costly request {took:.2f} s, /v2/health/ready meanwhile "
        f"{', '.join(f'{w * 1e3:.1f} ms' for w in waits)}"
    )
    assert answered_first, "the health check waited for the costly request"
    output = answers[0].as_numpy("OUTPUT__0" if model == costly_models.SPIN else "TOTAL")
    expected = SPIN_STEPS if model == costly_models.SPIN else SQUARE_SIDE**3
    assert output.tolist() == [pytest.approx(expected, rel=1e-2)]


def test_a_bad_execution_setting_fails_the_models_load(served: ServerProcess) -> None:
    c = client("http", served.url("http"))
    try:
        assert not c.is_model_ready(BAD)
        index = {m["name"]: m for m in c.get_model_repository_index()}
    finally:
        c.close()
    reason = index[BAD].get("reason", "")
    assert "TRITIUM_EXECUTION" in reason and "auto, inline, thread" in reason, reason
    assert "'sometimes'" in reason


def test_an_output_of_another_shape_fails_the_request(served: ServerProcess, protocol: str) -> None:
    """pt_wrong_dims returns INPUT__0[0] elements for an output configured [4]."""
    x = np.array([4, 0, 0, 0], dtype=np.float32)
    result = _infer(served, protocol, costly_models.WRONG_DIMS, "INPUT__0", x)
    assert result.as_numpy("OUTPUT__0").tolist() == [0.0] * 4
    with pytest.raises(InferenceServerException) as caught:
        big = np.array([1000, 0, 0, 0], dtype=np.float32)
        _infer(served, protocol, costly_models.WRONG_DIMS, "INPUT__0", big)
    message = str(caught.value)
    assert (
        "unexpected shape for output 'OUTPUT__0' for model 'pt_wrong_dims'. "
        "Expected [4], got [1000]"
    ) in message, message
    x = np.array([2, 0, 0, 0], dtype=np.float32)  # fewer elements than configured, too
    with pytest.raises(InferenceServerException):
        _infer(served, protocol, costly_models.WRONG_DIMS, "INPUT__0", x)
    assert _health(served.url("http")) >= 0.0  # the server serves on
