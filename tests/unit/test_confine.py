"""config/confine.py: the paths a client's configuration (a load request's ``config``) may
name stay inside the model's directory (issue 44 item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritium.config.confine import check_client_paths, client_path, without_model_dir
from tritium.config.model_config import config_from_json
from tritium.errors import ServerError


def _config(**fields: object) -> object:
    return config_from_json(json.dumps({"backend": "python", **fields}))


def _params(**values: str) -> dict[str, object]:
    return {"parameters": {k: {"string_value": v} for k, v in values.items()}}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"default_model_filename": "/etc/passwd"}, "default_model_filename"),
        ({"default_model_filename": "../../x.py"}, "default_model_filename"),
        ({"default_model_filename": "a/../../x.py"}, "default_model_filename"),
        ({"cc_model_filenames": {"7.5": "/lib/x.so"}}, "cc_model_filenames"),
        (_params(EXECUTION_ENV_PATH="/opt/env.tar.gz"), "parameters.EXECUTION_ENV_PATH"),
        (_params(EXECUTION_ENV_PATH="env.tar.gz"), "parameters.EXECUTION_ENV_PATH"),
        (
            _params(EXECUTION_ENV_PATH="$$TRITON_MODEL_DIRECTORY/../x"),
            "parameters.EXECUTION_ENV_PATH",
        ),
        (_params(CPU_EXTENSION_PATH="/usr/lib/libz.so"), "parameters.CPU_EXTENSION_PATH"),
        (_params(CACHE_DIR="/tmp/made"), "parameters.CACHE_DIR"),
        (_params(CACHE_DIR=".."), "parameters.CACHE_DIR"),
        ({"model_operations": {"op_library_filename": ["/x.so"]}}, "model_operations"),
    ],
)
def test_a_path_out_of_the_model_directory_is_refused(fields: dict, field: str) -> None:
    with pytest.raises(ServerError) as info:
        check_client_paths(_config(**fields))
    assert info.value.kind.value == "INVALID_ARG"
    assert f"field '{field}" in info.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"default_model_filename": "model.py"},
        {"default_model_filename": "sub/model.py"},
        _params(EXECUTION_ENV_PATH="$$TRITON_MODEL_DIRECTORY/env.tar.gz"),
        _params(CACHE_DIR="cache", CPU_EXTENSION_PATH="lib/ext.so", OTHER="/anything"),
        {},
    ],
)
def test_a_path_inside_is_accepted(fields: dict) -> None:
    check_client_paths(_config(**fields))


def test_a_link_out_is_refused_where_the_path_is_used(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (model_dir / "1" / "away").symlink_to(tmp_path / "out")
    (model_dir / "1" / "here").symlink_to(model_dir / "1")
    found = client_path(model_dir, model_dir / "1", "default_model_filename", "here/model.py")
    assert found == (model_dir / "1" / "model.py").resolve()
    with pytest.raises(ServerError) as info:
        client_path(model_dir, model_dir / "1", "default_model_filename", "away/model.py")
    assert "through a link" in info.value.message
    assert str(tmp_path) not in info.value.message


def test_the_model_directory_is_written_as_the_keyword(tmp_path: Path) -> None:
    text = f"unable to find 'x.py' in '{tmp_path / 'm' / '1'}'"
    assert without_model_dir(text, tmp_path / "m") == (
        "unable to find 'x.py' in '$$TRITON_MODEL_DIRECTORY/1'"
    )
