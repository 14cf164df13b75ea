"""Broken ensembles over the real server, both protocols: each one is UNAVAILABLE in the
repository index with a reason naming the ensemble, the step and the tensor, inference on it
gets Triton's error for a model with no ready version, and nothing else is taken down with it
(the good ensemble and the composing models keep serving).

One server (``--exit-on-error=false``) over a repository of the test models ``identity_int32``,
``identity_fp32`` and ``bad_init`` (its ``initialize`` raises) plus the ensembles below; the
ensembles that depend on themselves (``loop_a`` <-> ``loop_b``, ``self_ens``) get a server of
their own, with ``good_ens``.
Triton's messages: core ``model_config_utils.cc`` (ValidateEnsembleSchedulingConfig),
``ensemble_utils.cc`` (ValidateEnsembleConfig), ``model_repository_manager.cc`` (circular
dependencies, composing models that are not available) and ``model_lifecycle.cc`` (GetModel).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.clients import client, make_input
from tests.support.models import build_test_repository
from testkit.server_process import ServerProcess
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 30.0
I32 = "TYPE_INT32"
F32 = "TYPE_FP32"
ID32 = "identity_int32"
IDF32 = "identity_fp32"
COMPOSING = (ID32, IDF32, "bad_init")

Io = tuple[str, str, list[int]]
Step = tuple[str, dict[str, str], dict[str, str]]


def _io(kind: str, entries: Iterable[Io]) -> str:
    blocks = [f'{{ name: "{n}" data_type: {t} dims: {list(d)} }}' for n, t, d in entries]
    return f"{kind} [ {', '.join(blocks)} ]\n"


def _ensemble_config(name: str, steps: list[Step], inputs: list[Io], outputs: list[Io]) -> str:
    text = f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
    text += _io("input", inputs) + _io("output", outputs)
    rendered = []
    for model, ins, outs in steps:
        maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in ins.items()]
        maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outs.items()]
        rendered.append(f'{{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}')
    return text + f"ensemble_scheduling {{ step [ {', '.join(rendered)} ] }}\n"


def ident(model: str, src: str, dst: str) -> Step:
    return (model, {"INPUT0": src}, {"OUTPUT0": dst})


X = [("X", I32, [-1])]
Y = [("Y", I32, [-1])]

# name -> (steps, inputs, outputs)
ENSEMBLES: dict[str, tuple[list[Step], list[Io], list[Io]]] = {
    "good_ens": ([ident(ID32, "X", "t"), ident(ID32, "t", "Y")], X, Y),
    "cycle_ens": (
        [ident(ID32, "u", "v"), ident(ID32, "v", "u"), ident(ID32, "X", "Y")],
        X,
        Y,
    ),
    "unknown_ens": ([ident(ID32, "X", "t"), ident("no_such_model", "t", "Y")], X, Y),
    "unused_input_ens": ([ident(ID32, "X", "Y")], [*X, ("X2", I32, [-1])], Y),
    "unwritten_ens": ([ident(ID32, "X", "Y")], X, [*Y, ("Z", I32, [-1])]),
    "written_twice_ens": ([ident(ID32, "X", "Y"), ident(ID32, "X", "Y")], X, Y),
    "dtype_ens": (
        [ident(ID32, "X", "t"), ident(IDF32, "t", "Y")],
        X,
        [("Y", F32, [-1])],
    ),
    "shape_ens": ([ident(ID32, "X", "Y")], [("X", I32, [2, 2])], Y),
    "bad_init_ens": ([ident("bad_init", "X", "Y")], [("X", F32, [-1])], [("Y", F32, [-1])]),
    # circular dependencies between ensembles (served by a server of their own)
    "loop_a": ([ident("loop_b", "X", "Y")], X, Y),
    "loop_b": ([ident("loop_a", "X", "Y")], X, Y),
    "self_ens": ([ident("self_ens", "X", "Y")], X, Y),
}
CIRCULAR = ("loop_a", "loop_b", "self_ens")

# broken ensemble -> fragments its UNAVAILABLE reason must contain
BROKEN: dict[str, tuple[str, ...]] = {
    "cycle_ens": (
        "in ensemble cycle_ens, the steps form a cycle",
        f"step 0 (model '{ID32}') reads 'u' from step 1 (model '{ID32}') reads 'v' from step 0",
    ),
    "unknown_ens": (
        "ensemble unknown_ens contains models that are not available or ambiguous: no_such_model",
        "'no_such_model' which is not loaded",
    ),
    "unused_input_ens": ("ensemble input 'X2' for ensemble 'unused_input_ens' is not used",),
    "unwritten_ens": ("output 'Z' for ensemble 'unwritten_ens' is not written by any step",),
    "written_twice_ens": (
        "ensemble tensor 'Y' can appear in an output map only once for ensemble "
        f"'written_twice_ens' step 1 (model '{ID32}')",
    ),
    "dtype_ens": (
        f"in ensemble dtype_ens, step 1 (model '{IDF32}'): ensemble tensor t: inconsistent data "
        f"type: TYPE_INT32 is inferred from model {ID32} while TYPE_FP32 is inferred from "
        f"model {IDF32}",
    ),
    "shape_ens": (
        f"in ensemble shape_ens, step 0 (model '{ID32}'): ensemble tensor X: inconsistent shape: "
        f"[2,2] is inferred from ensemble 'shape_ens' while [-1] is inferred from model {ID32}",
    ),
    "bad_init_ens": (
        "ensemble bad_init_ens contains models that are not available or ambiguous: bad_init",
        "init failed on purpose",  # why bad_init itself failed
    ),
}


def write_repository(root: Path, names: Iterable[str]) -> Path:
    """The composing test models plus the ensembles ``names`` (each with an empty ``1/``)."""
    repo = build_test_repository(root, COMPOSING)
    for name in names:
        steps, inputs, outputs = ENSEMBLES[name]
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            _ensemble_config(name, steps, inputs, outputs), encoding="utf-8"
        )
    return repo


def start_server(repo: Path) -> ServerProcess:
    try:
        return ServerProcess([repo], "--exit-on-error=false", "--strict-readiness=false")
    except RuntimeError as exc:  # the log can be huge: keep its last line
        last = str(exc).strip().splitlines()[-1]
        pytest.fail(f"the server did not start: {last[:500]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    names = [n for n in ENSEMBLES if n not in CIRCULAR]
    proc = start_server(write_repository(tmp_path_factory.mktemp("ensembles") / "repo", names))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def circular_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Ensembles that depend on themselves, apart: they must not take a server down."""
    root = tmp_path_factory.mktemp("circular") / "repo"
    proc = start_server(write_repository(root, [*CIRCULAR, "good_ens"]))
    yield proc
    proc.stop()


