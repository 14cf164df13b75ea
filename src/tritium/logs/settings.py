"""Triton's logger: the log flags as state that the logging extension reads and changes at run
time, Triton's two record layouts, and where records go.

One ``LogSettings`` per process (Triton's ``gLogger_``): ``install`` puts its handler on the
root logger, and the server facade (``InferenceServer.log_settings`` / ``update_log_settings``)
changes it in place, so the next record follows the new settings. Records go where Triton's
go: to the ``--log-file`` when one is set, else INFO and verbose records to stdout and WARNING
and ERROR ones to stderr. ``http_update`` and ``grpc_update`` turn what a client sent into a
``LogUpdate`` with Triton's texts for bad values (which differ between the two protocols).

In Triton's two layouts each message is written as a JSON string (``] "loaded model 'x'"``:
quotes, backslashes and control characters escaped, so a client's text cannot forge a record),
as Triton 2.51's logger does unless ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0`` is set; the start-up
model table is written as it is (``raw_message``), as Triton's ``LOG_TABLE_INFO`` does.

Besides Triton's two layouts, tritium's ``json`` writes each record as one JSON object on one
line (``time``, ``level``, ``pid``, ``file``, ``line``, ``model``, ``message``); a record about
a model says which through ``extra=about_model(name)``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

import orjson

from ..errors import internal, invalid_arg, unavailable, unsupported

LOG_FORMATS = ("default", "ISO8601", "json")  # json: tritium's own
_MAX_VERBOSE = (1 << 31) - 1  # Triton keeps the level as an int32
_FILE_READ_ONLY = "log file location can not be updated through network protocol"
_BOOL_KEYS = ("log_info", "log_warning", "log_error")
# Libraries whose DEBUG/INFO records are their own internals (hpack logs every header it
# encodes or decodes): they stay at WARNING whatever --log-verbose is, so verbose logging
# shows tritium's records, not a line per HTTP/2 header.
QUIET_LIBRARIES = ("hpack", "h2", "hyperframe", "asyncio")
ESCAPE_VARIABLE = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"  # Triton's: "0" turns escaping off


def escape_from_environment() -> bool:
    """Whether messages are escaped: yes unless the variable is exactly "0" (Triton's rule)."""
    return os.environ.get(ESCAPE_VARIABLE) != "0"


# rapidjson's Writer::String, which Triton's TritonJson::SerializeString uses: the quote, the
# backslash and every control character below 0x20 escaped (\b \t \n \f \r, else \u00XX in
# upper-case hex); everything else, non-ASCII text included, as it is.
_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_ESCAPES: dict[int, str] = {c: _SHORT_ESCAPES.get(c, f"\\u{c:04X}") for c in range(0x20)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\"})


def escape_message(message: str) -> str:
    """``message`` as a JSON string, as Triton writes a log message (rapidjson's escaping); a
    lone surrogate, which UTF-8 cannot carry, as its \\uDXXX escape. (rapidjson stops at a NUL:
    tritium escapes it, \\u0000, and keeps what follows.)"""
    text = message.translate(_ESCAPES)
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return f'"{text}"'


@dataclass(frozen=True, slots=True)
class LogUpdate:
    """What a client asked to change (None: leave as it is)."""

    info: bool | None = None
    warning: bool | None = None
    error: bool | None = None
    verbose: int | None = None
    format: str | None = None


class LogSettings:
    """The log flags now: ``--log-file``, ``--log-info``/``-warning``/``-error``,
    ``--log-verbose`` and ``--log-format``. Only the file is fixed at start (Triton refuses to
    move it over the network)."""

    def __init__(
        self,
        file: str = "",
        levels: tuple[bool, bool, bool] = (True, True, True),
        verbose: int = 0,
        format: str = "default",
    ) -> None:
        if format not in LOG_FORMATS:
            raise ValueError(f"invalid argument for --log-format: {format}")
        self.file = file
        self.info, self.warning, self.error = levels
        self.verbose = min(max(verbose, 0), _MAX_VERBOSE)
        self.format = format
        self.escape = escape_from_environment()  # read once, at start, as Triton's logger
        self._handler: TritonHandler | None = None

    def as_dict(self) -> dict[str, Any]:
        """The logging extension's answer (Triton's keys and order)."""
        return {
            "log_file": self.file,
            "log_info": self.info,
            "log_warning": self.warning,
            "log_error": self.error,
            "log_verbose_level": self.verbose,
            "log_format": self.format,
        }

    def model_levels(self) -> tuple[bool, bool, bool, bool]:
        """Which pb_utils.Logger levels reach the log: INFO, WARNING, ERROR, VERBOSE."""
        return (self.info, self.warning, self.error, self.verbose >= 1)

    def apply(self, update: LogUpdate) -> None:
        """Change what the update names; the next record follows it."""
        if update.info is not None:
            self.info = update.info
        if update.warning is not None:
            self.warning = update.warning
        if update.error is not None:
            self.error = update.error
        if update.format is not None:
            self.format = update.format
        if update.verbose is not None:
            self.verbose = min(update.verbose, _MAX_VERBOSE)
            if self._handler is not None:
                logging.getLogger().setLevel(self.logger_level())

    def logger_level(self) -> int:
        """Python's level for the root logger: verbose records are DEBUG."""
        return logging.DEBUG if self.verbose >= 1 else logging.INFO

    def install(self) -> None:
        """Route every record through this process's Triton handler (opens ``file`` in append
        mode: an OSError when it cannot be opened, before anything is logged)."""
        handler = TritonHandler(self)
        root = logging.getLogger()
        for old in list(root.handlers):
            root.removeHandler(old)
            old.close()
        root.addHandler(handler)
        root.setLevel(self.logger_level())
        for name in QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.WARNING)
        self._handler = handler
        global _installed
        _installed = self


_installed: LogSettings | None = None


def installed() -> LogSettings | None:
    """The settings the process logs with (``install``), if any: the server facade shares
    them, so what the logging extension changes is what the handler uses."""
    return _installed


MODEL_KEY = "model"  # the LogRecord attribute that names the model a record is about


def about_model(name: str) -> dict[str, str]:
    """``extra=`` for a record about model ``name`` (the ``model`` key of a json record)."""
    return {MODEL_KEY: name}


RAW_KEY = "triton_raw"  # the LogRecord attribute of a message written unescaped


def raw_message() -> dict[str, bool]:
    """``extra=`` for a message of the server's own making written as it is (a table), as
    Triton's LOG_TABLE_INFO: never for text that came from a client."""
    return {RAW_KEY: True}


class TritonFormatter(logging.Formatter):
    """Triton's layouts (common/src/logging.cc): ``default`` is ``I1130 19:41:31.224123 23177
    model.py:42] message`` (level letter, UTC month/day and time to the microsecond, process
    id, file:line); ``ISO8601`` is ``2024-11-30T19:41:31Z I 23177 model.py:42] message``.
    Verbose records print as ``I``, as Triton's LOG_VERBOSE does; the message is a JSON string
    (``escape_message``) when the settings escape and the record is not ``raw_message``.
    tritium's ``json``: see ``json_record``."""

    _LETTERS = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W"}

    def __init__(self, settings: LogSettings | None = None) -> None:
        super().__init__()
        self._settings = settings

    def format(self, record: logging.LogRecord) -> str:
        settings = self._settings
        form = "default" if settings is None else settings.format
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if form == "json":
            return json_record(record, message)
        escape = escape_from_environment() if settings is None else settings.escape
        if escape and not getattr(record, RAW_KEY, False):
            message = escape_message(message)
        created = record.created
        letter = self._LETTERS.get(record.levelno, "E")
        where = f"{record.process} {record.filename}:{record.lineno}]"
        if form == "ISO8601":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
            return f"{stamp} {letter} {where} {message}"
        stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(created))
        micros = int(created % 1 * 1_000_000)
        return f"{letter}{stamp}.{micros:06d} {where} {message}"


