"""What Triton's own Python-backend QA suites (qa/L0_backend_python in the server repository)
rely on, each reproduced with tritium's own models (tests/qa_models.py), over HTTP and gRPC
where it applies to both."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonclient.utils import InferenceServerException

from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

_MODELS = [
    "qa_argv",
    "qa_async_overlap",
    "qa_async_serial",
    "qa_async_child",
    "slow_identity_int32",
    "raises",
    "qa_timeout_child",
    "qa_timeout_parent",
    "qa_device_probe",
    "qa_device_probe_model",
    "qa_sys_path",
    "qa_decoupled_returns",
    "qa_sender_once",
]
_WAIT_S = 90.0  # how long a test waits for answers before it gives up (not a measurement)


@pytest.fixture(scope="module")
def qa_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("qa") / "repo", _MODELS)


@pytest.fixture(scope="module")
def qa_server(qa_repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([qa_repo])
    yield proc
    proc.stop()


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _one(protocol: str) -> list:  # type: ignore[type-arg]
    return [make_input(protocol, "INPUT0", np.array([1], dtype=np.int32), "INT32")]


def test_model_sees_the_embedded_interpreters_argv(qa_server: ServerProcess, protocol: str) -> None:
    """Triton's stub embeds the interpreter with no arguments: ``sys.argv == ['']``. A model
    that parses its argv at import loads, and ``unittest.main("model", exit=False)`` inside
    ``execute`` (Triton's QA models do this) runs the module's own tests instead of looking
    for tests named after the stub's command line."""
    with client(protocol, qa_server.url(protocol)) as c:
        result = c.infer("qa_argv", _one(protocol))
    assert result.as_numpy("ARGV").tolist() == [b""]
    assert result.as_numpy("TESTS").tolist() == [2, 1]


def _wait_ms(protocol: str, value: int) -> list[Any]:
    return [make_input(protocol, "WAIT_MS", np.array([value], dtype=np.int32), "INT32")]


def _stream(url: str, model: str, sent: list[tuple[str, int, dict[str, Any]]]) -> list[Any]:
    """Send ``(request id, WAIT_MS, parameters)`` on one gRPC stream, in order; the results
    (or errors) in the order their final responses arrived."""
    arrived: list[Any] = []
    all_in = threading.Event()

    def callback(result: Any, error: Any) -> None:
        arrived.append(error if error is not None else result)
        if len(arrived) == len(sent):
            all_in.set()

    c = grpcclient.InferenceServerClient(url)
    try:
        c.start_stream(callback)
        for request_id, wait, parameters in sent:
            c.async_stream_infer(
                model, _wait_ms("grpc", wait), request_id=request_id, parameters=parameters
            )
        assert all_in.wait(_WAIT_S), f"only {len(arrived)} of {len(sent)} answers came"
        c.stop_stream()
    finally:
        c.close()
    return arrived


def _by_id(results: list[Any]) -> dict[str, list[int]]:
    return {r.get_response().id: r.as_numpy("OUT").tolist() for r in results}


@pytest.mark.parametrize("via", ["", "slow", "decoupled"], ids=["sleep", "bls", "bls-decoupled"])
def test_decoupled_async_executes_run_concurrently(qa_server: ServerProcess, via: str) -> None:
    """Triton runs a decoupled model's ``async def execute`` coroutines concurrently on the
    stub's event loop. "long" waits until another execute has finished; "short", sent after
    it, only waits briefly, so it finishes first, and each answer reaches its own request.
    Run one at a time, "long" would time out waiting (and answer an error). With BLS:
    ``async_exec`` of a model, or ``async_exec(decoupled=True)`` of a decoupled one whose
    responses are then iterated (its child too waits for the other's child: the loop must
    not be held while "long" waits for its first response)."""
    extra: dict[str, Any] = {"bls": via} if via else {}
    results = _stream(
        qa_server.grpc_url,
        "qa_async_overlap",
        [("long", 30, {"until_others": 1, **extra}), ("short", 20, extra)],
    )
    assert all(not isinstance(r, Exception) for r in results), results
    assert [r.get_response().id for r in results] == ["short", "long"]
    answers = _by_id(results)
    assert answers["short"][:2] == [20, 2]  # its value; two executes were in flight at once
    assert answers["long"] == [30, 2, 1]  # and one finished while "long" waited


def test_many_decoupled_async_executes_overlap(qa_server: ServerProcess) -> None:
    """Eight requests of different durations on one instance, sent longest first: each answer
    carries its own request's value, and more than one execute was in flight at once."""
    waits = [400, 350, 300, 250, 200, 150, 100, 50]
    sent = [(f"r{w}", w, {}) for w in waits]
    results = _stream(qa_server.grpc_url, "qa_async_overlap", sent)
    answers = _by_id(results)
    assert {rid: a[0] for rid, a in answers.items()} == {f"r{w}": w for w in waits}
    assert max(a[1] for a in answers.values()) > 1


def test_async_execute_of_a_model_not_decoupled_runs_one_at_a_time(
    qa_server: ServerProcess, protocol: str
) -> None:
    """Not decoupled, Triton awaits each ``async def execute`` before the next one starts:
    three requests in flight together are executed one after the other."""
    answers: list[list[int]] = []

    def one() -> None:
        with client(protocol, qa_server.url(protocol)) as c:
            result = c.infer("qa_async_serial", _wait_ms(protocol, 100))
            answers.append(result.as_numpy("OUT").tolist())

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_WAIT_S)
    assert [a[:2] for a in answers] == [[100, 1]] * 3


