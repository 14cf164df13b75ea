"""Restart policy of Python stubs (pure, clock injected), the version health it drives, the
execution-timeout parameter and the restart flags."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritium.backends.python.backend import execution_timeout
from tritium.backends.python.supervisor import CrashHistory, RestartPolicy, VersionHealth
from tritium.cli.main import build_parser, options_from_args
from tritium.errors import ErrorKind, ServerError
from tritium.config.model_config import ConfigProblem, ModelConfig
from tritium.config.spec import ModelSpec, build_spec, normalize


def test_back_off_doubles_to_its_cap() -> None:
    history = CrashHistory(RestartPolicy(max_restarts=10, window_s=1000, max_delay_s=0.5))
    delays = [history.crashed(float(t)) for t in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]


def test_gives_up_after_max_restarts_within_the_window() -> None:
    history = CrashHistory(RestartPolicy(max_restarts=2, window_s=60))
    assert history.crashed(0.0) is not None
    assert history.crashed(10.0) is not None
    assert history.crashed(20.0) is None  # the third crash within 60 s
    assert history.recent() == 3


def test_crashes_older_than_the_window_are_forgotten() -> None:
    history = CrashHistory(RestartPolicy(max_restarts=2, window_s=60))
    assert history.crashed(0.0) == 0.1
    assert history.crashed(10.0) == 0.2
    assert history.crashed(65.0) == 0.2  # the first one left the window
    assert history.crashed(200.0) == 0.1  # all forgotten: the back-off starts over


def test_zero_max_restarts_never_restarts() -> None:
    assert CrashHistory(RestartPolicy(max_restarts=0)).crashed(0.0) is None


def test_version_is_unavailable_while_any_instance_is_down() -> None:
    events: list[str] = []
    health = VersionHealth(
        lambda reason: events.append(f"down: {reason}"), lambda: events.append("up")
    )
    health.down("m_0_0", "a died")
    health.down("m_0_1", "b died")
    health.up("m_0_0")
    health.up("m_0_0")  # not down: nothing changes
    health.up("m_0_1")
    assert events == ["down: a died", "down: a died; b died", "down: b died", "up"]


def _spec(parameters: str) -> ModelSpec:
    config = text_format.Parse(
        'name: "m" backend: "python" '
        'input { name: "I" data_type: TYPE_FP32 dims: [1] } '
        'output { name: "O" data_type: TYPE_FP32 dims: [1] } ' + parameters,
        ModelConfig(),
    )
    problem = ConfigProblem("m", None, "")
    normalize(config, "m", problem)
    return build_spec(config, problem)


def test_execution_timeout_parameter() -> None:
    assert execution_timeout(_spec("")) is None
    text = 'parameters { key: "EXECUTION_TIMEOUT_SECS" value: { string_value: "%s" } }'
    assert execution_timeout(_spec(text % "2.5")) == 2.5
    for bad in ("0", "-1", "abc", "", "inf", "nan"):
        with pytest.raises(ServerError) as info:
            execution_timeout(_spec(text % bad))
        assert info.value.kind is ErrorKind.INVALID_ARG
        assert "EXECUTION_TIMEOUT_SECS" in info.value.message


def _options(*flags: str):  # type: ignore[no-untyped-def]
    return options_from_args(
        build_parser().parse_args(["serve", "--model-repository", "r", *flags])
    )


def test_restart_flags() -> None:
    defaults = _options().backends
    assert (defaults.instance_max_restarts, defaults.instance_restart_window_secs) == (5, 60.0)
    backends = _options(
        "--model-instance-max-restarts=0", "--model-instance-restart-window-secs=2.5"
    ).backends
    assert (backends.instance_max_restarts, backends.instance_restart_window_secs) == (0, 2.5)
    for bad in ("--model-instance-max-restarts=-1", "--model-instance-restart-window-secs=0"):
        with pytest.raises(SystemExit):
            _options(bad)
