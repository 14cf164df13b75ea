"""``model_warmup``: the samples a model version runs on each of its instances before it is
READY, checked against the model's spec and turned into tensors. Pure (a file read aside);
``tritium/repository/warmup.py`` runs them.

Triton's rules (core ``backend_model_instance.cc``, ``GenerateWarmupData``):

- a sample of ``batch_size`` N is N requests of one element each, run as one execution;
  ``batch_size`` 0 is skipped; ``count`` 0 runs the sample once;
- every dimension must be given (no -1); the request shape is ``[1] + dims`` when the model
  batches, ``dims`` otherwise;
- ``zero_data``: zeros; ``random_data``: random bytes; for TYPE_STRING both give empty
  strings (Triton's zero-filled length prefixes); ``input_data_file``: raw row-major bytes
  from ``<model dir>/warmup/<file>`` (at least the tensor's size; TYPE_STRING elements as
  u32 length + bytes);
- besides the model's inputs, a sample may name the sequence batcher's control tensors and
  implicit state inputs (Triton's "override inputs"): a sequence model gets exactly what the
  sample names, nothing is added.

tritium checks more than Triton does, at load and with a clear reason, what Triton leaves to
the backend: datatypes and shapes against the config, unknown names, missing required
inputs, a batch size the model cannot take, and a data file outside ``warmup/`` or, once
links are followed, outside the model's directory (``config/files.py``, the rule label files
and initial state follow too).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ServerError, invalid_arg
from ..tensor_codec import bytes_array
from ..types import DataType, Tensor
from .files import folder_file
from .model_config import mc
from .spec import IOSpec, ModelSpec

log = logging.getLogger("tritium")
WARMUP_FOLDER = "warmup"  # Triton's kWarmupDataFolder


@dataclass(frozen=True, slots=True)
class WarmupInput:
    name: str
    datatype: DataType
    dims: tuple[int, ...]  # one request's element, without the batch dimension
    source: str  # "zero", "random" or "file"
    filename: str = ""  # input_data_file, relative to <model dir>/warmup
    reshape: tuple[int, ...] | None = None  # the config's reshape of this input


@dataclass(frozen=True, slots=True)
class WarmupSample:
    name: str
    batch_size: int  # requests in its one execution
    count: int  # executions, at least one
    inputs: tuple[WarmupInput, ...]


def warmup_samples(spec: ModelSpec, model_dir: Path | None) -> tuple[WarmupSample, ...]:
    """The model's warm-up samples, checked; ServerError (INVALID_ARG) saying what is wrong."""
    samples = []
    for setting in spec.config.model_warmup:
        if setting.batch_size == 0:
            log.warning(
                "model '%s': skipping warmup sample '%s': its batch_size is 0",
                spec.name,
                setting.name,
            )
            continue
        samples.append(_sample(spec, setting, model_dir))
    return tuple(samples)


def _sample(spec: ModelSpec, setting: Any, model_dir: Path | None) -> WarmupSample:
    name: str = setting.name
    batch_size: int = setting.batch_size
    limit = max(spec.max_batch_size, 1)
    if batch_size > limit:
        raise invalid_arg(
            f"warmup sample '{name}' of model '{spec.name}' has batch_size {batch_size}, "
            + (
                f"but the model's max_batch_size is {spec.max_batch_size}"
                if spec.max_batch_size
                else "but a model that does not batch takes batch_size 1"
            )
        )
    given = setting.inputs
    order = [n for n in spec.inputs if n in given]
    order += sorted(n for n in given if n not in spec.inputs)
    inputs = tuple(_input(spec, name, n, given[n], model_dir) for n in order)
    missing = [n for n in spec.inputs if n in spec.required_inputs and n not in given]
    if missing:
        raise invalid_arg(
            f"warmup sample '{name}' of model '{spec.name}' misses required input(s) "
            + ", ".join(f"'{n}'" for n in missing)
        )
    count: int = setting.count
    return WarmupSample(name, batch_size, max(count, 1), inputs)


