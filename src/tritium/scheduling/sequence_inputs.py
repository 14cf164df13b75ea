"""What the sequence batcher adds to a request before it runs: the control tensors
(START / END / READY / CORRID, as the config names them), the implicit state inputs, and
the state outputs it takes back from the response; and the READY = false fillers of a
direct batch. Pure functions of the config and the request; ``sequence.py`` calls them."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ..config.sequence import SequenceConfig
from ..errors import ServerError, invalid_arg
from ..request import InferenceRequest, ResponseSender
from ..types import ClientRequest, DataType, InferenceResponse, Tensor

START_FLAG, END_FLAG = 1, 2


class SequenceState:
    """One sequence's implicit state: input name -> the value the model sees next."""

    __slots__ = ("cid", "values")

    def __init__(self, cid: int | str) -> None:
        self.cid = cid
        self.values: dict[str, np.ndarray] = {}


def check(config: SequenceConfig, request: InferenceRequest) -> ServerError | None:
    """Triton's checks of a request to a sequence model, in Triton's order and words."""
    model = request.model_name
    if request.batch_size > 1:
        return invalid_arg(
            f"inference request to model '{model}' must specify batch-size 1 due to "
            "requirements of sequence batcher"
        )
    cid = request.correlation_id
    if cid == 0 or cid == "":
        return invalid_arg(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    if config.corrid is not None:
        name, datatype = config.corrid
        sent = DataType.BYTES if isinstance(cid, str) else DataType.UINT64
        if (sent is DataType.BYTES) != (datatype is DataType.BYTES):
            prefix = f"[request id: {request.id}] " if request.id else ""
            return invalid_arg(
                f"{prefix}sequence batching control '{name}' data-type is '{sent.wire}', but "
                f"model '{model}' expects '{datatype.wire}'"
            )
    return None


def _control(config: SequenceConfig, name: str, datatype: DataType, value: np.ndarray) -> Tensor:
    data = value.reshape(1, 1) if config.batched else value
    return Tensor(name, datatype, data.shape, data)


def add_controls(
    config: SequenceConfig, tensors: list[Tensor], flags: int, ready: bool, cid: int | str
) -> None:
    """Append the control tensors the config asks for to ``tensors``."""
    for control, on in (
        (config.start, flags & START_FLAG),
        (config.end, flags & END_FLAG),
        (config.ready, ready),
    ):
        if control is not None:
            tensors.append(
                _control(config, control.name, control.datatype, control.value(bool(on)))
            )
    if config.corrid is not None:
        name, datatype = config.corrid
        if datatype is DataType.BYTES:
            text = cid if isinstance(cid, str) else ""
            value = np.array([text.encode()], dtype=object)
        else:
            value = np.array([cid if isinstance(cid, int) else 0], dtype=datatype.dtype)
        tensors.append(_control(config, name, datatype, value))


def add_state(config: SequenceConfig, tensors: list[Tensor], state: SequenceState) -> None:
    """Append each implicit state input: its current value, else the initial one."""
    for spec in config.states:
        value = state.values.get(spec.input_name, spec.initial)
        tensors.append(Tensor(spec.input_name, spec.datatype, value.shape, value))


def state_capture(
    config: SequenceConfig,
    state: SequenceState,
    request: InferenceRequest,
    configured: Iterable[str],
) -> Callable[[InferenceResponse], None]:
    """A sender hook that keeps the state outputs of a response as the sequence's next state
    inputs, and removes them from what the client gets unless the client asked for an
    output of that name that the config also lists (``configured``)."""
    wanted = {o.name for o in request.outputs} if request.outputs else set(configured)
    specs = {s.output_name: s for s in config.states}

    def capture(response: InferenceResponse) -> None:
        kept = []
        for tensor in response.outputs:
            spec = specs.get(tensor.name)
            if spec is None:
                kept.append(tensor)
                continue
            value = np.array(tensor.data, copy=True)  # not a view of the batch's output
            value.flags.writeable = False
            state.values[spec.input_name] = value
            if tensor.name in wanted:
                kept.append(tensor)
        response.outputs = kept

    return capture


def filler(
    config: SequenceConfig, template: InferenceRequest, base: int, version: str
) -> InferenceRequest:
    """A READY = false request for a slot with nothing to run in a direct batch: the client
    inputs of ``template`` (its first ``base`` tensors) zeroed, controls all false, and the
    template's state inputs (so the batch's shapes agree). Its answer is dropped."""
    tensors = [_zeroed(t) for t in template.inputs[:base]]
    add_controls(config, tensors, 0, False, "" if _string_ids(config) else 0)
    state_names = {s.input_name for s in config.states}
    tensors.extend(t for t in template.inputs[base:] if t.name in state_names)
    client = ClientRequest(template.model_name, inputs=tuple(tensors))
    request = InferenceRequest(client)
    request.model = template.model
    request.model_version = template.model_version
    request.batch_size = 1
    request.extra_outputs = config.state_outputs
    sender = ResponseSender(_drop)
    sender.bind(request, _ignore)
    return request


def _string_ids(config: SequenceConfig) -> bool:
    return config.corrid is not None and config.corrid[1] is DataType.BYTES


def _zeroed(tensor: Tensor) -> Tensor:
    if tensor.datatype is DataType.BYTES:
        data = np.full(tensor.data.shape, b"", dtype=object)
    else:
        data = np.zeros_like(tensor.data)
    return Tensor(tensor.name, tensor.datatype, tensor.shape, data)


def _drop(response: InferenceResponse | None, final: bool) -> None:
    """A filler's answer goes nowhere."""


def _ignore(
    request: InferenceRequest, error: Exception | None, last: InferenceResponse | None
) -> None:
    """A filler has no statistics, cache or shared memory to settle."""