_LEVEL_NAMES = {logging.DEBUG: "VERBOSE", logging.INFO: "INFO", logging.WARNING: "WARNING"}


def json_record(record: logging.LogRecord, message: str) -> str:
    """One line of JSON: ``time`` (ISO 8601, UTC, microseconds), ``level`` (VERBOSE, INFO,
    WARNING or ERROR, Triton's levels), ``pid``, ``file`` and ``line`` (the source location),
    ``model`` (the model the record is about, else null) and ``message`` (a traceback, or any
    message of several lines, stays inside it)."""
    created = record.created
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    model = getattr(record, MODEL_KEY, None)
    doc = {
        "time": f"{stamp}.{int(created % 1 * 1_000_000):06d}Z",
        "level": _LEVEL_NAMES.get(record.levelno, "ERROR"),
        "pid": record.process,
        "file": record.filename,
        "line": record.lineno,
        "model": None if model is None else str(model),
        "message": message,
    }
    try:
        return orjson.dumps(doc).decode()
    except TypeError:  # a lone surrogate (orjson takes valid UTF-8 only): escaped instead
        return json.dumps(doc)


class LevelFilter(logging.Filter):
    """Drops the records of a level whose flag is off (--log-info/--log-warning/--log-error);
    verbose (DEBUG) records are governed by --log-verbose through the logger's level."""

    def __init__(
        self,
        info: bool = True,
        warning: bool = True,
        error: bool = True,
        settings: LogSettings | None = None,
    ) -> None:
        super().__init__()
        self._settings = settings or LogSettings(levels=(info, warning, error))

    def filter(self, record: logging.LogRecord) -> bool:
        level, settings = record.levelno, self._settings
        if level >= logging.ERROR:
            return settings.error
        if level >= logging.WARNING:
            return settings.warning
        return settings.info if level >= logging.INFO else True


