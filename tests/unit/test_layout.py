"""Repository layout: model directories, numeric version folders, version policies and
duplicate names across repositories (no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritium.config.model_config import ModelConfig
from tritium.repository.layout import (
    ModelId,
    repository_problem,
    repository_text_problem,
    scan,
    select_versions,
    version_dirs,
)


def make_dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True)


# -------------------------------------------------------------------------- version folders


def test_version_dirs_numeric_only(tmp_path: Path) -> None:
    make_dirs(tmp_path, "1", "2", "10", "abc", "v3", "3.5", "-4", "1a")
    (tmp_path / "7").write_text("a file, not a version directory")
    versions = version_dirs(tmp_path)
    assert list(versions) == [1, 2, 10]
    assert versions[10] == tmp_path / "10"


def test_version_dirs_zero_prefixed_ignored(tmp_path: Path) -> None:
    make_dirs(tmp_path, "0", "01", "007", "5")
    assert list(version_dirs(tmp_path)) == [5]


def test_version_dirs_sorted_numerically(tmp_path: Path) -> None:
    make_dirs(tmp_path, "9", "100", "20")
    assert list(version_dirs(tmp_path)) == [9, 20, 100]


def test_version_dirs_none(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text("")
    assert version_dirs(tmp_path) == {}


# -------------------------------------------------------------------------- version policy


def policy(text: str) -> ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(text, ModelConfig())


@pytest.mark.parametrize(
    ("config_text", "available", "expected"),
    [
        ("", [1, 2, 3], [3]),  # no policy: latest 1
        ("version_policy: { latest: { num_versions: 1 } }", [3, 1, 2], [3]),
        ("version_policy: { latest: { num_versions: 2 } }", [1, 2, 3], [2, 3]),
        ("version_policy: { latest: { num_versions: 5 } }", [1, 2, 3], [1, 2, 3]),
        ("version_policy: { latest: { num_versions: 2 } }", [1, 10, 9], [9, 10]),
        ("version_policy: { all: {} }", [3, 1, 2], [1, 2, 3]),
        ("version_policy: { specific: { versions: [ 1, 3 ] } }", [1, 2, 3], [1, 3]),
        ("version_policy: { specific: { versions: [ 3, 4 ] } }", [1, 2, 3], [3]),
        ("version_policy: { specific: { versions: [ 7 ] } }", [1, 2, 3], []),
        ("", [], []),
        ("version_policy: { all: {} }", [], []),
    ],
)
def test_select_versions(config_text: str, available: list[int], expected: list[int]) -> None:
    assert select_versions(policy(config_text), available) == expected


# ------------------------------------------------------------------------- repository scan


def test_scan_models_across_repositories(tmp_path: Path) -> None:
    make_dirs(tmp_path / "a", "m1", "m2", ".hidden")
    make_dirs(tmp_path / "b", "m3")
    (tmp_path / "a" / "README.md").write_text("not a model")
    locations = scan([tmp_path / "a", tmp_path / "b"])
    assert sorted(k.name for k in locations) == ["m1", "m2", "m3"]
    assert all(k.namespace == "" for k in locations)
    assert locations[ModelId("", "m1")].path == tmp_path / "a" / "m1"
    assert locations[ModelId("", "m3")].path == tmp_path / "b" / "m3"
    assert all(loc.problem == "" for loc in locations.values())


def test_scan_duplicate_names_are_unavailable(tmp_path: Path) -> None:
    make_dirs(tmp_path / "a", "dup", "only_a")
    make_dirs(tmp_path / "b", "dup", "only_b")
    locations = scan([tmp_path / "a", tmp_path / "b"])
    dup = locations[ModelId("", "dup")]
    assert dup.path is None
    assert "dup" in dup.problem
    assert str(tmp_path / "a") in dup.problem
    assert str(tmp_path / "b") in dup.problem
    assert locations[ModelId("", "only_a")].path == tmp_path / "a" / "only_a"
    assert locations[ModelId("", "only_b")].path == tmp_path / "b" / "only_b"


def test_scan_missing_repository_is_skipped(tmp_path: Path) -> None:
    make_dirs(tmp_path / "a", "m1")
    locations = scan([tmp_path / "missing", tmp_path / "a"])
    assert list(locations) == [ModelId("", "m1")]


def test_same_repository_given_twice_is_not_a_duplicate(tmp_path: Path) -> None:
    """tritonserver keeps --model-repository paths in a set: repeating one path is harmless."""
    from tritium.cli.main import build_parser, options_from_args

    make_dirs(tmp_path / "a", "m1")
    repo = str(tmp_path / "a")
    args = build_parser().parse_args(
        ["serve", "--model-repository", repo, "--model-repository", repo]
    )
    locations = scan(list(options_from_args(args).repository.paths))
    assert locations[ModelId("", "m1")].path == tmp_path / "a" / "m1"
    assert locations[ModelId("", "m1")].problem == ""


def test_scan_with_namespacing_keeps_each_repository_copy(tmp_path: Path) -> None:
    """--model-namespacing: each repository is a namespace (its path); a name in two of them
    is two models, each loadable."""
    make_dirs(tmp_path / "a", "dup", "only_a")
    make_dirs(tmp_path / "b", "dup")
    locations = scan([tmp_path / "a", tmp_path / "b"], namespacing=True)
    a, b = str((tmp_path / "a").resolve()), str((tmp_path / "b").resolve())
    assert sorted(locations) == sorted([ModelId(a, "dup"), ModelId(a, "only_a"), ModelId(b, "dup")])
    assert locations[ModelId(b, "dup")].path == (tmp_path / "b" / "dup").resolve()
    assert locations[ModelId(b, "dup")].key == ModelId(b, "dup")
    assert all(loc.problem == "" for loc in locations.values())


# ------------------------------------------------------- --model-repository paths at start


def test_a_directory_is_a_repository(tmp_path: Path) -> None:
    assert repository_problem(tmp_path) == ""


def test_a_missing_path_fails_to_stat(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert repository_problem(missing) == (
        f"failed to stat file {missing}: No such file or directory"
    )


def test_a_file_is_not_a_valid_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert repository_problem(tmp_path / "f") == "repository path is not a valid directory"


@pytest.mark.parametrize("text", ["s3://b/m", "gs://b/m", "as://a/c/m", "S3://B/M"])
def test_cloud_urls_are_not_local_paths(text: str) -> None:
    assert "cloud model repositories" in repository_text_problem(text)


@pytest.mark.parametrize("text", ["/models", "models", "./s3://odd", "s3:/folded"])
def test_local_looking_text_is_left_to_the_path_check(text: str) -> None:
    assert repository_text_problem(text) == ""


def test_an_empty_path_is_refused() -> None:
    assert repository_text_problem("") == "the path is empty"
