"""What a new user meets at start (issue 21): a start that cannot serve fails at once, with a
message naming the flag and the value, before any model loads.

Triton's behaviour, from its sources: ``ModelRepositoryManager::Create`` checks every
repository path before loading anything, in every model control mode ("failed to stat file
<path>" for a missing one, "repository path is not a valid directory" for a file), and
``main.cc`` exits with "error: creating server: ...".
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from models import build_test_repository
from server_process import server_command

START_TIMEOUT_S = 120.0
MODEL = "identity_fp32"


def run_to_exit(repositories: list[Path | str], *args: str) -> subprocess.CompletedProcess[str]:
    """Start the server and wait for it to exit on its own (a start that must fail). A
    repository given as text goes on the command line as written (``Path`` folds '//')."""
    command = server_command([], *args)
    for repo in reversed(repositories):
        command[4:4] = ["--model-repository", str(repo)]  # after "python -m tritium serve"
    return subprocess.run(
        command, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def good_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("start") / "repo", [MODEL])


# ------------------------------------------------------------- 1. the model repositories


@pytest.mark.parametrize("mode", ["none", "explicit", "poll"])
def test_a_missing_repository_stops_the_start(tmp_path: Path, mode: str) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    done = run_to_exit([missing], f"--model-control-mode={mode}")
    assert done.returncode != 0
    assert f"--model-repository {missing}: failed to stat file {missing}" in done.stderr
    assert "Started HTTPService" not in done.stdout + done.stderr


def test_every_repository_must_exist(good_repo: Path, tmp_path: Path) -> None:
    """Several repositories: one missing stops the start, even in explicit mode with nothing
    to load from it (Triton checks each path)."""
    missing = tmp_path / "gone"
    done = run_to_exit(
        [good_repo, missing], "--model-control-mode=explicit", "--load-model", MODEL
    )
    assert done.returncode != 0
    assert f"--model-repository {missing}: failed to stat file" in done.stderr
    assert "successfully loaded" not in done.stdout + done.stderr


def test_a_file_is_not_a_repository(tmp_path: Path) -> None:
    a_file = tmp_path / "models.txt"
    a_file.write_text("not a directory")
    done = run_to_exit([a_file])
    assert done.returncode != 0
    assert f"--model-repository {a_file}: repository path is not a valid directory" in (
        done.stderr
    )


@pytest.mark.parametrize("url", ["s3://bucket/models", "gs://bucket/models", "as://acct/c/m"])
def test_cloud_repositories_are_refused(url: str) -> None:
    done = run_to_exit([url])
    assert done.returncode != 0
    assert f"--model-repository {url}: cloud model repositories" in done.stderr
    assert "not supported by tritium" in done.stderr
    assert "local directories only" in done.stderr
