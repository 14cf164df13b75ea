"""Whether a model's cost can depend on the *values* a client sends, decided once at load: such
a model never runs on the event loop (backends/inline_policy.py ``ModelExecution``), because
a few bytes can ask it for seconds of work after cheap requests taught the policy that it is
fast (a TorchScript loop of ``int(x[0])`` steps; ONNX ``ConstantOfShape(x) -> MatMul``).

A model is value-dependent when

- an input has a variable dimension besides the batch one (``-1`` in the configured dims) or
  is ragged: the client picks the size of the work (a dynamic sequence length);
- ONNX: its graph has a ``Loop``, ``If`` or ``Scan`` node, or a node whose output size is set
  by the values of one of its inputs (``SHAPE_INPUTS``: ``ConstantOfShape``'s shape,
  ``Range``'s bounds, ``Reshape`` / ``Expand`` / ``Tile`` / ``Resize`` / ``Slice`` / ``Pad``
  / ``TopK``'s shape operands, ``NonZero`` ...) where that input derives from the graph's
  inputs' values. Initializers, ``Constant`` nodes and ``Shape`` / ``Size`` (which read only
  shapes, and shapes are fixed by the rule above) are not client values; a local function
  that holds such a node, called with client values, counts as the node;
- TorchScript: a ``prim::Loop`` whose trip count or condition, or a ``prim::If`` whose
  condition, derives from input values; a tensor turned into a number (``aten::Int``,
  ``item``, ``tolist`` ...: numbers size tensors); an operator whose output size is its
  input's values (``nonzero``, ``unique``, ``masked_select`` ...); or a call the inlined
  graph still holds (an interface: its code is unknown here). ``aten::size`` and friends read
  shapes only.
- OpenVINO: a ``Loop``, ``TensorIterator`` or ``If``, or any dynamic output shape once the
  inputs are given static shapes (OpenVINO's own shape inference says what a value sets).

The ONNX graph is read here from the protobuf wire format (``onnx``, the package, is not a
dependency of the server), memory-mapped: only node and initializer headers are decoded,
weights are skipped. Operators of other domains than ONNX's own are taken as they are (their
cost is the hard bound's to catch: inline_policy.py).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.spec import ModelSpec

CONTROL_FLOW = frozenset({"Loop", "If", "Scan"})
# ONNX operator -> the inputs whose values set the size of its output (or of its work).
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "TopK": (1,),
    "NonZero": (0,),
    "Unique": (0,),
    "Compress": (1,),
    "OneHot": (1,),
    "NonMaxSuppression": (2,),
    "Split": (1,),
    "SplitToSequence": (1,),
    "CenterCropPad": (1,),
    "MaxUnpool": (2,),
    "Col2Im": (1, 2),
    "DFT": (1,),
    "STFT": (1, 3),
}
# Operators whose output depends on their input's shape only, not its values.
SHAPE_ONLY = frozenset({"Shape", "Size"})
_ONNX_DOMAINS = ("", "ai.onnx")


def variable_inputs(spec: ModelSpec) -> str:
    """Why the client sets the size of the work (a reason), or '' when every input's shape
    is fixed by the configuration (the batch dimension is bounded by max_batch_size)."""
    for io in spec.inputs.values():
        if io.allow_ragged:
            return f"input '{io.name}' is ragged (its length is the client's)"
        if -1 in io.dims:
            return f"input '{io.name}' has a variable dimension ({list(io.dims)})"
    return ""


# -- the protobuf wire format (onnx.proto: the field numbers of the messages read here) ------

_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_SPARSE = 1, 5, 11, 15
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP, _NODE_DOMAIN = 1, 2, 3, 4, 7
_TENSOR_NAME, _SPARSE_VALUES, _VALUE_INFO_NAME = 8, 1, 1
_FUNCTION_NAME, _FUNCTION_NODE, _FUNCTION_DOMAIN = 1, 7, 10


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint")


def _fields(data: memoryview) -> Iterator[tuple[int, Any]]:
    """(field number, value) of one message: an int for a varint, a memoryview (no copy) for
    a length-delimited field; fixed-width fields are skipped."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield key >> 3, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise ValueError("truncated field")
            yield key >> 3, data[pos : pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: memoryview) -> str:
    return bytes(value).decode("utf-8", "replace")


@dataclass(slots=True)
class _Node:
    op: str
    domain: str = ""
    name: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def _node(data: memoryview) -> _Node:
    node = _Node("")
    for number, value in _fields(data):
        if number == _NODE_INPUT:
            node.inputs.append(_text(value))
        elif number == _NODE_OUTPUT:
            node.outputs.append(_text(value))
        elif number == _NODE_OP:
            node.op = _text(value)
        elif number == _NODE_DOMAIN:
            node.domain = _text(value)
        elif number == _NODE_NAME:
            node.name = _text(value)
    return node


def _name_of(data: memoryview, number: int) -> str:
    return next((_text(v) for n, v in _fields(data) if n == number), "")


