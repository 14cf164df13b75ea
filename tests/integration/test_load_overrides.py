"""A load request's ``config`` and ``file:`` parameters are a client's (issue 44, items 2 and 4).

Item 2: every path a client's config names stays inside the model's directory. An absolute
path or a '..' in ``default_model_filename``, ``EXECUTION_ENV_PATH`` (only
``$$TRITON_MODEL_DIRECTORY/<path>``), OpenVINO's ``CPU_EXTENSION_PATH`` and ``CACHE_DIR``
(and the file fields) is INVALID_ARG before anything is loaded; a link in the model's
directory that leads out fails the load; the reasons a client reads name no server path
(the model's directory is written ``$$TRITON_MODEL_DIRECTORY``). The operator's own
config.pbtxt keeps Triton's reading.

Item 4: each load parameter has Triton's type (HTTP: a JSON string, a ``file:`` one base64;
gRPC: ``config`` a string_param, ``file:`` a bytes_param); ``true``, ``null`` or a number
is no file content. A parameter that is neither ``config`` nor ``file:`` is refused, as
Triton's gRPC front-end refuses it.

Requests go through tritonclient (HTTP and gRPC) where it can send them, and raw
(http.client, grpc stubs) where it cannot.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from tests.support.clients import client
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 60.0
PROTOCOLS = ["http", "grpc"]
CONFINED = "may name only files in the model's directory"


def marker_model(marker: Path) -> str:
    """A model.py that leaves ``marker`` behind when it is imported: proof a load ran it."""
    return f"open({str(marker)!r}, 'w').close()\n\nclass TritonPythonModel:\n    pass\n"


def fp32_config(**extra: Any) -> dict[str, Any]:
    return {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        **extra,
    }


def env_config(value: str) -> dict[str, Any]:
    return fp32_config(parameters={"EXECUTION_ENV_PATH": {"string_value": value}})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("overrides")


@pytest.fixture(scope="module")
def outside(root: Path) -> Path:
    """A folder outside every model directory, with a model.py that marks its import."""
    folder = root / "outside"
    folder.mkdir()
    (folder / "model.py").write_text(marker_model(root / "outside_ran"))
    return folder


@pytest.fixture(scope="module")
def repo(root: Path, outside: Path) -> Path:
    repo = build_test_repository(root / "repo", ["identity_fp32"])
    (repo / "identity_fp32" / "1" / "away").symlink_to(outside)  # the operator's link
    (repo / "identity_fp32" / "envlink").symlink_to(outside)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([repo], "--model-control-mode=explicit", "--load-model=identity_fp32")
    yield proc
    proc.stop()


class Refused(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


def load(server: ServerProcess, protocol: str, name: str, config: Any, files: Any = None) -> None:
    """tritonclient's load_model; a refusal raised as ``Refused(status, message)``."""
    c = client(protocol, server.url(protocol))
    try:
        c.load_model(name, config=json.dumps(config), files=files)
    except InferenceServerException as exc:
        raise Refused(str(exc.status()), exc.message()) from None
    finally:
        c.close()


def invalid_arg(protocol: str) -> str:
    return "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"


def internal(protocol: str) -> str:
    return "500" if protocol == "http" else "StatusCode.INTERNAL"


def http_load(server: ServerProcess, name: str, body: bytes) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.http_url, timeout=TIMEOUT_S)
    try:
        conn.request("POST", f"/v2/repository/models/{name}/load", body=body)
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else None
    finally:
        conn.close()


def grpc_load(server: ServerProcess, name: str, **parameters: Any) -> grpc.RpcError:
    request = service_pb2.RepositoryModelLoadRequest(model_name=name, parameters=parameters)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(request, timeout=TIMEOUT_S)
    return info.value


def still_serving(server: ServerProcess, protocol: str) -> None:
    c = client(protocol, server.url(protocol))
    try:
        assert c.is_model_ready("identity_fp32")
    finally:
        c.close()