class TritonHandler(logging.Handler):
    """Writes each record where Triton's logger would: the log file (appended, flushed per
    record) when one is set; otherwise INFO/verbose to stdout, WARNING/ERROR to stderr."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.setFormatter(TritonFormatter(settings))
        self.addFilter(LevelFilter(settings=settings))
        self._file: IO[str] | None = None
        if settings.file:
            self._file = open(settings.file, "a", encoding="utf-8")  # noqa: SIM115

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
            stream = self._file
            if stream is None:
                stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(line)
            stream.flush()
        except Exception:  # a full disk or a closed pipe must not stop the server
            self.handleError(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


# -- what clients send (Triton's texts: http_server.cc HandleLogging, grpc_server.cc) ---------


def http_update(doc: Any) -> LogUpdate:
    """A POST /v2/logging body. ``null`` leaves a setting alone; a wrong JSON type is Triton's
    TritonJson error (INTERNAL); an unknown format UNAVAILABLE, as Triton answers."""
    if not isinstance(doc, Mapping):
        raise invalid_arg("failed to parse the request JSON buffer: expected a JSON object")
    if doc.get("log_file") is not None:
        raise unsupported(_FILE_READ_ONLY)
    levels: list[bool | None] = []
    for key in _BOOL_KEYS:
        value = doc.get(key)
        if value is not None and not isinstance(value, bool):
            raise internal("attempt to access JSON non-boolean as boolean")
        levels.append(value)
    verbose = doc.get("log_verbose_level")
    if verbose is not None and not (
        isinstance(verbose, int) and not isinstance(verbose, bool) and 0 <= verbose < 1 << 64
    ):
        raise internal("attempt to access JSON non-unsigned-integer as unsigned-integer")
    form = doc.get("log_format")
    if form is not None:
        if not isinstance(form, str):
            raise internal("attempt to access JSON non-string as string")
        if form not in LOG_FORMATS:
            raise unavailable(f"invalid argument for --log_format, got: {form}")
    return LogUpdate(levels[0], levels[1], levels[2], verbose, form)


def grpc_update(settings: Mapping[str, tuple[str | None, Any]]) -> LogUpdate:
    """A LogSettingsRequest's settings as {key: (the oneof case set or None, its value)}: any
    ``log_file`` is UNSUPPORTED, a value of the wrong case INVALID_ARG (Triton's texts)."""
    if "log_file" in settings:
        raise unsupported(_FILE_READ_ONLY)
    levels: list[bool | None] = []
    for key in _BOOL_KEYS:
        levels.append(_typed(settings, key, "bool_param", "boolean"))
    verbose = _typed(settings, "log_verbose_level", "uint32_param", "int32")
    form = _typed(settings, "log_format", "string_param", "string")
    if form is not None and form not in LOG_FORMATS:
        raise invalid_arg(f"invalid argument for log_format, got: {form}")
    return LogUpdate(levels[0], levels[1], levels[2], verbose, form)


def _typed(settings: Mapping[str, tuple[str | None, Any]], key: str, case: str, kind: str) -> Any:
    if key not in settings:
        return None
    which, value = settings[key]
    if which != case:
        raise invalid_arg(f"expect {kind} for '{key}'")
    return value