@dataclass(slots=True)
class _Graph:
    nodes: list[_Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    constants: set[str] = field(default_factory=set)  # initializers not fed by a client


def _graph(data: memoryview) -> _Graph:
    graph = _Graph()
    for number, value in _fields(data):
        if number == _GRAPH_NODE:
            graph.nodes.append(_node(value))
        elif number == _GRAPH_INPUT:
            graph.inputs.append(_name_of(value, _VALUE_INFO_NAME))
        elif number == _GRAPH_INITIALIZER:
            graph.constants.add(_name_of(value, _TENSOR_NAME))
        elif number == _GRAPH_SPARSE:
            values = next((v for n, v in _fields(value) if n == _SPARSE_VALUES), None)
            if values is not None:
                graph.constants.add(_name_of(values, _TENSOR_NAME))
    # an initializer that is also a graph input can be overridden by a request
    graph.constants.difference_update(graph.inputs)
    return graph


def _functions(model: memoryview) -> dict[tuple[str, str], list[_Node]]:
    functions = {}
    for number, value in _fields(model):
        if number != _MODEL_FUNCTIONS:
            continue
        name, domain, nodes = "", "", []
        for inner, part in _fields(value):
            if inner == _FUNCTION_NAME:
                name = _text(part)
            elif inner == _FUNCTION_DOMAIN:
                domain = _text(part)
            elif inner == _FUNCTION_NODE:
                nodes.append(_node(part))
        functions[(domain, name)] = nodes
    return functions


def _risky_op(node: _Node) -> bool:
    return node.domain in _ONNX_DOMAINS and (node.op in CONTROL_FLOW or node.op in SHAPE_INPUTS)


def _function_reason(node: _Node, body: list[_Node], functions: dict[Any, list[_Node]]) -> str:
    """A call of a local function with client values: its body's first control-flow or
    shape-taking node (or that of a function it calls), named."""
    for inner in body:
        if _risky_op(inner):
            return (
                f"node '{node.name or node.op}' calls function '{node.op}', which has a {inner.op}"
            )
        nested = functions.get((inner.domain, inner.op))
        if nested is not None and nested is not body:
            reason = _function_reason(inner, nested, functions)
            if reason:
                return reason
    return ""


def _node_reason(node: _Node, tainted: set[str], functions: dict[Any, list[_Node]]) -> str:
    label = f"node '{node.name}' ({node.op})" if node.name else f"a {node.op} node"
    if node.domain in _ONNX_DOMAINS and node.op in CONTROL_FLOW:
        return f"its graph has control flow: {label}"
    positions = SHAPE_INPUTS.get(node.op, ()) if node.domain in _ONNX_DOMAINS else ()
    for index in positions:
        if index < len(node.inputs) and node.inputs[index] in tainted:
            return f"{label} takes the size of its output from input values"
    body = functions.get((node.domain, node.op))
    if body is not None and any(name in tainted for name in node.inputs):
        return _function_reason(node, body, functions)
    return ""


def onnx_graph_reason(model: memoryview) -> str:
    """Why an ONNX model's cost depends on input values, or ''."""
    graph = next((_graph(v) for n, v in _fields(model) if n == _MODEL_GRAPH), None)
    if graph is None:
        return "its ONNX file has no graph"
    functions = _functions(model)
    tainted = {name for name in graph.inputs if name}
    for node in graph.nodes:  # ONNX nodes are topologically sorted
        reason = _node_reason(node, tainted, functions)
        if reason:
            return reason
        shape_only = node.domain in _ONNX_DOMAINS and node.op in SHAPE_ONLY
        if not shape_only and any(name in tainted for name in node.inputs):
            tainted.update(node.outputs)
    return ""


def onnx_reason(path: Path) -> str:
    """``onnx_graph_reason`` of the file at ``path`` (memory-mapped); a file this cannot read
    counts as value-dependent (its reason says so)."""
    try:
        with (
            path.open("rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm,
        ):
            view = memoryview(mm)
            try:
                return onnx_graph_reason(view)
            finally:
                view.release()
    except (OSError, ValueError, IndexError) as exc:
        return f"its graph could not be read ({exc})"


# -- TorchScript ------------------------------------------------------------------------------

# tensor -> number: a number can size a tensor or count a loop
TORCH_TO_NUMBER = frozenset(
    {
        "aten::Int",
        "aten::Float",
        "aten::Bool",
        "aten::item",
        "aten::tolist",
        "aten::IntImplicit",
        "aten::FloatImplicit",
        "aten::ScalarImplicit",
        "aten::_local_scalar_dense",
    }
)
# operators whose output size is their input's values
TORCH_SIZED_BY_VALUES = frozenset(
    {
        "aten::nonzero",
        "aten::nonzero_numpy",
        "aten::nonzero_static",
        "aten::argwhere",
        "aten::unique",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::masked_select",
        "aten::repeat_interleave",
        "aten::bincount",
    }
)
# operators that read a tensor's shape or metadata, not its values
TORCH_SHAPE_ONLY = frozenset(
    {
        "aten::size",
        "aten::dim",
        "aten::numel",
        "aten::len",
        "prim::shape",
        "prim::dtype",
        "prim::device",
        "prim::layout",
        "prim::requires_grad",
        "aten::is_inference",
        "aten::is_floating_point",
    }
)
TORCH_CALLS = frozenset({"prim::CallMethod", "prim::CallFunction"})


def torch_graph_reason(graph: Any) -> str:
    """Why a TorchScript graph (``module.inlined_graph``) may cost what its input values say,
    or ''. The module itself (a first input of class type) is not a client value."""
    inputs = list(graph.inputs())
    if inputs and inputs[0].type().kind() == "ClassType":
        inputs = inputs[1:]
    tainted = {value.debugName() for value in inputs}
    return _torch_block_reason(graph.nodes(), tainted)


def _torch_block_reason(nodes: Iterable[Any], tainted: set[str]) -> str:
    for node in nodes:
        kind = node.kind()
        names = [value.debugName() for value in node.inputs()]
        dirty = [name in tainted for name in names]
        reason = _torch_node_reason(node, kind, dirty)
        if not reason:
            reason = _torch_blocks_reason(node, any(dirty), tainted)
        if reason:
            return reason
        if any(dirty) and kind not in TORCH_SHAPE_ONLY:
            tainted.update(value.debugName() for value in node.outputs())
    return ""


def _torch_node_reason(node: Any, kind: str, dirty: list[bool]) -> str:
    if kind in TORCH_CALLS:
        return f"its graph calls code it does not hold ({kind})"
    if kind == "prim::Loop" and any(dirty[:2]):
        return "a loop runs as many times as input values say (prim::Loop)"
    if kind == "prim::If" and dirty[:1] == [True]:
        return "a branch is chosen by input values (prim::If)"
    if any(dirty) and kind in TORCH_TO_NUMBER and _of_tensor(node):
        return f"an input value becomes a number ({kind})"
    if any(dirty) and (
        kind in TORCH_SIZED_BY_VALUES or (kind == "aten::where" and len(dirty) == 1)
    ):
        return f"an output's size is input values ({kind})"
    return ""


def _of_tensor(node: Any) -> bool:
    """Whether a conversion converts a tensor (``int(tensor)``, not ``int(a_bool)``)."""
    first = next(iter(node.inputs()), None)
    return first is not None and first.type().kind() == "TensorType"


def _torch_blocks_reason(node: Any, dirty: bool, tainted: set[str]) -> str:
    """The blocks of a loop or branch: their parameters are client values when the node's
    inputs are (or, for a loop, when its body returns client values into them: walked
    again); what they return taints the node's outputs; a loop's continue condition (its
    block's first return) must not derive from client values."""
    for block in node.blocks():
        for again in (False, True):
            if dirty or again:
                tainted.update(value.debugName() for value in block.inputs())
            reason = _torch_block_reason(block.nodes(), tainted)
            if reason:
                return reason
            returned = [value.debugName() in tainted for value in block.outputs()]
            if node.kind() == "prim::Loop" and returned[:1] == [True]:
                return "a loop stops when input values say (prim::Loop)"
            if any(returned):
                tainted.update(value.debugName() for value in node.outputs())
            if dirty or not any(returned) or node.kind() != "prim::Loop":
                break
    return ""


# -- OpenVINO -------------------------------------------------------------------------------

OPENVINO_CONTROL_FLOW = frozenset({"Loop", "TensorIterator", "If"})


def openvino_reason(model: Any, spec: ModelSpec, partial_shape: Callable[[list[int]], Any]) -> str:
    """Why an OpenVINO model (``ov.Model``, as it will be compiled) may cost what its input
    values say, or '': control flow, or an output shape that OpenVINO cannot infer once every
    input has its configured, static shape (batch 1): a size taken from input values
    (Broadcast of an input's values, NonZero, Range ...). ``partial_shape`` is
    ``ov.PartialShape`` (this module imports no framework)."""
    for op in model.get_ordered_ops():
        if op.get_type_name() in OPENVINO_CONTROL_FLOW:
            return f"its graph has control flow: {op.get_friendly_name()} ({op.get_type_name()})"
    static = model.clone()
    try:
        static.reshape(
            {port.get_any_name(): partial_shape(_static(port, spec)) for port in static.inputs}
        )
    except Exception as exc:  # OpenVINO's own exception types
        return f"its shapes could not be fixed for the analysis ({exc})"
    for op in static.get_ordered_ops():
        for index in range(op.get_output_size()):
            if op.get_output_partial_shape(index).is_dynamic:
                return (
                    f"{op.get_friendly_name()} ({op.get_type_name()}) takes the size of its "
                    "output from input values"
                )
    return ""


def _static(port: Any, spec: ModelSpec) -> list[int]:
    """An input's shape with each dynamic dimension set: the configured one, else 1."""
    io = next((spec.inputs[n] for n in port.get_names() if n in spec.inputs), None)
    dims = (io.reshape if io.reshape is not None else io.dims) if io is not None else ()
    lead = 1 if spec.max_batch_size > 0 else 0
    fixed = []
    for index, dim in enumerate(port.get_partial_shape()):
        inner = index - lead
        if dim.is_static:
            fixed.append(dim.get_length())
        elif 0 <= inner < len(dims) and dims[inner] > 0:
            fixed.append(dims[inner])
        else:
            fixed.append(1)
    return fixed
