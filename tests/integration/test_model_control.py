"""Model control over the real server, both protocols: ``--model-control-mode=none|poll|explicit``,
``--load-model``, the repository extension (index with its ``ready`` filter, load with ``config``
and ``file:`` overrides, unload with ``unload_dependents``), reloads under load, unload waiting for
in-flight requests, and poll mode picking up repository changes.

Expected behaviour is Triton's, read from triton-inference-server/core
``src/model_repository_manager/model_repository_manager.cc`` (``LoadUnloadModel``, ``Poll``,
``InitializeModelInfo``, ``LocalizeRepoAgent``, ``RepositoryIndex``) and ``src/model_lifecycle.cc``
(``GetModel``, ``AsyncUnload``, the deleter that marks an unloaded version UNAVAILABLE with reason
``"unloaded"``); see also ../shared/reference/protocol.md §1.3, §2 and §6.

Every scenario starts servers of its own (they start in about a second) over a small repository:
copies of the example ``simple`` (ONNX, max_batch_size 8) and ``add_sub_python`` plus the test
models ``slow``, ``versioned_latest`` and ``identity_fp32``.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tests.support.clients import add_sub_inputs, client, make_input
from tests.support.models import SLOW_SECONDS, build_test_repository, model_files
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 30.0
EXAMPLE_MODELS = ("simple", "add_sub_python")
TEST_MODELS = ("slow", "versioned_latest", "identity_fp32")
ALL_MODELS = EXAMPLE_MODELS + TEST_MODELS
EXPLICIT = "--model-control-mode=explicit"

# Triton's messages (core model_repository_manager.cc / model_lifecycle.cc).
NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"
POLL_FAILED = "failed to poll from model repository"  # "failed to load '<m>', " + this

_IO_INT32_16 = {
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
        {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
        {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]},
    ],
}
BACKENDS = {"simple": "onnxruntime", "add_sub_python": "python"}

# A python model that exists only in a load request (config + file:1/model.py).
FILE_MODEL_PY = b'''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 * 10 + 1: only ever delivered through a load request."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x * 10 + 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
'''


def fp32_config(name: str | None = None, backend: str = "python") -> str:
    config: dict[str, Any] = {
        "backend": backend,
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    }
    if name is not None:
        config["name"] = name
    return json.dumps(config)


def add_sub_config(model: str, max_batch_size: int) -> str:
    return json.dumps(
        {"backend": BACKENDS[model], "max_batch_size": max_batch_size, **_IO_INT32_16}
    )


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def repo(tmp_path: Path, example_repo: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name in EXAMPLE_MODELS:
        shutil.copytree(example_repo / name, root / name)
    build_test_repository(root, TEST_MODELS)
    return root


@pytest.fixture
def start(repo: Path) -> Iterator[Callable[..., ServerProcess]]:
    """``start(*flags)`` runs a server over ``repo``; every server is stopped at teardown."""
    servers: list[ServerProcess] = []

    def _start(*flags: str, repos: list[Path] | None = None) -> ServerProcess:
        proc = ServerProcess(repos or [repo], *flags)
        servers.append(proc)
        return proc

    yield _start
    for proc in servers:
        proc.stop()


# ----------------------------------------------------------------------------- helpers


def open_client(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return client(
            protocol, server.http_url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S
        )
    return client(protocol, server.grpc_url)


def ready(c: Any, name: str, version: str = "") -> bool:
    """Model readiness for the flows below. Triton answers ``ready: false`` with status OK for a
    model or version that is not loaded, on both protocols (core server.cc ``ModelIsReady``
    returns Success; grpc_server.cc ``ModelReady`` sets ``ready`` from it). A gRPC NOT_FOUND /
    UNAVAILABLE is read as "not ready" here so that the flows test model control;
    ``test_model_ready_answers_false_not_an_error`` holds the server to Triton's answer."""
    try:
        return bool(c.is_model_ready(name, version))
    except InferenceServerException as exc:
        if exc.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE"):
            return False
        raise


def index_rows(c: Any, protocol: str) -> list[dict[str, Any]]:
    if protocol == "http":
        return list(c.get_model_repository_index())
    return list(c.get_model_repository_index(as_json=True).get("models", []))