def open_client(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return client(protocol, server.http_url, network_timeout=TIMEOUT_S)
    return client(protocol, server.grpc_url)


@pytest.fixture
def conn(server: ServerProcess, protocol: str) -> Iterator[Any]:
    c = open_client(server, protocol)
    yield c
    c.close()


def index(c: Any, protocol: str) -> dict[str, dict[str, Any]]:
    rows = (
        c.get_model_repository_index()
        if protocol == "http"
        else c.get_model_repository_index(as_json=True).get("models", [])
    )
    by_name: dict[str, dict[str, Any]] = {}
    for row in rows:
        assert row["name"] not in by_name, f"one row per model expected here: {rows}"
        by_name[row["name"]] = row
    return by_name


def infer(c: Any, protocol: str, model: str, data: np.ndarray, version: str = "") -> Any:
    """``data`` as the model's only input: ``X`` for the ensembles, ``INPUT0`` otherwise."""
    name = "INPUT0" if model in COMPOSING else "X"
    datatype = "FP32" if data.dtype == np.float32 else "INT32"
    kwargs: dict[str, Any] = {"model_version": version}
    if protocol == "grpc":
        kwargs["client_timeout"] = TIMEOUT_S
    return c.infer(model, [make_input(protocol, name, data, datatype)], **kwargs)


# --------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_ensemble_is_unavailable_with_its_reason(
    conn: Any, protocol: str, name: str
) -> None:
    row = index(conn, protocol)[name]
    assert row.get("state") == "UNAVAILABLE", row
    reason = row.get("reason", "")
    for fragment in BROKEN[name]:
        assert fragment in reason, f"{fragment!r} missing from {name}'s reason: {reason}"
    assert not conn.is_model_ready(name)


