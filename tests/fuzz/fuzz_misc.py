"""Fuzz targets for BYTES deserialisation and for loading config.pbtxt (read, auto-complete
the backend, normalise, build the spec: what the model manager does before a backend runs)."""

from __future__ import annotations

import atexit
import shutil
import struct
import tempfile
from pathlib import Path

from fuzz_harness import FuzzFailure, Target, byte_inputs, check_rejection

from tritium.errors import ServerError
from tritium.config.model_config import ConfigProblem, read_config
from tritium.repository.layout import select_versions
from tritium.config.spec import build_spec, infer_backend, normalize
from tritium.tensor_codec import deserialize_bytes, object_array, serialize_bytes


def check_bytes(data: bytes) -> None:
    try:
        items = deserialize_bytes(data, "x")
    except ServerError as exc:
        check_rejection(exc)
        return
    again = serialize_bytes(object_array(items, (len(items),)))
    if again != data:
        raise FuzzFailure("deserialize_bytes then serialize_bytes does not give the input back")


def _bytes_seed(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(i)) + i for i in items)


BYTES_SEEDS = [b"", _bytes_seed(b""), _bytes_seed(b"abc", b"", b"\xff" * 9), b"\xff\xff\xff\xff"]

BYTES = Target(
    "bytes_deserialize",
    check_bytes,
    byte_inputs(BYTES_SEEDS, [b"\x00\x00\x00\x00", b"\x01\x00\x00\x00"], 256),
    seeds=BYTES_SEEDS,
)


# -- config.pbtxt --------------------------------------------------------------------------

_ROOT: Path | None = None


def _model_dir() -> Path:
    """``<tmp>/m`` with version directories 1, 2 and 3 (and no model files)."""
    global _ROOT
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="tritium-fuzz-"))
        atexit.register(shutil.rmtree, _ROOT, True)
        for version in (1, 2, 3):
            (_ROOT / "m" / str(version)).mkdir(parents=True)
    return _ROOT / "m"


def load_config(text: bytes) -> None:
    """The manager's steps from the file to a ModelSpec; all must end in a clear error."""
    model_dir = _model_dir()
    (model_dir / "config.pbtxt").write_bytes(text)
    try:
        config, path, source = read_config(model_dir)
        infer_backend(config, [model_dir / "1", model_dir / "2", model_dir / "3"])
        select_versions(config, [1, 2, 3])
        problem = ConfigProblem("m", path, source)
        normalize(config, "m", problem)
        build_spec(config, problem)
    except ServerError as exc:
        check_rejection(exc)


CONFIG_SEEDS = [
    b"",
    b'name: "m"\nbackend: "python"\nmax_batch_size: 8\n'
    b'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
    b'output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] reshape { shape: [ ] } } ]\n'
    b"instance_group [ { kind: KIND_CPU count: 2 } ]\n"
    b"dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 100 }\n",
    b'platform: "onnxruntime_onnx"\nversion_policy: { specific: { versions: [ 1, 3 ] } }\n'
    b'parameters { key: "k" value: { string_value: "v" } }\n'
    b"sequence_batching { }\nmodel_transaction_policy { decoupled: true }\n",
    b'platform: "ensemble"\nensemble_scheduling { step [ { model_name: "a" model_version: -1 '
    b'input_map { key: "x" value: "y" } output_map { key: "o" value: "p" } } ] }\n',
    b'backend: "pytorch"\nversion_policy { latest { num_versions: 2 } }\n'
    b'input { name: "I" data_type: TYPE_INT64 dims: 1 optional: true allow_ragged_batch: true }',
]
CONFIG_TOKENS = [
    b"input [ { ",
    b"output { ",
    b"name: ",
    b"data_type: TYPE_BF16 ",
    b"dims: [ -1 ] ",
    b"reshape { shape: [ 2 ] } ",
    b"instance_group { kind: KIND_GPU } ",
    b"count: -1 ",
    b"max_batch_size: -1 ",
    b"version_policy { all { } } ",
    b'backend: "ensemble" ',
    b"default_model_filename: ",
    b"9223372036854775808",
    b"#",
    b"{",
    b"}",
    b'"\\',
]

CONFIG = Target(
    "config_pbtxt",
    load_config,
    byte_inputs(CONFIG_SEEDS, CONFIG_TOKENS, 512),
    seeds=CONFIG_SEEDS,
    tokens=CONFIG_TOKENS,
)