def test_decoupled_async_execute_that_raises_answers_its_request(qa_server: ServerProcess) -> None:
    """A background ``execute`` that raises before answering: its request gets the error
    (Triton leaves such a request without a final response), and the requests around it are
    answered as usual."""
    results = _stream(
        qa_server.grpc_url,
        "qa_async_overlap",
        [("before", 5, {}), ("bad", -1, {}), ("after", 5, {})],
    )
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and "ValueError: wait_ms cannot be negative" in str(errors[0])
    answered = _by_id([r for r in results if not isinstance(r, Exception)])
    assert {rid: a[0] for rid, a in answered.items()} == {"before": 5, "after": 5}


def test_an_execute_error_is_logged_and_answered_in_tritons_words(
    qa_server: ServerProcess, qa_repo: Path, protocol: str
) -> None:
    """Triton's stub logs an exception of ``execute`` as an error and answers every request
    with the same text: pybind11's ``Type: message`` and the model's frames after ``At:``."""
    model_py = qa_repo / "raises" / "1" / "model.py"
    line = _line_of(model_py, 'raise ValueError("boom from model")')
    expected = (
        "Failed to process the request(s) for model 'raises_0_0', message: ValueError: boom "
        f"from model\n\nAt:\n  {model_py}({line}): execute\n"  # pybind11's what(): a last \\n
    )
    data = np.ones(2, dtype=np.float32)
    with client(protocol, qa_server.url(protocol)) as c:
        with pytest.raises(InferenceServerException) as info:
            c.infer("raises", [make_input(protocol, "INPUT0", data, "FP32")])
    assert info.value.message() == expected
    record = re.compile(r"^E\d{4} [\d:.]+ \d+ stub\.py:\d+\] " + re.escape(expected), re.M)
    _wait_for(lambda: record.search(qa_server.log_text()) is not None, "the error in the log")


def test_a_background_execute_error_is_logged_with_its_traceback(
    qa_server: ServerProcess, qa_repo: Path
) -> None:
    """Triton logs the traceback of a decoupled ``async def execute`` that raised
    (Stub::BackgroundFutureDone); the request gets the error in the stub's words."""
    model_py = qa_repo / "qa_async_overlap" / "1" / "model.py"
    line = _line_of(model_py, 'raise ValueError("wait_ms cannot be negative")')
    (error,) = _stream(qa_server.grpc_url, "qa_async_overlap", [("bad", -1, {})])
    assert str(error).startswith(
        "Failed to process the request(s) for model 'qa_async_overlap_0_0', message: ValueError: "
        f"wait_ms cannot be negative\n\nAt:\n  {model_py}({line}): _wait\n"
    ), str(error)
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "{model_py}", line {_line_of(model_py, "await self._wait(r, finished_before)")}'
        ", in execute\n"
    )
    _wait_for(lambda: trace in qa_server.log_text(), "the traceback in the log")
    log = qa_server.log_text()
    assert f'  File "{model_py}", line {line}, in _wait\n' in log
    assert "\nValueError: wait_ms cannot be negative\n" in log


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = ["qa_argv", "qa_bls_in_initialize", "qa_bls_in_finalize"]
    repo = build_test_repository(tmp_path_factory.mktemp("qa_explicit") / "repo", models)
    proc = ServerProcess([repo], "--model-control-mode=explicit", "--load-model=qa_argv")
    proc.repo = repo  # type: ignore[attr-defined]
    yield proc
    proc.stop()


_BLS_REFUSED = "TritonModelException: BLS is only supported during the 'execute' function."


def test_bls_in_initialize_fails_the_load_with_tritons_text(
    explicit_server: ServerProcess, protocol: str
) -> None:
    """``exec`` in ``initialize`` raises Triton's TritonModelException (named as Triton
    names it, without tritium's module path); uncaught, it fails the load."""
    with client(protocol, explicit_server.url(protocol)) as c:
        with pytest.raises(InferenceServerException) as info:
            c.load_model("qa_bls_in_initialize")
    assert re.search(r"(?<![\w.])" + re.escape(_BLS_REFUSED), info.value.message()), info.value
    assert _BLS_REFUSED in explicit_server.log_text()


