"""config.pbtxt → Triton's real ``ModelConfig`` message, normalised as Triton core does.

Errors name the file, the line and the field, so a user can fix a repository without guessing.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ..errors import ServerError, invalid_arg
from ..logs.settings import about_model
from .locate import field_line

# ``mc`` (the generated model_config messages) and ``ModelConfig`` are re-exported: the rest of
# the package reaches Triton's config schema through this module.
__all__ = [
    "BACKEND_DEFAULTS",
    "PLATFORM_TO_BACKEND",
    "ConfigProblem",
    "ModelConfig",
    "config_from_json",
    "config_to_json",
    "mc",
    "parse_config_text",
    "read_config",
]


# backend → (platform string reported for it, default model file name)
BACKEND_DEFAULTS: dict[str, tuple[str, str]] = {
    "onnxruntime": ("onnxruntime_onnx", "model.onnx"),
    "python": ("", "model.py"),
    "pytorch": ("pytorch_libtorch", "model.pt"),
    "ensemble": ("ensemble", ""),
}
PLATFORM_TO_BACKEND = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "libtorch": "pytorch",
    "torch_aoti": "pytorch",  # refused by the backend with its reason
    "ensemble": "ensemble",
}
log = logging.getLogger("tritium")
_SEMANTIC_LOCATION = re.compile(r"^(\d+):(\d+) : ")


def parse_config_text(text: str, path: Path) -> ModelConfig:
    """Parse protobuf text format; a syntax error names ``path:line:column`` and the field."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        message = str(exc)
        match = _SEMANTIC_LOCATION.match(message)
        if match:
            line, col = match.groups()
            message = f"{path}:{line}:{col}: {message[match.end() :]}"
        else:
            message = f"{path}: {message}"
        raise invalid_arg(f"failed to parse model configuration: {message}") from None
    except (ValueError, Warning) as exc:
        # protobuf's parser raises ValueError for an enum number beyond int32, and warns of an
        # invalid escape such as '\i' (an error where warnings are errors, as under pytest).
        raise invalid_arg(f"failed to parse model configuration: {path}: {exc}") from None
    return config


def read_config(model_dir: Path, config_name: str = "") -> tuple[ModelConfig, Path | None, str]:
    """Read ``config.pbtxt`` (or ``configs/<name>.pbtxt``); no file gives an empty config."""
    path = model_dir / "config.pbtxt"
    if config_name:
        custom = model_dir / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            path = custom
    if not path.is_file():
        return ModelConfig(), None, ""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_arg(
            f"failed to parse model configuration: {path}: not UTF-8 text ({exc.reason} at "
            f"byte {exc.start})"
        ) from None
    return parse_config_text(text, path), path, text


def config_from_json(text: str) -> ModelConfig:
    """A config override given as JSON with proto field names (the load API's ``config``)."""
    config = ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as exc:
        raise invalid_arg(f"failed to parse model configuration override: {exc}") from None
    return config


class ConfigProblem:
    """Builds load errors (and warnings) that point at the config file, the line and the
    field (``locate.field_line``: the field's path, and an ``anchor`` naming the entry). One is
    made per model load, so a warning is logged once per load, not once per version."""

    def __init__(self, model: str, path: Path | None, text: str, client: bool = False) -> None:
        self._model = model
        self._path = path
        self._text = text
        # The config came with a load request (a client's): the paths it names are confined
        # to the model's directory (config/confine.py), its errors name no server path.
        self.client = client
        self._warned: set[str] = set()

    def error(self, field: str, message: str, anchor: str = "") -> ServerError:
        return invalid_arg(self._where(field, message, anchor))

    def warn(self, field: str, message: str, anchor: str = "") -> None:
        """Log a warning about ``field``, the first time only."""
        if field not in self._warned:
            self._warned.add(field)
            log.warning(
                "model '%s': %s",
                self._model,
                self._where(field, message, anchor),
                extra=about_model(self._model),
            )

    def _origin(self) -> str:
        return "the load request's config" if self.client else "auto-completed config"

    def _where(self, field: str, message: str, anchor: str) -> str:
        where = str(self._path) if self._path else f"model '{self._model}' ({self._origin()})"
        line = field_line(self._text, field, anchor) if self._text else 0
        if line:
            where += f":{line}"
        return f"{where}: field '{field}': {message}"


_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def config_to_json(config: ModelConfig) -> dict[str, Any]:
    """Render as Triton's ``/config`` does: proto field names, every default printed,
    enums by name and 64-bit integers as JSON numbers."""
    data = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    _numbers_for_int64(config.DESCRIPTOR, data)
    return data


def _numbers_for_int64(descriptor: Any, data: dict[str, Any]) -> None:
    for fd in descriptor.fields:
        if fd.name not in data:
            continue
        value = data[fd.name]
        if fd.type in _INT64_TYPES:
            data[fd.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            sub = fd.message_type
            if sub.GetOptions().map_entry:
                value_fd = sub.fields_by_name["value"]
                for key, item in value.items():
                    if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                        _numbers_for_int64(value_fd.message_type, item)
                    elif value_fd.type in _INT64_TYPES:
                        value[key] = int(item)
            elif isinstance(value, list):
                for item in value:
                    _numbers_for_int64(sub, item)
            elif isinstance(value, dict):
                _numbers_for_int64(sub, value)
