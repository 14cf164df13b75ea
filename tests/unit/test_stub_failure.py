"""A Python model that fails to load (import, auto-complete, initialize): the reason in
Triton's shape (``<Type>: <message>``, then pybind11's ``At:`` frames, innermost first), the
traceback for the log and the model's file:line, with the stub's own frames left out."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from tritium.backends.python.stub import import_model
from tritium.backends.python.stub_failure import MAX_FRAMES, describe


def _failed_import(tmp_path: Path, source: str, name: str = "model.py") -> tuple[Exception, str]:
    path = tmp_path / "m" / "1" / name
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(source))
    try:
        with pytest.raises(Exception) as caught:
            import_model(str(path))
    finally:
        for module in ("model", "1", f"1.{name[:-3]}"):
            sys.modules.pop(module, None)
        sys.path.remove(str(path.parent))
        sys.path.remove(str(path.parent.parent))
    return caught.value, str(path)


def test_an_import_error_names_the_models_line(tmp_path: Path) -> None:
    exc, path = _failed_import(tmp_path, "import os\nimport no_such_module_for_tritium\n")
    failure = describe(exc, path)
    assert failure.reason == (
        "ModuleNotFoundError: No module named 'no_such_module_for_tritium'\n\n"
        f"At:\n  {path}(2): <module>\n"
    )
    assert failure.where == f"{path}:2"
    assert failure.traceback == (
        "Traceback (most recent call last):\n"
        f'  File "{path}", line 2, in <module>\n'
        "    import no_such_module_for_tritium\n"
        "ModuleNotFoundError: No module named 'no_such_module_for_tritium'"
    )


def test_a_module_level_exception_lists_frames_innermost_first(tmp_path: Path) -> None:
    source = """\
        def helper():
            raise ValueError("bad module state")


        helper()
    """
    exc, path = _failed_import(tmp_path, source)
    failure = describe(exc, path)
    assert failure.reason == (
        f"ValueError: bad module state\n\nAt:\n  {path}(2): helper\n  {path}(5): <module>\n"
    )
    assert failure.where == f"{path}:2"
    assert "stub.py" not in failure.traceback  # the server's frames are not the model's
    assert "frozen importlib" not in failure.traceback
    last = 'raise ValueError("bad module state")\nValueError: bad module state'
    assert failure.traceback.endswith(last)


def test_a_syntax_error_points_at_the_offending_line(tmp_path: Path) -> None:
    exc, path = _failed_import(tmp_path, "class TritonPythonModel:\n    def execute(self, r)\n")
    failure = describe(exc, path)
    assert failure.reason == (
        f"SyntaxError: expected ':' (model.py, line 2)\n\nAt:\n  {path}(2): <module>\n"
    )
    assert failure.where == f"{path}:2"
    assert f'File "{path}", line 2' in failure.traceback
    assert failure.traceback.endswith("SyntaxError: expected ':'")


def test_a_library_the_model_imports_comes_first_then_the_model(tmp_path: Path) -> None:
    helper = tmp_path / "m" / "1" / "helper_lib_for_tritium.py"
    helper.parent.mkdir(parents=True)
    helper.write_text("raise RuntimeError('library broke')\n")
    path = helper.parent / "model.py"
    path.write_text("import numpy\nimport helper_lib_for_tritium\n")
    try:
        with pytest.raises(RuntimeError) as caught:
            import_model(str(path))
    finally:
        sys.modules.pop("model", None)
        sys.modules.pop("helper_lib_for_tritium", None)
        sys.path.remove(str(path.parent))
        sys.path.remove(str(path.parent.parent))
    failure = describe(caught.value, str(path))
    assert failure.reason == (
        f"RuntimeError: library broke\n\nAt:\n  {helper}(1): <module>\n  {path}(2): <module>\n"
    )
    assert failure.where == f"{path}:2"  # the model's own line, not the library's


def test_chained_exceptions_keep_both_tracebacks_without_the_stubs_frames(tmp_path: Path) -> None:
    source = """\
        try:
            {}["missing"]
        except KeyError as exc:
            raise ImportError("configuration absent") from exc
    """
    exc, path = _failed_import(tmp_path, source)
    failure = describe(exc, path)
    assert failure.reason.startswith("ImportError: configuration absent\n\nAt:\n")
    assert f"  {path}(4): <module>" in failure.reason
    text = failure.traceback
    assert "KeyError: 'missing'" in text and "direct cause" in text
    assert text.count(f'File "{path}"') == 2 and "stub.py" not in text


def test_deep_recursion_is_cut_to_max_frames(tmp_path: Path) -> None:
    exc, path = _failed_import(tmp_path, "def f(n):\n    return f(n + 1)\nf(0)\n")
    failure = describe(exc, path)
    frames = [line for line in failure.reason.splitlines() if line.startswith("  /")]
    assert len(frames) == MAX_FRAMES
    assert failure.reason.splitlines()[-1].startswith("  ... ")
    assert failure.reason.splitlines()[-1].endswith(" more")


def test_an_error_in_tritium_itself_has_no_model_frames(tmp_path: Path) -> None:
    exc, path = _failed_import(tmp_path, "X = 1\n")  # no TritonPythonModel
    failure = describe(exc, path)
    # Triton's stub imports the file as <version>.model (here 1/model.py)
    assert failure.reason == (
        "AttributeError: module '1.model' has no attribute 'TritonPythonModel'"
    )
    assert failure.where == ""