def test_bls_in_finalize_is_refused_and_logged(
    explicit_server: ServerProcess, protocol: str
) -> None:
    """``exec`` in ``finalize`` raises the same exception; Triton's stub logs it (at INFO,
    with the model's frames) and finishes the unload."""
    model_py = explicit_server.repo / "qa_bls_in_finalize" / "1" / "model.py"  # type: ignore[attr-defined]
    record = re.compile(
        r"^I\d{4} [\d:.]+ \d+ stub\.py:\d+\] "
        + re.escape(
            f"{_BLS_REFUSED}\n\nAt:\n"
            f"  {model_py}({_line_of(model_py, ').exec()')}): _call_another_model\n"
            f"  {model_py}({_line_of(model_py, '        _call_another_model()')}): finalize"
        ),
        re.M,
    )
    before = len(record.findall(explicit_server.log_text()))
    with client(protocol, explicit_server.url(protocol)) as c:
        c.load_model("qa_bls_in_finalize")
        c.unload_model("qa_bls_in_finalize")
    _wait_for(
        lambda: len(record.findall(explicit_server.log_text())) > before, "the refusal in the log"
    )


@pytest.mark.parametrize("how", ["exec", "decoupled", "async"])
@pytest.mark.parametrize("timeout_us", [0, 5_000_000, 11_000_000_000])
def test_a_bls_requests_timeout_reaches_the_child(
    qa_server: ServerProcess, protocol: str, how: str, timeout_us: int
) -> None:
    """``InferenceRequest(..., timeout=...)`` sets the child request's timeout: the child's
    ``request.timeout()`` is what the parent set, however the call is made; a value far past
    the child's default queue timeout (Triton's QA uses 11 000 s) included."""
    inputs = [
        make_input(protocol, "TIMEOUT_US", np.array([timeout_us], dtype=np.int64), "INT64"),
        make_input(protocol, "HOW", np.array([how.encode()], dtype=object), "BYTES"),
    ]
    with client(protocol, qa_server.url(protocol)) as c:
        result = c.infer("qa_timeout_parent", inputs)
    assert result.as_numpy("SEEN").tolist() == [timeout_us]


@pytest.mark.parametrize(
    ("model", "kind"), [("qa_device_probe", "CPU"), ("qa_device_probe_model", "MODEL")]
)
def test_everything_a_model_is_told_says_cpu(
    qa_server: ServerProcess, protocol: str, model: str, kind: str
) -> None:
    """What Triton on a CPU-only server tells a Python model, field by field: the instance
    kind of its group ('CPU' for KIND_CPU, 'MODEL' for KIND_MODEL) on device 0; every tensor
    (input, its own, one made from DLPack, a BLS output whatever memory it preferred) in CPU
    memory, DLPack device (kDLCPU=1, 0). A model that goes to CUDA when told "GPU" stays on
    the CPU."""
    with client(protocol, qa_server.url(protocol)) as c:
        result = c.infer(model, _one(protocol))
    report = json.loads(result.as_numpy("REPORT")[0])
    cpu = [True, [1, 0]]
    assert report == {
        "kind": kind,
        "device_id": "0",
        "name": f"{model}_0_0",
        "input": cpu,
        "own": cpu,
        "from_dlpack": cpu,
        "bls_default": cpu,
        "bls_cpu": cpu,
        "bls_gpu": cpu,  # Triton built without GPUs allocates it in CPU memory
    }


def test_model_directories_are_appended_to_sys_path(qa_server: ServerProcess) -> None:
    """Triton's stub appends the version directory, then the model's directory, to
    ``sys.path``: an installed package wins over a model's file of the same name."""
    with client("http", qa_server.url("http")) as c:
        result = c.infer("qa_sys_path", _one("http"))
    report = json.loads(result.as_numpy("REPORT")[0])
    path = report["sys_path"]
    version, model = path.index(report["version_dir"]), path.index(report["model_dir"])
    assert model == version + 1
    installed = [i for i, entry in enumerate(path) if entry.endswith("-packages")]
    assert installed and max(installed) < version


def test_a_decoupled_execute_that_returns_responses_fails_its_open_requests(
    qa_server: ServerProcess,
) -> None:
    """Triton refuses a decoupled ``execute`` that returns something other than None: a
    request it had not finished gets that error (and its final flag); one it had finished
    through its sender gets nothing more."""
    (error,) = _stream(qa_server.grpc_url, "qa_decoupled_returns", [("open", 0, {})])
    assert isinstance(error, InferenceServerException)
    assert (
        "Python model 'qa_decoupled_returns_0_0' is using the decoupled mode and the execute "
        "function must return None." in error.message()
    )
    (result,) = _stream(qa_server.grpc_url, "qa_decoupled_returns", [("done", 1, {})])
    assert result.as_numpy("OUT").tolist() == [1, 0, 0]


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["after-return", "second-refused", "none-in-list"])
def test_a_model_not_decoupled_answers_once_through_its_sender(
    qa_server: ServerProcess, protocol: str, mode: int
) -> None:
    """Triton 2.51: a request ``execute`` returned None for waits for its sender, whose one
    response completes it; what the model does after that (a second send, which raises and
    fails ``execute``, or the final flag) reaches no client."""
    with client(protocol, qa_server.url(protocol)) as c:
        result = c.infer("qa_sender_once", _wait_ms(protocol, mode))
    assert result.as_numpy("OUT").tolist() == [mode, 1, 0]
