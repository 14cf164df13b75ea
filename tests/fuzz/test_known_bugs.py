"""Minimal reproducers of the crashes fuzzing found, each a strict xfail until its fix lands.

The fuzz targets tolerate these (``KNOWN_BUGS`` in fuzz_harness.py) so that fuzzing goes on
past them. When a fix makes a reproducer pass, the strict xfail fails the suite: delete the
xfail here and the KNOWN_BUGS entry, and the fuzz targets guard the fix from then on."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_harness import KNOWN_BUGS  # noqa: E402
from tritonclient.grpc import service_pb2 as pb  # noqa: E402

from tritium.errors import ErrorKind, ServerError  # noqa: E402
from tritium.frontends.grpc.codec import decode_request as decode_grpc  # noqa: E402
from tritium.frontends.http.codec import decode_request as decode_http  # noqa: E402
from tritium.config.model_config import (  # noqa: E402
    ConfigProblem,
    parse_config_text,
    read_config,
)
from tritium.extensions.parameters import parse_parameters  # noqa: E402
from tritium.config.spec import build_spec, normalize  # noqa: E402
from tritium.types import ClientRequest  # noqa: E402

pytestmark = pytest.mark.fuzz
HUGE = 2**62


def _grpc(**params: pb.InferParameter) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m")
    for key, value in params.items():
        msg.parameters[key].CopyFrom(value)
    return msg


def _grpc_tensor(datatype: str, shape: list[int], raw: bytes | None = None) -> object:
    msg = pb.ModelInferRequest(model_name="m")
    tensor = msg.inputs.add(name="A", datatype=datatype, shape=shape)
    if raw is None:
        tensor.contents.SetInParent()
    else:
        msg.raw_input_contents.append(raw)
    return msg


def _int8_contents() -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="A", datatype="INT8", shape=[1]).contents.int_contents.append(1000)
    return msg


def _config(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_bytes(b'name: "m"\nbackend: "python\xff"\n')
    read_config(tmp_path)


def _core(request: ClientRequest) -> None:
    """What the core reads of a decoded request's parameters (one rule for every protocol)."""
    parse_parameters(request.parameters)


def _config_enum(tmp_path: Path) -> None:
    """The load steps after reading (as the manager runs them) on an undefined enum number."""
    text = 'backend: "python"\ninput { name: "I" data_type: 64 dims: 1 }\n'
    config = parse_config_text(text, tmp_path / "config.pbtxt")
    problem = ConfigProblem("m", tmp_path / "config.pbtxt", text)
    normalize(config, "m", problem)
    build_spec(config, problem)


REPRODUCERS: dict[str, list[Callable[[Path], object]]] = {
    "grpc-parameter-type": [
        lambda _: _core(decode_grpc(_grpc(priority=pb.InferParameter(string_param="abc")), 1)),
        lambda _: _core(decode_grpc(_grpc(timeout=pb.InferParameter()), 1)),
    ],
    "http-parameter-type": [
        lambda _: _core(
            decode_http(b'{"inputs":[],"parameters":{"priority":"abc"}}', None, "m", 1)[0]
        ),
        lambda _: _core(
            decode_http(b'{"inputs":[],"parameters":{"timeout":null}}', None, "m", 1)[0]
        ),
    ],
    "grpc-contents-overflow": [lambda _: decode_grpc(_int8_contents(), 1)],
    "config-not-utf8": [_config],
    "http-datatype-not-string": [
        lambda _: decode_http(
            b'{"inputs":[{"name":"A","datatype":{},"shape":[1],"data":[1]}]}', None, "m", 1
        ),
    ],
    "config-unknown-enum-value": [_config_enum],
    "config-enum-out-of-range": [
        lambda path: parse_config_text("input { data_type: 2147483648 }", path / "config.pbtxt"),
    ],
    "zero-size-huge-shape": [
        lambda _: decode_grpc(_grpc_tensor("INT32", [0, HUGE, HUGE], b""), 1),
        lambda _: decode_grpc(_grpc_tensor("BYTES", [0, HUGE, HUGE], b""), 1),
        lambda _: decode_grpc(_grpc_tensor("INT32", [0, HUGE, HUGE]), 1),
        lambda _: decode_http(
            b'{"inputs":[{"name":"A","datatype":"FP32","shape":[0,%d,%d],"data":[]}]}'
            % (HUGE, HUGE),
            None,
            "m",
            1,
        ),
    ],
}
# Fixed: their reproducers stay as regression tests (no longer expected to fail), and the
# fuzz targets no longer tolerate them.
FIXED = {
    "config-not-utf8",
    "config-unknown-enum-value",
    "config-enum-out-of-range",
    "http-datatype-not-string",
    "grpc-parameter-type",
    "http-parameter-type",
    "grpc-contents-overflow",
    "zero-size-huge-shape",
}
CASES = [
    pytest.param(
        key,
        index,
        id=f"{key}-{index}",
        marks=() if key in FIXED else pytest.mark.xfail(strict=True),
    )
    for key, calls in REPRODUCERS.items()
    for index in range(len(calls))
]


def test_every_known_bug_has_a_reproducer() -> None:
    assert {bug.key for bug in KNOWN_BUGS} == set(REPRODUCERS) - FIXED


@pytest.mark.parametrize(("key", "index"), CASES)
def test_known_bug_is_rejected_as_invalid_argument(key: str, index: int, tmp_path: Path) -> None:
    with pytest.raises(ServerError) as caught:
        REPRODUCERS[key][index](tmp_path)
    assert caught.value.kind is ErrorKind.INVALID_ARG
