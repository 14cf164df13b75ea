"""Model names, version strings and ``file:`` keys as the core accepts them (no sockets):
what could reach a filesystem path is one safe component, and only ASCII digits are versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.repository.layout import version_dirs
from tritium.repository.names import (
    check_model_name,
    check_override_key,
    is_version_dir,
    version_from_string,
)

TRAVERSAL = "must not contain path traversal characters"
STOL = "(details: stol), version should be an integral value > 0"


def refused(call, *args: str) -> str:
    with pytest.raises(ServerError) as info:
        call(*args)
    assert info.value.kind is ErrorKind.INVALID_ARG
    return info.value.message


# ------------------------------------------------------------------------------ model names


@pytest.mark.parametrize(
    "name",
    ["simple", "add_sub_python", "a.b", "...", "a..b", "name with spaces", "ünïcødé", "x" * 255],
)
def test_good_names_pass(name: str) -> None:
    check_model_name(name)


@pytest.mark.parametrize("name", ["", " ", "\t "])
def test_empty_name_refused_with_triton_message(name: str) -> None:
    message = refused(check_model_name, name)
    assert message == "Model name cannot be empty. Please enter a valid name to deploy."


@pytest.mark.parametrize(
    "name", [".", "..", "a/b", "/abs", "../../../../outside/x", "a\\b", "..\\x", "x/"]
)
def test_traversal_names_refused_with_triton_message(name: str) -> None:
    message = refused(check_model_name, name)
    assert message == f"invalid model name '{name}', model name {TRAVERSAL}"


@pytest.mark.parametrize("name", ["a\x00b", "a\nb", "\x1b[31m", "tab\there", "del\x7f", "c1\x85"])
def test_control_characters_refused_and_escaped_in_the_message(name: str) -> None:
    message = refused(check_model_name, name)
    assert "must not contain control characters" in message
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in message), message


def test_long_names_refused_by_utf8_bytes_and_echo_is_bounded() -> None:
    assert "at most 255 bytes" in refused(check_model_name, "x" * 256)
    message = refused(check_model_name, "é" * 128)  # 128 characters, 256 bytes
    assert "at most 255 bytes" in message
    assert len(refused(check_model_name, "y" * 100_000)) < 200


# ----------------------------------------------------------------------------- file: keys


@pytest.mark.parametrize(
    ("key", "relative"),
    [
        ("file:1/model.py", "1/model.py"),
        ("file:labels.txt", "labels.txt"),
        ("file:1/a/b/c", "1/a/b/c"),
    ],
)
def test_good_override_keys(key: str, relative: str) -> None:
    assert check_override_key(key) == relative


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("file:", "must be relative to the model directory"),
        ("file:/etc/passwd", "must be relative to the model directory"),
        ("file:../x.py", TRAVERSAL),
        ("file:1/../../x.py", TRAVERSAL),
        ("file:./1/model.py", TRAVERSAL),
        ("file:1\\..\\x", TRAVERSAL),
        ("file:1//model.py", "must not have an empty component"),
        ("file:1/", "must not have an empty component"),
        ("file:1/a\x00b.py", "must not contain control characters"),
        ("file:1/" + "x" * 256, "must be at most 255 bytes long"),
        ("file:" + "/".join(["d" * 200] * 21), "must be at most 4096 bytes long"),
    ],
)
def test_bad_override_keys(key: str, problem: str) -> None:
    message = refused(check_override_key, key)
    assert message.startswith("Invalid file parameter '")
    assert message.endswith(f"the path {problem}"), message
    assert "\x00" not in message


# ------------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("text", "version"), [("", -1), ("0", 0), ("1", 1), ("0042", 42), ("0" * 5000 + "7", 7)]
)
def test_ascii_versions(text: str, version: int) -> None:
    assert version_from_string(text) == version


@pytest.mark.parametrize(
    "text",
    ["²", "١", "۳", "１", "1²", "abc", "1.5", " 1", "1 ", "+1", "1_0", "-", str(2**63), "9" * 5000],
)
def test_only_ascii_digits_are_versions(text: str) -> None:
    message = refused(version_from_string, text)
    assert message.startswith("failed to get model version from specified version string '")
    assert message.endswith(STOL)


def test_negative_version_message() -> None:
    message = refused(version_from_string, "-3")
    assert message == (
        "invalid model version specified '-3' , version should be an integral value > 0"
    )


@pytest.mark.parametrize(
    ("name", "ok"), [("1", True), ("10", True), ("01", False), ("²", False), ("١", False)]
)
def test_is_version_dir(name: str, ok: bool) -> None:
    assert is_version_dir(name) is ok


def test_version_dirs_ignore_non_ascii_digits(tmp_path: Path) -> None:
    for name in ("2", "١", "²", "３"):
        (tmp_path / name).mkdir()
    assert list(version_dirs(tmp_path)) == [2]