def rows_for(c: Any, protocol: str, name: str) -> list[dict[str, Any]]:
    return [row for row in index_rows(c, protocol) if row["name"] == name]


def raw_index(server: ServerProcess, protocol: str, ready: bool | None) -> list[dict[str, Any]]:
    """The index with the ``ready`` filter, which tritonclient 2.73 cannot send: a raw HTTP POST
    of ``{"ready": ...}`` or a raw gRPC ``RepositoryIndex(ready=...)``."""
    if protocol == "http":
        body = b"" if ready is None else json.dumps({"ready": ready}).encode()
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/repository/index", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            assert response.status == 200
            return json.loads(response.read())
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.RepositoryIndex(
            service_pb2.RepositoryIndexRequest(ready=bool(ready)), timeout=TIMEOUT_S
        )
    rows = []
    for m in reply.models:
        row = {"name": m.name}
        row.update({k: v for k, v in (("version", m.version), ("state", m.state)) if v})
        if m.reason:
            row["reason"] = m.reason
        rows.append(row)
    return rows


def infer_add_sub(c: Any, protocol: str, model: str = "simple", batch: int = 1) -> None:
    inputs, a, b = add_sub_inputs(protocol, batch=batch)
    kwargs = {"client_timeout": TIMEOUT_S} if protocol == "grpc" else {}
    result = c.infer(model, inputs, **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def infer_one(c: Any, protocol: str, model: str, data: np.ndarray, datatype: str, **kw: Any) -> Any:
    inputs = [make_input(protocol, "INPUT0", data, datatype)]
    if protocol == "grpc":
        kw.setdefault("client_timeout", TIMEOUT_S)
    return c.infer(model, inputs, **kw).as_numpy("OUTPUT0")


def versioned_output(c: Any, protocol: str, model: str = "versioned_latest", **kw: Any) -> int:
    """``versioned_*`` answer INPUT0 * version: send 1, get the serving version back."""
    return int(infer_one(c, protocol, model, np.array([1], dtype=np.int32), "INT32", **kw)[0])


def error_status(protocol: str, code: str) -> str:
    http = {"UNAVAILABLE": "503", "INTERNAL": "500", "NOT_FOUND": "404", "INVALID_ARG": "400"}
    grpc_code = {"INVALID_ARG": "INVALID_ARGUMENT"}.get(code, code)
    return http[code] if protocol == "http" else f"StatusCode.{grpc_code}"


def assert_load_failed(exc: InferenceServerException, protocol: str, model: str) -> None:
    """Triton: a load whose override (or repository entry) cannot be polled fails INTERNAL with
    ``failed to load '<m>', failed to poll from model repository`` (LoadUnloadModel)."""
    message = exc.message()
    assert f"failed to load '{model}'" in message, message
    assert POLL_FAILED in message, message
    assert exc.status() == error_status(protocol, "INTERNAL"), (exc.status(), message)


def assert_not_served(c: Any, protocol: str, model: str) -> None:
    """Inference on a model with no ready version fails: Triton answers NOT_FOUND
    ``Request for unknown model: '<m>' has no available versions`` once it was loaded and
    ``... '<m>' is not found`` when it never was (model_lifecycle.cc GetModel)."""
    with pytest.raises(InferenceServerException) as info:
        if model in BACKENDS:
            infer_add_sub(c, protocol, model)
        else:
            infer_one(c, protocol, model, np.ones(3, dtype=np.float32), "FP32")
    message = info.value.message()
    assert f"Request for unknown model: '{model}'" in message, message
    assert "has no available versions" in message or "is not found" in message, message


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except InferenceServerException as exc:  # not there yet
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")


def config_json(c: Any, protocol: str, model: str) -> dict[str, Any]:
    if protocol == "http":
        return c.get_model_config(model)
    return c.get_model_config(model, as_json=True)["config"]


# ------------------------------------------------------------------ explicit mode: startup


def test_explicit_without_load_model_loads_nothing(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT)
    c = open_client(server, protocol)
    try:
        rows = index_rows(c, protocol)
        assert sorted(row["name"] for row in rows) == sorted(ALL_MODELS), rows
        # Never-loaded models are listed by name only: no version, state or reason.
        assert all(set(row) == {"name"} for row in rows), rows
        for name in ALL_MODELS:
            assert ready(c, name) is False, name
        assert_not_served(c, protocol, "simple")
        assert c.is_server_ready()
    finally:
        c.close()


def test_explicit_load_model_flag_loads_only_that_model(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT, "--load-model", "simple")
    c = open_client(server, protocol)
    try:
        assert ready(c, "simple")
        infer_add_sub(c, protocol)
        for name in ALL_MODELS:
            if name != "simple":
                assert ready(c, name) is False, name
        rows = {row["name"]: row for row in index_rows(c, protocol)}
        assert set(rows) == set(ALL_MODELS)
        assert rows["simple"]["version"] == "1"
        assert rows["simple"]["state"] == "READY"
        assert set(rows["add_sub_python"]) == {"name"}, rows["add_sub_python"]
    finally:
        c.close()


def test_explicit_load_model_star_loads_everything(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT, "--load-model=*")
    c = open_client(server, protocol)
    try:
        for name in ALL_MODELS:
            assert ready(c, name), name
        states = {(row["name"], row.get("state")) for row in index_rows(c, protocol)}
        # versioned_latest: latest policy -> only version 3 is loaded.
        assert states == {(name, "READY") for name in ALL_MODELS}, states
        infer_add_sub(c, protocol, "add_sub_python")
        assert versioned_output(c, protocol) == 3
    finally:
        c.close()


# ------------------------------------------------------------ explicit mode: load / unload


def test_load_infer_unload_reload(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT)
    c = open_client(server, protocol)
    try:
        assert ready(c, "simple") is False
        c.load_model("simple")
        assert ready(c, "simple")
        infer_add_sub(c, protocol)
        assert [(r.get("version"), r.get("state")) for r in rows_for(c, protocol, "simple")] == [
            ("1", "READY")
        ]

        c.unload_model("simple")
        assert ready(c, "simple") is False
        assert_not_served(c, protocol, "simple")
        # Triton keeps the version in the index: UNAVAILABLE, reason "unloaded".
        rows = rows_for(c, protocol, "simple")
        assert rows == [
            {"name": "simple", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        ], rows

        c.load_model("simple")
        assert ready(c, "simple")
        infer_add_sub(c, protocol)
        rows = rows_for(c, protocol, "simple")
        assert [(r.get("version"), r.get("state")) for r in rows] == [("1", "READY")], rows

        # unload_dependents is accepted (the HTTP client always sends it).
        c.load_model("add_sub_python")
        infer_add_sub(c, protocol, "add_sub_python")
        c.unload_model("add_sub_python", unload_dependents=True)
        assert ready(c, "add_sub_python") is False
        assert_not_served(c, protocol, "add_sub_python")
        assert ready(c, "simple")  # other models are untouched
    finally:
        c.close()


def test_model_ready_answers_false_not_an_error(start: Callable, protocol: str) -> None:
    """``is_model_ready`` is how clients watch model control; for a model that is not loaded
    Triton answers false with status OK on both protocols (core server.cc ``ModelIsReady``:
    ``*ready = false`` ... ``return Status::Success``), so the gRPC client returns False instead
    of raising."""
    server = start(EXPLICIT, "--load-model", "versioned_latest")
    c = open_client(server, protocol)
    try:
        assert c.is_model_ready("simple") is False  # in the repository, never loaded
        assert c.is_model_ready("no_such_model") is False  # not in the repository
        assert c.is_model_ready("versioned_latest", "1") is False  # version not loaded
        assert c.is_model_ready("versioned_latest", "3") is True
        c.unload_model("versioned_latest")
        assert c.is_model_ready("versioned_latest") is False  # unloaded
        assert c.is_model_ready("versioned_latest", "3") is False
    finally:
        c.close()


def test_official_model_control_example_flow(start: Callable, protocol: str) -> None:
    """The steps of tritonclient's ``simple_{grpc,http}_model_control_client.py`` examples."""
    server = start(EXPLICIT)
    c = open_client(server, protocol)
    try:
        c.load_model("simple")
        assert c.is_model_ready("simple")
        # An invalid override: the example only requires "failed to load" in the message.
        with pytest.raises(InferenceServerException) as info:
            c.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
        assert "failed to load" in info.value.message(), info.value.message()
        # An override naming only max_batch_size (as a string): backend, inputs and outputs
        # come from auto-complete.
        c.load_model("simple", config='{"max_batch_size":"16"}')
        assert config_json(c, protocol, "simple")["max_batch_size"] == 16
        infer_add_sub(c, protocol, batch=16)
        c.unload_model("simple")
        assert c.is_model_ready("simple") is False
        with pytest.raises(InferenceServerException) as info:
            c.load_model("wrong_model_name")
        assert "failed to load" in info.value.message(), info.value.message()
    finally:
        c.close()


def test_load_unknown_model_fails(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT)
    c = open_client(server, protocol)
    try:
        with pytest.raises(InferenceServerException) as info:
            c.load_model("no_such_model")
        assert_load_failed(info.value, protocol, "no_such_model")
    finally:
        c.close()


@pytest.mark.parametrize("mode_flags", [(), ("--model-control-mode=poll",)], ids=["none", "poll"])
def test_load_unload_rejected_unless_explicit(
    start: Callable, protocol: str, mode_flags: tuple[str, ...]
) -> None:
    server = start(*mode_flags)
    c = open_client(server, protocol)
    try:
        for call in (lambda: c.load_model("simple"), lambda: c.unload_model("simple")):
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.message() == NOT_ALLOWED, info.value.message()
            assert info.value.status() == error_status(protocol, "UNAVAILABLE")
        with pytest.raises(InferenceServerException) as info:
            c.load_model("simple", config=add_sub_config("simple", 4))
        assert info.value.message() == NOT_ALLOWED
        # Nothing changed: the model still serves with its on-disk config.
        assert ready(c, "simple")
        infer_add_sub(c, protocol)
        assert config_json(c, protocol, "simple")["max_batch_size"] == 8
    finally:
        c.close()


# ---------------------------------------------------------------------- config override


def test_config_override(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT, "--load-model", "simple", "--load-model", "versioned_latest")
    c = open_client(server, protocol)
    try:
        assert config_json(c, protocol, "simple")["max_batch_size"] == 8
        infer_add_sub(c, protocol, batch=8)

        # No name in the override: Triton fills it from the model directory.
        c.load_model("simple", config=add_sub_config("simple", 4))
        assert config_json(c, protocol, "simple")["max_batch_size"] == 4
        infer_add_sub(c, protocol, batch=4)
        with pytest.raises(InferenceServerException) as info:
            infer_add_sub(c, protocol, batch=5)
        assert "batch-size must be <= 4" in info.value.message(), info.value.message()

        # A load without config after an override reloads from disk (the override is undone).
        c.load_model("simple")
        assert config_json(c, protocol, "simple")["max_batch_size"] == 8
        infer_add_sub(c, protocol, batch=8)

        # version_policy through an override: all three versions of versioned_latest serve.
        assert versioned_output(c, protocol) == 3
        override = {
            "backend": "python",
            "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [1]}],
            "version_policy": {"all": {}},
        }
        c.load_model("versioned_latest", config=json.dumps(override))
        policy = config_json(c, protocol, "versioned_latest")["version_policy"]
        assert "all" in policy, policy
        for version in (1, 2, 3):
            assert ready(c, "versioned_latest", str(version)), version
            assert versioned_output(c, protocol, model_version=str(version)) == version
        served = sorted(
            r["version"]
            for r in rows_for(c, protocol, "versioned_latest")
            if r.get("state") == "READY"
        )
        assert served == ["1", "2", "3"], served
        # ... and a specific policy narrows it again to version 1.
        override["version_policy"] = {"specific": {"versions": [1]}}
        c.load_model("versioned_latest", config=json.dumps(override))
        assert ready(c, "versioned_latest", "1")
        assert ready(c, "versioned_latest", "3") is False
        assert versioned_output(c, protocol) == 1
    finally:
        c.close()


@pytest.mark.parametrize(
    "bad_config",
    ['{"backend": "onnxruntime", "max_batch_size": 4', '{"backend": "onnxruntime", "bogus": 1}'],
    ids=["malformed_json", "unknown_field"],
)
def test_bad_config_override_keeps_previous_state(
    start: Callable, protocol: str, bad_config: str
) -> None:
    server = start(EXPLICIT, "--load-model", "simple")
    c = open_client(server, protocol)
    try:
        with pytest.raises(InferenceServerException) as info:
            c.load_model("simple", config=bad_config)
        assert_load_failed(info.value, protocol, "simple")
        # The loaded model keeps serving, with its previous config.
        assert ready(c, "simple")
        infer_add_sub(c, protocol, batch=8)
        assert config_json(c, protocol, "simple")["max_batch_size"] == 8

        # A model that was not loaded stays unloaded.
        with pytest.raises(InferenceServerException) as info:
            c.load_model("add_sub_python", config=bad_config)
        assert_load_failed(info.value, protocol, "add_sub_python")
        assert ready(c, "add_sub_python") is False
        assert set(rows_for(c, protocol, "add_sub_python")[0]) == {"name"}
    finally:
        c.close()


# ------------------------------------------------------------------------ file: overrides


def test_file_override_creates_model_not_on_disk(
    start: Callable, protocol: str, repo: Path
) -> None:
    name = "from_request_py"
    assert not (repo / name).exists()
    server = start(EXPLICIT)
    c = open_client(server, protocol)
    try:
        c.load_model(name, config=fp32_config(name), files={"file:1/model.py": FILE_MODEL_PY})
        assert ready(c, name)
        data = np.array([0.5, -1.0, 2.0], dtype=np.float32)
        np.testing.assert_array_equal(infer_one(c, protocol, name, data, "FP32"), data * 10 + 1)
        metadata = c.get_model_metadata(name, **({"as_json": True} if protocol == "grpc" else {}))
        assert metadata["name"] == name and metadata["versions"] == ["1"], metadata
        assert not (repo / name).exists()  # nothing written into the repository

        c.unload_model(name)
        assert ready(c, name) is False
        assert_not_served(c, protocol, name)
    finally:
        c.close()


def test_file_override_without_config_fails(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT)
    c = open_client(server, protocol)
    try:
        # A name that is not in the repository, and the same for an existing model.
        for name in ("files_only_py", "add_sub_python"):
            with pytest.raises(InferenceServerException) as info:
                c.load_model(name, files={"file:1/model.py": FILE_MODEL_PY})
            assert_load_failed(info.value, protocol, name)
            assert ready(c, name) is False
    finally:
        c.close()


# ------------------------------------------------------------- reloads under steady load


@pytest.mark.parametrize("model", ["simple", "add_sub_python"])
def test_reload_under_load_fails_no_request(start: Callable, protocol: str, model: str) -> None:
    server = start(EXPLICIT, "--load-model", model)
    stop = threading.Event()
    connected = threading.Event()
    outcome: dict[str, Any] = {"ok": 0, "errors": []}

    def stream() -> None:
        # tritonclient.http is gevent based: the client lives in the thread that uses it.
        c = open_client(server, protocol)
        try:
            assert c.is_server_live()
            connected.set()
            while not stop.is_set():
                try:
                    infer_add_sub(c, protocol, model)
                    outcome["ok"] += 1
                except Exception as exc:  # every failure is reported below
                    outcome["errors"].append(repr(exc))
        finally:
            connected.set()
            c.close()

    worker = threading.Thread(target=stream)
    worker.start()
    started = time.monotonic()
    c = open_client(server, protocol)
    try:
        assert connected.wait(TIMEOUT_S)
        time.sleep(0.3)
        # A config override always forces a full reload; the plain load after it undoes it
        # (another reload); the last plain load is a no-op or a reload, both fine.
        c.load_model(model, config=add_sub_config(model, 4))
        assert config_json(c, protocol, model)["max_batch_size"] == 4
        time.sleep(0.3)
        c.load_model(model)
        assert config_json(c, protocol, model)["max_batch_size"] == 8
        time.sleep(0.3)
        c.load_model(model)
        while time.monotonic() - started < 2.0:
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(TIMEOUT_S)
        c.close()
    assert not worker.is_alive()
    assert outcome["errors"] == [], outcome["errors"][:5]
    assert outcome["ok"] >= 10, outcome


def test_unload_waits_for_in_flight_request(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT, "--load-model", "slow")
    data = np.arange(5, dtype=np.float32)
    outcome: dict[str, Any] = {}
    connected = threading.Event()

    def run() -> None:
        c = open_client(server, protocol)
        try:
            assert c.is_server_live()
            connected.set()
            outcome["result"] = infer_one(c, protocol, "slow", data, "FP32")
        except Exception as exc:  # reported below
            outcome["error"] = exc
        finally:
            connected.set()
            outcome["done"] = time.monotonic()
            c.close()

    worker = threading.Thread(target=run)
    worker.start()
    c = open_client(server, protocol)
    try:
        assert connected.wait(TIMEOUT_S)
        started = time.monotonic()
        time.sleep(SLOW_SECONDS / 3)  # the request is inside the model by now
        c.unload_model("slow")
        worker.join(TIMEOUT_S)
        assert not worker.is_alive()
        assert "error" not in outcome, outcome.get("error")
        np.testing.assert_array_equal(outcome["result"], data)
        assert outcome["done"] - started >= SLOW_SECONDS * 0.8
        # Once unloaded, new requests are refused.
        assert ready(c, "slow") is False
        assert_not_served(c, protocol, "slow")
        wait_until(
            lambda: [r.get("state") for r in rows_for(c, protocol, "slow")] == ["UNAVAILABLE"],
            10,
            "slow to be UNAVAILABLE in the index",
        )
    finally:
        c.close()


# ------------------------------------------------------------------------------ poll mode


def _write_model(repo: Path, name: str, files: dict[str, str | bytes]) -> None:
    """Write a model next to the repository, then rename it in: the poller never sees half."""
    staging = repo.parent / f".staging_{name}"
    for rel, content in files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    os.rename(staging, repo / name)


def test_poll_mode_picks_up_repository_changes(
    start: Callable, protocol: str, tmp_path: Path
) -> None:
    repo = tmp_path / "poll_repo"
    build_test_repository(repo, ["versioned_latest", "slow", "identity_int32"])
    shutil.rmtree(repo / "versioned_latest" / "3")  # start with versions 1 and 2
    server = start("--model-control-mode=poll", "--repository-poll-secs=1", repos=[repo])
    c = open_client(server, protocol)
    try:
        assert versioned_output(c, protocol) == 2
        int_data = np.array([7, -3], dtype=np.int32)
        np.testing.assert_array_equal(
            infer_one(c, protocol, "identity_int32", int_data, "INT32"), int_data
        )

        # (1) A new version directory: the latest policy moves to it.
        version_3 = model_files("versioned_latest")["3/model.py"]
        staging = tmp_path / "v3"
        staging.mkdir()
        (staging / "model.py").write_text(version_3)
        os.rename(staging, repo / "versioned_latest" / "3")
        wait_until(lambda: versioned_output(c, protocol) == 3, 10, "version 3 to serve")
        assert ready(c, "versioned_latest", "3")

        # (2) A new model directory appears and serves.
        assert ready(c, "identity_fp32") is False
        _write_model(repo, "identity_fp32", model_files("identity_fp32"))
        wait_until(lambda: ready(c, "identity_fp32"), 10, "identity_fp32 to load")
        fp_data = np.array([1.5, -2.0], dtype=np.float32)
        np.testing.assert_array_equal(
            infer_one(c, protocol, "identity_fp32", fp_data, "FP32"), fp_data
        )
        assert any(r.get("state") == "READY" for r in rows_for(c, protocol, "identity_fp32"))

        # (3) A removed model directory: the model becomes unavailable.
        shutil.rmtree(repo / "slow")
        wait_until(lambda: ready(c, "slow") is False, 10, "slow to be unloaded")
        assert_not_served(c, protocol, "slow")

        # (4) A broken config in a served model: the old model keeps serving. A model added
        # in the same breath tells when a poll has seen the broken file.
        broken = 'backend: "python"\nmax_batch_size: "x"\n'
        (repo / "identity_int32" / "config.pbtxt").write_text(broken)
        _write_model(repo, "identity_uint8", model_files("identity_uint8"))
        wait_until(lambda: ready(c, "identity_uint8"), 10, "identity_uint8 to load")
        time.sleep(1.5)  # one more poll period
        assert ready(c, "identity_int32")
        np.testing.assert_array_equal(
            infer_one(c, protocol, "identity_int32", int_data, "INT32"), int_data
        )
        assert server.proc.poll() is None
    finally:
        c.close()


def test_poll_mode_unloads_a_model_that_appears_in_a_second_repository(
    start: Callable, tmp_path: Path
) -> None:
    """Triton's L0_lifecycle test_multiple_model_repository_polling: a served model copied
    into the second repository is no longer unique, so the poll unloads it (core
    ``Poll``: "not unique across all model repositories"; the index lists it UNAVAILABLE
    with ``MODEL_READY_REASON_DUPLICATE``) while the server stays ready and the others
    serve; once the first copy is removed, the second one loads (here with its version 3)."""
    first, second = tmp_path / "models", tmp_path / "models_0"
    build_test_repository(first, ["versioned_latest", "identity_int32"])
    shutil.rmtree(first / "versioned_latest" / "3")  # the first copy serves version 2
    build_test_repository(second, ["identity_fp32"])
    server = start("--model-control-mode=poll", "--repository-poll-secs=1", repos=[first, second])
    clients = {protocol: open_client(server, protocol) for protocol in ("http", "grpc")}
    try:
        assert versioned_output(clients["http"], "http") == 2
        _write_model(second, "versioned_latest", model_files("versioned_latest"))
        for protocol, c in clients.items():
            wait_until(lambda c=c: not ready(c, "versioned_latest"), 10, "the duplicate unloaded")
            assert c.is_server_live() and c.is_server_ready()  # unloaded, not failed
            assert ready(c, "identity_int32") and ready(c, "identity_fp32")
            assert rows_for(c, protocol, "versioned_latest") == [
                {
                    "name": "versioned_latest",
                    "state": "UNAVAILABLE",
                    "reason": "model appears in two or more repositories",
                }
            ]
            with pytest.raises(InferenceServerException):
                versioned_output(c, protocol)
        assert (
            "failed to poll model 'versioned_latest': not unique across all model repositories"
        ) in server.log_text()

        shutil.rmtree(first / "versioned_latest")
        for protocol, c in clients.items():
            wait_until(
                lambda c=c, p=protocol: versioned_output(c, p) == 3, 10, "the second copy served"
            )
            assert c.is_server_ready()
    finally:
        for c in clients.values():
            c.close()


# ----------------------------------------------------------------- index and its filter


def test_index_ready_filter(start: Callable, protocol: str) -> None:
    server = start(EXPLICIT, "--load-model", "simple", "--load-model", "slow")
    c = open_client(server, protocol)
    try:
        c.unload_model("slow")
        wait_until(
            lambda: [r.get("state") for r in rows_for(c, protocol, "slow")] == ["UNAVAILABLE"],
            10,
            "slow to be UNAVAILABLE",
        )
        every = raw_index(server, protocol, ready=None)
        assert sorted(r["name"] for r in every) == sorted(ALL_MODELS), every
        key = lambda row: (row["name"], row.get("version", ""))  # noqa: E731
        assert sorted(raw_index(server, protocol, ready=False), key=key) == sorted(every, key=key)
        by_name = {r["name"]: r for r in every}
        assert by_name["simple"] == {"name": "simple", "version": "1", "state": "READY"}
        assert by_name["slow"] == {
            "name": "slow",
            "version": "1",
            "state": "UNAVAILABLE",
            "reason": "unloaded",
        }
        assert by_name["identity_fp32"] == {"name": "identity_fp32"}

        # ready=true: only READY versions; never-loaded and unloaded models are left out.
        only_ready = raw_index(server, protocol, ready=True)
        assert only_ready == [{"name": "simple", "version": "1", "state": "READY"}], only_ready
    finally:
        c.close()
