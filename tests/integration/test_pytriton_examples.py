"""tritium.pytriton (issue 39.2): PyTriton's examples (ours, examples/pytriton_*.py) bound
into a server in this process and driven by PyTriton's own clients (``pytriton.client``, from
the nvidia-pytriton 0.7 install where the machine has it) and by tritonclient, over HTTP and
gRPC: answers equal numpy's, the decoupled model streams every step, the configuration is
PyTriton's, a failing callable fails only its request, a model unbinds."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

import pytriton_add_sub
import pytriton_identity
import pytriton_streaming
from tests.support import pytriton_callables
from tests.support.clients import client, make_input
from tritium.pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonInvalidOperationError,
    PyTritonModelConfigError,
)
from tritium.pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from tritium.pytriton.triton import Triton, TritonConfig

# nvidia-pytriton 0.7's install (its clients import cleanly with tritium's numpy and
# tritonclient: its folder goes after ours on sys.path).
# PyTriton's gRPC clients warn that tritonclient.grpc has no timeout on non-infer calls.
pytestmark = pytest.mark.filterwarnings("ignore:tritonclient.grpc doesn't support timeout")
PYTRITON_SITE = Path("/tmp/triton-ref/pytriton/lib/python3.11/site-packages")
PORTS = TritonConfig(
    http_port=0, grpc_port=0, metrics_port=0, http_address="127.0.0.1", grpc_address="127.0.0.1"
)


def pytriton_client() -> Any:
    if not (PYTRITON_SITE / "pytriton" / "client").is_dir():
        pytest.skip("nvidia-pytriton's client is not installed here")
    if str(PYTRITON_SITE) not in sys.path:
        sys.path.append(str(PYTRITON_SITE))
    return importlib.import_module("pytriton.client")


def fails(requests: list[Any]) -> list[dict[str, np.ndarray]]:
    if float(requests[0]["x"][0]) < 0:
        raise ValueError("negative input refused")
    return [{"y": r["x"] * 2} for r in requests]


def echo_parameter(requests: list[Any]) -> list[dict[str, np.ndarray]]:
    """Answers its request's ``greeting`` parameter (PyTriton's ``Request.parameters``)."""
    return [{"y": np.array([str(r.parameters.get("greeting", "")).encode()])} for r in requests]


@pytest.fixture(scope="module")
def triton() -> Iterator[Triton]:
    with Triton(config=PORTS) as served:
        pytriton_add_sub.bind(served)
        pytriton_identity.bind(served)
        pytriton_streaming.bind(served)
        served.bind(
            "add_sub_process",
            pytriton_add_sub.add_sub,
            inputs=[
                Tensor(name="a", dtype=np.float32, shape=(-1,)),
                Tensor(name="b", dtype=np.float32, shape=(-1,)),
            ],
            outputs=[
                Tensor(name="add", dtype=np.float32, shape=(-1,)),
                Tensor(name="sub", dtype=np.float32, shape=(-1,)),
            ],
            config=ModelConfig(max_batch_size=8),
            pool="process",
        )
        served.bind(
            "exits",
            pytriton_callables.exits_on_negative,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))],
            config=ModelConfig(batching=False),
            pool="process",
        )
        served.bind(
            "parameters",
            echo_parameter,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="y", dtype=np.bytes_, shape=(1,))],
            config=ModelConfig(batching=False),
        )
        served.bind(
            "fails",
            fails,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))],
            config=ModelConfig(batching=False),
        )
        yield served


def url(triton: Triton, protocol: str) -> str:
    return f"{protocol}://127.0.0.1:{triton.ports[protocol]}"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["add_sub", "add_sub_process"])
def test_add_sub_with_pytriton_client(triton: Triton, protocol: str, model: str) -> None:
    clients = pytriton_client()
    rng = np.random.default_rng(3)
    a, b = (rng.random((5, 7), dtype=np.float32) for _ in range(2))
    with clients.ModelClient(url(triton, protocol), model) as c:
        result = c.infer_batch(a=a, b=b)
    np.testing.assert_array_equal(result["add"], a + b)
    np.testing.assert_array_equal(result["sub"], a - b)


def test_add_sub_concurrent_requests_batched(triton: Triton) -> None:
    """Many requests at once go through the dynamic batcher: each answer is its own.
    (FuturesModelClient over HTTP: PyTriton 0.7's, given a grpc:// URL, sends HTTP.)"""
    clients = pytriton_client()
    samples = [(np.full(3, i, np.float32), np.arange(3, dtype=np.float32)) for i in range(32)]
    with clients.FuturesModelClient(url(triton, "http"), "add_sub", max_workers=16) as c:
        futures = [c.infer_sample(a=a, b=b) for a, b in samples]
        results = [f.result() for f in futures]
    for (a, b), result in zip(samples, results, strict=True):
        np.testing.assert_array_equal(result["add"], a + b)
        np.testing.assert_array_equal(result["sub"], a - b)


def test_add_sub_concurrent_grpc_clients(triton: Triton) -> None:
    clients = pytriton_client()

    def one(i: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        a = np.full((2, 3), i, np.float32)
        with clients.ModelClient(url(triton, "grpc"), "add_sub") as c:
            return a, c.infer_batch(a=a, b=a * 2)

    with ThreadPoolExecutor(8) as pool:
        for a, result in pool.map(one, range(16)):
            np.testing.assert_array_equal(result["add"], a * 3)
            np.testing.assert_array_equal(result["sub"], -a)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_add_sub_with_tritonclient(triton: Triton, protocol: str) -> None:
    c = client(protocol, f"127.0.0.1:{triton.ports[protocol]}")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    inputs = [make_input(protocol, "a", a, "FP32"), make_input(protocol, "b", b, "FP32")]
    result = c.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("add"), a + b)
    np.testing.assert_array_equal(result.as_numpy("sub"), a - b)


def test_batched_decorators_linear_and_identity(triton: Triton) -> None:
    clients = pytriton_client()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with clients.ModelClient(url(triton, "http"), "linear") as c:
        default = c.infer_batch(x=x)  # scale left out: @fill_optionals gives 1.0
        scaled = c.infer_batch(x=x, scale=np.full((2, 1), 3.0, np.float32))
    np.testing.assert_allclose(default["y"], x @ pytriton_identity.WEIGHTS, rtol=1e-6)
    np.testing.assert_allclose(scaled["y"], x @ pytriton_identity.WEIGHTS * 3.0, rtol=1e-6)
    data = np.array([[b"one"], [b"two"]], dtype=np.bytes_)
    with clients.ModelClient(url(triton, "grpc"), "identity") as c:
        echoed = c.infer_batch(data=data)
    assert [bytes(v) for v in echoed["identity"].reshape(-1)] == [b"one", b"two"]


def test_decoupled_streams_every_step(triton: Triton) -> None:
    clients = pytriton_client()
    x = np.array([1.0, 2.5], np.float32)
    with clients.DecoupledModelClient(url(triton, "grpc"), "count") as c:
        answers = list(c.infer_sample(x=x, n=np.array([4], np.int32)))
    assert [int(a["step"][0]) for a in answers] == [0, 1, 2, 3]
    for i, answer in enumerate(answers):
        np.testing.assert_array_equal(answer["total"], x * (i + 1))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_config_is_pytritons(triton: Triton, protocol: str) -> None:
    c = client(protocol, f"127.0.0.1:{triton.ports[protocol]}")
    config = c.get_model_config("add_sub")
    config = config if protocol == "http" else _json(config.config)
    assert config["max_batch_size"] == 128
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 100
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]] == [
        ("a", "TYPE_FP32", [-1]),
        ("b", "TYPE_FP32", [-1]),
    ]
    streaming = c.get_model_config("count")
    streaming = streaming if protocol == "http" else _json(streaming.config)
    assert streaming["model_transaction_policy"]["decoupled"] is True
    assert streaming.get("max_batch_size", 0) == 0


