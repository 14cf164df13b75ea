"""How a Python model's failure to load reads: Triton's shape (python_backend's stub reports
pybind11's ``error_already_set::what()``), and the traceback the log gets.

``describe`` turns an exception raised while importing ``model.py``, in ``auto_complete_config``
or in ``initialize`` into:

- ``reason``: the model's UNAVAILABLE reason, ``<Type>: <message>`` and then, as pybind11
  writes it, ``\\n\\nAt:\\n`` and one ``  <file>(<line>): <function>`` per frame, innermost
  first (at most ``MAX_FRAMES``); a SyntaxError's own line comes first, as ``<module>``;
- ``traceback``: Python's own traceback text, for the log;
- ``where``: ``<file>:<line>`` of the innermost frame in the model's file (for a SyntaxError, the
  offending line), else of the innermost frame shown: the log record's source location.

Frames of the server's own machinery (up to tritium's last frame before the first frame of the
code it called) and of ``<frozen importlib...>`` are left out, as CPython leaves
import machinery out of an ``import`` statement's traceback. Standard library only: the stub
imports it.
"""

from __future__ import annotations

import traceback as _traceback
from dataclasses import dataclass
from pathlib import Path

MAX_FRAMES = 30
_OWN = str(Path(__file__).resolve().parents[2]) + "/"  # the tritium package


@dataclass(frozen=True, slots=True)
class Failure:
    reason: str
    traceback: str
    where: str


def describe(exc: BaseException, model_file: str = "") -> Failure:
    innermost = list(reversed(_model_frames(_traceback.extract_tb(exc.__traceback__))))
    if isinstance(exc, SyntaxError):
        head = f"{type(exc).__name__}: {exc}"  # one line: "<msg> (model.py, line N)"
    else:
        head = "".join(_traceback.format_exception_only(type(exc), exc)).strip()
    lines = _at_lines(exc, innermost)
    reason = head + "\n\nAt:\n" + "\n".join(lines) if lines else head
    return Failure(reason, _traceback_text(exc), _where(exc, innermost, model_file))


def _at_lines(exc: BaseException, innermost: list[_traceback.FrameSummary]) -> list[str]:
    lines = [f"  {f.filename}({f.lineno}): {f.name}" for f in innermost[:MAX_FRAMES]]
    if len(innermost) > MAX_FRAMES:
        lines.append(f"  ... {len(innermost) - MAX_FRAMES} more")
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        lines.insert(0, f"  {exc.filename}({exc.lineno}): <module>")  # the code that is wrong
    return lines


def _model_frames(stack: _traceback.StackSummary) -> list[_traceback.FrameSummary]:
    """The frames from where tritium called into other code on, without import machinery."""
    frames, start, called = list(stack), 0, False
    for index, frame in enumerate(frames):
        if frame.filename.startswith(_OWN):
            start, called = index + 1, True
        elif called and not _frozen(frame):
            break  # the first frame of the code tritium called
    return [f for f in frames[start:] if not _frozen(f)]


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
