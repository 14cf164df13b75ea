"""Hostile model names, ``file:`` keys and version strings over both protocols (issue 10, items
2 and 11): nothing a client sends as a name or key reaches a path outside the server's override
area, each is refused before anything is created, and override directories go away with their
model. A bad name is INVALID_ARG (HTTP 400, Triton's ``ValidateModelName``); a bad ``file:`` key
fails the load as Triton's repository agent fails it, INTERNAL (HTTP 500) "failed to load
'<name>', failed to poll from model repository" (issue 23: Triton's
``simple_grpc_model_control.py`` expects that for a file name over NAME_MAX).

Triton's messages: core model_repository_manager.cc ``ValidateModelName`` (empty name, '..' or
'/') and ``GetModelVersionFromString`` ("... (details: stol), version should be an integral
value > 0"). Triton checks names on load only; tritium refuses a name that could never be loaded
on every route that takes one (readiness and metadata included), see repository/names.py.

HTTP requests are sent raw with every character of the name percent-encoded (tritonclient's
``quote`` leaves '/' as is, so a name with '/' would not reach the model routes at all); gRPC
requests go through tritonclient, whose names are plain protobuf strings.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 30.0
EXPLICIT = "--model-control-mode=explicit"
TRAVERSAL = "model name must not contain path traversal characters"
EMPTY = "Model name cannot be empty. Please enter a valid name to deploy."
STOL = "(details: stol), version should be an integral value > 0"
ATTACK_NAME = "../../../../outside/x"


def marker_model(marker: Path, factor: int = 10) -> bytes:
    """A model.py that leaves ``marker`` behind when it runs: proof a load executed it."""
    return f"""\
import numpy as np
import triton_python_backend_utils as pb_utils

