"""A ModelInstance backed by a stub process, kept alive: a stub that dies is restarted.

Requests go to the stub as EXECUTE frames and come back as EXEC_DONE / RESPONSE frames. When
the stub dies (SIGKILL, a segfault, the OOM killer, or the server killing a hung ``execute``),
the requests it held fail with Triton's message, the version reports UNAVAILABLE with the
reason, and a new stub is started after a back-off (``supervisor.CrashHistory``); requests
that were queued for the instance wait for it. Too many crashes in the window leave the
instance down until the model is reloaded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Container, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import orjson

from ... import loop_spin
from ...errors import ErrorKind, ServerError, cancelled, internal
from ...logs.settings import about_model
from ...config.spec import ModelSpec
from ...request import NOT_EXECUTED, InferenceRequest
from ...types import InferenceResponse
from ..base import output_tensor, requested_names, send_error
from . import ipc, shm_tensors
from .bls_host import BlsHost
from .process import StubProcess
from .supervisor import CrashHistory, RestartPolicy, VersionHealth

log = logging.getLogger("tritium")

# pb_utils.TritonError codes → error kinds (Triton's TRITONSERVER_Error_Code order).
_CODE_TO_KIND = [
    ErrorKind.UNKNOWN,
    ErrorKind.INTERNAL,
    ErrorKind.NOT_FOUND,
    ErrorKind.INVALID_ARG,
    ErrorKind.UNAVAILABLE,
    ErrorKind.UNSUPPORTED,
    ErrorKind.ALREADY_EXISTS,
    ErrorKind.CANCELLED,
]
EXECUTION_TIMEOUT_PARAMETER = "EXECUTION_TIMEOUT_SECS"


@dataclass(slots=True)
class Supervision:
    """What an instance needs to replace its stub: how to start one (spawned and
    initialised), the restart policy, its version's health, and the execution timeout."""

    spawn: Callable[[str], Awaitable[StubProcess]]
    policy: RestartPolicy
    health: VersionHealth
    execution_timeout_s: float | None = None


class Completion(Protocol):
    """What an execution in flight resolves once its requests are answered: the future a
    task awaits (``execute``), or a ``_Part`` of what ``start`` sent."""

    def done(self) -> bool: ...

    def set_result(self, result: None, /) -> None: ...


class _Started:
    """The executions one ``start`` sent: once each has resolved its ``Part``, ``done`` is
    called (on the loop's next turn, as a future's callbacks are: never inside the stub's
    frame handler) and the execution timeout's timer, if any, is cancelled."""

    def __init__(
        self, count: int, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]
    ) -> None:
        self.left = count
        self._loop = loop
        self._callback = callback
        self.timer: asyncio.TimerHandle | None = None

    def resolved(self) -> None:
        self.left -= 1
        if self.left == 0:
            if self.timer is not None:
                self.timer.cancel()
            self._loop.call_soon(self._callback)


class _Part:
    """One execution of a ``_Started`` group: its completion."""

    def __init__(self, group: _Started) -> None:
        self._group = group
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: None, /) -> None:
        if not self._done:
            self._done = True
            self._group.resolved()


