"""What Triton's own Python-backend QA suites (qa/L0_backend_python in the server repository)
rely on, each reproduced with tritium's own models (tests/qa_models.py), over HTTP and gRPC
where it applies to both."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from tests.support.server_process import ServerProcess

_MODELS = ["qa_argv"]


@pytest.fixture(scope="module")
def qa_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("qa") / "repo", _MODELS)
    proc = ServerProcess([repo])
    yield proc
    proc.stop()


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
