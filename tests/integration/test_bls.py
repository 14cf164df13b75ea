"""BLS: Python models that call other models with ``pb_utils.InferenceRequest(...).exec()``,
driven by HTTP and gRPC clients (models: tests/support/bls_models.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from tests.support.sequence_models import SEEN_FIELDS
from testkit.server_process import ServerProcess

_BLS_MODELS = [
    "bls_double",
    "bls_batch_probe",
    "bls_pipeline",
    "bls_fanout_async",
    "bls_fanout_threads",
    "bls_decoupled",
    "bls_probe",
    "bls_cancel_parent",
    "bls_cancel_child",
    "bls_sequence",
    "bls_forward_fp32",
    "bls_by_name",
    "raises",
    "identity_fp32",
    "identity_onnx_fp32",
    "seq_echo_direct",
]
_BIG = 16 * 1024 * 1024
_DEV_SHM = Path("/dev/shm")


@pytest.fixture(scope="module")
def bls_server(
    example_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("bls") / "repo", _BLS_MODELS)
    proc = ServerProcess([example_repo, repo], "--http-max-input-size", str(64 * 1024 * 1024))
    yield proc
    proc.stop()


def _url(server: ServerProcess, protocol: str) -> str:
    return server.http_url if protocol == "http" else server.grpc_url


def _infer(server: ServerProcess, protocol: str, model: str, inputs: list, **kwargs):  # type: ignore[no-untyped-def]
    with client(protocol, _url(server, protocol)) as c:
        return c.infer(model, inputs, **kwargs)


def _text_input(protocol: str, name: str, text: str):  # type: ignore[no-untyped-def]
    return make_input(protocol, name, np.array([text.encode()], dtype=object), "BYTES")


def test_three_model_pipeline(bls_server: ServerProcess, protocol: str) -> None:
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 3, dtype=np.int32)
    inputs = [
        make_input(protocol, "INPUT0", a, "INT32"),
        make_input(protocol, "INPUT1", b, "INT32"),
    ]
    result = _infer(bls_server, protocol, "bls_pipeline", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * (a + b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_model_and_output_names_may_be_bytes(bls_server: ServerProcess, protocol: str) -> None:
    """Triton's pybind11 binding takes bytes where it takes a str (a BYTES input's
    ``as_numpy()[0]``, as qa/L0_trace's bls_simple passes it): the child runs."""
    a = np.arange(16, dtype=np.int32)
    b = np.full(16, 3, dtype=np.int32)
    inputs = [
        make_input(protocol, "INPUT0", a, "INT32"),
        make_input(protocol, "INPUT1", b, "INT32"),
        _text_input(protocol, "MODEL_NAME", "simple"),
    ]
    result = _infer(bls_server, protocol, "bls_by_name", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    assert result.as_numpy("OUTPUT1").tolist() == (a - b).tolist()


@pytest.mark.parametrize("model", ["bls_fanout_async", "bls_fanout_threads"])
def test_fanout_runs_children_in_parallel_and_they_batch(
    bls_server: ServerProcess, protocol: str, model: str
) -> None:
    """Four children sent at once reach the dynamically batched model together: it runs them
    as one batch of four (sent one after the other, each would run alone after the 2 s
    queue delay), and its statistics show fewer executions than inferences."""
    values = np.array([1, 2, 3, 4], dtype=np.int32)
    result = _infer(bls_server, protocol, model, [make_input(protocol, "INPUT0", values, "INT32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values * 2)
    assert result.as_numpy("OUTPUT1").tolist() == [4, 4, 4, 4]
    with client(protocol, _url(bls_server, protocol)) as c:
        as_json = {} if protocol == "http" else {"as_json": True}
        stats = c.get_inference_statistics("bls_batch_probe", **as_json)
    entry = stats["model_stats"][0]
    assert int(entry["execution_count"]) < int(entry["inference_count"])


def test_decoupled_child_iterated_to_its_final_response(
    bls_server: ServerProcess, protocol: str
) -> None:
    n = np.array([3], dtype=np.int32)
    result = _infer(
        bls_server, protocol, "bls_decoupled", [make_input(protocol, "INPUT0", n, "INT32")]
    )
    assert result.as_numpy("OUTPUT0").tolist() == [3, 3, 3]
    assert result.as_numpy("OUTPUT1").tolist() == [4]  # three responses and the empty final
    zero = np.array([0], dtype=np.int32)
    result = _infer(
        bls_server, protocol, "bls_decoupled", [make_input(protocol, "INPUT0", zero, "INT32")]
    )
    assert result.as_numpy("OUTPUT0").tolist() == []
    assert result.as_numpy("OUTPUT1").tolist() == [1]


_ERRORS = {
    "unknown_model": (
        "Model no_such_model - Error when running inference: Failed for execute the inference "
        "request. Model 'no_such_model' is not ready.",
        1,
    ),
    "bad_input": (
        "Model bls_double - Error when running inference: unexpected inference input 'WRONG' "
        "for model 'bls_double'",
        1,
    ),
    "decoupled": (
        "Model square_int32 - Error when running inference: Model square_int32 is using the "
        "decoupled. The current BLS request call doesn't support models using the decoupled "
        "transaction policy. Please use 'decoupled=True' argument to the 'exec' or "
        "'async_exec' calls for decoupled models.'",
        1,
    ),
    "load": (
        "Failed to load model: Failed to process the request for model 'bls_probe_0_0', "
        "message: explicit model load / unload is not allowed if polling is enabled",
        -1,
    ),
}


@pytest.mark.parametrize("case", sorted(_ERRORS))
def test_errors_come_back_as_responses_with_tritons_text(
    bls_server: ServerProcess, protocol: str, case: str
) -> None:
    result = _infer(bls_server, protocol, "bls_probe", [_text_input(protocol, "CASE", case)])
    message, code = _ERRORS[case]
    assert result.as_numpy("MESSAGE")[0].decode() == message
    assert result.as_numpy("CODE").tolist() == [code]


def test_a_child_that_raises_gives_its_error(bls_server: ServerProcess, protocol: str) -> None:
    result = _infer(bls_server, protocol, "bls_probe", [_text_input(protocol, "CASE", "raises")])
    message = result.as_numpy("MESSAGE")[0].decode()
    assert "boom from model" in message and "raises" in message
    assert result.as_numpy("CODE").tolist() == [1]  # INTERNAL, as the child failed with


def test_sequence_child_gets_correlation_id_and_flags(
    bls_server: ServerProcess, protocol: str
) -> None:
    values = np.array([1, 2, 3], dtype=np.int32)
    corrid = 4242 if protocol == "http" else 4343
    result = _infer(
        bls_server,
        protocol,
        "bls_sequence",
        [make_input(protocol, "INPUT0", values, "INT32")],
        parameters={"corrid": corrid},
    )
    rows = result.as_numpy("SEEN")
    field = {name: i for i, name in enumerate(SEEN_FIELDS)}
    assert rows[:, field["correlation_id"]].tolist() == [corrid] * 3
    assert rows[:, field["flags"]].tolist() == [1, 0, 2]
    assert rows[:, field["start"]].tolist() == [1, 0, 0]
    assert rows[:, field["end"]].tolist() == [0, 0, 1]
    assert rows[:, field["acc"]].tolist() == [1, 3, 6]  # one slot: the sequence's running sum


@pytest.mark.parametrize("target", ["identity_onnx_fp32", "identity_fp32"])
def test_large_tensor_round_trip(bls_server: ServerProcess, protocol: str, target: str) -> None:
    """16 MiB through the BLS model to its child and back (shared memory on the BLS hops)."""
    data = np.random.default_rng(7).random(_BIG // 4, dtype=np.float32)
    result = _infer(
        bls_server,
        protocol,
        "bls_forward_fp32",
        [make_input(protocol, "INPUT0", data, "FP32")],
        parameters={"target": target},
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    if _DEV_SHM.is_dir():
        assert _segments_of(bls_server)  # large tensors did go through /dev/shm


@pytest.mark.skipif(not _DEV_SHM.is_dir(), reason="no /dev/shm: tensors go inline")
def test_segments_are_removed_when_their_stub_goes(tmp_path: Path) -> None:
    """The segments a stub and the server pool for reuse are unlinked when the stub stops
    (here: at shutdown) and when it dies."""
    repo = build_test_repository(tmp_path / "repo", ["bls_forward_fp32", "identity_onnx_fp32"])
    server = ServerProcess([repo], "--http-max-input-size", str(64 * 1024 * 1024))
    data = np.ones(_BIG // 4, dtype=np.float32)
    try:
        for _ in range(2):
            _infer(server, "http", "bls_forward_fp32", [make_input("http", "INPUT0", data, "FP32")])
        assert _segments_of(server)
        pid = next(iter(_stub_pids(server)))
        os.kill(pid, signal.SIGKILL)  # the stub dies: the server sweeps its segments
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(f"-{pid}-" in n for n in _segments_of(server)):
            time.sleep(0.1)
        assert not [n for n in _segments_of(server) if f"-{pid}-" in n]
    finally:
        server.stop()
    assert not _segments_of(server)


def _segments_of(server: ServerProcess) -> list[str]:
    prefix = f"tritium-bls-{server.proc.pid}."  # then the server's token
    if not _DEV_SHM.is_dir():
        return []
    return sorted(p.name for p in _DEV_SHM.glob(prefix + "*") if not p.name.endswith(".lock"))


def _stub_pids(server: ServerProcess) -> set[int]:
    return {int(n.split("-")[3]) for n in _segments_of(server)}


def test_client_cancel_reaches_the_child(bls_server: ServerProcess, tmp_path: Path) -> None:
    """gRPC: the client cancels the parent; the child it is blocked on sees is_cancelled()."""
    marker = tmp_path / "grpc-marker"
    c = grpcclient.InferenceServerClient(bls_server.grpc_url)
    inp = grpcclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([5], dtype=np.int32))
    done: list = []
    call = c.async_infer(
        "bls_cancel_parent",
        [inp],
        callback=lambda result, error: done.append(error),
        parameters={"marker": str(marker)},
    )
    time.sleep(1.0)  # let the parent start and block in exec()
    call.cancel()
    _wait_for(marker)
    assert marker.read_text() == "cancelled"
    c.close()


def test_client_disconnect_reaches_the_child(bls_server: ServerProcess, tmp_path: Path) -> None:
    """HTTP: the client gives up (its connection closes); the child sees is_cancelled()."""
    marker = tmp_path / "http-marker"
    c = httpclient.InferenceServerClient(bls_server.http_url, network_timeout=1.0)
    inp = httpclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([5], dtype=np.int32))
    with pytest.raises(Exception):  # noqa: B017 - the client's own timeout, any type
        c.infer("bls_cancel_parent", [inp], parameters={"marker": str(marker)})
    c.close()
    _wait_for(marker)
    assert marker.read_text() == "cancelled"


def _wait_for(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.05)
    assert path.exists(), "the child never saw its cancellation"


# -- model control from a model (explicit mode) ------------------------------------------------


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(
        tmp_path_factory.mktemp("bls_explicit") / "repo", ["bls_control", "bls_double"]
    )
    proc = ServerProcess([repo], "--model-control-mode=explicit", "--load-model=bls_control")
    yield proc
    proc.stop()


def _control(server: ServerProcess, protocol: str, action: str) -> str:
    result = _infer(server, protocol, "bls_control", [_text_input(protocol, "ACTION", action)])
    return str(result.as_numpy("MESSAGE")[0].decode())


def test_load_unload_is_model_ready_in_explicit_mode(
    explicit_server: ServerProcess, protocol: str
) -> None:
    assert _control(explicit_server, protocol, "ready bls_double") == "ready=False"
    assert _control(explicit_server, protocol, "load bls_double") == "loaded"
    assert _control(explicit_server, protocol, "ready bls_double") == "ready=True"
    assert _control(explicit_server, protocol, "ready bls_double 1") == "ready=True"
    value = np.array([21], dtype=np.int32)
    result = _infer(
        explicit_server, protocol, "bls_double", [make_input(protocol, "INPUT0", value, "INT32")]
    )
    assert result.as_numpy("OUTPUT0").tolist() == [42]
    assert _control(explicit_server, protocol, "unload bls_double") == "unloaded"
    assert _control(explicit_server, protocol, "ready bls_double") == "ready=False"
    with pytest.raises(InferenceServerException):
        _infer(
            explicit_server,
            protocol,
            "bls_double",
            [make_input(protocol, "INPUT0", value, "INT32")],
        )


def test_model_control_works_in_initialize_and_exec_does_not(
    explicit_server: ServerProcess,
) -> None:
    assert _control(explicit_server, "http", "init x") == (
        "ready=False; exec: BLS is only supported during the 'execute' function."
    )


def test_control_errors_have_tritons_text(explicit_server: ServerProcess, protocol: str) -> None:
    assert _control(explicit_server, protocol, "ready bls_double abc") == (
        "Failed to check model readiness: Failed to process the request for model "
        "'bls_control_0_0', message: failed to get model version from specified version "
        "string 'abc' (details: stol), version should be an integral value > 0"
    )
    message = _control(explicit_server, protocol, "load no_such_model")
    assert message.startswith(
        "Failed to load model: Failed to process the request for model 'bls_control_0_0', message: "
    )
    assert "no_such_model" in message