def _json(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_failing_callable_fails_its_request_only(triton: Triton, protocol: str) -> None:
    c = client(protocol, f"127.0.0.1:{triton.ports[protocol]}")
    bad = [make_input(protocol, "x", np.array([-1.0], np.float32), "FP32")]
    with pytest.raises(InferenceServerException, match="negative input refused"):
        c.infer("fails", bad)
    good = [make_input(protocol, "x", np.array([4.0], np.float32), "FP32")]
    np.testing.assert_array_equal(c.infer("fails", good).as_numpy("y"), [8.0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_process_that_dies_fails_one_execution(triton: Triton, protocol: str) -> None:
    """pool='process': the callable's process exits; that request fails, the next request
    gets a new process."""
    c = client(protocol, f"127.0.0.1:{triton.ports[protocol]}")
    bad = [make_input(protocol, "x", np.array([-1.0], np.float32), "FP32")]
    with pytest.raises(InferenceServerException, match="process running its callable exited"):
        c.infer("exits", bad)
    good = [make_input(protocol, "x", np.array([2.5], np.float32), "FP32")]
    np.testing.assert_array_equal(c.infer("exits", good).as_numpy("y"), [5.0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_request_parameters_reach_the_callable(triton: Triton, protocol: str) -> None:
    c = client(protocol, f"127.0.0.1:{triton.ports[protocol]}")
    x = [make_input(protocol, "x", np.array([1.0], np.float32), "FP32")]
    result = c.infer("parameters", x, parameters={"greeting": "hello"})
    assert result.as_numpy("y").tolist() == [b"hello"]


def test_run_and_stop_without_a_with_block() -> None:
    served = Triton(config=PORTS)
    pytriton_add_sub.bind(served)  # bound before the server runs: loaded by run()
    served.run()
    try:
        c = client("grpc", f"127.0.0.1:{served.ports['grpc']}")
        assert c.is_model_ready("add_sub")
    finally:
        assert served.stop()
    assert not served.is_alive()
    assert not served.stop()  # stopped once


def test_unbind_unloads_the_model() -> None:
    with Triton(config=PORTS) as served:
        pytriton_add_sub.bind(served)
        c = client("http", f"127.0.0.1:{served.ports['http']}")
        assert c.is_model_ready("add_sub")
        served.unbind("add_sub")
        assert not c.is_model_ready("add_sub")
        with pytest.raises(InferenceServerException):
            a = np.ones((1, 2), np.float32)
            c.infer(
                "add_sub", [make_input("http", "a", a, "FP32"), make_input("http", "b", a, "FP32")]
            )
        pytriton_add_sub.bind(served)  # bound again under the same name
        assert c.is_model_ready("add_sub")


def test_a_model_that_fails_to_load_is_not_kept(triton: Triton) -> None:
    bad = ModelConfig(max_batch_size=4, batcher=DynamicBatcher(preferred_batch_size=[100]))
    tensors = [Tensor(name="x", dtype=np.float32, shape=(1,))]
    with pytest.raises(PyTritonModelConfigError, match="failed to load"):
        triton.bind("bad_batcher", fails, inputs=tensors, outputs=tensors, config=bad)
    triton.bind("bad_batcher", fails, inputs=tensors, outputs=tensors)  # the name is free


def test_a_stopped_triton_does_not_run_again() -> None:
    served = Triton(config=PORTS)
    served.run()
    served.stop()
    with pytest.raises(PyTritonInvalidOperationError, match="create a new one"):
        served.run()


def test_triton_config_tritium_cannot_honour_is_refused() -> None:
    with pytest.raises(PyTritonBadParameterError, match="SageMaker"):
        Triton(config=TritonConfig(allow_sagemaker=True))


def test_install_never_shadows_a_real_pytriton(tmp_path: Path) -> None:
    """Without nvidia-pytriton, ``install()`` serves ``pytriton`` from tritium; with it on
    the path, the real package stays."""
    script = (
        "import sys\n"
        "from tritium.pytriton.compat import install\n"
        "done = install()\n"
        "import pytriton.triton, pytriton.decorators\n"
        "print(done, pytriton.triton.__name__, pytriton.decorators.batch.__module__)\n"
    )
    clean = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert clean.stdout.split() == [
        "True",
        "tritium.pytriton.triton",
        "tritium.pytriton.decorators",
    ]
    if not PYTRITON_SITE.is_dir():
        pytest.skip("nvidia-pytriton is not installed here")
    env_script = f"import sys; sys.path.append({str(PYTRITON_SITE)!r})\n" + script
    real = subprocess.run(
        [sys.executable, "-c", env_script], capture_output=True, text=True, check=True
    )
    assert real.stdout.split() == ["False", "pytriton.triton", "pytriton.decorators"]


PYTRITON_SCRIPT = """
import numpy as np
from tritium.pytriton.compat import install
assert install()
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig
import tritonclient.http as httpclient

@batch
def infer(x):
    return {"y": x * 3}

config = TritonConfig(http_port=0, grpc_port=0, metrics_port=0, http_address="127.0.0.1",
                      grpc_address="127.0.0.1")
with Triton(config=config) as triton:
    triton.bind("triple", infer, inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))],
                config=ModelConfig(max_batch_size=4))
    client = httpclient.InferenceServerClient(f"127.0.0.1:{triton.ports['http']}")
    x = httpclient.InferInput("x", [1, 2], "FP32")
    x.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
    print(client.infer("triple", [x]).as_numpy("y").tolist())
"""


def test_a_pytriton_script_runs_under_install() -> None:
    """A script written against ``pytriton``'s module names, after ``install()``."""
    done = subprocess.run(
        [sys.executable, "-c", PYTRITON_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[[3.0, 6.0]]"
