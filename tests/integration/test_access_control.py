"""Access control and audit over the real server, both protocols, with tritonclient's
``headers`` argument (HTTP headers / gRPC metadata):

- Triton's ``--http-restricted-api`` / ``--grpc-restricted-protocol``: restricting
  ``model-repository`` stops a client without the header from loading a ``model.py``;
  Triton's answers (HTTP 403 "This API is restricted, expecting header '<key>'", gRPC
  UNAVAILABLE "This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'").
- ``--auth-token-file``: 401 + ``WWW-Authenticate`` / UNAUTHENTICATED without a valid token,
  403 / PERMISSION_DENIED for a token without the group, health open to probes.
- ``--audit-log``: control actions with their outcome and refused requests, read back from the
  file; the token itself never appears.
- ``--max-inflight-per-client``: 429 / RESOURCE_EXHAUSTED over the bound; slots come back when
  requests finish, fail or are cancelled; each request on a ModelStreamInfer stream holds a
  slot while in flight (an open stream none), one over the bound is refused in the stream.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tests.support.identity_model import IDENTITY_FP32_CONFIG, IDENTITY_FP32_PY
from tests.support.clients import client, make_input
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritium.access.audit import REFUSED_BURST
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 30.0
HTTP_RESTRICTED = "This API is restricted, expecting header 'admin-key'"
GRPC_RESTRICTED = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
OPS_TOKEN = "ops-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
READER_TOKEN = "reader-99887766554433221100ffeeddcc"
TOKENS = f"""\
# name the tokens: the audit log shows the name, never the token
{OPS_TOKEN} * ops
{READER_TOKEN} inference,metadata,model-config reader
"""

# A Python model only ever delivered in a load request (config + file:1/model.py).
FILE_MODEL_PY, FILE_MODEL_CONFIG = IDENTITY_FP32_PY, IDENTITY_FP32_CONFIG

# Holds every request until the file named by its ``gate`` parameter exists (bounded); while a
# request executes, a file of its own exists in the ``running`` directory next to the gate.
# Two instances, so two held requests both execute and the test can see them.
GATE_PY = """\
import json
import os
import time
import uuid

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = config["parameters"]["gate"]["string_value"]
        self.running = os.path.join(os.path.dirname(self.gate), "running")

    def execute(self, requests):
        marker = os.path.join(self.running, uuid.uuid4().hex)
        open(marker, "w").close()
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            os.remove(marker)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
"""


def _gate_model(repo: Path, gate: Path) -> None:
    (repo / "gate" / "1").mkdir(parents=True)
    (repo / "gate" / "1" / "model.py").write_text(GATE_PY)
    (gate.parent / "running").mkdir()
    (repo / "gate" / "config.pbtxt").write_text(
        'name: "gate"\nbackend: "python"\nmax_batch_size: 0\n'
        "instance_group [ { count: 2, kind: KIND_CPU } ]\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        f'parameters {{ key: "gate" value: {{ string_value: "{gate}" }} }}\n'
    )


def _running(gate: Path) -> int:
    """How many requests the gate model is executing now."""
    return len(list((gate.parent / "running").iterdir()))


def _infer(protocol: str, url: str, model: str = "identity_fp32", **kwargs: Any) -> Any:
    data = np.arange(4, dtype=np.float32)
    inputs = [make_input(protocol, "INPUT0", data, "FP32")]
    with client(protocol, url) as c:
        result = c.infer(model, inputs, **kwargs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    return result


def _refused(call: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def _status(protocol: str, code: str) -> str:
    http = {"UNAVAILABLE": "403", "UNAUTHENTICATED": "401", "PERMISSION_DENIED": "403"}
    http["RESOURCE_EXHAUSTED"] = "429"
    return http[code] if protocol == "http" else f"StatusCode.{code}"


def _file_load(protocol: str, url: str, name: str, headers: dict[str, str] | None) -> None:
    with client(protocol, url) as c:
        c.load_model(
            name,
            headers=headers,
            config=json.dumps(FILE_MODEL_CONFIG),
            files={"file:1/model.py": FILE_MODEL_PY},
        )


def _admin(protocol: str) -> dict[str, str]:
    """The restricted group's header: gRPC metadata keys get Triton's prefix."""
    return {"admin-key" if protocol == "http" else "triton-grpc-protocol-admin-key": "s3cret"}


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {TIMEOUT_S}s: {what}")


# --- Triton's restricted API groups -----------------------------------------------------------


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    base = tmp_path_factory.mktemp("restricted")
    repo = build_test_repository(base / "repo", ["identity_fp32"])
    audit = base / "audit.jsonl"
    proc = ServerProcess(
        [repo],
        "--model-control-mode=explicit",
        "--load-model=identity_fp32",
        "--allow-client-shm=true",
        "--http-restricted-api=model-repository,shared-memory:admin-key=s3cret",
        "--grpc-restricted-protocol=model-repository,shared-memory:admin-key=s3cret",
        f"--audit-log={audit}",
    )
    yield proc, audit
    proc.stop()


def test_restricted_repository_refuses_a_model_py_without_the_header(
    restricted: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, audit = restricted
    url = proc.url(protocol)
    name = f"evil_{protocol}_{uuid.uuid4().hex[:6]}"
    for headers in (None, {"admin-key": "wrong"}, {"other": "s3cret"}):
        error = _refused(lambda h=headers: _file_load(protocol, url, name, h))  # type: ignore[misc]
        assert error.status() == _status(protocol, "UNAVAILABLE")
        assert error.message() == (HTTP_RESTRICTED if protocol == "http" else GRPC_RESTRICTED)
    with client(protocol, url) as c:
        assert not c.is_model_ready(name)  # nothing was loaded
        error = _refused(lambda: c.get_model_repository_index())
        assert error.status() == _status(protocol, "UNAVAILABLE")
        assert c.is_server_live() and c.get_server_metadata()  # other groups stay open
    _infer(protocol, url)
    refused = [e for e in _audit(audit) if e["target"] == name]
    assert len(refused) == 3
    for entry in refused:
        assert entry["action"] == "load" and entry["outcome"] == "refused"
        assert entry["reason"] == "restricted" and entry["protocol"] == protocol
        assert entry["peer"].startswith("127.0.0.1:") and entry["identity"] is None


def test_restricted_repository_loads_with_the_header(
    restricted: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, audit = restricted
    url = proc.url(protocol)
    name = f"echo_{protocol}"
    admin = _admin(protocol)
    _file_load(protocol, url, name, admin)
    _infer(protocol, url, name)  # inference is not restricted
    with client(protocol, url) as c:
        c.unload_model(name, headers=_admin(protocol))
        error = _refused(lambda: c.load_model("no_such_model", headers=_admin(protocol)))
    entries = [
        e
        for e in _audit(audit)
        if e["target"] in (name, "no_such_model") and e["protocol"] == protocol
    ]
    assert [(e["action"], e["outcome"]) for e in entries] == [
        ("load", "ok"),
        ("unload", "ok"),
        ("load", "error"),
    ]
    assert entries[2]["message"] == error.message()


def test_shared_memory_register_and_unregister_are_audited(
    restricted: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, audit = restricted
    region, key = f"region_{protocol}", f"/tritium_access_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region(region, key, 64)
    try:
        with client(protocol, proc.url(protocol)) as c:
            error = _refused(lambda: c.register_system_shared_memory(region, key, 64))
            assert error.status() == _status(protocol, "UNAVAILABLE")
            c.register_system_shared_memory(region, key, 64, headers=_admin(protocol))
            c.unregister_system_shared_memory(region, headers=_admin(protocol))
            c.unregister_system_shared_memory(headers=_admin(protocol))  # all regions
    finally:
        shm.destroy_shared_memory_region(handle)
    entries = [e for e in _audit(audit) if e["action"].startswith("system_shm")]
    mine = [e for e in entries if e["protocol"] == protocol]
    assert [(e["action"], e["target"], e["outcome"]) for e in mine] == [
        ("system_shm_register", region, "refused"),
        ("system_shm_register", region, "ok"),
        ("system_shm_unregister", region, "ok"),
        ("system_shm_unregister", "", "ok"),
    ]
    assert key not in audit.read_text()  # the key is not a target; only the region name


# --- bearer tokens ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    base = tmp_path_factory.mktemp("tokens")
    repo = build_test_repository(base / "repo", ["identity_fp32"])
    (base / "tokens").write_text(TOKENS)
    audit = base / "audit.jsonl"
    proc = ServerProcess(
        [repo],
        "--model-control-mode=explicit",
        "--load-model=identity_fp32",
        f"--auth-token-file={base / 'tokens'}",
        f"--audit-log={audit}",
    )
    yield proc, audit
    proc.stop()


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_tokens_are_required_except_for_health(
    tokens: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, _ = tokens
    url = proc.url(protocol)
    with client(protocol, url) as c:
        assert c.is_server_live() and c.is_server_ready()  # probes need no token
        assert c.is_model_ready("identity_fp32")
    for headers in (None, _bearer("not-a-token"), {"authorization": f"Basic {OPS_TOKEN}"}):
        error = _refused(lambda h=headers: _infer(protocol, url, headers=h))  # type: ignore[misc]
        assert error.status() == _status(protocol, "UNAUTHENTICATED")
    _infer(protocol, url, headers=_bearer(READER_TOKEN))
    _infer(protocol, url, headers=_bearer(OPS_TOKEN))


def test_token_groups_limit_what_a_token_may_do(
    tokens: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, audit = tokens
    url = proc.url(protocol)
    reader, ops = _bearer(READER_TOKEN), _bearer(OPS_TOKEN)
    name = f"tok_{protocol}"
    with client(protocol, url) as c:
        assert c.get_model_metadata("identity_fp32", headers=reader)
        assert c.get_model_config("identity_fp32", headers=reader)
        error = _refused(lambda: c.get_inference_statistics("identity_fp32", headers=reader))
        assert error.status() == _status(protocol, "PERMISSION_DENIED")
        assert error.message() == "token 'reader' is not allowed to use the 'statistics' API"
        error = _refused(lambda: _file_load(protocol, url, name, reader))
        assert error.status() == _status(protocol, "PERMISSION_DENIED")
        assert not c.is_model_ready(name)
        _file_load(protocol, url, name, ops)
        assert c.get_inference_statistics("identity_fp32", headers=ops)
    entries = [e for e in _audit(audit) if e["target"] == name]
    assert [(e["identity"], e["outcome"], e.get("reason")) for e in entries] == [
        ("reader", "refused", "forbidden"),
        ("ops", "ok", None),
    ]
    text = audit.read_text()
    assert OPS_TOKEN not in text and READER_TOKEN not in text


def test_http_answers_401_with_a_bearer_challenge(tokens: tuple[ServerProcess, Path]) -> None:
    proc, audit = tokens
    url = f"http://{proc.http_url}/v2/models/identity_fp32"
    for headers, challenge in (({}, "Bearer"), (_bearer("nope"), 'Bearer error="invalid_token"')):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
        assert info.value.code == 401
        assert info.value.headers["WWW-Authenticate"] == challenge
        assert "error" in json.loads(info.value.read())
    request = urllib.request.Request(url, headers=_bearer(READER_TOKEN))
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["name"] == "identity_fp32"
    refused = [e for e in _audit(audit) if e["action"] == "model_metadata"]
    assert {e["reason"] for e in refused} == {"unauthenticated"}


def test_a_flood_of_refusals_is_summarised_and_control_actions_are_all_written(
    tmp_path: Path,
) -> None:
    """An unauthenticated client sends many refused requests: the audit log keeps the first
    REFUSED_BURST lines per protocol and one summary with the count of the rest (written
    when the server stops at the latest); every admitted control action is written."""
    repo = build_test_repository(tmp_path / "repo", ["identity_fp32"])
    (tmp_path / "tokens").write_text(TOKENS)
    audit = tmp_path / "audit.jsonl"
    proc = ServerProcess(
        [repo],
        "--model-control-mode=explicit",
        "--load-model=identity_fp32",
        f"--auth-token-file={tmp_path / 'tokens'}",
        f"--audit-log={audit}",
    )
    flood = 3 * REFUSED_BURST
    try:
        for protocol in ("http", "grpc"):
            url = proc.url(protocol)
            for _ in range(flood):
                error = _refused(lambda u=url, p=protocol: _infer(p, u))  # type: ignore[misc]
                assert error.status() == _status(protocol, "UNAUTHENTICATED")
            with client(protocol, url) as c:
                for _ in range(REFUSED_BURST + 2):  # more than a burst: each one written
                    c.unload_model("identity_fp32", headers=_bearer(OPS_TOKEN))
                    c.load_model("identity_fp32", headers=_bearer(OPS_TOKEN))
    finally:
        proc.stop()  # the audit log closes: the pending summaries are written
    entries = _audit(audit)
    for protocol in ("http", "grpc"):
        mine = [e for e in entries if e["protocol"] == protocol]
        refused = [e for e in mine if e["outcome"] == "refused" and "suppressed" not in e]
        assert len(refused) == REFUSED_BURST, refused
        summaries = [e for e in mine if "suppressed" in e]
        assert len(summaries) == 1, summaries
        summary = summaries[0]
        assert summary["suppressed"] == flood - REFUSED_BURST
        assert summary["peer"] == "127.0.0.1" and summary["reason"] == "unauthenticated"
        assert summary["message"].startswith(f"{flood - REFUSED_BURST} more refused requests")
        control = [(e["action"], e["outcome"]) for e in mine if e["outcome"] != "refused"]
        assert control == [("unload", "ok"), ("load", "ok")] * (REFUSED_BURST + 2)


# --- per-client in-flight bound ----------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    base = tmp_path_factory.mktemp("limited")
    repo = build_test_repository(base / "repo", ["identity_fp32", "text_stream"])
    gate = base / "gate-open"
    _gate_model(repo, gate)
    audit = base / "audit.jsonl"
    proc = ServerProcess([repo], "--max-inflight-per-client=2", f"--audit-log={audit}")
    yield proc, gate
    gate.touch()  # never leave a stub waiting
    proc.stop()


def _probe_refused(protocol: str, url: str) -> bool:
    try:
        _infer(protocol, url)
    except InferenceServerException as exc:
        assert exc.status() == _status(protocol, "RESOURCE_EXHAUSTED"), exc
        assert "too many inference requests in flight from client '127.0.0.1'" in exc.message()
        return True
    return False


def _in_background(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # reported by the test that reads ``outcome``
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_inflight_bound_refuses_then_recovers(
    limited: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, gate = limited
    url = proc.url(protocol)
    gate.unlink(missing_ok=True)
    held = [_in_background(lambda: _infer(protocol, url, "gate")) for _ in range(2)]
    _wait_for(lambda: _running(gate) == 2, "both held requests executing")
    assert _probe_refused(protocol, url)
    gate.touch()
    for thread, outcome in held:
        thread.join(TIMEOUT_S)
        assert outcome and not isinstance(outcome[0], Exception), outcome
    _infer(protocol, url)  # the slots came back with the answers


def test_failed_requests_release_their_slot(
    limited: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, _ = limited
    url = proc.url(protocol)
    bad = [make_input(protocol, "WRONG", np.zeros(2, dtype=np.float32), "FP32")]
    with client(protocol, url) as c:
        for _ in range(5):  # more failures than the bound: a leak would refuse the last ones
            error = _refused(lambda: c.infer("identity_fp32", bad))
            assert error.status() != _status(protocol, "RESOURCE_EXHAUSTED")
    _infer(protocol, url)


def _give_up_after(protocol: str, url: str, seconds: float) -> Any:
    """A held request whose client gives up: gRPC's deadline, or HTTP's socket timeout (the
    client closes the connection)."""
    data = [make_input(protocol, "INPUT0", np.zeros(2, dtype=np.float32), "FP32")]
    if protocol == "http":
        with client(protocol, url, network_timeout=seconds) as c:
            return c.infer("gate", data)
    with client(protocol, url) as c:
        return c.infer("gate", data, client_timeout=seconds)


def test_cancelled_requests_release_their_slot(
    limited: tuple[ServerProcess, Path], protocol: str
) -> None:
    proc, gate = limited
    url = proc.url(protocol)
    gate.unlink(missing_ok=True)
    held = [_in_background(lambda: _give_up_after(protocol, url, 8.0)) for _ in range(2)]
    _wait_for(lambda: _running(gate) == 2, "both held requests executing")
    assert _probe_refused(protocol, url)
    for thread, outcome in held:
        thread.join(TIMEOUT_S)
        assert outcome and isinstance(outcome[0], Exception), outcome  # the clients gave up
    _wait_for(lambda: not _probe_refused(protocol, url), "slots released after cancellation")
    gate.touch()
    _wait_for(lambda: _running(gate) == 0, "the model's executions over")


def _open_stream(url: str, metadata: dict[str, str] | None = None) -> tuple[Any, list[Any]]:
    c = client("grpc", url)
    answers: list[Any] = []
    c.start_stream(callback=lambda result, error: answers.append((result, error)), headers=metadata)
    return c, answers


def _stream_infer(c: Any, model: str, rid: str) -> None:
    data = [make_input("grpc", "INPUT0", np.ones(2, dtype=np.float32), "FP32")]
    c.async_stream_infer(model, data, request_id=rid)


def test_an_open_grpc_stream_holds_no_slot(limited: tuple[ServerProcess, Path]) -> None:
    """More open streams than the bound, each with its answered request: nothing is in
    flight, so the client's other requests still go through."""
    proc, _ = limited
    streams = [_open_stream(proc.grpc_url) for _ in range(3)]
    for n, (c, answers) in enumerate(streams):
        _stream_infer(c, "identity_fp32", f"open-{n}")
        _wait_for(lambda a=answers: bool(a), "a response on the stream")
        assert answers[0][1] is None
    assert not _probe_refused("grpc", proc.grpc_url)
    assert not _probe_refused("http", proc.http_url)
    for c, _ in streams:
        c.stop_stream()
        c.close()