open({str(marker)!r}, "w").close()


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = pb_utils.Tensor("OUTPUT0", (x * {factor} + 1).astype(np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return out
""".encode()


def fp32_config() -> str:
    return json.dumps(
        {
            "backend": "python",
            "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        }
    )


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Everything the module's server may write to: its repository and its TMPDIR."""
    return tmp_path_factory.mktemp("names")


@pytest.fixture(scope="module")
def sandbox(root: Path) -> Path:
    """The server's TMPDIR, deep inside ``root``: its override area is
    ``<sandbox>/tritium-overrides-*``, so where a traversal would land stays under ``root``."""
    tmpdir = root / "tmp" / "a" / "b" / "c" / "d" / "e" / "f" / "g"
    tmpdir.mkdir(parents=True)
    return tmpdir


@pytest.fixture(scope="module")
def explicit_server(root: Path, sandbox: Path) -> Iterator[ServerProcess]:
    repo = root / "repo"
    repo.mkdir()
    build_test_repository(repo, ["identity_fp32"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(sandbox))
        proc = ServerProcess([repo], EXPLICIT, "--load-model", "identity_fp32")
    yield proc
    proc.stop()


def override_area(sandbox: Path) -> Path:
    (area,) = sandbox.glob("tritium-overrides-*")
    return area


def tree(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


# ----------------------------------------------------------------------------- requests


def http_call(server: ServerProcess, method: str, path: str, doc: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.http_url, timeout=TIMEOUT_S)
    try:
        body = None if doc is None else json.dumps(doc).encode()
        conn.request(method, path, body=body)
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None
    finally:
        conn.close()


def http_load(server: ServerProcess, name: str, config: str | None, files: dict[str, bytes]):
    params: dict[str, Any] = {k: base64.b64encode(v).decode() for k, v in files.items()}
    if config is not None:
        params["config"] = config
    path = f"/v2/repository/models/{quote(name, safe='')}/load"
    return http_call(server, "POST", path, {"parameters": params})


def load(server: ServerProcess, protocol: str, name: str, files: dict[str, bytes]) -> None:
    """Load ``name`` with a config and ``files``; raises InferenceServerException-like errors
    as (status, message) through ``Refused``."""
    if protocol == "http":
        status, doc = http_load(server, name, fp32_config(), files)
        if status != 200:
            raise Refused(str(status), doc["error"])
        return
    c = client("grpc", server.grpc_url)
    try:
        c.load_model(name, config=fp32_config(), files=files)
    except InferenceServerException as exc:
        raise Refused(exc.status(), exc.message()) from None
    finally:
        c.close()


class Refused(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


def unload(server: ServerProcess, protocol: str, name: str) -> None:
    if protocol == "http":
        path = f"/v2/repository/models/{quote(name, safe='')}/unload"
        assert http_call(server, "POST", path) == (200, None)
        return
    c = client("grpc", server.grpc_url)
    try:
        c.unload_model(name)
    finally:
        c.close()


def wait_until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT_S}s waiting for {what}")
        time.sleep(0.1)


def invalid_arg(protocol: str) -> str:
    return "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"


def internal(protocol: str) -> str:
    return "500" if protocol == "http" else "StatusCode.INTERNAL"


def infer_fp32(server: ServerProcess, protocol: str, name: str) -> np.ndarray:
    c = client(protocol, server.url(protocol))
    try:
        data = np.array([1.0, 2.0], dtype=np.float32)
        kwargs = {"client_timeout": TIMEOUT_S} if protocol == "grpc" else {}
        return c.infer(name, [make_input(protocol, "INPUT0", data, "FP32")], **kwargs).as_numpy(
            "OUTPUT0"
        )
    finally:
        c.close()


# --------------------------------------------------------------- item 2: the reported attack


def test_traversal_name_creates_nothing_outside_the_override_area(
    explicit_server: ServerProcess, root: Path, sandbox: Path, tmp_path: Path, protocol: str
) -> None:
    """A load of ``../../../../outside/x`` with a config and ``file:1/model.py`` used to create
    ``<override area>/../../../../outside/x-*`` and ``.../outside/x/1/model.py`` and run it.
    The directories a traversal would use are made in advance, so only the check stops it."""
    for trap in (sandbox.parents[2] / "outside", sandbox.parents[4] / "outside"):
        trap.mkdir(exist_ok=True)
    marker = tmp_path / "model_ran"
    before = tree(root)

    with pytest.raises(Refused) as info:
        load(explicit_server, protocol, ATTACK_NAME, {"file:1/model.py": marker_model(marker)})

    assert info.value.status == invalid_arg(protocol), info.value
    assert info.value.message == f"invalid model name '{ATTACK_NAME}', {TRAVERSAL}"
    assert tree(root) - before == set()  # nothing created anywhere, the override area included
    assert not marker.exists()  # and nothing ran


@pytest.mark.parametrize(
    "key",
    [
        "file:../escaped.py",
        "file:1/../../escaped.py",
        "file:{abs}",
        "file:1/model\x00.py",
        "file:1//model.py",
        "file:",
        "file:./1/model.py",
        "file:" + "A" * 256,
        "file:1/" + "A" * 256,
    ],
    ids=[
        "parent",
        "nested",
        "absolute",
        "nul",
        "empty-component",
        "empty",
        "dot",
        "long-name",
        "long-nested-name",
    ],
)
def test_bad_file_keys_refused_before_anything_is_written(
    explicit_server: ServerProcess, root: Path, tmp_path: Path, protocol: str, key: str
) -> None:
    marker = tmp_path / "model_ran"
    key = key.format(abs=root / "escaped.py")
    before = tree(root)
    files = {"file:1/model.py": marker_model(marker), key: marker_model(marker)}

    with pytest.raises(Refused) as info:
        load(explicit_server, protocol, "keys", files)

    assert info.value.status == internal(protocol), info.value
    assert info.value.message.startswith(
        "failed to load 'keys', failed to poll from model repository: Invalid file parameter 'file:"
    ), info.value
    assert "\x00" not in info.value.message
    assert tree(root) - before == set()
    assert not marker.exists()


def test_oversized_file_name_fails_the_load_as_tritons_example_expects(
    explicit_server: ServerProcess, protocol: str
) -> None:
    """What Triton's ``simple_grpc_model_control.py`` does: a load with ``config="{}"`` and a
    ``file:`` name longer than NAME_MAX. Triton answers INTERNAL (HTTP 500) "failed to load
    ..., failed to poll from model repository" and stays up; the model keeps serving."""
    c = client(protocol, explicit_server.url(protocol))
    try:
        with pytest.raises(InferenceServerException) as info:
            c.load_model("identity_fp32", config="{}", files={"file:" + "A" * 256: b"a"})
        assert c.is_server_live()
    finally:
        c.close()
    assert info.value.status() == internal(protocol), info.value
    assert "failed to poll from model repository" in info.value.message(), info.value
    np.testing.assert_array_equal(infer_fp32(explicit_server, protocol, "identity_fp32"), [1, 2])


def test_file_content_must_be_bytes(explicit_server: ServerProcess, tmp_path: Path) -> None:
    """gRPC only (HTTP sends every file as base64): a ``file:`` parameter given as a string is
    refused with Triton's INVALID_ARG message instead of failing inside: its gRPC front-end's
    (grpc_server.cc, since 2022), which answers before the core's LocalizeRepoAgent would."""
    marker = tmp_path / "model_ran"
    param = service_pb2.ModelRepositoryParameter
    request = service_pb2.RepositoryModelLoadRequest(
        model_name="strings",
        parameters={
            "config": param(string_param=fp32_config()),
            "file:1/model.py": param(string_param=marker_model(marker).decode()),
        },
    )
    with grpc.insecure_channel(explicit_server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(request, timeout=TIMEOUT_S)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "invalid value type for load parameter 'file:1/model.py', expected bytes_param."
    )
    assert not marker.exists()


def test_non_ascii_version_folder_in_a_load_is_not_a_version(
    explicit_server: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    """``file:١/model.py`` once became version 1 (``int('١') == 1``); Triton ignores a folder
    whose name ``stoll`` cannot read, so the model has no version and the load fails."""
    marker = tmp_path / "model_ran"
    with pytest.raises(Refused) as info:
        load(
            explicit_server,
            protocol,
            f"arabic_{protocol}",
            {"file:١/model.py": marker_model(marker)},
        )
    assert "at least one version must be available" in info.value.message, info.value
    assert not marker.exists()


# --------------------------------------------------- item 2: override directories are removed


def test_override_directory_removed_on_unload_and_reload(
    explicit_server: ServerProcess, sandbox: Path, tmp_path: Path, protocol: str
) -> None:
    """Each load with ``file:`` overrides materialises its own directory in the override area;
    a reload that replaces the model removes the previous one once it has drained, a failed
    reload removes its own, and an unload removes the model's before it answers (they were
    only removed at exit)."""
    area = override_area(sandbox)
    name = f"from_request_{protocol}"

    def folders() -> list[Path]:
        return [d for d in area.iterdir() if (d / name).exists()]

    assert folders() == []
    load(explicit_server, protocol, name, {"file:1/model.py": marker_model(tmp_path / "m1", 10)})
    (first,) = folders()
    assert (first / name / "1" / "model.py").is_file()
    np.testing.assert_array_equal(infer_fp32(explicit_server, protocol, name), [11.0, 21.0])

    load(explicit_server, protocol, name, {"file:1/model.py": marker_model(tmp_path / "m2", 20)})
    np.testing.assert_array_equal(infer_fp32(explicit_server, protocol, name), [21.0, 41.0])
    wait_until(lambda: len(folders()) == 1, "the previous override directory to go")
    (second,) = folders()
    assert second != first and not first.exists()

    with pytest.raises(Refused):  # a model.py that fails: the second one keeps serving
        load(explicit_server, protocol, name, {"file:1/model.py": b"raise RuntimeError('no')\n"})
    wait_until(lambda: folders() == [second], "the failed load's directory to go")
    np.testing.assert_array_equal(infer_fp32(explicit_server, protocol, name), [21.0, 41.0])

    unload(explicit_server, protocol, name)
    assert folders() == []  # gone before the unload answered


def test_failed_load_leaves_no_override_directory(
    explicit_server: ServerProcess, sandbox: Path, protocol: str
) -> None:
    """A model that never loaded from its files keeps none of them either."""
    area = override_area(sandbox)
    name = f"never_loads_{protocol}"
    with pytest.raises(Refused):
        load(explicit_server, protocol, name, {"file:1/model.py": b"raise RuntimeError('no')\n"})
    wait_until(lambda: not any((d / name).exists() for d in area.iterdir()), "its directory to go")


# ------------------------------------------------------------ item 2: every route, every name

BAD_NAMES = {
    "dot": (".", TRAVERSAL),
    "dotdot": ("..", TRAVERSAL),
    "slash": ("a/b", TRAVERSAL),
    "backslash": ("a\\b", TRAVERSAL),
    "nul": ("a\x00b", "control characters"),
    "newline": ("a\nb", "control characters"),
    "long": ("x" * 256, "at most 255 bytes"),
}


def _http_routes(name: str) -> list[tuple[str, str, Any]]:
    quoted = quote(name, safe="")
    infer = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    return [
        ("POST", f"/v2/repository/models/{quoted}/load", None),
        ("POST", f"/v2/models/{quoted}/infer", infer),
        ("GET", f"/v2/models/{quoted}", None),
        ("GET", f"/v2/models/{quoted}/versions/1", None),
        ("GET", f"/v2/models/{quoted}/config", None),
        ("GET", f"/v2/models/{quoted}/stats", None),
        ("GET", f"/v2/models/{quoted}/ready", None),
    ]


def _grpc_calls(c: Any, name: str) -> list[Any]:
    data = np.ones(1, dtype=np.float32)
    return [
        lambda: c.load_model(name),
        lambda: c.infer(name, [make_input("grpc", "INPUT0", data, "FP32")]),
        lambda: c.get_model_metadata(name),
        lambda: c.get_model_metadata(name, model_version="1"),
        lambda: c.get_model_config(name),
        lambda: c.get_inference_statistics(name),
        lambda: c.is_model_ready(name),
    ]


@pytest.mark.parametrize("which", list(BAD_NAMES))
def test_bad_names_refused_on_every_route(
    explicit_server: ServerProcess, root: Path, protocol: str, which: str
) -> None:
    name, problem = BAD_NAMES[which]
    before = tree(root)
    if protocol == "http":
        for method, path, doc in _http_routes(name):
            status, body = http_call(explicit_server, method, path, doc)
            assert status == 400, (path, status, body)
            assert problem in body["error"], (path, body)
    else:
        c = client("grpc", explicit_server.grpc_url)
        try:
            for call in _grpc_calls(c, name):
                with pytest.raises(InferenceServerException) as info:
                    call()
                assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value
                assert problem in info.value.message(), info.value
        finally:
            c.close()
    assert tree(root) - before == set()
    served = infer_fp32(explicit_server, protocol, "identity_fp32")  # everyone else is served
    np.testing.assert_array_equal(served, [1.0, 2.0])


@pytest.mark.parametrize("which", list(BAD_NAMES))
def test_unload_of_a_bad_name_answers_as_an_unknown_model(
    explicit_server: ServerProcess, root: Path, protocol: str, which: str
) -> None:
    """An unload builds no path: a name that can never be loaded is an unknown model there,
    answered as any other (Triton's L0_input_validation: no traversal refusal on unload)."""
    name, _ = BAD_NAMES[which]
    before = tree(root)
    unload(explicit_server, protocol, name)
    unload(explicit_server, protocol, "no_such_model_here")  # the same answer
    assert tree(root) - before == set()
    served = infer_fp32(explicit_server, protocol, "identity_fp32")
    np.testing.assert_array_equal(served, [1.0, 2.0])


def test_empty_name_refused_where_one_is_required(
    explicit_server: ServerProcess, protocol: str
) -> None:
    """Load, unload, readiness and metadata need a name; statistics without one are every
    model's (the statistics extension), not an error."""
    if protocol == "http":
        for method, path in [
            ("POST", "/v2/repository/models//load"),
            ("POST", "/v2/repository/models/%20/unload"),
            ("GET", "/v2/models//ready"),
            ("GET", "/v2/models//config"),
        ]:
            status, body = http_call(explicit_server, method, path)
            assert (status, body) == (400, {"error": EMPTY}), path
        assert http_call(explicit_server, "GET", "/v2/models/stats")[0] == 200
        return
    c = client("grpc", explicit_server.grpc_url)
    try:
        for call in (
            lambda: c.load_model(""),
            lambda: c.is_model_ready(""),
            lambda: c.get_model_metadata(" "),
        ):
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value
            assert info.value.message() == EMPTY
        assert c.get_inference_statistics("") is not None
    finally:
        c.close()


# ------------------------------------------------------------ item 11: only ASCII digits


@pytest.mark.parametrize(
    "version", ["²", "١", "１"], ids=["superscript", "arabic-indic", "fullwidth"]
)
def test_non_ascii_digit_versions_refused(
    server: ServerProcess, protocol: str, version: str
) -> None:
    """``versioned_all`` serves versions 1, 2 and 3. '²' passed ``str.isdigit()`` and then made
    ``int()`` fail (500 on infer); '١' and '１' were read by ``int()`` as 1 and served version 1.
    Over gRPC every call that takes a version answers Triton's INVALID_ARG message instead;
    over HTTP a version segment that is not ASCII digits matches no route (Triton's URL
    patterns take ``[0-9]+``): 404, as Triton answers."""
    name = "versioned_all"
    message = f"failed to get model version from specified version string '{version}' {STOL}"
    if protocol == "http":
        base = f"/v2/models/{name}/versions/{quote(version, safe='')}"
        infer = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}]}
        for method, path, doc in [
            ("GET", base, None),
            ("GET", f"{base}/ready", None),
            ("GET", f"{base}/config", None),
            ("GET", f"{base}/stats", None),
            ("POST", f"{base}/infer", infer),
        ]:
            assert http_call(server, method, path, doc) == (404, {"error": "Not Found"}), path
        return
    c = client("grpc", server.grpc_url)
    data = np.ones(1, dtype=np.int32)
    try:
        for call in (
            lambda: c.is_model_ready(name, version),
            lambda: c.get_model_metadata(name, version),
            lambda: c.get_model_config(name, version),
            lambda: c.get_inference_statistics(name, version),
            lambda: c.infer(
                name, [make_input("grpc", "INPUT0", data, "INT32")], model_version=version
            ),
        ):
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value
            assert info.value.message() == message
        assert c.is_model_ready(name, "1")  # the ASCII spelling still works
    finally:
        c.close()
