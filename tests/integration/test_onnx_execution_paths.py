"""ONNX executions forced to the instance thread (``TRITIUM_ONNX_EXECUTION=thread``, the
benchmarks' knob of backends/inline_policy.py) answer right, one at a time and when requests
queue up behind a busy instance (a group goes to the thread in one hand-off); an unknown value
fails the model's load (and so the start) with a message naming the choices, as does a bad
GIL switch interval (``TRITIUM_SWITCH_INTERVAL_US``, which the thread server sets). Both
protocols."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio

from testkit.server_process import ServerProcess

ENV = "TRITIUM_ONNX_EXECUTION"
SWITCH_ENV = "TRITIUM_SWITCH_INTERVAL_US"


def _start(repo: Path, mode: str, switch: str = "") -> ServerProcess:
    saved = {name: os.environ.get(name) for name in (ENV, SWITCH_ENV)}
    os.environ[ENV] = mode  # the server inherits it (read when a model loads)
    os.environ[SWITCH_ENV] = switch
    try:
        return ServerProcess(
            [repo], "--model-control-mode", "explicit", "--load-model", "simple",
            "--strict-readiness=false",
        )  # fmt: skip
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def thread_server(example_repo: Path) -> Iterator[ServerProcess]:
    proc = _start(example_repo, "thread", switch="100")
    yield proc
    proc.stop()


def _inputs(mod: object, seed: int) -> tuple[list[object], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-100, 100, (1, 16), dtype=np.int32)
    b = rng.integers(-100, 100, (1, 16), dtype=np.int32)
    ins = [mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")]  # type: ignore[attr-defined]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return ins, a, b


async def _many(protocol: str, url: str, count: int) -> int:
    mod = httpaio if protocol == "http" else grpcaio
    client = mod.InferenceServerClient(url)
    try:

        async def one(seed: int) -> bool:
            ins, a, b = _inputs(mod, seed)
            result = await client.infer("simple", ins)
            return bool(
                np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                and np.array_equal(result.as_numpy("OUTPUT1"), a - b)
            )

        answers = await asyncio.gather(*(one(seed) for seed in range(count)))
    finally:
        await client.close()
    return sum(answers)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_thread_path_answers_right_under_concurrency(
    thread_server: ServerProcess, protocol: str
) -> None:
    assert asyncio.run(_many(protocol, thread_server.url(protocol), 1)) == 1
    assert asyncio.run(_many(protocol, thread_server.url(protocol), 64)) == 64


def test_an_unknown_mode_fails_the_load(example_repo: Path) -> None:
    """The start-up load fails, so the server does not start (--exit-on-error, the default)
    and says why."""
    with pytest.raises(RuntimeError) as caught:
        _start(example_repo, "fastest").stop()
    text = str(caught.value)
    assert "simple version 1" in text and ENV in text
    assert "auto, inline, thread" in text and "'fastest'" in text


def test_a_bad_switch_interval_fails_the_load(example_repo: Path) -> None:
    with pytest.raises(RuntimeError) as caught:
        _start(example_repo, "auto", switch="0.5").stop()
    text = str(caught.value)
    assert "simple version 1" in text and SWITCH_ENV in text and "'0.5'" in text