def test_good_ensemble_and_composing_models_serve(conn: Any, protocol: str) -> None:
    rows = index(conn, protocol)
    for name in ("good_ens", ID32, IDF32):
        assert rows[name].get("state") == "READY", rows[name]
        assert conn.is_model_ready(name)
    data = np.arange(5, dtype=np.int32)
    np.testing.assert_array_equal(infer(conn, protocol, "good_ens", data).as_numpy("Y"), data)
    np.testing.assert_array_equal(infer(conn, protocol, ID32, data).as_numpy("OUTPUT0"), data)
    fp = np.linspace(0, 1, 4, dtype=np.float32)
    np.testing.assert_array_equal(infer(conn, protocol, IDF32, fp).as_numpy("OUTPUT0"), fp)


def test_composing_model_that_fails_to_load_is_unavailable(conn: Any, protocol: str) -> None:
    row = index(conn, protocol)["bad_init"]
    assert row.get("state") == "UNAVAILABLE", row
    assert "init failed on purpose" in row.get("reason", ""), row


@pytest.mark.parametrize("name", ["cycle_ens", "unknown_ens", "dtype_ens", "bad_init_ens"])
def test_infer_on_broken_ensemble_has_no_available_versions(
    conn: Any, protocol: str, name: str
) -> None:
    """Triton (model_lifecycle.cc GetModel): NOT_FOUND ``Request for unknown model: '<m>' has no
    available versions`` for the latest version of a model that failed to load."""
    data = np.ones(4, dtype=np.float32 if name == "bad_init_ens" else np.int32)
    with pytest.raises(InferenceServerException) as info:
        infer(conn, protocol, name, data)
    message = info.value.message()
    assert f"Request for unknown model: '{name}' has no available versions" in message, message
    assert info.value.status() == ("404" if protocol == "http" else "StatusCode.NOT_FOUND")


def test_infer_on_broken_ensemble_version_is_not_ready(conn: Any, protocol: str) -> None:
    """Triton: UNAVAILABLE ``... '<m>' version 1 is not at ready state`` for a named version
    that failed to load."""
    with pytest.raises(InferenceServerException) as info:
        infer(conn, protocol, "dtype_ens", np.ones(4, dtype=np.int32), version="1")
    message = info.value.message()
    assert "Request for unknown model: 'dtype_ens' version 1 is not at ready state" in message
    assert info.value.status() == ("503" if protocol == "http" else "StatusCode.UNAVAILABLE")


def test_circular_dependency_between_ensembles(
    circular_server: ServerProcess, protocol: str
) -> None:
    """Triton (model_repository_manager.cc): ``circular dependency between ensembles: ...``;
    the ensembles in the cycle are UNAVAILABLE, the rest of the repository serves."""
    c = open_client(circular_server, protocol)
    try:
        rows = index(c, protocol)
        for name in CIRCULAR:
            assert rows[name].get("state") == "UNAVAILABLE", rows[name]
            reason = rows[name].get("reason", "")
            assert "circular dependency between ensembles" in reason, reason
            assert name in reason, reason
        for name in ("loop_a", "loop_b"):  # the walk, whichever end it was found from
            reason = rows[name]["reason"]
            assert "loop_a -> loop_b" in reason or "loop_b -> loop_a" in reason, reason
        data = np.arange(3, dtype=np.int32)
        np.testing.assert_array_equal(infer(c, protocol, "good_ens", data).as_numpy("Y"), data)
    finally:
        c.close()
