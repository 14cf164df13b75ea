"""The paths a client's configuration may name.

A model's ``config.pbtxt`` is the operator's: the paths in it are taken as Triton takes them
(``default_model_filename`` joined to the version folder, OpenVINO's ``CPU_EXTENSION_PATH``
and ``CACHE_DIR`` and the Python backend's ``EXECUTION_ENV_PATH`` as given). A configuration
that comes with a load request (the ``config`` parameter of HTTP ``POST
/v2/repository/models/<name>/load`` or gRPC ``RepositoryModelLoad``, explicit mode) is a
client's, and may name nothing outside the model's directory:

- ``check_client_paths``, before anything is loaded: every path-valued field is a relative
  path without '..' (``EXECUTION_ENV_PATH`` one below ``$$TRITON_MODEL_DIRECTORY/``, the one
  way Triton has to name the model's directory), else INVALID_ARG naming the field and the
  client's own value, never a server path;
- ``client_path``, where the path is used: the path with every link followed must still be
  inside the model's directory (a link in the directory does not lead a client out of it).

Label files, warm-up data and initial-state files are confined for every configuration
(``files.py``); they are checked here too so that a client's ``..`` is refused up front.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..errors import invalid_arg
from .model_config import ModelConfig

MODEL_DIRECTORY_KEYWORD: Final = "$$TRITON_MODEL_DIRECTORY"
# ``parameters`` keys whose value is a path (Python: EXECUTION_ENV_PATH; OpenVINO: the others)
PATH_PARAMETERS: Final = ("EXECUTION_ENV_PATH", "CPU_EXTENSION_PATH", "CACHE_DIR")
_SHOWN: Final = 64  # characters of a client's value echoed back


def client_paths(config: ModelConfig) -> list[tuple[str, str]]:
    """``(field, value)`` for every path a configuration names (empty values name none)."""
    found = [("default_model_filename", config.default_model_filename)]
    found += [("cc_model_filenames", v) for v in config.cc_model_filenames.values()]
    found += [("output.label_filename", o.label_filename) for o in config.output]
    found += [
        ("model_warmup.inputs.input_data_file", i.input_data_file)
        for sample in config.model_warmup
        for i in sample.inputs.values()
    ]
    found += [
        ("sequence_batching.state.initial_state.data_file", s.data_file)
        for state in config.sequence_batching.state
        for s in state.initial_state
    ]
    found += [
        ("model_operations.op_library_filename", name)
        for name in config.model_operations.op_library_filename
    ]
    found += [
        (f"parameters.{key}", config.parameters[key].string_value)
        for key in PATH_PARAMETERS
        if key in config.parameters
    ]
    return [(field, value) for field, value in found if value.strip()]


def check_client_paths(config: ModelConfig) -> None:
    """Refuse (INVALID_ARG) a client's configuration that names a path outside its model's
    directory: absolute, with a '..' component, or (EXECUTION_ENV_PATH) not below
    ``$$TRITON_MODEL_DIRECTORY/``."""
    for field, value in client_paths(config):
        _relative(field, value)


def client_path(model_dir: Path, base: Path, field: str, value: str) -> Path:
    """Where a client's ``value`` of ``field`` leads: ``base`` (the model's directory, or a
    folder in it) joined with the relative path, every link followed; INVALID_ARG when that
    is not inside the model's directory. ``$$TRITON_MODEL_DIRECTORY/`` starts an
    EXECUTION_ENV_PATH (then ``base`` is the model's directory)."""
    root = model_dir.resolve()
    path = (base / _relative(field, value)).resolve()
    if path == root or not path.is_relative_to(root):
        raise _refused(field, value, "leads out of the model directory through a link")
    return path


def _relative(field: str, value: str) -> str:
    relative = value.strip()
    if field == "parameters.EXECUTION_ENV_PATH":
        if not relative.startswith(MODEL_DIRECTORY_KEYWORD + "/"):
            raise _refused(field, value, f"must start with '{MODEL_DIRECTORY_KEYWORD}/'")
        relative = relative[len(MODEL_DIRECTORY_KEYWORD) + 1 :]
    parts = relative.split("/")
    if not relative or relative.startswith("/") or "\0" in relative or ".." in parts:
        raise _refused(
            field, value, "must be a relative path inside the model directory, without '..'"
        )
    return relative


def _refused(field: str, value: str, rule: str) -> Exception:
    shown = value[:_SHOWN] + ("..." if len(value) > _SHOWN else "")
    return invalid_arg(
        f"config parameter: field '{field}': '{shown}' {rule} (a configuration given with a "
        "load request may name only files in the model's directory)"
    )


def without_model_dir(text: str, model_dir: Path) -> str:
    """A load failure's reason for the client who sent the config: the model's directory
    (as the server names it, and with its links followed) written as Triton's
    ``$$TRITON_MODEL_DIRECTORY``; the server's log keeps the full text."""
    for shown in sorted({str(model_dir), str(model_dir.resolve())}, key=len, reverse=True):
        text = text.replace(shown, MODEL_DIRECTORY_KEYWORD)
    return text
