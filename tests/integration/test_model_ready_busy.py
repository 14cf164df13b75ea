"""A Python model's readiness while its stub is busy in ``execute`` (Triton's
``L0_backend_python/model_readiness``): a decoupled model that works ~1 s per request, with
requests queued behind each other, reads READY over HTTP and gRPC while it works, whether it
has an ``is_ready()`` of its own (answered by the stub beside the execution, as Triton's stub
does on its own thread) or not (then the server asks no stub: ready while it lives)."""

from __future__ import annotations

import queue
import textwrap
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.support.clients import client
from testkit.server_process import ServerProcess

_MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().item())
            sender = request.get_response_sender()
            for _ in range(count):
                time.sleep(0.1)
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([count], dtype=np.int32))]
                ))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

_IS_READY = """
    def is_ready(self):
        time.sleep(0.2)
        return True
"""

MODELS = {"busy_ready_hook": _MODEL + _IS_READY, "busy_no_hook": _MODEL}
REQUESTS = 8  # queued on the one instance: ~8 s of work
RESPONSES = 10  # per request, 0.1 s apart
CHECKERS = 16  # readiness checks at once


def _config(name: str) -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: 0
        model_transaction_policy {{ decoupled: true }}
        input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
    """)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("busy_ready")
    for name, source in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_config(name))
        (root / name / "1" / "model.py").write_text(source)
    proc = ServerProcess([Path(root)])
    yield proc
    proc.stop()


def _check(server: ServerProcess, protocol: str, model: str) -> bool:
    checker = client(protocol, server.url(protocol))
    try:
        return bool(checker.is_model_ready(model))
    finally:
        checker.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_busy_model_reads_ready(server: ServerProcess, model: str, protocol: str) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    stream = grpcclient.InferenceServerClient(server.grpc_url)
    stream.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        for _ in range(REQUESTS):
            inp = grpcclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([RESPONSES], dtype=np.int32))
            stream.async_stream_infer(model, [inp])
        first = answers.get(timeout=60)  # the stub is in execute now, the rest queued
        assert not isinstance(first, Exception), first
        ready = [_check(server, protocol, model) for _ in range(3)]
        with ThreadPoolExecutor(CHECKERS) as pool:  # at once, as Triton's suite does
            ready += pool.map(lambda _: _check(server, protocol, model), range(CHECKERS))
        assert ready == [True] * (3 + CHECKERS)
        for _ in range(REQUESTS * RESPONSES - 1):  # every response still comes, none failed
            got = answers.get(timeout=60)
            assert not isinstance(got, Exception), got
            assert got.as_numpy("OUT").tolist() == [RESPONSES]
    finally:
        stream.stop_stream()
        stream.close()
