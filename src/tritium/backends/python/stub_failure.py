"""How an exception of a Python model reads: Triton's shape (python_backend's stub reports
pybind11's ``error_already_set::what()``), and the traceback the log gets.

``describe`` turns an exception raised while importing ``model.py``, in ``auto_complete_config``,
``initialize``, ``execute`` or ``finalize`` into:

- ``reason``: the model's UNAVAILABLE reason (or the error of the requests of an ``execute``),
  ``<Type>: <message>`` (the class's own name, as pybind11 names it; ``<EMPTY MESSAGE>`` for
  none) and then, as pybind11 writes it, ``\\n\\nAt:\\n`` and one
  ``  <file>(<line>): <function>\\n`` per frame (so the text ends with a newline), innermost
  first (at most ``MAX_FRAMES``); a SyntaxError's own line comes first, as ``<module>``;
- ``traceback``: Python's own traceback text, for the log;
- ``where``: ``<file>:<line>`` of the innermost frame in the model's file (for a SyntaxError, the
  offending line), else of the innermost frame shown: the log record's source location.

Frames of the server's own machinery are left out: the leading ones (the stub's call of the
model, and the event loop and future that carried an exception of a coroutine across threads),
tritium's anywhere (``pb_utils``, BLS: Triton has them in C++), and ``<frozen importlib...>``,
as CPython leaves import machinery out of an ``import`` statement's traceback. Standard library
only: the stub imports it.
"""

from __future__ import annotations

import importlib.util
import os
import traceback as _traceback
from dataclasses import dataclass
from pathlib import Path

MAX_FRAMES = 30
_OWN = str(Path(__file__).resolve().parents[2]) + "/"  # the tritium package


def _package_dir(name: str) -> str | None:
    """Where package ``name`` is, without importing it (the stub imports asyncio lazily)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return str(Path(spec.origin).resolve().parent) + os.sep


_CARRIERS = tuple(
    d for d in (_package_dir("asyncio"), _package_dir("concurrent.futures")) if d is not None
)


@dataclass(frozen=True, slots=True)
class Failure:
    reason: str
    traceback: str
    where: str


def describe(exc: BaseException, model_file: str = "") -> Failure:
    innermost = list(reversed(_model_frames(_traceback.extract_tb(exc.__traceback__))))
    head = f"{type(exc).__name__}: {_message(exc)}"  # a SyntaxError: "<msg> (model.py, line N)"
    lines = _at_lines(exc, innermost)
    reason = head + "\n\nAt:\n" + "".join(f"{line}\n" for line in lines) if lines else head
    return Failure(reason, _traceback_text(exc), _where(exc, innermost, model_file))


def _at_lines(exc: BaseException, innermost: list[_traceback.FrameSummary]) -> list[str]:
    lines = [f"  {f.filename}({f.lineno}): {f.name}" for f in innermost[:MAX_FRAMES]]
    if len(innermost) > MAX_FRAMES:
        lines.append(f"  ... {len(innermost) - MAX_FRAMES} more")
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        lines.insert(0, f"  {exc.filename}({exc.lineno}): <module>")  # the code that is wrong
    return lines


def _message(exc: BaseException) -> str:
    try:
        return str(exc) or "<EMPTY MESSAGE>"
    except Exception:  # the model's __str__ raised
        return "<MESSAGE UNAVAILABLE DUE TO ANOTHER EXCEPTION>"


def _model_frames(stack: _traceback.StackSummary) -> list[_traceback.FrameSummary]:
    """The frames from where tritium called into other code on (the event loop and the
    future between tritium's frames are its own), without tritium's own frames further in
    and import machinery."""
    frames, start, called = list(stack), 0, False
    for index, frame in enumerate(frames):
        if _ours(frame):
            start, called = index + 1, True
        elif called and not _frozen(frame) and not frame.filename.startswith(_CARRIERS):
            break  # the first frame of the code tritium called
    return [f for f in frames[start:] if not _frozen(f) and not _ours(f)]


def _ours(frame: _traceback.FrameSummary) -> bool:
    return frame.filename.startswith(_OWN)


def _frozen(frame: _traceback.FrameSummary) -> bool:
    return frame.filename.startswith("<frozen importlib")


def _traceback_text(exc: BaseException) -> str:
    summary = _traceback.TracebackException.from_exception(exc)
    _trim(summary)
    return "".join(summary.format()).rstrip("\n")


def _trim(summary: _traceback.TracebackException) -> None:
    seen: set[int] = set()
    current: _traceback.TracebackException | None = summary
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.stack = _traceback.StackSummary.from_list(_model_frames(current.stack))
        current = current.__cause__ or current.__context__


def _where(exc: BaseException, innermost: list[_traceback.FrameSummary], model_file: str) -> str:
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{exc.filename}:{exc.lineno}"
    mine = [f for f in innermost if model_file and f.filename == model_file]
    frames = mine or innermost
    return f"{frames[0].filename}:{frames[0].lineno}" if frames else ""