def test_each_request_on_a_grpc_stream_holds_a_slot(limited: tuple[ServerProcess, Path]) -> None:
    """Two held requests on one stream take the client's two slots: the client's unary
    requests are refused on both protocols, and a third request on the stream is refused
    with RESOURCE_EXHAUSTED's message, answered in the stream in its turn (after the two
    before it); the stream goes on and serves the next request."""
    proc, gate = limited
    gate.unlink(missing_ok=True)
    c, answers = _open_stream(proc.grpc_url)
    try:
        for n in range(2):
            _stream_infer(c, "gate", f"held-{n}")
        _wait_for(lambda: _running(gate) == 2, "both held stream requests executing")
        assert _probe_refused("grpc", proc.grpc_url) and _probe_refused("http", proc.http_url)
        _stream_infer(c, "identity_fp32", "over")
        gate.touch()
        _wait_for(lambda: len(answers) == 3, "the three requests answered")
        assert [r.get_response().id for r, e in answers[:2] if e is None] == ["held-0", "held-1"]
        result, error = answers[2]
        assert result is None and error is not None
        assert "too many inference requests in flight from client '127.0.0.1'" in str(error)
        _stream_infer(c, "identity_fp32", "after")  # the same stream serves again
        _wait_for(lambda: len(answers) == 4, "the request after the refusal answered")
        assert answers[3][1] is None and answers[3][0].get_response().id == "after"
    finally:
        gate.touch()
        c.stop_stream()
        c.close()
    _infer("grpc", proc.grpc_url)
    _infer("http", proc.http_url)


