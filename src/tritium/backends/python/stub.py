"""The stub process that hosts one instance of a Triton Python model.

Run as ``python .../triton_python_backend_stub.py tritium.backends.python.stub <fd> <server
pid> <instance name> <token>`` (the launcher beside this file, which runs this module as
``python -m`` would and gives the process Triton's stub's name in ``ps``; the token: the
server's, in its segments' names, ``shm_tensors``); it speaks
the frames of ``ipc`` over the socket ``fd``. The model runs here, isolated: if it raises, the
error goes back as a response; if it crashes, only this process dies and the server notices the
closed socket. The stub never outlives the server: on Linux the kernel kills it when the server
dies (``PR_SET_PDEATHSIG``), and everywhere a watcher thread exits it once its parent changes;
a closed socket (the server went away) ends it too. The model's own children die with it
(``stub_group``).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import inspect
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...types import DataType
from . import bls_client, ipc, shm_tensors
from . import pb_c_utils, pb_metrics, pb_utils, stub_group
from .stub_failure import describe
from .stub_fork import install as relay_forks
from .stub_loop import StubLoop
from .stub_observe import Outbox, RemoteMetrics, ServerCalls


class Stub:
    def __init__(
        self,
        channel: ipc.BlockingChannel,
        server_pid: int = 0,
        name: str = "stub",
        token: str = "",  # the server's (shm_tensors.server_token)
    ) -> None:
        self._channel = channel
        self._send_lock = threading.Lock()
        # Frames are read through the mux: threads blocked in BLS calls read them too.
        self._mux = bls_client.FrameMux(channel, self._cancel)
        names = shm_tensors.SegmentNames(server_pid, os.getpid(), token)
        segments = shm_tensors.SegmentPool(names)
        self._segments = segments  # large outputs go to the server through them too
        self._inputs = shm_tensors.InputMaps(names)  # large inputs the server lends
        self._bls = bls_client.BlsClient(self._mux, self.send, segments, name)
        self._name = name  # the instance's name (INIT says it again: Triton's messages)
        pb_utils._set_bls(self._bls)
        self._model_cls: Any = None
        self._model: Any = None
        self._initialized = False  # initialize() returned: only then does finalize() run
        self._loop = StubLoop()  # coroutines of the model (stub_loop)
        self._execute_is_async = False
        self._decoupled = False
        self._output_names: list[str] = []
        self._model_name = ""
        self._cancelled: set[tuple[int, int]] = set()  # (batch, index) the client gave up on
        self._looked = 0.0  # when the running frame last read its CANCELs (execute_all)
        self._model_version = -1
        self._outbox = Outbox()  # the model's logs and metric updates (stub_observe)

    def observe(self) -> None:
        """Route ``pb_utils.Logger`` and custom metrics to the server (see stub_observe)."""
        pb_utils._set_log_sink(self._outbox.log)
        pb_metrics._set_backend(RemoteMetrics(self._outbox, ServerCalls(self.send, self._mux)))
        self._outbox.start_flusher(self.flush)
        relay_forks(self._bls, self.forked)

    def forked(self, link: ipc.BlockingChannel) -> None:
        """In a child the model forked (``stub_fork``): frames go over ``link`` to the
        parent, which relays them; the server's socket is its and its siblings' no more."""
        server, self._channel = self._channel, link
        self._send_lock = threading.Lock()
        self._mux.reattach(link)
        self._bls.reattach()
        # The parent's inputs are the parent's to give back: none from here.
        self._inputs = shm_tensors.InputMaps(self._inputs.names)
        self._loop.after_fork()
        self._outbox.after_fork()
        self._outbox.start_flusher(self.flush)
        pb_metrics._handles_after_fork(os.getpid())
        server.close()

    def flush(self) -> None:
        with self._send_lock:
            self._flush()

    def _flush(self) -> None:
        observed = self._outbox.take()
        if observed is not None:
            self._channel.send(ipc.OBSERVE, observed)
        free = self._inputs.take_free()
        if free:  # input segments the model let go of: the server writes them again
            self._channel.send(ipc.INPUTS_FREE, free)

    def send(self, kind: int, body: Any, buffers: ipc.Buffers | None = None) -> None:
        with self._send_lock:
            self._flush()  # the logs and counts of what produced this frame go first
            self._channel.send(kind, body, buffers)

    def _cancel(self, key: tuple[int, int]) -> None:
        """The server's CANCEL of a request of an ``execute`` (read by any thread): its
        (batch id, index)."""
        self._cancelled.add((key[0], key[1]))

    # -- lifecycle ---------------------------------------------------------------------------
    def _import_model(self, path: str) -> None:
        self._model_cls = import_model(path)

    def autocomplete(self, body: dict[str, Any]) -> dict[str, Any] | None:
        self._import_model(body["path"])
        hook = getattr(self._model_cls, "auto_complete_config", None)
        if hook is None:
            return None
        config = pb_utils.ModelConfig(body["config"])
        result = hook(config)
        return (result or config).as_dict()

    def init(self, body: dict[str, Any]) -> dict[str, bool]:
        """Load the model; the reply says whether it has an ``is_ready`` of its own (else
        the server asks no stub: it is ready while it is alive, as Triton's)."""
        if self._model_cls is None:
            self._import_model(body["path"])
        config = json.loads(body["args"]["model_config"])
        self._outbox.enabled = list(body.get("log_levels", self._outbox.enabled))
        self._decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled"))
        self._output_names = [o["name"] for o in config.get("output", [])]
        self._model_name = body["args"]["model_name"]
        self._name = self._bls.instance = body["args"]["model_instance_name"]
        self._model_version = int(body["args"]["model_version"])
        self._model = self._model_cls()
        execute = getattr(self._model, "execute", None)
        self._execute_is_async = inspect.iscoroutinefunction(execute)
        init = getattr(self._model, "initialize", None)
        if init is not None:
            result = init(body["args"])
            if inspect.isawaitable(result):
                self._run(result)
        self._initialized = True
        self._bls.enabled = True  # BLS from now on (Triton: only once initialized)
        has_ready = getattr(self._model, "is_ready", None) is not None
        if has_ready:
            self._answer_readiness()
        return {"is_ready": has_ready}

    def _answer_readiness(self) -> None:
        """IS_READY is answered by a thread of its own, as Triton's stub does, so a model
        busy in ``execute`` still tells the server whether it is ready."""
        self._mux.divert(ipc.IS_READY)

        def run() -> None:
            while True:
                try:
                    self._mux.next_diverted()
                    self._answer_ready()
                except (EOFError, OSError):
                    return

        threading.Thread(target=run, name="tritium-stub-ready", daemon=True).start()

    def _run(self, awaitable: Any) -> Any:
        return self._loop.run(awaitable)

    # -- execution ---------------------------------------------------------------------------
    def _make_request(
        self,
        batch_id: int,
        index: int,
        wire: ipc.RequestWire,
        buffers: ipc.Buffers,
        finished: list[bool],
    ) -> pb_utils.InferenceRequest:
        request_id, correlation_id, flags, timeout_us, inputs, outputs, params = wire
        tensors = [
            pb_utils.Tensor._wrap(name, self._inputs.unpack(t, buffers), _TYPE_CODE[t[0]])
            for name, t in inputs
        ]
        decoupled = self._decoupled

        def send(response: pb_utils.InferenceResponse | None, flags: int) -> None:
            if finished[index]:  # execute failed, which closed the senders of its requests
                raise pb_utils.TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if final:
                finished[index] = True
                self._cancelled.discard(key)
            out = shm_tensors.FrameTensors(self._segments)
            try:
                payload = None if response is None else self._wire_response(response, out)
                self.send(ipc.RESPONSE, (batch_id, index, payload, final), out.buffers)
            except (OSError, ipc.FrameTooLarge) as exc:  # /dev/shm full, or too much inline
                out.rollback()
                failed = (None, f"unable to send the response: {exc}", _INTERNAL)
                self.send(ipc.RESPONSE, (batch_id, index, failed, final))

        key = (batch_id, index)

        def is_cancelled() -> bool:
            if key not in self._cancelled:
                self._mux.poll()  # the CANCEL may be waiting unread while execute runs
            return key in self._cancelled

        def make_sender() -> pb_utils.InferenceResponseSender:
            return pb_utils.InferenceResponseSender(send, is_cancelled, decoupled=decoupled)

        request = pb_utils.InferenceRequest._from_server(
            request_id,
            correlation_id,
            flags,
            tensors,
            outputs or self._output_names,
            params,
            self._model_name,
            self._model_version,
            make_sender,
        )
        request._cancelled = is_cancelled
        request._timeout = timeout_us  # pb_utils: request.timeout(), in microseconds
        return request

    @staticmethod
    def _wire_response(
        response: pb_utils.InferenceResponse, out: shm_tensors.FrameTensors
    ) -> ipc.ResponseWire:
        """``response`` is what the model sent, or returned from ``execute`` (model code,
        not checked: anything else raises here, and the batch fails with it); its tensors go
        inline or, when large, through shared memory (``out``)."""
        error = response.error()
        if error is not None:
            return (None, error.message(), error.code())
        tensors = [(t.name(), out.pack(t._as_array())) for t in response.output_tensors()]
        params = response.parameters()
        return (tensors, None, params if params and params != "{}" else None)

    def execute(
        self,
        batch_id: int,
        wires: list[ipc.RequestWire],
        buffers: ipc.Buffers,
        out: shm_tensors.FrameTensors,
    ) -> ipc.ExecDone:
        """One ``execute`` call of the model; returns its EXEC_DONE entry (output tensors
        queued on ``out``)."""
        parent = bls_client.current_batch.set(batch_id)  # the parent of BLS calls it makes
        finished = [False] * len(wires)  # which requests had their final response
        try:
            requests = [
                self._make_request(batch_id, i, w, buffers, finished) for i, w in enumerate(wires)
            ]
            result = self._model.execute(requests)
            if self._execute_is_async or (
                type(result) is not list and result is not None and inspect.isawaitable(result)
            ):
                if self._decoupled:  # answered through its senders: runs on, in the background
                    self._loop.start(self._background(batch_id, result, finished))
                    return (batch_id, None, None, ())
                result = self._run(result)
        except Exception as exc:  # the model raised: every request of the batch fails
            return self._failed(batch_id, describe(exc).reason, finished)
        finally:
            bls_client.current_batch.reset(parent)
        again = _rescheduled(requests)
        if result is None:  # answered (or answering) through senders
            return (batch_id, None, None, again)
        if self._decoupled:
            message = (
                f"Python model '{self._name}' is using the decoupled mode and the execute "
                "function must return None."
            )
            return self._failed(batch_id, message, finished)
        if len(result) != len(requests):
            message = (
                f"Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, "
                f"and InferenceResponse(s) size is:{len(result)}"
            )
            return self._failed(batch_id, message, finished)
        for index in again:  # a rescheduled request is answered by a later execution
            if result[index] is not None:
                message = (
                    "Expected a None object in the execute function return list for "
                    f"reschduled request, found type '{type(result[index])}'."
                )
                return self._failed(batch_id, message, finished)
        mark = out.mark()
        try:
            wired = [None if r is None else self._wire_response(r, out) for r in result]
        except Exception as exc:
            out.rollback(mark)
            return self._failed(batch_id, f"{type(exc).__name__}: {exc}", finished)
        return (batch_id, None, wired, again)

    def _failed(self, batch_id: int, detail: str, finished: list[bool]) -> ipc.ExecDone:
        """``execute`` failed: Triton's stub logs it as an error, every request of the
        execution not finished yet gets it, and their senders are closed (pb_stub.cc
        ProcessRequests)."""
        finished[:] = [True] * len(finished)
        message = self._execute_failure(detail)
        self._outbox.log("ERROR", message, _here())
        return (batch_id, message, None, ())

    def _execute_failure(self, detail: str) -> str:
        return f"Failed to process the request(s) for model '{self._name}', message: {detail}"

    async def _background(self, batch_id: int, execution: Any, finished: list[bool]) -> None:
        """A decoupled model's ``async def execute``, run concurrently with the next ones.
        If it raises, its requests still waiting for a final response get the error."""
        bls_client.current_batch.set(batch_id)  # this task's own context
        try:
            await execution
        except Exception as exc:  # Triton logs the traceback (Stub::BackgroundFutureDone)
            failure = describe(exc)
            self._outbox.log("ERROR", failure.traceback, _here())
            payload = (None, self._execute_failure(failure.reason), pb_utils.TritonError.INTERNAL)
            for index, done in enumerate(finished):
                if not done:
                    finished[index] = True
                    self._cancelled.discard((batch_id, index))
                    self.send(ipc.RESPONSE, (batch_id, index, payload, True))

    def execute_all(
        self, executions: list[tuple[int, list[ipc.RequestWire]]], buffers: ipc.Buffers
    ) -> None:
        """Several executions sent together (requests that queued up for this instance):
        each is its own ``execute`` call, in order; one frame carries every answer."""
        out = shm_tensors.FrameTensors(self._segments)
        self._looked = time.perf_counter()  # the frame's CANCELs so far were read with it
        done = [
            self._not_run(batch_id, wires)
            if position and self._all_cancelled(batch_id, len(wires))
            else self.execute(batch_id, wires, buffers, out)
            for position, (batch_id, wires) in enumerate(executions)
        ]
        try:
            self.send(ipc.EXEC_DONE, done, out.buffers)
        except ipc.FrameTooLarge as exc:  # over what the server accepts: say so instead
            out.rollback()
            message = f"the responses could not be sent: {exc}"
            self.send(ipc.EXEC_DONE, [(entry[0], message, None, ()) for entry in done])

    def _not_run(self, batch_id: int, wires: list[ipc.RequestWire]) -> ipc.ExecDone:
        for wire in wires:  # their input segments go back unread
            self._inputs.skip(wire[4])
        return ipc.not_run(batch_id)

    def _all_cancelled(self, batch_id: int, count: int) -> bool:
        """Whether every request of an execution waiting behind others of its frame was
        cancelled meanwhile (a CANCEL read now counts): it is not run then, as Triton runs
        no request cancelled while queued (the server answers them CANCELLED)."""
        cancelled = self._cancelled
        if not all((batch_id, i) in cancelled for i in range(count)):
            now = time.perf_counter()
            if now - self._looked < _CANCEL_LOOK_S:  # too soon for a CANCEL to matter
                return False
            self._looked = now
            self._mux.poll()
            if not all((batch_id, i) in cancelled for i in range(count)):
                return False
        for index in range(count):
            cancelled.discard((batch_id, index))
        return True

    def _answer_ready(self) -> None:
        """IS_READY's answer, a READY_REPLY: the server may ask again before an answer
        that came late (a slow ``is_ready``), so it is not a REPLY of its other calls."""
        try:
            reply: tuple[bool, Any] = (True, self.is_ready())
        except Exception as exc:
            reply = (False, self._failure(ipc.IS_READY, None, exc))
        self.send(ipc.READY_REPLY, reply)

    def is_ready(self) -> bool:
        hook = getattr(self._model, "is_ready", None)
        if hook is None:
            return True
        result = hook()
        if inspect.isawaitable(result):
            result = self._run(result)
        return bool(result)

    def finalize(self) -> None:
        self._bls.enabled = False  # Triton: no BLS while finalizing
        # Triton's stub finalizes an initialized model only: a model whose initialize()
        # raised (or never ran) is not finalized, so one that cleans up in finalize() can
        # retry its load.
        hook = getattr(self._model, "finalize", None) if self._initialized else None
        try:
            if hook is not None:
                result = hook()
                if inspect.isawaitable(result):
                    self._run(result)
        except Exception as exc:  # Triton logs it (at INFO) and goes on finalizing
            self._outbox.log("INFO", describe(exc).reason, _here())
        finally:
            self._loop.stop()

    # -- main loop ---------------------------------------------------------------------------
    def serve(self) -> bool:
        """Answer the server's frames; returns True after FINALIZE, False when the server
        closed the socket (it is gone, or gave up on this stub)."""
        handlers: dict[int, Callable[[Any], Any]] = {
            ipc.AUTOCOMPLETE: self.autocomplete,
            ipc.INIT: self.init,
            ipc.FINALIZE: lambda _body: self.finalize(),
        }
        while True:
            try:
                kind, body, buffers = self._mux.next_command()
            except EOFError:
                return False
            if kind == ipc.EXECUTE:
                self.execute_all(body, buffers)
                continue
            if kind == ipc.LOG_LEVELS:  # the logging extension changed them (one-way)
                self._outbox.enabled = list(body)
                continue
            if kind == ipc.RELEASED:  # segments of our outputs the server has copied
                self._segments.adopt(body)
                continue
            if kind == ipc.IS_READY:  # not diverted: the model has no is_ready() (True)
                self._answer_ready()
                continue
            try:
                reply: tuple[bool, Any] = (True, handlers[kind](body))
            except Exception as exc:
                reply = (False, self._failure(kind, body, exc))
            self.send(ipc.REPLY, reply)
            if kind == ipc.FINALIZE:
                return True

    def _failure(self, kind: int, body: Any, exc: Exception) -> str:
        """The reply's error text. The model failed to load (``import``,
        ``auto_complete_config``, ``initialize``): Triton's reason with the model's frames, and
        the traceback logged at the model's line (it leaves ahead of the reply)."""
        if kind not in (ipc.AUTOCOMPLETE, ipc.INIT):
            return "".join(traceback.format_exception_only(type(exc), exc)).strip()
        failure = describe(exc, str(body.get("path", "")) if isinstance(body, dict) else "")
        step = " for auto-complete" if kind == ipc.AUTOCOMPLETE else ""
        self._outbox.log(
            "ERROR",
            f"Failed to initialize Python stub '{self._name}'{step}: {failure.traceback}",
            failure.where,
        )
        return failure.reason


def import_model(path: str) -> Any:
    """Import ``model.py`` and return its ``TritonPythonModel``, as Triton's stub does.

    The version directory and the model's directory are appended to ``sys.path`` (installed
    packages come first, a model's own files after them), and the file is imported as the
    module ``<version>.<file>`` (``1.model``): the version directory is a package, so a model
    of several files can use relative imports (``from . import helper``). A version directory
    whose name cannot be a package name (a dot in it) imports the file as ``model``."""
    model_path = Path(path)
    version_dir = model_path.parent
    sys.path.extend((str(version_dir), str(version_dir.parent)))
    package = version_dir.name
    if not model_path.name.endswith(".py") or "." in package or not package:
        return _import_file("model", model_path).TritonPythonModel
    _import_package(package, version_dir)
    return _import_file(f"{package}.{model_path.name[:-3]}", model_path).TritonPythonModel


def _import_package(name: str, directory: Path) -> None:
    """The version directory as the package ``name``: its ``__init__.py`` run where it has
    one (a regular package), else an empty package over the directory alone (not a namespace
    package that other directories of the same name on ``sys.path`` would join)."""
    init = directory / "__init__.py"
    if init.is_file():
        _import_file(name, init, [str(directory)])
        return
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    sys.modules[name] = importlib.util.module_from_spec(spec)


def _import_file(name: str, model_path: Path, search: list[str] | None = None) -> Any:
    spec = importlib.util.spec_from_file_location(
        name, model_path, submodule_search_locations=search
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_TYPE_CODE = {
    t.wire: getattr(pb_utils, "TYPE_STRING" if t is DataType.BYTES else f"TYPE_{t.wire}")
    for t in DataType
}
_INTERNAL = pb_utils.TritonError.INTERNAL
# How long the executions of one frame run before the stub looks for CANCELs that came
# meanwhile (a socket poll) ahead of the next one: fast executions do not pay a system call
# each, a slow one's followers are still skipped once their clients have gone.
_CANCEL_LOOK_S = 0.001


def _rescheduled(requests: list[pb_utils.InferenceRequest]) -> tuple[int, ...]:
    """The requests the model released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (as
    Triton's stub, the flags must be that value alone)."""
    flag = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    return tuple(i for i, r in enumerate(requests) if r._release_flags() == flag)


def _here() -> str:
    """``stub.py:<line>`` of the caller: where a log record of the stub's own comes from."""
    return f"{Path(__file__).name}:{sys._getframe(1).f_lineno}"


def _never() -> bool:
    return False


def _batch_scheduling() -> None:
    """SCHED_BATCH: a stub woken by the server's write does not preempt the server on its
    CPU, so the server finishes what it is doing (answering other clients) first. Measured
    with `add_sub_python` over HTTP at concurrency 16; without it the server's writes to the
    stub stall while the stub runs in its place."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or not permitted: keep the default
        pass


_PR_SET_PDEATHSIG = 1
_PARENT_POLL_S = 0.5


def _die_with_parent(parent: int) -> None:
    """Never outlive the server, even when it is killed with SIGKILL and even while the model
    is stuck in its own code: the kernel sends SIGKILL when the parent dies (Linux), and a
    daemon thread polls the parent pid (everywhere, and for the race before prctl)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc to call: the watcher alone
            pass
    if os.getppid() != parent:  # the server died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(_PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="tritium-parent-watch", daemon=True).start()


def main() -> None:
    if len(sys.argv) > 2:
        stub_group.start(int(sys.argv[2]))
        _die_with_parent(int(sys.argv[2]))
    server_pid = int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid()
    name = sys.argv[3] if len(sys.argv) > 3 else "stub"
    token = sys.argv[4] if len(sys.argv) > 4 else ""
    run(int(sys.argv[1]), server_pid, name, token)


def run(fd: int, server_pid: int, name: str, token: str) -> None:
    """Serve the model over socket ``fd`` (the process is already tied to the server:
    ``main``, or ``stub_zygote`` for a stub forked from the zygote)."""
    # Ctrl-C in a terminal reaches the whole process group: the server shuts its stubs down
    # itself (finalize, then kill), so a stub must not die of it first and look crashed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _batch_scheduling()
    sock = socket.socket(fileno=fd)
    sys.modules["triton_python_backend_utils"] = pb_utils
    sys.modules["c_python_backend_utils"] = pb_c_utils  # Triton's C++ module, as models see it
    # The model sees the argv of Triton's embedded interpreter, not the stub's command line
    # (``unittest.main()`` and ``argparse`` read it; ``ps`` still shows the command line).
    sys.argv = [""]
    stub = Stub(ipc.BlockingChannel(sock), server_pid, name, token)
    stub.observe()
    if not stub.serve():
        # The server closed the socket without FINALIZE: it is gone. Threads the model
        # started must not keep this process alive.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
