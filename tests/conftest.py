"""Shared fixtures: model repositories built at test time and the real server."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
# examples/ is a folder of scripts that import each other by name (build_models.py imports
# image_models.py), not a package: its folder goes on sys.path, for build_models here and for
# the tests that compare against its references (test_ensembles.py, test_image_examples.py).
sys.path.insert(0, str(ROOT / "examples"))

from build_models import build_examples  # noqa: E402

# The servers the tests start log each message as written (TRITON_SERVER_ESCAPE_LOG_MESSAGES=0),
# not as a JSON string as Triton and tritium do by default, so that the tests read the messages
# they look for as they are; tests/integration/test_logging.py and
# tests/unit/test_log_settings.py check the escaped default.
os.environ.setdefault("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "0")

# Models every healthy shared server has; crash/bad models get servers of their own.
GOOD_TEST_MODELS = [
    "identity_bool",
    "identity_uint8",
    "identity_uint16",
    "identity_uint32",
    "identity_uint64",
    "identity_int8",
    "identity_int16",
    "identity_int32",
    "identity_int64",
    "identity_fp16",
    "identity_fp32",
    "identity_fp64",
    "identity_bf16",
    "identity_bytes",
    "identity_onnx_fp32",
    "identity_onnx_nocfg",
    "onnx_partial_cfg",
    "raises",
    "error_response",
    "async_add_sub",
    "versioned_latest",
    "versioned_all",
    "versioned_specific",
    "slow",
    "is_ready_false",
    "scalar_reshape",
    "sender_two_step",
    "autocomplete_py",
    "classify_batched",
]
PROTOCOLS = ["http", "grpc"]


@pytest.fixture(scope="session")
def example_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("examples") / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", repo)
    build_examples(repo)
    return repo


@pytest.fixture(scope="session")
def test_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("testmodels") / "repo", GOOD_TEST_MODELS)


@pytest.fixture(scope="session")
def server(example_repo: Path, test_repo: Path) -> Iterator[ServerProcess]:
    """One server over the examples and the well-behaved test models, shared by the session.

    ``is_ready_false`` keeps strict readiness from ever holding, so readiness is not strict
    here; tests about readiness start their own server."""
    proc = ServerProcess(
        [example_repo, test_repo],
        "--strict-readiness=false",
        "--http-max-input-size",
        str(160 * 1024 * 1024),
    )
    yield proc
    proc.stop()


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return request.param