def test_a_refused_stream_request_ends_the_stream_with_triton_grpc_error(
    limited: tuple[ServerProcess, Path],
) -> None:
    """With Triton's ``triton_grpc_error`` header the refusal is the stream's status."""
    proc, gate = limited
    gate.unlink(missing_ok=True)
    c, answers = _open_stream(proc.grpc_url, {"triton_grpc_error": "true"})
    try:
        for n in range(2):
            _stream_infer(c, "gate", f"held-{n}")
        _wait_for(lambda: _running(gate) == 2, "both held stream requests executing")
        _stream_infer(c, "identity_fp32", "over")
        gate.touch()
        _wait_for(lambda: any(e is not None for _, e in answers), "the stream's status")
        errors = [e for _, e in answers if e is not None]
        assert errors[0].status() == "StatusCode.RESOURCE_EXHAUSTED", errors
        assert "too many inference requests in flight" in errors[0].message()
    finally:
        gate.touch()
        c.stop_stream()
        c.close()
    _wait_for(lambda: _running(gate) == 0, "the model's executions over")
    _wait_for(lambda: not _probe_refused("grpc", proc.grpc_url), "slots back after the stream")


def test_streamed_http_answers_release_their_slot(limited: tuple[ServerProcess, Path]) -> None:
    proc, _ = limited
    url = f"http://{proc.http_url}/v2/models/text_stream/generate_stream"
    body = json.dumps({"text_input": "a b c"}).encode()
    for _ in range(4):  # twice the bound, one after another
        request = urllib.request.Request(url, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            events = [line for line in response.read().split(b"\n") if line.startswith(b"data:")]
        assert len(events) == 3
    _infer("http", proc.http_url)


def test_bad_access_flags_stop_the_server(tmp_path: Path) -> None:
    repo = build_test_repository(tmp_path / "repo", ["identity_fp32"])
    (tmp_path / "tokens").write_text("t1 inference,nonsense\n")
    for flags in (
        [f"--auth-token-file={tmp_path / 'tokens'}"],
        [f"--auth-token-file={tmp_path / 'missing'}"],
        ["--http-restricted-api=bogus:k=v"],
    ):
        with pytest.raises(RuntimeError, match="server exited with"):
            ServerProcess([repo], *flags)


def test_health_can_be_restricted_explicitly(tmp_path: Path) -> None:
    repo = build_test_repository(tmp_path / "repo", ["identity_fp32"])
    proc = ServerProcess(
        [repo],
        "--http-restricted-api=health:probe-key=p",
        "--grpc-restricted-protocol=health:probe-key=p",
        wait_ready=False,
    )
    try:
        url = f"http://{proc.http_url}/v2/health/ready"

        def ready() -> bool:
            request = urllib.request.Request(url, headers={"probe-key": "p"})
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status == 200
            except urllib.error.HTTPError:
                return False

        _wait_for(ready, "ready with the probe header")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url, timeout=5)
        assert info.value.code == 403
        expected = "This API is restricted, expecting header 'probe-key'"
        assert json.loads(info.value.read()) == {"error": expected}
        with grpc.insecure_channel(proc.grpc_url) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            with pytest.raises(grpc.RpcError) as rpc:
                check(health_pb2.HealthCheckRequest(), timeout=10)
            assert rpc.value.code() == grpc.StatusCode.UNAVAILABLE
            metadata = [("triton-grpc-protocol-probe-key", "p")]
            answer = check(health_pb2.HealthCheckRequest(), timeout=10, metadata=metadata)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with client("grpc", proc.grpc_url) as c:
            error = _refused(lambda: c.is_server_live())
            assert error.status() == "StatusCode.UNAVAILABLE"
            assert c.is_server_live(headers={"triton-grpc-protocol-probe-key": "p"})
    finally:
        proc.stop()