class PythonInstance:
    """A ModelInstance backed by a stub process."""

    def __init__(
        self, spec: ModelSpec, version: int, stub: StubProcess, supervision: Supervision
    ) -> None:
        self.name = stub.name
        self._spec = spec
        self._about = about_model(spec.name)  # extra= of its log records
        self._version = str(version)
        self._batches: dict[int, tuple[Completion, list[InferenceRequest], list[bool]]] = {}
        self._ids = itertools.count()
        self._sent_ns = 0  # when the last EXECUTE frame left (statistics: compute_infer)
        self._input_ns = 0
        self._hop_ns = 0  # the last execution's round trip through the stub (loop_spin)
        self._sup = supervision
        self._timeout = supervision.execution_timeout_s
        self._crashes = CrashHistory(supervision.policy)
        self._restarted: asyncio.Future[None] | None = None  # set while a restart is pending
        self._restart_task: asyncio.Task[None] | None = None
        self._closing = False
        self._restarts: dict[str, int] = {}  # the model's statistics table (count_restarts_in)
        self._stub = stub
        self._bls: BlsHost | None = None
        self._attach(stub)

    def _attach(self, stub: StubProcess) -> None:
        self._stub = stub
        stub.on_batch_done = self._batch_done
        stub.on_response = self._response
        stub.on_death = self._died
        self._bls = stub.bls  # attached when the stub started (BLS may run in initialize)
        if self._bls is not None:
            self._bls.in_flight = lambda: list(self._batches)
            self._bls.batch_requests = self._batch_requests

    def _batch_requests(self, batch_id: int) -> list[InferenceRequest]:
        entry = self._batches.get(batch_id)
        return [] if entry is None else entry[1]

    @property
    def stub_pid(self) -> int | None:
        return self._stub.pid

    def count_restarts_in(self, table: dict[str, int]) -> None:
        """Keep this instance's restart count in ``table`` (the model's statistics)."""
        self._restarts = table
        table.setdefault(self.name, 0)

    async def execute(self, requests: list[InferenceRequest]) -> None:
        await self._send_executions([requests])

    async def execute_each(self, requests: list[InferenceRequest]) -> None:
        """One ``execute`` call per request, all sent in one frame and answered in one (with
        an execution timeout, one after the other, so each is timed on its own)."""
        if self._timeout is None:
            await self._send_executions([[r] for r in requests])
            return
        for request in requests:
            await self._send_executions([[request]])

    def start(self, requests: list[InferenceRequest], done: Callable[[], None]) -> bool:
        """``execute_each`` without a task (``backends/base.py:StartedInstance``): one
        ``execute`` per request, sent in one frame; ``done`` is called once, on the loop,
        when every one of them has been answered (or failed). False, with nothing sent, when
        that would have to wait: the stub is down, or several executions would each need
        the execution timeout of their own."""
        if not self._stub.alive or (self._timeout is not None and len(requests) > 1):
            return False
        self._start_executions([[r] for r in requests], done)
        return True

    def start_batch(self, requests: list[InferenceRequest], done: Callable[[], None]) -> bool:
        """``execute`` of all ``requests`` together (a dynamic batch) without a task
        (``backends/base.py:BatchStartedInstance``): one
        execution, sent at once; ``done`` is called on the loop once it is answered (or
        failed). False, with nothing sent, when the stub is down (the batch then waits for
        its restart in a task)."""
        if not self._stub.alive:
            return False
        self._start_executions([requests], done)
        return True

    def _start_executions(
        self, batches: list[list[InferenceRequest]], done: Callable[[], None]
    ) -> None:
        loop = asyncio.get_running_loop()
        group = _Started(len(batches), loop, done)
        stub = self._send([_Part(group) for _ in batches], batches)
        if self._timeout is not None and group.left:
            group.timer = loop.call_later(self._timeout, self._hung, stub)

    async def _send_executions(self, batches: list[list[InferenceRequest]]) -> None:
        if not self._stub.alive:
            batches = await self._wait_for_stub(batches)
            if not batches:
                return
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in batches]
        stub = self._send(futures, batches)
        if self._timeout is None:
            for future in futures:
                await future
            return
        timer = loop.call_later(self._timeout, self._hung, stub)
        try:
            for future in futures:
                await future
        finally:
            timer.cancel()

    def _send(
        self, completions: Sequence[Completion], batches: list[list[InferenceRequest]]
    ) -> StubProcess:
        """Send ``batches`` (one ``execute`` each) in one EXECUTE frame; each one's
        completion is resolved when its requests are answered. The stub they went to."""
        buffers: ipc.Buffers = []
        started = time.perf_counter_ns()
        # Encoded first: a request that cannot be (the caller fails it) leaves nothing here.
        executions = [
            (next(self._ids), [self._wire(r, buffers) for r in requests]) for requests in batches
        ]
        stub = self._stub
        stub.send(ipc.EXECUTE, executions, buffers)
        sent = zip(completions, batches, executions, strict=True)
        for completion, requests, (batch_id, _) in sent:
            self._batches[batch_id] = (completion, requests, [False] * len(requests))
            for index, request in enumerate(requests):
                request.on_cancel = self._canceller(batch_id, index)
        self._sent_ns = time.perf_counter_ns()
        self._input_ns = (self._sent_ns - started) // len(batches)
        if loop_spin.ACTIVE.requests == 1 and self._hop_ns < loop_spin.SPIN_NS:
            # This request is all the process has in flight, and the stub answered quickly
            # last time: the loop polls for its answer rather than sleep (loop_spin). Not for
            # a frame of several: the clients' wait is the stub's work then, not a wake-up.
            loop_spin.arm(asyncio.get_running_loop())
        return stub

    async def _wait_for_stub(
        self, batches: list[list[InferenceRequest]]
    ) -> list[list[InferenceRequest]]:
        """The stub is down: wait for its restart (if one is coming); the batches still to
        run then (without requests whose client went away), or [] once all are answered."""
        if self._restarted is not None:
            await asyncio.shield(self._restarted)
        if not self._stub.alive:
            error = internal(
                f"Failed to process the request(s) for model instance '{self.name}', "
                f"message: Stub process '{self.name}' is not healthy."
            )
            for batch in batches:
                for request in batch:
                    send_error(request, self._version, error)
            return []
        kept = []
        for batch in batches:
            for request in batch:
                if request.cancelled:
                    send_error(request, self._version, cancelled("the request was cancelled"))
            batch = [r for r in batch if not r.cancelled]
            if batch:
                kept.append(batch)
        return kept

    def _wire(self, request: InferenceRequest, buffers: ipc.Buffers) -> ipc.RequestWire:
        params = orjson.dumps(request.parameters).decode() if request.parameters else "{}"
        return (
            request.id,
            request.correlation_id,
            request.flags,
            request.timeout_us,
            [(t.name, self._pack_input(t.data, buffers)) for t in request.inputs],
            requested_names(self._spec, request),
            params,
        )

    def _pack_input(self, data: np.ndarray, buffers: ipc.Buffers) -> shm_tensors.PackedTensor:
        """An input for the EXECUTE frame: inline, or (a large one) copied into a segment the
        stub maps (``shm_tensors.InputSegments``: one copy, not two through the socket)."""
        inputs = self._stub.inputs
        if inputs is None or data.nbytes < shm_tensors.INPUT_MIN_BYTES:
            return ipc.pack_array(data, buffers)
        return shm_tensors.pack_input(data, buffers, inputs)

    def _canceller(self, batch_id: int, index: int) -> Callable[[], None]:
        def cancel() -> None:
            if self._stub.alive and batch_id in self._batches:
                self._stub.send(ipc.CANCEL, (batch_id, index))
                if self._bls is not None and all(r.cancelled for r in self._batches[batch_id][1]):
                    self._bls.cancel_children(batch_id)

        return cancel

    def _make_response(
        self, request: InferenceRequest, payload: ipc.ResponseWire, buffers: ipc.Buffers
    ) -> InferenceResponse:
        response = InferenceResponse(request.model_name, self._version, request.id)
        tensors, message, extra = payload
        if message is not None:
            kind = (
                _CODE_TO_KIND[extra] if isinstance(extra, int) and extra < 8 else ErrorKind.INTERNAL
            )
            response.error = ServerError(kind, message)
            return response
        assert tensors is not None  # no error message: the stub sent the outputs
        if request.outputs or request.extra_outputs:
            wanted: Container[str] = set(requested_names(self._spec, request))
        else:  # the common case: every configured output (a dict answers ``in``)
            wanted = self._spec.outputs
        try:
            response.outputs = [
                output_tensor(self._spec, n, self._array(t, buffers))
                for n, t in tensors
                if n in wanted
            ]
        except ServerError as exc:
            response.error = exc
            shm_tensors.discard_segments(tensors, self._segments)  # those not read
        else:
            if len(response.outputs) != len(tensors):  # outputs nobody asked for
                unread = [entry for entry in tensors if entry[0] not in wanted]
                shm_tensors.discard_segments(unread, self._segments)
        if extra:
            response.parameters = json.loads(extra)
        return response

    @property
    def _segments(self) -> shm_tensors.SegmentPool | None:
        return self._stub.segments

    def _array(self, packed: shm_tensors.PackedTensor, buffers: ipc.Buffers) -> np.ndarray:
        """An output's array: from the frame's buffers (the common case), or copied out of
        the shared-memory segment a large one came in."""
        if type(packed[2]) is int:
            return ipc.unpack_array(packed, buffers)
        return shm_tensors.unpack(packed, buffers, self._segments, keep=False)

    def _batch_done(self, body: ipc.ExecDone, buffers: ipc.Buffers) -> None:
        """``execute`` returned. Its requests are answered now, except a decoupled model's,
        whose responses may keep coming from the model's threads until each one's final flag;
        the batch stays routable until then."""
        batch_id, error, wired, again = body
        future, requests, finished = self._batches[batch_id]
        arrived = time.perf_counter_ns()
        infer_ns = arrived - self._sent_ns
        self._hop_ns = infer_ns
        self._sent_ns = arrived  # the next execution of a group ran after this one
        # With other requests in flight (some may wait for this instance), resolved first:
        # what waits on it (the scheduler's next group) runs on the loop's next turn before
        # the writes of the answers made below, so the stub starts on it while those go out.
        # Alone, resolved last, so that the answer's write goes first. (All synchronous
        # here: the answers are made before anything that waits on the future runs.)
        if loop_spin.ACTIVE.requests > len(requests) and not future.done():
            future.set_result(None)
        if error == ipc.NOT_RUN:  # cancelled while queued behind others of its frame
            gone = cancelled("the request was cancelled")
            for request in requests:
                request.timing = NOT_EXECUTED
            self._answer_unfinished(
                requests, finished, lambda r: send_error(r, self._version, gone)
            )
        elif error is not None:  # the stub's text, as Triton's stub words (and logs) it
            failure = internal(error)
            self._answer_unfinished(
                requests, finished, lambda r: send_error(r, self._version, failure)
            )
        elif wired is not None:
            self._answer_each(requests, wired, finished, buffers, infer_ns)
        if error is None and again:
            self._reschedule(requests, again, finished)
        # A request execute returned None for (all of them, when it returned None) is its
        # sender's to answer, as in Triton: it stays open until its final response.
        for request in requests:  # requests still answering, failed ones
            if request.timing is None:
                request.timing = (self._input_ns, infer_ns, 0)
        if all(finished):
            del self._batches[batch_id]
        if not future.done():
            future.set_result(None)

    def _answer_each(
        self,
        requests: list[InferenceRequest],
        wired: list[ipc.ResponseWire | None],
        finished: list[bool],
        buffers: ipc.Buffers,
        infer_ns: int,
    ) -> None:
        if len(wired) != len(requests):
            raise ValueError(f"{len(wired)} responses for an execution of {len(requests)}")
        for index in range(len(requests)):
            payload = wired[index]
            if payload is None or finished[index]:  # its sender answers (or has answered) it
                continue
            request = requests[index]
            began = time.perf_counter_ns()
            # Made before the request counts as answered: a response the server cannot use
            # (a segment the stub truncated or removed) kills the stub as malformed, and
            # ``fail_all`` then answers this request too instead of leaving it open forever.
            response = self._make_response(request, payload, buffers)
            finished[index] = True
            request.timing = (self._input_ns, infer_ns, time.perf_counter_ns() - began)
            assert request.sender is not None
            request.sender.send(response, True)

    def _reschedule(
        self, requests: list[InferenceRequest], again: tuple[int, ...], finished: list[bool]
    ) -> None:
        """The model released these requests with RESCHEDULE: each goes back to its scheduler
        (its responses from now on come from the execution that runs it next)."""
        for index in again:
            if not 0 <= index < len(requests):  # no stub sends it: a malformed frame
                raise ValueError(f"request index {index} is not one of the execution's")
            if finished[index]:  # its final response went out: nothing to run again
                continue
            finished[index] = True
            request = requests[index]
            request.on_cancel = None
            if request.reschedule is not None:
                request.reschedule(request)
                continue
            # Triton logs this when the release fails and releases the request (which then
            # never gets a response); tritium answers it with the error instead.
            message = (
                "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the "
                "model is not configured to handle such a flag."
            )
            log.error("Failed to release request: %s", message, extra=self._about)
            send_error(request, self._version, ServerError(ErrorKind.INVALID_ARG, message))

    @staticmethod
    def _answer_unfinished(
        requests: list[InferenceRequest],
        finished: list[bool],
        answer: Callable[[InferenceRequest], None],
    ) -> None:
        for i, request in enumerate(requests):
            if not finished[i]:
                finished[i] = True
                answer(request)

    def _response(self, body: ipc.ResponseFrame, buffers: ipc.Buffers) -> None:
        batch_id, index, payload, final = body
        entry = self._batches.get(batch_id)
        if entry is None or entry[2][index]:
            if payload is not None:  # the request already completed (or failed): nothing
                shm_tensors.discard_segments(payload[0], self._segments)  # more goes out
            return
        future, requests, finished = entry
        request = requests[index]
        response = None if payload is None else self._make_response(request, payload, buffers)
        # A model that is not decoupled answers each request once: its sender's one response
        # completes the request (Triton's front-ends take no more for it).
        final = final or (response is not None and not self._spec.decoupled)
        if final:
            finished[index] = True
            if future.done() and all(finished):
                del self._batches[batch_id]
        assert request.sender is not None
        request.sender.send(response, final)

    def fail_all(self, reason: str, kind: ErrorKind = ErrorKind.INTERNAL) -> None:
        """Answer every request the stub holds with an error (the stub is gone)."""
        error = ServerError(
            kind,
            f"Failed to process the request(s) for model instance '{self.name}', message: {reason}",
        )
        for batch_id in list(self._batches):
            future, requests, finished = self._batches.pop(batch_id)
            for i, request in enumerate(requests):
                if not finished[i]:
                    send_error(request, self._version, error)
            if not future.done():
                future.set_result(None)

    async def is_ready(self) -> bool:
        """Triton's TRITONBACKEND_ModelInstanceReady; why not is logged at verbose level in
        its core's words (``Model '<model>' version <v> is not ready: <reason>``)."""
        if not self._stub.alive:
            return self._not_ready(f"Stub process '{self.name}' is not healthy.")
        if not self._stub.asks_ready:
            return True
        try:
            ready = await self._stub.ready(timeout=5.0)
        except TimeoutError:
            return self._not_ready("Timed out waiting for user-defined is_ready() response")
        except ServerError as exc:
            return self._not_ready(exc.message)
        return ready or self._not_ready(
            f"Model '{self.name}' is not ready (user-defined check failed)."
        )

    def _not_ready(self, reason: str) -> bool:
        name, version = self._spec.name, self._version
        log.debug(
            "Model '%s' version %s is not ready: %s", name, version, reason, extra=self._about
        )
        return False

    # -- supervision -------------------------------------------------------------------------
    def _died(self, status: str) -> None:
        """The stub died without being asked to: fail what it held, then restart it (after
        a back-off) or, past the crash limit, leave the instance down."""
        cause = self._stub.cause  # the server killed it: a malformed frame
        detail = "" if cause is None else f" The server killed it: {cause}."
        self.fail_all(f"Stub process '{self.name}' is not healthy.{detail}")
        if self._bls is not None:
            self._bls.close()
        if self._closing:
            return
        # Triton's words first (log-watching tools look for them), then what happened
        what = f"Stub process '{self.name}' is not healthy. It died ({status})"
        delay = self._crashes.crashed(time.monotonic())
        if delay is None:
            self._give_up(what)
            return
        name = self._spec.name
        log.error("model '%s': %s; restarting it in %.1f s", name, what, delay, extra=self._about)
        self._sup.health.down(self.name, f"{what}; restarting")
        self._restarted = asyncio.get_running_loop().create_future()
        self._restart_task = asyncio.ensure_future(self._restart(delay))

    def _give_up(self, what: str) -> None:
        policy = self._sup.policy
        if policy.max_restarts <= 0:
            reason = f"{what}; restarts are off (--model-instance-max-restarts=0)"
        else:
            reason = (
                f"{what}; not restarted: {self._crashes.recent()} crashes within "
                f"{policy.window_s:g} s (--model-instance-max-restarts={policy.max_restarts})"
            )
        log.error("model '%s': %s", self._spec.name, reason, extra=self._about)
        self._sup.health.down(self.name, reason)
        self._wake()

    async def _restart(self, delay: float) -> None:
        while True:
            await asyncio.sleep(delay)
            try:
                stub = await self._sup.spawn(self.name)
            except Exception as exc:  # init failed or timed out, or spawning did
                what = f"stub process of instance '{self.name}' failed to restart ({exc})"
                next_delay = self._crashes.crashed(time.monotonic())
                if next_delay is None:
                    self._give_up(what)
                    return
                log.error(
                    "model '%s': %s; retrying in %.1f s",
                    self._spec.name,
                    what,
                    next_delay,
                    extra=self._about,
                )
                delay = next_delay
                continue
            break
        self._attach(stub)
        self._restarts[self.name] = self._restarts.get(self.name, 0) + 1
        log.warning(
            "model '%s': restarted the stub process of '%s'",
            self._spec.name,
            self.name,
            extra=self._about,
        )
        self._sup.health.up(self.name)
        self._wake()

    def _wake(self) -> None:
        """Let the requests waiting for a restart go on (to the new stub, or to fail)."""
        waiting, self._restarted = self._restarted, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    def _hung(self, stub: StubProcess) -> None:
        """``execute`` ran past the execution timeout: answer its requests, kill the stub
        and restart it like one that crashed (queued requests wait for the new one)."""
        if stub is not self._stub or not stub.alive:
            return
        timeout = f"{self._timeout:g} s"
        self.fail_all(
            f"execute() did not return within the execution timeout of {timeout} (model "
            f"parameter {EXECUTION_TIMEOUT_PARAMETER}); the stub process is restarted",
            ErrorKind.UNAVAILABLE,
        )
        stub.kill()
        self._died(f"killed: execute() ran past {EXECUTION_TIMEOUT_PARAMETER}={timeout}")

    def abort(self, reason: str) -> None:
        """Stop now (unload or shutdown ran out of time): kill the stub and answer every
        request it holds with ``reason``."""
        self._closing = True
        if self._restart_task is not None:
            self._restart_task.cancel()
        self._stub.kill()
        self.fail_all(reason, ErrorKind.UNAVAILABLE)
        if self._bls is not None:
            self._bls.close()
        self._wake()

    async def close(self) -> None:
        self._closing = True
        if self._restart_task is not None:
            self._restart_task.cancel()
            await asyncio.gather(self._restart_task, return_exceptions=True)
        self._wake()
        await self._stub.stop()
