"""The start-up WARNING when explicit model control leaves load/unload open to anyone who can
reach a port (issue 44 item 3): read from the real server's log, once per start, and absent
when loads are refused (none, poll) or guarded (the model-repository group restricted on every
enabled front-end, or bearer tokens required)."""

from __future__ import annotations

from pathlib import Path

import pytest
from testkit.server_process import ServerProcess

WARNING = "--model-control-mode=explicit leaves the model repository API open on"
HTTP_RULE = "--http-restricted-api=model-repository:admin-key=secret"
GRPC_RULE = "--grpc-restricted-protocol=model-repository:admin-key=secret"


def started_log(repo: Path, *args: str) -> str:
    proc = ServerProcess([repo], *args)
    try:
        return proc.log_text()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("empty_repo")


def test_explicit_mode_open_on_both_doors_warns_once(repo: Path) -> None:
    log = started_log(repo, "--model-control-mode=explicit")
    assert log.count(WARNING) == 1, log
    assert f"{WARNING} HTTP and gRPC:" in log
    assert "--auth-token-file" in log


def test_explicit_mode_restricted_on_one_door_names_the_other(repo: Path) -> None:
    log = started_log(repo, "--model-control-mode=explicit", HTTP_RULE)
    assert f"{WARNING} gRPC:" in log, log


@pytest.mark.parametrize(
    "args",
    [
        ("--model-control-mode=explicit", HTTP_RULE, GRPC_RULE),
        ("--model-control-mode=explicit", HTTP_RULE, "--allow-grpc=false"),
        ("--model-control-mode=none",),
        ("--model-control-mode=poll",),
    ],
)
def test_no_warning_when_loads_are_refused_or_restricted(repo: Path, args: tuple[str, ...]) -> None:
    log = started_log(repo, *args)
    assert WARNING not in log, log


def test_no_warning_when_tokens_are_required(repo: Path, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token * admin\n")
    log = started_log(repo, "--model-control-mode=explicit", f"--auth-token-file={tokens}")
    assert WARNING not in log, log
