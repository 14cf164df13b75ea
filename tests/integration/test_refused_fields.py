"""No config silently ignored, end to end: a model that sets a field tritium does not implement
loads UNAVAILABLE with a reason naming the field (python, onnxruntime and ensemble models alike);
a GPU-only field loads with one warning; the other models keep serving (HTTP and gRPC)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.models import model_files
from testkit.server_process import ServerProcess

PROTOCOLS = ("http", "grpc")
GOOD = "identity_fp32"
# model -> (the test model it copies, the config lines it adds, the field its reason names)
REFUSED = {
    "oplib_onnx": (
        "identity_onnx_fp32",
        'model_operations { op_library_filename: "libcustom_ops.so" }',
        "model_operations",
    ),
    "passive_py": (
        GOOD,
        "instance_group [ { count: 1 kind: KIND_CPU passive: true } ]",
        "instance_group.passive",
    ),
}
# A refused field whose name also comes earlier in a comment, in the model's name, in a string
# and in another message: the reason names the field's own line (LINE_MODEL_LINE).
LINE_MODEL = "passive_line_py"
LINE_MODEL_CONFIG = f"""\
name: "{LINE_MODEL}"
# passive: see below
backend: "python"
max_batch_size: 0
parameters {{ key: "note" value {{ string_value: "passive: true" }} }}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [
  {{ count: 1 kind: KIND_CPU }},
  {{ count: 1
     passive: true }}
]
"""
LINE_MODEL_LINE = 11
# model -> (the test model it copies, a platform string Triton does not know, in place of
# its backend or platform line)
BAD_PLATFORMS = {
    "bad_platform_py": (GOOD, "python"),
    "bad_platform_onnx": ("identity_onnx_fp32", "onnxruntime"),
    "typo_platform_onnx": ("identity_onnx_fp32", "onnxruntime_onx"),
}
GPU_ONLY = "cuda_py"
GPU_ONLY_FIELD = "optimization.cuda"
REFUSING_ENSEMBLE = "refusing_ensemble"
REFUSING_ENSEMBLE_CONFIG = f"""\
name: "{REFUSING_ENSEMBLE}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [ {{ model_name: "{GOOD}" model_version: -1
  input_map {{ key: "INPUT0" value: "INPUT0" }} output_map {{ key: "OUTPUT0" value: "OUTPUT0" }}
}} ] }}
model_operations {{ op_library_filename: "libcustom.so" }}
"""


def _write(root: Path, name: str, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _variant(source: str, name: str, extra: str) -> dict[str, str | bytes]:
    files = model_files(source)
    config = str(files["config.pbtxt"]).replace(f'name: "{source}"', f'name: "{name}"')
    files["config.pbtxt"] = config + extra + "\n"
    return files


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fields") / "repo"
    _write(root, GOOD, model_files(GOOD))
    for name, (source, extra, _) in REFUSED.items():
        _write(root, name, _variant(source, name, extra))
    # Two versions of one model: still one warning for the load.
    cuda = _variant(
        GOOD, GPU_ONLY, "version_policy { all { } }\noptimization { cuda { graphs: true } }"
    )
    cuda["2/model.py"] = cuda["1/model.py"]
    _write(root, GPU_ONLY, cuda)
    _write(root, REFUSING_ENSEMBLE, {"config.pbtxt": REFUSING_ENSEMBLE_CONFIG, "1/.keep": ""})
    line_model = model_files(GOOD)
    line_model["config.pbtxt"] = LINE_MODEL_CONFIG
    _write(root, LINE_MODEL, line_model)
    for name, (source, platform) in BAD_PLATFORMS.items():
        files = _variant(source, name, "")
        config = re.sub(
            r'(backend|platform): "[^"]*"', f'platform: "{platform}"', str(files["config.pbtxt"])
        )
        files["config.pbtxt"] = config
        _write(root, name, files)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess([repo], "--exit-on-error=false")
    yield proc
    proc.stop()


def _client(server: ServerProcess, protocol: str) -> Any:
    return client(protocol, server.url(protocol))


def _index(server: ServerProcess, protocol: str) -> dict[tuple[str, str], dict[str, Any]]:
    c = _client(server, protocol)
    try:
        rows = (
            c.get_model_repository_index()
            if protocol == "http"
            else c.get_model_repository_index(as_json=True).get("models", [])
        )
    finally:
        c.close()
    return {(row["name"], row.get("version", "")): row for row in rows}


def _refused_cases() -> list[tuple[str, str]]:
    return [(name, field) for name, (_, _, field) in REFUSED.items()] + [
        (REFUSING_ENSEMBLE, "model_operations")
    ]


@pytest.mark.parametrize(("name", "field"), _refused_cases())
def test_refused_field_makes_the_model_unavailable_with_its_name(
    server: ServerProcess, repo: Path, protocol: str, name: str, field: str
) -> None:
    rows = _index(server, protocol)
    row = rows[(name, "1")]
    assert row["state"] == "UNAVAILABLE", row
    config = re.escape(str(repo / name / "config.pbtxt"))
    assert re.search(rf"^{config}:\d+: field '{re.escape(field)}': ", row["reason"]), row
    assert row["reason"].endswith("; remove it from the configuration"), row
    c = _client(server, protocol)
    try:
        assert c.is_model_ready(name) is False
    finally:
        c.close()


def _identity(server: ServerProcess, protocol: str, name: str, version: str = "") -> np.ndarray:
    data = np.array([0.5, -1.0, 4.0], dtype=np.float32)
    c = _client(server, protocol)
    try:
        result = c.infer(
            name, [make_input(protocol, "INPUT0", data, "FP32")], model_version=version
        )
    finally:
        c.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    return data


def test_other_models_still_serve(server: ServerProcess, protocol: str) -> None:
    rows = _index(server, protocol)
    for key in ((GOOD, "1"), (GPU_ONLY, "1"), (GPU_ONLY, "2")):
        assert rows[key]["state"] == "READY", rows[key]
    _identity(server, protocol, GOOD)
    for version in ("1", "2"):
        _identity(server, protocol, GPU_ONLY, version)


def test_gpu_only_field_warns_once_per_load(server: ServerProcess, repo: Path) -> None:
    warnings = [
        line
        for line in server.log_text().splitlines()
        if f"field '{GPU_ONLY_FIELD}'" in line and f"'{GPU_ONLY}'" in line
    ]
    assert len(warnings) == 1, warnings
    assert "accepted but ignored" in warnings[0]
    assert str(repo / GPU_ONLY / "config.pbtxt") in warnings[0]


def test_the_reason_names_the_refused_fields_own_line(
    server: ServerProcess, repo: Path, protocol: str
) -> None:
    assert LINE_MODEL_CONFIG.splitlines()[LINE_MODEL_LINE - 1].strip() == "passive: true }"
    row = _index(server, protocol)[(LINE_MODEL, "1")]
    assert row["state"] == "UNAVAILABLE", row
    config = repo / LINE_MODEL / "config.pbtxt"
    assert row["reason"].startswith(f"{config}:{LINE_MODEL_LINE}: field 'instance_group.passive': ")


@pytest.mark.parametrize("name", list(BAD_PLATFORMS))
def test_unknown_platform_is_refused(server: ServerProcess, protocol: str, name: str) -> None:
    """An unknown platform string is not replaced by what the version directory holds: the
    model is UNAVAILABLE with Triton's reason (it loaded silently before)."""
    rows = [row for (model, _), row in _index(server, protocol).items() if model == name]
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["state"] == "UNAVAILABLE", row
    platform = BAD_PLATFORMS[name][1]
    assert f"unexpected platform type '{platform}' for {name}" in row["reason"], row
