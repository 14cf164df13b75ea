"""ModelInferRequest bytes → message, in short steps.

The transport hands ModelInfer and ModelStreamInfer their request bytes undecoded (see
``service``), so that a message protobuf refuses (a string field that is not UTF-8) is answered
INVALID_ARGUMENT with a clear message, and so that a large message is parsed without one long
protobuf call holding the GIL: 48 MiB of empty strings in ``bytes_contents`` take upb about
a second. A large message is cut at its top-level field boundaries into pieces merged one at a
time (protobuf's merge of concatenated pieces is the parse of the whole); the typed
``contents`` of a large input are kept aside as bytes and decoded by ``decode_contents`` chunk
by chunk. From ``RAW_VIEWS_FROM`` bytes on, ``raw_input_contents`` are not given to protobuf
(which copies each into its arena, then into a new bytes object on access) but kept as views
of the request's bytes, so the tensors over them are the request's own bytes.

That first walk also counts (``_Census``): a message of more fields, inputs, requested outputs,
raw contents, parameters or dimensions than ``frontends.tensors`` bounds is refused before
protobuf builds any of them (an empty entry is 2 bytes on the wire: 976 KiB held 500k inputs,
half a second of the event loop). A message under ``RAW_VIEWS_FROM`` bytes cannot hold more
than ``MAX_FIELDS`` fields: protobuf parses it at once, and ``codec.decode_request`` checks the
same bounds on the message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import numpy as np
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from ...errors import invalid_arg
from ...tensor_codec import CHUNK, empty_strings, let_threads_run, object_array, strided_items
from ...transport.grpc.frames import Pieces as Pieces  # codec.py's too
from ..tensors import MAX_PARAMETERS, MAX_RANK, MAX_TENSORS, rank_error, too_many

PIECE = 1 << 20  # bytes merged by one protobuf call
RAW_VIEWS_FROM = 1 << 14  # a message of this many bytes keeps its raw contents as views
# Fields of one ModelInferRequest, those of its tensors included: as many as a message under
# RAW_VIEWS_FROM bytes can hold (2 bytes each), 5x what MAX_TENSORS inputs of a name, a
# datatype and a shape with their raw contents take.
MAX_FIELDS: Final = RAW_VIEWS_FROM // 2
_PARAMETERS: Final = 4  # ModelInferRequest.parameters, InferInputTensor.parameters
_INPUTS: Final = 5  # ModelInferRequest.inputs
_RAW_INPUT_CONTENTS: Final = 7  # ModelInferRequest.raw_input_contents
_REQUESTED: Final = 6  # ModelInferRequest.outputs
_INPUT_SHAPE: Final = 3  # InferInputTensor.shape
_CONTENTS: Final = 5  # InferInputTensor.contents
_OUTPUT_PARAMETERS: Final = 2  # InferRequestedOutputTensor.parameters
_BYTES_CONTENTS: Final = 8  # InferTensorContents.bytes_contents
# Fields walked between two turns of the other threads (``let_threads_run``).
_FIELDS_PER_TURN: Final = 1 << 12


def _malformed(kind: str, why: str, hint: bool = False) -> Exception:
    """protobuf's DecodeError says only which message failed: ``hint`` names the usual cause."""
    utf8 = " (string fields such as model_name, id and names must be valid UTF-8)" if hint else ""
    return invalid_arg(f"unable to parse the {kind} message: {why}{utf8}")


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        if pos >= len(buf):
            raise _malformed("ModelInferRequest", "truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise _malformed("ModelInferRequest", "varint too long")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start of the field, start of its payload, end). Other
    threads get a turn every ``_FIELDS_PER_TURN`` fields: compiled, this loop never lets the
    GIL go by itself, and it reads the typed contents of a large input on a worker thread."""
    pos, end = 0, len(buf)
    turn = _FIELDS_PER_TURN
    while pos < end:
        turn -= 1
        if turn == 0:
            let_threads_run()
            turn = _FIELDS_PER_TURN
        start = pos
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
            body = start
        elif wire in (1, 5):
            body = pos
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            size, body = _varint(buf, pos)
            pos = body + size
        else:
            raise _malformed("ModelInferRequest", f"unsupported wire type {wire}")
        if pos > end:
            raise _malformed("ModelInferRequest", "truncated field")
        yield key >> 3, wire, start, body, pos


def _key(number: int, size: int) -> bytes:
    out = bytearray()
    for value in (number << 3 | 2, size):
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def parse_request(
    raw: bytes,
) -> tuple[pb.ModelInferRequest, dict[int, memoryview], list[memoryview] | None]:
    """The message, the ``contents`` bytes of its large inputs by input index, and (from
    ``RAW_VIEWS_FROM`` bytes) its ``raw_input_contents`` as views of ``raw``, left out of the
    message; None: they are in the message."""
    message = pb.ModelInferRequest()
    try:
        if len(raw) < RAW_VIEWS_FROM:
            message.MergeFromString(raw)
            return message, {}, None
        views: list[memoryview] = []
        return message, _merge_pieces(message, memoryview(raw), views), views
    except DecodeError as exc:
        raise _malformed("ModelInferRequest", str(exc), hint=True) from None


# What ``simple_request`` gives: model name, version, id, the inputs (name, datatype, shape),
# the requested outputs' names and the raw contents (views of the message's bytes).
InputSpec = tuple[str, str, tuple[int, ...]]  # name, datatype, shape
SimpleRequest = tuple[str, str, str, list[InputSpec], list[str], list[memoryview]]
_MORE: Final = 0x80  # a varint's byte with more to come
_INT64_SIGN: Final = 1 << 63
_UINT64_END: Final = 1 << 64


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A varint of ``buf[pos:end]`` and the position after it; (-1, -1) when malformed (the
    fast path's twin of ``_varint``, kept apart: over ``bytes``, which compiled code indexes
    directly, and without raising, where ``_varint`` reads views of large messages and
    raises protobuf-style errors)."""
    result = shift = 0
    while pos < end and shift < 70:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < _MORE:
            return (result, pos) if result < _UINT64_END else (-1, -1)
        shift += 7
    return -1, -1


def _payload(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Where a length-delimited payload whose length starts at ``pos`` begins and ends;
    (-1, -1) when malformed or past ``end``."""
    size, pos = _uvarint(buf, pos, end)
    return (pos, pos + size) if pos >= 0 and size <= end - pos else (-1, -1)


def _text(buf: bytes, start: int, end: int) -> str | None:
    try:
        return buf[start:end].decode()
    except UnicodeDecodeError:
        return None


def _int64(value: int) -> int:
    """A varint's 64 bits as protobuf's int64 (two's complement)."""
    return value - _UINT64_END if value >= _INT64_SIGN else value


def _dims(buf: bytes, pos: int, end: int, dims: list[int]) -> bool:
    """Packed int64 values of ``buf[pos:end]`` appended to ``dims``; False when malformed."""
    while pos < end:
        value, pos = _uvarint(buf, pos, end)
        if pos < 0:
            return False
        dims.append(_int64(value))
    return True


def _simple_tensor(buf: bytes, pos: int, end: int) -> InputSpec | None:
    """An InferInputTensor of name, datatype and shape only (None: anything else)."""
    name = datatype = ""
    dims: list[int] = []
    while pos < end:
        key, pos = _uvarint(buf, pos, end)
        if pos < 0:
            return None
        if key == (_INPUT_SHAPE << 3):  # one unpacked dimension
            value, pos = _uvarint(buf, pos, end)
            if pos < 0:
                return None
            dims.append(_int64(value))
            continue
        if key & 7 != 2:
            return None
        pos, stop = _payload(buf, pos, end)
        if pos < 0:
            return None
        number = key >> 3
        if number == 1 or number == 2:
            text = _text(buf, pos, stop)
            if text is None:
                return None
            if number == 1:
                name = text
            else:
                datatype = text
        elif number != _INPUT_SHAPE or not _dims(buf, pos, stop, dims):
            return None
        pos = stop
    return name, datatype, tuple(dims)


def _simple_output(buf: bytes, pos: int, end: int) -> str | None:
    """The name of an InferRequestedOutputTensor that has nothing else (None otherwise)."""
    name = ""
    while pos < end:
        key, pos = _uvarint(buf, pos, end)
        if pos < 0 or key != (1 << 3 | 2):
            return None
        pos, stop = _payload(buf, pos, end)
        text = None if pos < 0 else _text(buf, pos, stop)
        if text is None:
            return None
        name, pos = text, stop
    return name


def simple_request(raw: bytes) -> SimpleRequest | None:
    """The fields of a ModelInferRequest that has only model_name, model_version, id, inputs
    of a name, datatype and shape, requested outputs of a name, and raw_input_contents (what
    perf_analyzer and most clients send), read straight from its bytes; None for any other
    message (parameters, typed contents, an unknown field, text that is not UTF-8, bytes that
    do not parse): protobuf decodes that one (``parse_request``), and its errors are the
    answer. The same reader in both builds (docs/compiled-code.md)."""
    end = len(raw)
    pos = 0
    texts = ["", "", ""]
    inputs: list[InputSpec] = []
    outputs: list[str] = []
    raws: list[memoryview] = []
    view: memoryview | None = None
    while pos < end:
        key, pos = _uvarint(raw, pos, end)
        if pos < 0 or key & 7 != 2:
            return None
        pos, stop = _payload(raw, pos, end)
        if pos < 0:
            return None
        number = key >> 3
        if number == _RAW_INPUT_CONTENTS:
            if view is None:
                view = memoryview(raw)
            raws.append(view[pos:stop])
        elif number == _INPUTS:
            tensor = _simple_tensor(raw, pos, stop)
            if tensor is None:
                return None
            inputs.append(tensor)
        elif number == _REQUESTED:
            name = _simple_output(raw, pos, stop)
            if name is None:
                return None
            outputs.append(name)
        elif 1 <= number <= 3:
            text = _text(raw, pos, stop)
            if text is None:
                return None
            texts[number - 1] = text
        else:
            return None
        pos = stop
    return texts[0], texts[1], texts[2], inputs, outputs, raws


class _Census:
    """The counts of the first walk over a large ModelInferRequest (``_merge_pieces``): the
    message is refused as soon as one passes its bound, before protobuf builds an entry."""

    __slots__ = ("fields", "inputs", "outputs", "raws", "parameters")

    def __init__(self) -> None:
        self.fields = self.inputs = self.outputs = self.raws = self.parameters = 0

    def field(self) -> None:
        self.fields += 1
        if self.fields > MAX_FIELDS:
            raise _malformed("ModelInferRequest", f"more than {MAX_FIELDS} fields")

    def top(self, number: int, wire: int, payload: memoryview) -> None:
        """One field of the message (``payload``: its bytes past the length)."""
        self.field()
        if wire != 2:
            return
        if number == _INPUTS:
            self.inputs += 1
            if self.inputs > MAX_TENSORS:
                raise too_many("inputs", MAX_TENSORS)
            self._input(payload)
        elif number == _REQUESTED:
            self.outputs += 1
            if self.outputs > MAX_TENSORS:
                raise too_many("outputs", MAX_TENSORS)
            self._output(payload)
        elif number == _RAW_INPUT_CONTENTS:
            self.raws += 1
            if self.raws > MAX_TENSORS:
                raise too_many("raw_input_contents", MAX_TENSORS)
        elif number == _PARAMETERS:
            self.parameters += 1
            if self.parameters > MAX_PARAMETERS:
                raise too_many("parameters", MAX_PARAMETERS)

    def _input(self, tensor: memoryview) -> None:
        rank = parameters = 0
        name = tensor[0:0]
        for number, wire, _start, body, end in _fields(tensor):
            self.field()
            if number == _INPUT_SHAPE and wire == 0:
                rank += 1
            elif number == _INPUT_SHAPE and wire == 2:
                rank += _packed_count(tensor[body:end])
            elif number == _PARAMETERS and wire == 2:
                parameters += 1
            elif number == 1 and wire == 2:
                name = tensor[body:end]
            if rank > MAX_RANK:
                raise rank_error(_name(name))
            if parameters > MAX_PARAMETERS:
                raise too_many(f"parameters for input '{_name(name)}'", MAX_PARAMETERS)

    def _output(self, tensor: memoryview) -> None:
        parameters = 0
        name = tensor[0:0]
        for number, wire, _start, body, end in _fields(tensor):
            self.field()
            if number == _OUTPUT_PARAMETERS and wire == 2:
                parameters += 1
            elif number == 1 and wire == 2:
                name = tensor[body:end]
            if parameters > MAX_PARAMETERS:
                raise too_many(f"parameters for output '{_name(name)}'", MAX_PARAMETERS)


def _packed_count(payload: memoryview) -> int:
    """How many varints a packed field holds (a lower bound past ``MAX_RANK`` of them)."""
    if len(payload) > 10 * MAX_RANK:  # a varint is 10 bytes at most
        return (len(payload) + 9) // 10
    count = 0
    for byte in payload:
        if byte < _MORE:
            count += 1
    return count


def _name(text: memoryview) -> str:
    return bytes(text[:256]).decode(errors="replace")


def _merge_pieces(
    message: pb.ModelInferRequest, view: memoryview, views: list[memoryview]
) -> dict[int, memoryview]:
    contents: dict[int, memoryview] = {}
    piece: list[bytes | memoryview] = []
    size = index = 0
    census = _Census()
    for number, wire, start, body, end in _fields(view):
        census.top(number, wire, view[body:end])
        if number == _RAW_INPUT_CONTENTS and wire == 2:
            views.append(view[body:end])
            continue
        field: bytes | memoryview = view[start:end]
        if number == _INPUTS and wire == 2:
            if end - body > PIECE:
                field = _strip_contents(view[body:end], index, contents)
            index += 1
        piece.append(field)
        size += len(field)
        if size >= PIECE:
            message.MergeFromString(b"".join(piece))
            piece, size = [], 0
    message.MergeFromString(b"".join(piece))
    return contents


def _strip_contents(tensor: memoryview, index: int, contents: dict[int, memoryview]) -> bytes:
    """The input field without its ``contents`` (kept in ``contents[index]``)."""
    kept: list[bytes | memoryview] = []
    for number, wire, start, body, end in _fields(tensor):
        if number == _CONTENTS and wire == 2:
            contents[index] = tensor[body:end]  # a later one replaces it, as protobuf merges
        else:
            kept.append(tensor[start:end])
    rest = b"".join(kept)
    return _key(_INPUTS, len(rest)) + rest


_FIXED = {"fp32_contents": 4, "fp64_contents": 8}  # the others are varints
_DTYPES = {  # each field's own width, so chunks concatenate without changing type
    "bool_contents": np.bool_,
    "int_contents": np.int64,
    "int64_contents": np.int64,
    "uint_contents": np.uint64,
    "uint64_contents": np.uint64,
    "fp32_contents": np.float32,
    "fp64_contents": np.float64,
}


def decode_contents(view: memoryview, field: str, count: int) -> np.ndarray:
    """The values of ``field`` (an InferTensorContents field name) in ``view``, flat; stops
    early once there are more than ``count``."""
    number = pb.InferTensorContents.DESCRIPTOR.fields_by_name[field].number
    if number == _BYTES_CONTENTS:
        array = _uniform_bytes(view, count)
        return array if array is not None else _bytes_fields(view, count)
    chunks: list[np.ndarray] = []
    pending: list[memoryview] = []  # small fields, merged by one protobuf call per PIECE
    size = total = 0
    for key, wire, start, body, end in _fields(view):
        if key != number:
            continue
        if wire == 2 and end - body > PIECE:
            total += _flush(pending, field, chunks)
            for piece in _packed_pieces(view[body:end], number, _FIXED.get(field, 0)):
                total += _convert(piece, field, chunks)
        else:
            pending.append(view[start:end])
            size += end - start
        if size >= PIECE:
            total += _flush(pending, field, chunks)
        size = 0 if not pending else size
        if total > count:
            break
    _flush(pending, field, chunks)
    return np.concatenate(chunks) if chunks else np.empty(0, dtype=_DTYPES[field])


def _flush(pending: list[memoryview], field: str, chunks: list[np.ndarray]) -> int:
    if not pending:
        return 0
    count = _convert(b"".join(pending), field, chunks)
    pending.clear()
    return count


def _convert(piece: bytes, field: str, chunks: list[np.ndarray]) -> int:
    let_threads_run()  # a piece is a step of a long decode on a worker thread
    try:
        values = getattr(pb.InferTensorContents.FromString(piece), field)
    except DecodeError as exc:
        raise _malformed("InferTensorContents", str(exc), hint=True) from None
    dtype = _DTYPES[field]
    step = range(0, len(values), CHUNK)
    chunks.extend(np.asarray(values[i : i + CHUNK], dtype=dtype) for i in step)
    return len(values)


def _packed_pieces(payload: memoryview, number: int, fixed: int) -> Iterator[bytes]:
    """A packed field of many values as packed fields of at most ``PIECE`` bytes each."""
    pos, end = 0, len(payload)
    while pos < end:
        stop = min(pos + max(PIECE, 10), end)  # a varint takes 10 bytes at most
        if stop < end and fixed:
            stop -= (stop - pos) % fixed
        elif stop < end:  # after the last byte that ends a varint
            ends = np.flatnonzero(np.frombuffer(payload[pos:stop], dtype=np.uint8) < 0x80)
            if not ends.size:
                raise _malformed("InferTensorContents", "varint too long")
            stop = pos + int(ends[-1]) + 1
        yield _key(number, stop - pos) + bytes(payload[pos:stop])
        pos = stop


def _uniform_bytes(view: memoryview, count: int) -> np.ndarray | None:
    """``count`` bytes_contents of one length < 128 (tag, one-byte length, data), or None."""
    if count == 0 or len(view) % count:
        return None
    stride = len(view) // count
    length = stride - 2
    if not 0 <= length < 0x80:
        return None
    rows = np.frombuffer(view, dtype=np.uint8).reshape(count, stride)
    for i in range(0, count, CHUNK):
        head = rows[i : i + CHUNK, :2]
        if not ((head[:, 0] == _BYTES_CONTENTS << 3 | 2).all() and (head[:, 1] == length).all()):
            return None
    if length == 0:
        return empty_strings(count)
    return strided_items(view, count, 2, stride, length)  # past each field's 2-byte head


def _bytes_fields(view: memoryview, count: int) -> np.ndarray:
    """bytes_contents of mixed lengths, one field at a time (chunks of ``CHUNK``)."""
    parts, items, total = [], [], 0
    for key, wire, _start, body, end in _fields(view):
        if key != _BYTES_CONTENTS or wire != 2:
            continue
        items.append(bytes(view[body:end]))
        if len(items) == CHUNK:
            parts.append(object_array(items, (len(items),)))
            total += CHUNK
            items = []
            if total > count:
                break
    parts.append(object_array(items, (len(items),)))
    return np.concatenate(parts)


# -- the answer: ModelInferResponse bytes written here ------------------------------------------
OUTPUT_VIEWS_FROM = 1 << 14  # a raw output this large goes out as a view of its array
_RAW_OUTPUT_CONTENTS = 6  # ModelInferResponse.raw_output_contents
_OUTPUTS: Final = 5  # ModelInferResponse.outputs
_SHAPE: Final = 3  # InferOutputTensor.shape


def _put_varint(out: bytearray, value: int) -> None:
    value &= 0xFFFFFFFFFFFFFFFF  # a negative int64 is its two's complement, 10 bytes
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _put_string(out: bytearray, number: int, text: str) -> None:
    """A string field (proto3: an empty one is not written)."""
    if text:
        data = text.encode()
        out.append(number << 3 | 2)
        _put_varint(out, len(data))
        out += data


def output_tensor(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    """An InferOutputTensor (name, datatype, packed shape) as a ``outputs`` field."""
    body = bytearray()
    _put_string(body, 1, name)
    _put_string(body, 2, datatype)
    if shape:
        dims = bytearray()
        for dim in shape:
            _put_varint(dims, dim)
        body.append(_SHAPE << 3 | 2)
        _put_varint(body, len(dims))
        body += dims
    field = bytearray((_OUTPUTS << 3 | 2,))
    _put_varint(field, len(body))
    return bytes(field + body)


def infer_response(
    names: tuple[str, str, str],
    parameters: bytes,
    outputs: list[bytes],
    raws: list[bytes | memoryview],
) -> bytes | Pieces:
    """The bytes protobuf would give a ModelInferResponse of ``names`` (model name, version,
    id), ``parameters`` (its field 4, serialized), ``outputs`` (``output_tensor``'s) and
    ``raws`` (``raw_output_contents``, the last field): one bytes, or ``Pieces`` when some raw
    content is ``OUTPUT_VIEWS_FROM`` bytes or more (those are not copied)."""
    out = bytearray()
    for number, text in enumerate(names, 1):
        _put_string(out, number, text)
    out += parameters
    for field in outputs:
        out += field
    parts: list[bytes | memoryview] = []
    size = 0
    for raw in raws:
        length = len(raw) if isinstance(raw, bytes) else raw.nbytes
        out.append(_RAW_OUTPUT_CONTENTS << 3 | 2)
        _put_varint(out, length)
        if length < OUTPUT_VIEWS_FROM:
            out += raw
            continue
        parts.append(bytes(out))
        parts.append(raw if isinstance(raw, bytes) or raw.format == "B" else raw.cast("B"))
        size += len(out) + length
        out = bytearray()
    if not parts:
        return bytes(out)
    if out:
        parts.append(bytes(out))
        size += len(out)
    return Pieces(parts, size)
