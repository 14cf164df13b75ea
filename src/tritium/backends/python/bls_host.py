"""Server side of BLS (Business Logic Scripting): a stub's child requests run as any request.

A Python model calling ``pb_utils.InferenceRequest(...).exec()`` sends a BLS_REQUEST frame; a
``BlsHost`` (one per stub process) turns it into a ``ClientRequest`` and runs it through the
server's own ``request`` + ``submit`` (``BlsDispatch``, which ``InferenceServer`` satisfies: the
backend never imports the server), so the called model goes through its own scheduler
(dynamic batching, instance groups, sequences). Each response goes back as a BLS_RESPONSE
frame. Errors follow Triton's python_backend (``request_executor.cc``): a request that cannot
be scheduled is answered with "Model <m> - Error when running inference: ..." rather than
raising in the model. Children are cancelled when their parent request is (``cancel_children``)
and when the stub goes away (``close``); a child still waiting in its model's queue is answered
CANCELLED at once (a model calling itself with one instance would otherwise wait forever for
the instance its parent holds). Large tensors travel through ``shm_tensors``, through the
stub's segment pool (``StubProcess.segments``), which copies what the stub wrote.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ErrorKind, ServerError, cancelled
from ...request import InferenceRequest, RequestState, ResponseCallback, ResponseSender
from ...types import ClientRequest, DataType, InferenceResponse, RequestedOutput, Tensor
from . import ipc, shm_tensors
from .process import StubProcess

if TYPE_CHECKING:
    from ...tracing import Trace

log = logging.getLogger("tritium")

# Triton's TRITONSERVER_Error_Code order (pb_utils.TritonError codes).
_KIND_TO_CODE = {
    ErrorKind.UNKNOWN: 0,
    ErrorKind.INTERNAL: 1,
    ErrorKind.NOT_FOUND: 2,
    ErrorKind.INVALID_ARG: 3,
    ErrorKind.UNAVAILABLE: 4,
    ErrorKind.UNSUPPORTED: 5,
    ErrorKind.ALREADY_EXISTS: 6,
    ErrorKind.CANCELLED: 7,
}
_INTERNAL = 1
_NO_PARENT = -1
_NOT_READY = "Failed for execute the inference request. Model '{}' is not ready."
_FLAG_START, _FLAG_END = 1, 2

# BLS_REQUEST: (call id, parent batch id or -1, decoupled, model name, model version,
# request id, correlation id, flags, timeout (us), inputs, requested outputs, parameters JSON).
BlsRequestWire = tuple[
    int,
    int,
    bool,
    str,
    int,
    str,
    int | str,
    int,
    int,
    list[tuple[str, shm_tensors.PackedTensor]],
    list[str],
    str,
]


class BlsDispatch(Protocol):
    """What BLS needs of the server: its two steps for a request, and model control."""

    def request(
        self,
        client: ClientRequest,
        parent: InferenceRequest | None = None,
        trace: Trace | None = None,
    ) -> InferenceRequest: ...

    def submit(self, request: InferenceRequest, sender: ResponseSender) -> None: ...

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def model_ready(self, name: str, version: str = "") -> bool: ...


class BlsHost:
    """The BLS requests of one stub process: started, answered, cancelled, cleaned up."""

    def __init__(self, dispatch: BlsDispatch, stub: StubProcess) -> None:
        self._dispatch = dispatch
        self._stub = stub
        self._children: dict[int, tuple[InferenceRequest, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.segments = stub.segments
        self.in_flight: Callable[[], list[int]] = list  # the stub's executions (batch ids)
        # The requests of one of those executions (the parents of its BLS calls).
        self.batch_requests: Callable[[int], list[InferenceRequest]] = lambda _batch: []
        stub.bls = self

    def on_frame(self, kind: int, body: Any, buffers: ipc.Buffers) -> None:
        if kind == ipc.BLS_REQUEST:
            self._start(body, buffers)
        elif kind == ipc.BLS_CANCEL:
            entry = self._children.get(body)
            if entry is not None:
                _cancel(entry[0])
        elif kind == ipc.BLS_CONTROL:
            task = asyncio.ensure_future(self._control(*body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- inference ---------------------------------------------------------------------------
    def _start(self, wire: BlsRequestWire, buffers: ipc.Buffers) -> None:
        call_id, parent, decoupled, model_name = wire[0], wire[1], wire[2], wire[3]
        try:
            client = self._client(wire, buffers)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            shm_tensors.discard_segments(wire[9], self.segments)  # those it did not read
            self._fail(call_id, model_name, str(exc))
            return
        if parent == _NO_PARENT:  # sent from a model's own thread: the one execution running
            batches = self.in_flight()
            parent = batches[0] if len(batches) == 1 else _NO_PARENT
        try:
            request = self._dispatch.request(client, None, self._child_trace(parent))
        except ServerError as exc:
            if exc.kind in (ErrorKind.NOT_FOUND, ErrorKind.UNAVAILABLE):
                reason = (
                    f"Failed for execute the inference request. Model '{model_name}' is not ready."
                )
            else:
                reason = str(exc)
            self._fail(call_id, model_name, reason)
            return
        if request.decoupled and not decoupled:
            self._fail(call_id, model_name, _decoupled_refusal(model_name))
            return
        self._children[call_id] = (request, parent)
        try:
            self._dispatch.submit(request, ResponseSender(self._callback(call_id)))
        except ServerError as exc:
            self._children.pop(call_id, None)
            self._fail(call_id, model_name, str(exc))

    def _child_trace(self, parent: int) -> Trace | None:
        """A child of the parent request's trace when it is traced (a span under its model
        span, or a trace-file entry with its ``parent_id``). An execution of several traced
        requests gives no single parent: its BLS calls are not traced."""
        if parent == _NO_PARENT:
            return None
        traced = [r.trace for r in self.batch_requests(parent) if r.trace is not None]
        return traced[0].child() if len(traced) == 1 else None

    def _client(self, wire: BlsRequestWire, buffers: ipc.Buffers) -> ClientRequest:
        (_, _, _, model_name, version, request_id, correlation_id, flags, timeout_us, inputs,
         outputs, params_json) = wire  # fmt: skip
        parameters = json.loads(params_json) if params_json else {}
        if not isinstance(parameters, dict):
            raise ValueError("request parameters must be a JSON object")
        if correlation_id:
            parameters["sequence_id"] = correlation_id
        if flags & _FLAG_START:
            parameters["sequence_start"] = True
        if flags & _FLAG_END:
            parameters["sequence_end"] = True
        if timeout_us:
            parameters["timeout"] = timeout_us
        tensors = []
        for name, packed in inputs:
            data = shm_tensors.unpack(packed, buffers, self.segments)
            datatype = DataType.from_wire(packed[0])
            assert datatype is not None  # unpack refused an unknown one
            tensors.append(Tensor(name, datatype, tuple(data.shape), data))
        return ClientRequest(
            model_name,
            version,
            request_id,
            tuple(tensors),
            tuple(RequestedOutput(n) for n in outputs),
            parameters,
        )

    def _callback(self, call_id: int) -> ResponseCallback:
        def callback(response: InferenceResponse | None, final: bool) -> None:
            if final:
                self._children.pop(call_id, None)
            self._send(call_id, response, final)

        return callback

    def _send(self, call_id: int, response: InferenceResponse | None, final: bool) -> None:
        if not self._stub.alive:
            return
        buffers: ipc.Buffers = []
        payload: shm_tensors.ResponseWire | None = None
        if response is not None:
            error = response.error
            if error is not None:
                code = _INTERNAL
                if isinstance(error, ServerError):
                    code = _KIND_TO_CODE.get(error.kind, _INTERNAL)
                payload = (None, str(error), code)
            else:
                try:
                    tensors = [
                        (t.name, shm_tensors.pack(t.data, buffers, self.segments))
                        for t in response.outputs
                    ]
                except OSError as exc:  # /dev/shm is full: the error, not a dead stub
                    payload, buffers = (None, f"unable to pass the outputs: {exc}", _INTERNAL), []
                else:
                    params = json.dumps(response.parameters) if response.parameters else None
                    payload = (tensors, None, params)
        self._stub.send(ipc.BLS_RESPONSE, (call_id, payload, final), buffers)

    def _fail(self, call_id: int, model_name: str, reason: str) -> None:
        message = f"Model {model_name} - Error when running inference: {reason}"
        if self._stub.alive:
            self._stub.send(ipc.BLS_RESPONSE, (call_id, (None, message, _INTERNAL), True))

    # -- cancellation and cleanup ------------------------------------------------------------
    def cancel_children(self, parent_batch: int) -> None:
        """The parent request(s) of ``parent_batch`` were cancelled: so are their children."""
        for request, parent in list(self._children.values()):
            if parent == parent_batch:
                _cancel(request)

    def close(self) -> None:
        """The stub stopped or died: cancel its children (its segments are the stub's to
        remove)."""
        for request, _ in list(self._children.values()):
            _cancel(request)
        self._children.clear()
        for task in list(self._tasks):
            task.cancel()

    # -- model control -------------------------------------------------------------------------
    async def _control(self, call_id: int, action: str, args: list[Any]) -> None:
        """load / unload / ready, as Triton's ModelLoader: the reply is (ok, value or error)."""
        try:
            if action == "load":
                name, config, files = args
                await self._dispatch.load_model(name, config or None, files or None)
                value: Any = None
            elif action == "unload":
                await self._dispatch.unload_model(args[0], bool(args[1]))
                value = None
            else:
                _check_version(args[1])
                value = await self._dispatch.model_ready(args[0], args[1])
            reply: tuple[bool, Any] = (True, value)
        except (ServerError, ValueError) as exc:
            reply = (False, str(exc))
        if self._stub.alive:
            self._stub.send(ipc.BLS_REPLY, (call_id, reply))


def _cancel(request: InferenceRequest) -> None:
    """Cancel a child; one still waiting in its model's queue (nothing runs it to see the
    cancellation) is answered CANCELLED now, which its parent's ``exec()`` gets; the queue
    drops it when its turn comes."""
    request.cancel()
    if request.state is RequestState.QUEUED and request.on_cancel is None:
        request.fail(str(request.model_version), cancelled("the request was cancelled"))


def _decoupled_refusal(model_name: str) -> str:
    return (
        f"Model {model_name} is using the decoupled. The current BLS request call doesn't "
        "support models using the decoupled transaction policy. Please use "
        "'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
    )


def _check_version(version: str) -> None:
    """Triton's ModelLoader::GetModelVersionFromString, with its texts."""
    if version == "":
        return
    head = f"failed to get model version from specified version string '{version}'"
    try:
        number = int(version)
    except ValueError:
        raise ValueError(
            f"{head} (details: stol), version should be an integral value > 0"
        ) from None
    if number < 0:
        raise ValueError(f"{head}, version should be an integral value > 0")