# ------------------------------------------------- item 2: default_model_filename


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("escape", ["absolute", "dotdot"])
def test_default_model_filename_outside_is_refused(
    server: ServerProcess, root: Path, outside: Path, protocol: str, escape: str
) -> None:
    """An absolute path or a '..' ran any model.py on disk (the marker's file was created);
    now INVALID_ARG before anything is loaded, and the message names no server path."""
    # the model's directory is <root>/repo/identity_fp32: <root> is three up from version 1
    target = str(outside / "model.py") if escape == "absolute" else "../../../outside/model.py"
    with pytest.raises(Refused) as info:
        load(server, protocol, "identity_fp32", fp32_config(default_model_filename=target))
    assert info.value.status == invalid_arg(protocol), info.value
    assert "field 'default_model_filename'" in info.value.message
    assert CONFINED in info.value.message
    assert str(root) not in info.value.message.replace(target, "")
    assert not (root / "outside_ran").exists()
    still_serving(server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_default_model_filename_through_a_link_out_fails(
    server: ServerProcess, root: Path, protocol: str
) -> None:
    """``away`` is a link in the version folder to a folder outside the model's directory: a
    client's ``away/model.py`` does not run what it leads to."""
    with pytest.raises(Refused) as info:
        load(server, protocol, "identity_fp32", fp32_config(default_model_filename="away/model.py"))
    assert info.value.status == internal(protocol), info.value
    assert "leads out of the model directory through a link" in info.value.message
    assert str(root) not in info.value.message
    assert not (root / "outside_ran").exists()
    still_serving(server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_model_file_names_no_server_path(
    server: ServerProcess, repo: Path, protocol: str
) -> None:
    """The reason a client reads says which of its files is missing, and where in the model's
    directory, never the server's path to it."""
    with pytest.raises(Refused) as info:
        load(server, protocol, "identity_fp32", fp32_config(default_model_filename="nothere.py"))
    assert info.value.status == internal(protocol), info.value
    message = info.value.message
    assert "nothere.py" in message and "$$TRITON_MODEL_DIRECTORY/1" in message, message
    assert str(repo) not in message and str(repo.resolve()) not in message, message
    still_serving(server, protocol)


def test_the_operators_config_keeps_its_paths(root: Path, outside: Path) -> None:
    """A config.pbtxt on disk is the operator's: its default_model_filename is read as
    Triton reads it (here through a link out of the model's directory), and loads."""
    repo = root / "operator_repo"
    build_test_repository(repo, ["identity_fp32"])
    shared = root / "shared"
    shared.mkdir()
    model_py = repo / "identity_fp32" / "1" / "model.py"
    (shared / "identity.py").write_bytes(model_py.read_bytes())
    model_py.unlink()
    (repo / "identity_fp32" / "1" / "shared").symlink_to(shared)
    config = repo / "identity_fp32" / "config.pbtxt"
    config.write_text(config.read_text() + '\ndefault_model_filename: "shared/identity.py"\n')
    proc = ServerProcess([repo])
    try:
        c = client("http", proc.http_url)
        assert c.is_model_ready("identity_fp32")
        c.close()
    finally:
        proc.stop()


# ------------------------------------------------------- item 2: EXECUTION_ENV_PATH


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "value",
    ["/usr", "env.tar.gz", "$$TRITON_MODEL_DIRECTORY/../../outside", "$$TRITON_MODEL_DIRECTORY"],
)
def test_execution_env_path_outside_is_refused(
    server: ServerProcess, root: Path, protocol: str, value: str
) -> None:
    """A client's EXECUTION_ENV_PATH probed any path on the server (and its reason told what
    was there); now it must be ``$$TRITON_MODEL_DIRECTORY/<relative path>``."""
    with pytest.raises(Refused) as info:
        load(server, protocol, "identity_fp32", env_config(value))
    assert info.value.status == invalid_arg(protocol), info.value
    assert "field 'parameters.EXECUTION_ENV_PATH'" in info.value.message, info.value
    assert str(root) not in info.value.message
    still_serving(server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_execution_env_path_through_a_link_out_fails(
    server: ServerProcess, root: Path, protocol: str
) -> None:
    with pytest.raises(Refused) as info:
        load(server, protocol, "identity_fp32", env_config("$$TRITON_MODEL_DIRECTORY/envlink"))
    assert info.value.status == internal(protocol), info.value
    assert "leads out of the model directory through a link" in info.value.message
    assert str(root) not in info.value.message
    still_serving(server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_execution_env_path_in_the_model_directory_is_taken(
    server: ServerProcess, repo: Path, protocol: str
) -> None:
    """``$$TRITON_MODEL_DIRECTORY/...`` still works: the environment is looked for in the
    model's directory (none there: the load fails saying so), and the reason shows the
    keyword, not the server's path."""
    with pytest.raises(Refused) as info:
        load(server, protocol, "identity_fp32", env_config("$$TRITON_MODEL_DIRECTORY/env.tar.gz"))
    assert info.value.status == internal(protocol), info.value
    message = info.value.message
    assert "not a usable execution environment" in message, message
    assert "$$TRITON_MODEL_DIRECTORY/env.tar.gz" in message, message
    assert str(repo) not in message and str(repo.resolve()) not in message, message
    still_serving(server, protocol)


# ----------------------------------------------------------- item 2: the file fields


@pytest.mark.parametrize(
    ("field", "config"),
    [
        (
            "output.label_filename",
            fp32_config(
                output=[
                    {
                        "name": "OUTPUT0",
                        "data_type": "TYPE_FP32",
                        "dims": [-1],
                        "label_filename": "/etc/hostname",
                    }
                ]
            ),
        ),
        (
            "model_warmup.inputs.input_data_file",
            fp32_config(
                model_warmup=[
                    {
                        "name": "w",
                        "batch_size": 1,
                        "inputs": {
                            "INPUT0": {
                                "data_type": "TYPE_FP32",
                                "dims": [1],
                                "input_data_file": "../../../../etc/hostname",
                            }
                        },
                    }
                ]
            ),
        ),
    ],
)
def test_file_fields_outside_are_refused(
    server: ServerProcess, field: str, config: dict[str, Any]
) -> None:
    with pytest.raises(Refused) as info:
        load(server, "grpc", "identity_fp32", config)
    assert info.value.status == invalid_arg("grpc"), info.value
    assert f"field '{field}'" in info.value.message


# ---------------------------------------------------------------- item 2: OpenVINO


@pytest.fixture(scope="module")
def ov_server(root: Path) -> Iterator[tuple[ServerProcess, Path]]:
    ov_models = pytest.importorskip("tests.support.openvino_models")
    repo = root / "ov_repo"
    entry = ov_models.good_models()["ov_cached"]  # a doubler with a CACHE_DIR
    ov_models.write_model(repo, "ov_cached", entry, root / "operator_cache")
    (repo / "ov_cached" / "client_cache").mkdir()
    proc = ServerProcess([repo], "--model-control-mode=explicit", start_timeout=120)
    yield proc, repo / "ov_cached"
    proc.stop()


def ov_config(**parameters: str) -> dict[str, Any]:
    return {
        "backend": "openvino",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_openvino_cache_dir_outside_is_refused(
    ov_server: tuple[ServerProcess, Path], root: Path, protocol: str, where: str
) -> None:
    """A client's CACHE_DIR made a folder wherever it said; now refused, nothing created."""
    server, _ = ov_server
    made = root / f"client_named_{protocol}_{where}"
    value = str(made) if where == "absolute" else f"../../{made.name}"
    with pytest.raises(Refused) as info:
        load(server, protocol, "ov_cached", ov_config(CACHE_DIR=value))
    assert info.value.status == invalid_arg(protocol), info.value
    assert "field 'parameters.CACHE_DIR'" in info.value.message
    assert not made.exists()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_openvino_cache_dir_must_exist_in_the_model_directory(
    ov_server: tuple[ServerProcess, Path], protocol: str
) -> None:
    server, model_dir = ov_server
    with pytest.raises(Refused) as info:
        load(server, protocol, "ov_cached", ov_config(CACHE_DIR=f"new_{protocol}"))
    assert "CACHE_DIR names no folder in the model directory" in info.value.message
    assert not (model_dir / f"new_{protocol}").exists()
    load(server, protocol, "ov_cached", ov_config(CACHE_DIR="client_cache"))  # loads
    c = client(protocol, server.url(protocol))
    try:
        assert c.is_model_ready("ov_cached")
    finally:
        c.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_openvino_cpu_extension_outside_is_refused(
    ov_server: tuple[ServerProcess, Path], protocol: str
) -> None:
    """A client's CPU_EXTENSION_PATH loaded any library on disk (and the reason told whether
    it existed); now refused before OpenVINO sees it."""
    server, _ = ov_server
    with pytest.raises(Refused) as info:
        load(server, protocol, "ov_cached", ov_config(CPU_EXTENSION_PATH="/usr/lib/libz.so.1"))
    assert info.value.status == invalid_arg(protocol), info.value
    assert "field 'parameters.CPU_EXTENSION_PATH'" in info.value.message


# ------------------------------------------------ item 4: load parameters' value types


@pytest.mark.parametrize("value", [True, None, 2**64 - 1, 12, {"a": "b"}, ["AAAA"]])
def test_http_file_parameter_not_a_string(server: ServerProcess, root: Path, value: Any) -> None:
    """``true`` became the file 'N\\xbb\\x9e' (str(True) read as base64), ``null`` 'None',
    2^64-1 fifteen bytes: each was written as the model's file. Now refused."""
    body = {
        "parameters": {
            "config": json.dumps(fp32_config()),
            "file:1/model.py": value,
        }
    }
    status, doc = http_load(server, "typed_files", json.dumps(body).encode())
    assert status == 400, doc
    assert doc == {
        "error": "Unable to parse load parameter 'file:1/model.py': attempt to access JSON "
        "non-string as string"
    }
    still_serving(server, "http")


@pytest.mark.parametrize("value", [{"backend": "python"}, 5, True])
def test_http_config_parameter_not_a_string(server: ServerProcess, value: Any) -> None:
    body = {"parameters": {"config": value}}
    status, doc = http_load(server, "identity_fp32", json.dumps(body).encode())
    assert status == 400, doc
    assert doc == {
        "error": "Unable to parse load parameter 'config': attempt to access JSON non-string "
        "as string"
    }


@pytest.mark.parametrize("value", [None, [], "config", 1])
def test_http_load_parameters_not_an_object(server: ServerProcess, value: Any) -> None:
    status, doc = http_load(server, "identity_fp32", json.dumps({"parameters": value}).encode())
    assert status == 400, doc
    assert doc == {"error": "attempt to get members for non-object"}


def test_http_unknown_load_parameter(server: ServerProcess) -> None:
    body = {"parameters": {"config": json.dumps(fp32_config()), "confg": "x"}}
    status, doc = http_load(server, "identity_fp32", json.dumps(body).encode())
    assert status == 400, doc
    assert doc == {"error": "unrecognized load parameter 'confg'."}


@pytest.mark.parametrize(
    "value",
    [
        service_pb2.ModelRepositoryParameter(bool_param=True),
        service_pb2.ModelRepositoryParameter(int64_param=2**63 - 1),
        service_pb2.ModelRepositoryParameter(string_param="AAAA"),
        service_pb2.ModelRepositoryParameter(),
    ],
)
def test_grpc_file_parameter_not_bytes(server: ServerProcess, root: Path, value: Any) -> None:
    config = service_pb2.ModelRepositoryParameter(string_param=json.dumps(fp32_config()))
    error = grpc_load(server, "typed_files", **{"config": config, "file:1/model.py": value})
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "invalid value type for load parameter 'file:1/model.py', expected bytes_param."
    )
    still_serving(server, "grpc")


@pytest.mark.parametrize(
    "value",
    [
        service_pb2.ModelRepositoryParameter(bool_param=True),
        service_pb2.ModelRepositoryParameter(bytes_param=b"{}"),
    ],
)
def test_grpc_config_parameter_not_a_string(server: ServerProcess, value: Any) -> None:
    error = grpc_load(server, "identity_fp32", config=value)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (
        error.details() == "invalid value type for load parameter 'config', expected string_param."
    )


def test_grpc_unknown_load_parameter(server: ServerProcess) -> None:
    error = grpc_load(
        server, "identity_fp32", confg=service_pb2.ModelRepositoryParameter(string_param="x")
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "unrecognized load parameter 'confg'."


def test_a_good_file_override_still_loads(server: ServerProcess, repo: Path) -> None:
    """The same request with a base64 string (HTTP) and bytes (gRPC) loads and serves."""
    source = (repo / "identity_fp32" / "1" / "model.py").read_bytes()
    for protocol in PROTOCOLS:
        load(server, protocol, f"good_{protocol}", fp32_config(), {"file:1/model.py": source})
        c = client(protocol, server.url(protocol))
        try:
            assert c.is_model_ready(f"good_{protocol}")
        finally:
            c.close()
    body = {"parameters": {"config": json.dumps(fp32_config()), "file:1/model.py": "!!"}}
    status, doc = http_load(server, "bad_base64", json.dumps(body).encode())
    assert status == 400 and "base64" in doc["error"], doc
