"""The ``tritium`` command's first step (cli/entry.py): ``serve``'s --log-file is created
before the server's modules are imported, as Triton's log file appears at once (Triton's
qa/L0_logging log_format_test.py gives it 5 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritium.cli.entry import create_log_file, log_file_argument, main


def test_log_file_argument_reads_both_spellings_and_the_last_wins() -> None:
    assert log_file_argument(["--log-file=/a.log"]) == "/a.log"
    assert log_file_argument(["--model-repository", "/m", "--log-file", "/b.log"]) == "/b.log"
    assert log_file_argument(["--log-file=/a.log", "--log-file", "/b.log"]) == "/b.log"
    assert log_file_argument(["--log-file="]) is None  # empty: the console
    assert log_file_argument(["--log-file"]) is None  # no value: argparse refuses it later
    assert log_file_argument(["--log-format=default", "--", "--log-file=/c.log"]) is None
    assert log_file_argument(["--log-verbose=1"]) is None


def test_create_log_file_creates_appends_and_leaves_errors_to_setup(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    create_log_file([f"--log-file={path}"])
    assert path.exists() and path.read_text() == ""
    path.write_text("a line from before\n")
    create_log_file(["--log-file", str(path)])
    assert path.read_text() == "a line from before\n"  # appended to, never truncated
    missing = tmp_path / "no-such-dir" / "server.log"
    create_log_file([f"--log-file={missing}"])  # no error here: _setup_logging reports it
    assert not missing.parent.exists()


def test_serve_creates_the_log_file_before_refusing_a_bad_flag(tmp_path: Path) -> None:
    path = tmp_path / "early.log"
    with pytest.raises(SystemExit):
        main(["serve", f"--log-file={path}", "--no-such-flag"])
    assert path.exists()
    other = tmp_path / "other.log"
    with pytest.raises(SystemExit):  # not `serve`: nothing is created
        main(["--version", f"--log-file={other}"])
    assert not other.exists()