def _input(
    spec: ModelSpec, sample: str, name: str, meta: Any, model_dir: Path | None
) -> WarmupInput:
    dims = tuple(int(d) for d in meta.dims)
    if any(d < 0 for d in dims):
        raise invalid_arg(  # Triton's words
            f"warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )
    code: int = meta.data_type
    known = code in mc.DataType.values()
    datatype = DataType.from_config(mc.DataType.Name(code)) if known else None
    if datatype is None:
        raise invalid_arg(f"warmup sample '{sample}': input '{name}' must specify 'data_type'")
    expected, reshape = _expected(spec, sample, name)
    if datatype is not expected.datatype:
        raise invalid_arg(
            f"warmup sample '{sample}': input '{name}' data-type is '{datatype.wire}', but "
            f"model '{spec.name}' expects '{expected.datatype.wire}'"
        )
    if len(dims) != len(expected.dims) or any(
        d != e and e != -1 for d, e in zip(dims, expected.dims, strict=True)
    ):
        raise invalid_arg(
            f"warmup sample '{sample}': input '{name}' has dims {list(dims)}, but model "
            f"'{spec.name}' expects {list(expected.dims)}"
        )
    source = meta.WhichOneof("input_data_type")
    if source is None:
        raise invalid_arg(  # Triton's words
            f"warmup setting expects input '{name}' to have input_data_type set"
        )
    filename = ""
    if source == "input_data_file":
        filename = meta.input_data_file
        data_path(model_dir, sample, name, filename)  # refused now if it leaves warmup/
    kind = {"zero_data": "zero", "random_data": "random", "input_data_file": "file"}[source]
    return WarmupInput(name, datatype, dims, kind, filename, reshape)


def _expected(spec: ModelSpec, sample: str, name: str) -> tuple[IOSpec, tuple[int, ...] | None]:
    """The spec a sample's tensor must match: a model input, or one the sequence batcher
    would add (a control tensor or an implicit state input)."""
    io = spec.inputs.get(name)
    if io is not None:
        return io, io.reshape
    seq = spec.sequence
    if seq is not None:
        for control in (seq.start, seq.end, seq.ready):
            if control is not None and control.name == name:
                return IOSpec(name, control.datatype, (1,), None, False), None
        if seq.corrid is not None and seq.corrid[0] == name:
            return IOSpec(name, seq.corrid[1], (1,), None, False), None
        for state in seq.states:
            if state.input_name == name:
                return IOSpec(name, state.datatype, state.dims, None, False), None
    raise invalid_arg(
        f"warmup sample '{sample}': unexpected input '{name}' for model '{spec.name}' (neither "
        "an input of the model nor a sequence control or state input)"
    )


def data_path(model_dir: Path | None, sample: str, name: str, filename: str) -> Path:
    """``<model dir>/warmup/<filename>`` (links followed); a name, or a link (``warmup/``
    itself included), that would leave that folder or the model's directory is refused."""
    if model_dir is None:
        raise invalid_arg(f"warmup sample '{sample}': input_data_file needs the model's directory")
    path = folder_file(model_dir, WARMUP_FOLDER, filename)
    if path is None:
        raise invalid_arg(
            f"warmup sample '{sample}': input_data_file '{filename}' of input '{name}' must "
            f"name a file inside '{model_dir / WARMUP_FOLDER}' (after following links, "
            "inside the model's directory)"
        )
    return path


def sample_tensors(
    sample: WarmupSample, model_dir: Path | None, batched: bool, rng: np.random.Generator
) -> list[Tensor]:
    """The input tensors of one request of ``sample`` (every request of the batch shares
    them, as in Triton). Reads the data files: run it off the event loop."""
    tensors = []
    for item in sample.inputs:
        data = _data(sample.name, item, model_dir, rng)
        shape = ((1,) if batched else ()) + item.dims
        data = data.reshape(shape)
        if item.reshape is not None:
            data = data.reshape(((1,) if batched else ()) + item.reshape)
        data.flags.writeable = False
        tensors.append(Tensor(item.name, item.datatype, data.shape, data))
    return tensors


def _data(
    sample: str, item: WarmupInput, model_dir: Path | None, rng: np.random.Generator
) -> np.ndarray:
    count = int(np.prod(item.dims, dtype=np.int64))
    datatype = item.datatype
    if item.source == "file":
        return _from_file(sample, item, model_dir, count)
    if datatype is DataType.BYTES:  # Triton: zero length prefixes, random or not
        return np.full(count, b"", dtype=object)
    if item.source == "zero":
        return np.zeros(count, dtype=datatype.dtype)
    if datatype is DataType.BOOL:
        return rng.integers(0, 2, size=count).astype(np.bool_)
    raw = rng.integers(0, 256, size=count * datatype.size, dtype=np.uint8)
    return raw.view(datatype.dtype)  # random bytes, as Triton's rand() fill


def _from_file(sample: str, item: WarmupInput, model_dir: Path | None, count: int) -> np.ndarray:
    path = data_path(model_dir, sample, item.name, item.filename)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(
            f"warmup sample '{sample}': unable to read '{path}': {exc.strerror}"
        ) from None
    if item.datatype is DataType.BYTES:
        try:
            return bytes_array(data, item.name, count)
        except ServerError as exc:
            raise invalid_arg(f"warmup sample '{sample}': '{path}': {exc.message}") from None
    needed = count * item.datatype.size
    if len(data) < needed:
        raise invalid_arg(  # Triton's words (its missing space included)
            f"warmup setting expects {needed} bytes, but the data provided from "
            f"{item.filename}only has {len(data)} bytes"
        )
    return np.frombuffer(data, dtype=item.datatype.dtype, count=count).copy()
