"""The log settings' logic (issue 15 item 2): Triton's layouts, the level filter following the
settings live, where records go, the logging extension's checks with Triton's texts per
protocol, the start-up table's layout, and run-time levels reaching running stubs."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tritium.backends.python import ipc
from tritium.backends.python.observer import ModelLogLevels
from tritium.cli.main import _setup_logging, build_parser, options_from_args
from tritium.errors import ErrorKind, ServerError
from tritium.logs.settings import (
    ESCAPE_VARIABLE,
    LevelFilter,
    about_model,
    escape_message,
    LogSettings,
    LogUpdate,
    TritonFormatter,
    TritonHandler,
    grpc_update,
    http_update,
    raw_message,
)
from tritium.logs.table import model_table, render_table


def _record(level: int, message: str = "msg", created: float = 1_700_000_000.25) -> Any:
    record = logging.LogRecord("tritium", level, "/x/server.py", 12, message, (), None)
    record.created = created
    record.process = 4242
    return record


# ----------------------------------------------------------------------------- layouts


def test_default_and_iso8601_layouts_follow_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ESCAPE_VARIABLE, raising=False)  # the default: messages escaped
    settings = LogSettings()
    formatter = TritonFormatter(settings)
    # 1_700_000_000.25 is 2023-11-14 22:13:20.25 UTC
    assert formatter.format(_record(logging.WARNING)) == (
        'W1114 22:13:20.250000 4242 server.py:12] "msg"'
    )
    settings.apply(LogUpdate(format="ISO8601"))
    assert formatter.format(_record(logging.WARNING)) == (
        '2023-11-14T22:13:20Z W 4242 server.py:12] "msg"'
    )
    assert formatter.format(_record(logging.DEBUG)).startswith("2023-11-14T22:13:20Z I ")
    assert formatter.format(_record(logging.CRITICAL)).startswith("2023-11-14T22:13:20Z E ")


def test_escape_message_follows_rapidjson() -> None:
    # Triton 2.51 writes each message through TritonJson::SerializeString (rapidjson)
    assert escape_message('say "hi"\\now') == '"say \\"hi\\"\\\\now"'
    assert escape_message("a\nb\tc\rd\be\ff") == '"a\\nb\\tc\\rd\\be\\ff"'
    control = "\u001b[31mred\u0007\x00end\x1f"
    assert escape_message(control) == '"\\u001B[31mred\\u0007\\u0000end\\u001F"'
    assert escape_message("del \x7f, é, ✓ and /") == '"del \x7f, é, ✓ and /"'  # as they are
    lone = escape_message("bad \udc80")
    lone.encode("utf-8")  # writable to a UTF-8 file
    for text in ('say "hi"\\now', control, "del \x7f, é", "bad \udc80", "\n[fake] record\n"):
        escaped = escape_message(text)
        assert "\n" not in escaped and json.loads(escaped) == text


def test_messages_are_escaped_unless_the_variable_is_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    injected = _record(logging.ERROR, 'input "\nI0205 18:34:18.707423 1 file.cc:123] forged"')
    monkeypatch.delenv(ESCAPE_VARIABLE, raising=False)
    for form in ("default", "ISO8601"):
        line = TritonFormatter(LogSettings(format=form)).format(injected)
        assert len(line.splitlines()) == 1
        assert json.loads(line.split("] ", 1)[1]) == injected.getMessage()
    for value in ("1", "", "false", "00"):  # only "0" turns it off, as in Triton
        monkeypatch.setenv(ESCAPE_VARIABLE, value)
        assert TritonFormatter(LogSettings()).format(_record(logging.INFO)).endswith('] "msg"')
    monkeypatch.setenv(ESCAPE_VARIABLE, "0")
    settings = LogSettings(format="ISO8601")
    raw = TritonFormatter(settings).format(injected)
    assert raw.endswith('] input "\nI0205 18:34:18.707423 1 file.cc:123] forged"')
    settings.apply(LogUpdate(format="json"))  # tritium's json layout is JSON either way
    assert json.loads(TritonFormatter(settings).format(injected))["message"] == (
        injected.getMessage()
    )


def test_tables_are_written_unescaped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ESCAPE_VARIABLE, raising=False)
    table = model_table([{"name": "simple", "version": "1", "state": "READY"}])
    record = _record(logging.INFO, "%s")
    record.args = (table,)
    record.__dict__.update(raw_message())
    line = TritonFormatter(LogSettings()).format(record)
    assert line == "I1114 22:13:20.250000 4242 server.py:12] " + table
    assert "| simple | 1       | READY  |" in line.splitlines()


def test_json_layout_is_one_object_per_record() -> None:
    settings = LogSettings(format="json")
    formatter = TritonFormatter(settings)
    record = _record(logging.INFO, "loaded")
    record.__dict__.update(about_model("add_sub"))
    line = formatter.format(record)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2023-11-14T22:13:20.250000Z",
        "level": "INFO",
        "pid": 4242,
        "file": "server.py",
        "line": 12,
        "model": "add_sub",
        "message": "loaded",
    }
    levels = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
    assert [json.loads(formatter.format(_record(level)))["level"] for level in levels] == [
        "VERBOSE",
        "INFO",
        "WARNING",
        "ERROR",
        "ERROR",
    ]
    assert json.loads(formatter.format(_record(logging.INFO)))["model"] is None
    settings.apply(LogUpdate(format="default"))  # the next record follows the settings
    assert formatter.format(_record(logging.INFO)).startswith("I1114 22:13:20.250000 4242 ")


def test_json_keeps_tracebacks_and_odd_text_inside_the_object() -> None:
    formatter = TritonFormatter(LogSettings(format="json"))
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("tritium", logging.ERROR, "/x/m.py", 3, "a\nb", (), exc_info)
    line = formatter.format(record)
    assert len(line.splitlines()) == 1
    message = json.loads(line)["message"]
    assert message.startswith("a\nb\nTraceback (most recent call last):\n")
    assert message.endswith("ValueError: boom")
    odd = _record(logging.WARNING, 'quote " and \udc80 surrogate\ttab')
    assert json.loads(formatter.format(odd))["message"] == 'quote " and \udc80 surrogate\ttab'


def test_level_filter_follows_run_time_changes() -> None:
    settings = LogSettings()
    keep = LevelFilter(settings=settings)
    levels = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)
    assert [keep.filter(_record(level)) for level in levels] == [True, True, True, True]
    settings.apply(LogUpdate(info=False, error=False))
    assert [keep.filter(_record(level)) for level in levels] == [True, False, True, False]


def test_settings_answer_tritons_keys_and_model_levels() -> None:
    settings = LogSettings("/var/log/t.log", (True, False, True), 0, "default")
    assert settings.as_dict() == {
        "log_file": "/var/log/t.log",
        "log_info": True,
        "log_warning": False,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    assert settings.model_levels() == (True, False, True, False)
    settings.apply(LogUpdate(verbose=1 << 40, warning=True))
    assert settings.as_dict()["log_verbose_level"] == (1 << 31) - 1  # Triton's int32
    assert settings.model_levels() == (True, True, True, True)
    with pytest.raises(ValueError):
        LogSettings(format="xml")


# ----------------------------------------------------------------------------- handler


def test_console_records_go_where_tritons_go(capsys: pytest.CaptureFixture[str]) -> None:
    handler = TritonHandler(LogSettings())
    handler.handle(_record(logging.INFO, "to stdout"))
    handler.handle(_record(logging.DEBUG, "verbose to stdout"))
    handler.handle(_record(logging.WARNING, "to stderr"))
    handler.handle(_record(logging.ERROR, "also to stderr"))
    out, err = capsys.readouterr()
    assert re.findall(r"\] (.*)", out) == ["to stdout", "verbose to stdout"]
    assert re.findall(r"\] (.*)", err) == ["to stderr", "also to stderr"]


def test_log_file_is_appended_and_takes_every_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.log"
    path.write_text("earlier\n")
    settings = LogSettings(str(path), (True, False, True))
    handler = TritonHandler(settings)
    for level, text in ((logging.INFO, "i"), (logging.WARNING, "w"), (logging.ERROR, "e")):
        handler.handle(_record(level, text))
    handler.close()
    assert re.findall(r"\] (.*)", path.read_text()) == ["i", "e"]  # warnings are off
    assert path.read_text().startswith("earlier\n")
    assert capsys.readouterr() == ("", "")


def test_unopenable_log_file_is_an_error_at_start(tmp_path: Path) -> None:
    root = logging.getLogger()
    handlers = list(root.handlers)
    missing = tmp_path / "missing" / "t.log"
    args = build_parser().parse_args(["serve", "--model-repository", "r", f"--log-file={missing}"])
    with pytest.raises(SystemExit, match="failed to open log file .*No such file"):
        _setup_logging(options_from_args(args))
    assert root.handlers == handlers  # nothing was installed


def test_log_flags_reach_the_options() -> None:
    args = build_parser().parse_args(
        ["serve", "--model-repository", "r", "--log-format", "ISO8601", "--log-file", "x.log"]
    )
    options = options_from_args(args)
    assert (options.logging.format, options.logging.file) == ("ISO8601", "x.log")
    defaults = options_from_args(build_parser().parse_args(["serve", "--model-repository", "r"]))
    assert (defaults.logging.format, defaults.logging.file) == ("default", "")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--model-repository", "r", "--log-format=iso8601"])
    json_args = build_parser().parse_args(["serve", "--model-repository", "r", "--log-format=json"])
    assert options_from_args(json_args).logging.format == "json"


# ----------------------------------------------------------------- the extension's checks


def _refused(parse: Any, body: Any) -> tuple[ErrorKind, str]:
    with pytest.raises(ServerError) as caught:
        parse(body)
    return caught.value.kind, caught.value.message


def test_http_update_accepts_and_skips_nulls() -> None:
    assert http_update({}) == LogUpdate()
    assert http_update({"log_file": None, "log_info": None, "other": 1}) == LogUpdate()
    assert http_update(
        {
            "log_info": False,
            "log_warning": True,
            "log_error": False,
            "log_verbose_level": 2,
            "log_format": "ISO8601",
        }
    ) == LogUpdate(False, True, False, 2, "ISO8601")
    assert http_update({"log_format": "json"}) == LogUpdate(format="json")


@pytest.mark.parametrize(
    ("body", "kind", "text"),
    [
        (
            {"log_file": ""},
            ErrorKind.UNSUPPORTED,
            "log file location can not be updated through network protocol",
        ),
        ({"log_warning": 0}, ErrorKind.INTERNAL, "attempt to access JSON non-boolean as boolean"),
        (
            {"log_verbose_level": True},
            ErrorKind.INTERNAL,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"log_verbose_level": 1 << 64},
            ErrorKind.INTERNAL,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"log_format": ["default"]},
            ErrorKind.INTERNAL,
            "attempt to access JSON non-string as string",
        ),
        (
            {"log_format": "iso8601"},
            ErrorKind.UNAVAILABLE,
            "invalid argument for --log_format, got: iso8601",
        ),
        (
            [1],
            ErrorKind.INVALID_ARG,
            "failed to parse the request JSON buffer: expected a JSON object",
        ),
    ],
)
def test_http_update_refusals(body: Any, kind: ErrorKind, text: str) -> None:
    assert _refused(http_update, body) == (kind, text)


def test_grpc_update_checks_the_oneof_case() -> None:
    assert grpc_update({}) == LogUpdate()
    assert grpc_update(
        {
            "log_info": ("bool_param", True),
            "log_verbose_level": ("uint32_param", 4),
            "log_format": ("string_param", "default"),
            "unknown": (None, None),
        }
    ) == LogUpdate(info=True, verbose=4, format="default")
    assert grpc_update({"log_format": ("string_param", "json")}) == LogUpdate(format="json")
    cases = [
        (
            {"log_file": (None, None)},
            ErrorKind.UNSUPPORTED,
            "log file location can not be updated through network protocol",
        ),
        ({"log_error": (None, None)}, ErrorKind.INVALID_ARG, "expect boolean for 'log_error'"),
        (
            {"log_verbose_level": ("bool_param", True)},
            ErrorKind.INVALID_ARG,
            "expect int32 for 'log_verbose_level'",
        ),
        (
            {"log_format": ("uint32_param", 1)},
            ErrorKind.INVALID_ARG,
            "expect string for 'log_format'",
        ),
        (
            {"log_format": ("string_param", "xml")},
            ErrorKind.INVALID_ARG,
            "invalid argument for log_format, got: xml",
        ),
    ]
    for settings, kind, text in cases:
        assert _refused(grpc_update, settings) == (kind, text)


# ----------------------------------------------------------------------------- table


def test_model_table_layout_and_states() -> None:
    index = [
        {"name": "bad", "version": "1", "state": "UNAVAILABLE", "reason": "Internal: boom"},
        {"name": "never_loaded"},  # explicit mode, on disk only: not listed (as Triton)
        {"name": "no_versions", "state": "UNAVAILABLE"},
        {"name": "simple", "version": "1", "state": "READY"},
    ]
    assert model_table(index) == (
        "\n"
        "+-------------+---------+----------------------------------------+\n"
        "| Model       | Version | Status                                 |\n"
        "+-------------+---------+----------------------------------------+\n"
        "| bad         | 1       | UNAVAILABLE: Internal: boom            |\n"
        "| no_versions | -       | Not loaded: No model version was found |\n"
        "| simple      | 1       | READY                                  |\n"
        "+-------------+---------+----------------------------------------+\n"
    )
    border = "+-------+---------+--------+\n"
    assert model_table([]) == f"\n{border}| Model | Version | Status |\n{border}{border}"


def test_table_wider_than_the_terminal_wraps_as_tritons() -> None:
    # 60 columns: 50 to share; "Model" (5) and "Version" (7) keep their width and give
    # the rest to Status: 50 - 5 - 7 = 38 - the fractions Triton's float shares drop = 36.
    table = render_table(("Model", "Version", "Status"), [("m", "1", "x" * 80)], width=60)
    lines = table.splitlines()
    assert lines[1] == "+-------+---------+--------------------------------------+"
    assert lines[4:7] == [
        "| m     | 1       | " + "x" * 36 + " |",
        "|       |         | " + "x" * 36 + " |",
        "|       |         | " + "x" * 8 + " " * 28 + " |",
    ]
    assert "| a     |" in render_table(("Model", "V"), [("a\nb", "1")])  # a cell's own lines


# ----------------------------------------------------------------- levels to the stubs


class _Stub:
    """Stands in for a StubProcess: what ModelLogLevels sends it."""

    def __init__(self, name: str, alive: bool = True) -> None:
        self.name = name
        self.alive = alive
        self.sent: list[tuple[int, Any]] = []

    def send(self, kind: int, body: Any) -> None:
        self.sent.append((kind, body))


def test_level_changes_reach_the_live_stubs_once() -> None:
    levels = ModelLogLevels((True, True, True, False))
    live, dead = _Stub("a_0"), _Stub("b_0", alive=False)
    levels.watch(live)  # type: ignore[arg-type]
    levels.watch(dead)  # type: ignore[arg-type]
    levels.set((True, True, True, False))  # no change: nothing sent
    levels.set((True, True, True, True))
    assert levels.current == (True, True, True, True)
    assert live.sent == [(ipc.LOG_LEVELS, (True, True, True, True))]
    assert dead.sent == []
    del dead
    levels.set((False, True, True, True))  # a collected stub is forgotten
    assert len(live.sent) == 2


@pytest.fixture
def root_restored() -> Any:
    """``install`` replaces the root logger's handlers: put the test runner's back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_http2_libraries_stay_at_warning_whatever_the_verbosity(
    tmp_path: Path, root_restored: logging.Logger
) -> None:
    path = tmp_path / "t.log"
    settings = LogSettings(str(path), verbose=1)
    settings.install()
    logging.getLogger("hpack.hpack").debug("Decoded 5, consumed 1 bytes")
    logging.getLogger("h2.connection").info("h2 internals")
    logging.getLogger("asyncio").debug("Using selector: EpollSelector")
    logging.getLogger("tritium").debug("gRPC request: /x")
    logging.getLogger("hpack.table").warning("a library's warning still shows")
    settings.apply(LogUpdate(verbose=2))  # a run-time change keeps them quiet too
    logging.getLogger("hyperframe.frame").debug("frame internals")
    assert re.findall(r"\] (.*)", path.read_text()) == [
        "gRPC request: /x",
        "a library's warning still shows",
    ]


def test_table_cell_ending_in_a_newline_has_no_empty_last_line() -> None:
    """Triton reads a cell's lines with std::getline: a Python model's error text (pybind11's,
    ending in a newline) gets no empty row after its last frame."""
    table = render_table(["Model", "Status"], [["m", "UNAVAILABLE: E: x\n\nAt:\n  f(1): g\n"]])
    assert table.splitlines()[-3:] == [
        "|       | At:               |",
        "|       |   f(1): g         |",
        "+-------+-------------------+",
    ]
