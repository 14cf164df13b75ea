"""A request's reserved parameters reach a Python model as Triton's request API gives them:
``flags()`` (sequence start/end), ``timeout()`` (µs), ``correlation_id()``; they are parsed
once, in the core, with the same rules over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess

START, END = 1, 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_test_repository(tmp_path_factory.mktemp("options") / "repo", ["request_options"])
    proc = ServerProcess([Path(repo)])
    yield proc
    proc.stop()


def _seen(proc: ServerProcess, protocol: str, **kwargs: object) -> list[int]:
    with client(protocol, proc.url(protocol)) as c:
        data = np.zeros(1, dtype=np.int32)
        result = c.infer(
            "request_options", [make_input(protocol, "INPUT0", data, "INT32")], **kwargs
        )
        return result.as_numpy("OUTPUT0").tolist()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_flags_timeout_and_correlation_id_reach_the_model(
    served: ServerProcess, protocol: str
) -> None:
    assert _seen(served, protocol) == [0, 0, 0, 0]
    first = _seen(served, protocol, sequence_id=7, sequence_start=True, timeout=5000)
    assert first == [START, 5000, 7, 0]
    last = _seen(served, protocol, sequence_id=7, sequence_end=True)
    assert last == [END, 0, 7, 0]
    both = _seen(served, protocol, sequence_id="s-1", sequence_start=True, sequence_end=True)
    assert both == [START | END, 0, -1, 0]
    custom = _seen(served, protocol, parameters={"a": 1, "b": "x"})
    assert custom == [0, 0, 0, 2]  # the model's own parameters, the reserved ones not among them
