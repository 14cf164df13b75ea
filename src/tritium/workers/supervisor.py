"""The supervisor: binds every front-end's listening sockets once, starts N worker processes
that inherit them (each a full replica: its own models, its own event loop), and keeps them
one server through the control plane (channel.py).

- A worker that exits (crash, ``kill -9``) is started again; the connections it had are
  reset by the kernel (their requests in flight fail), the listening sockets and their
  backlog stay with the others. A worker whose heartbeat stops for
  ``--worker-heartbeat-secs`` (a blocked event loop, a stopped process) is killed, then
  started again.
- SIGTERM/SIGINT: every worker drains (the single server's shutdown, within
  ``--exit-timeout-secs``); one still running after that and a grace is killed.
- A worker dies with the supervisor (``PR_SET_PDEATHSIG``, worker.py), so killing the
  supervisor leaves nothing behind (a worker's Python stubs die with their worker).
- Model control goes through here: a load or unload sent to any worker is applied on every
  worker, one control action at a time, and answered when all have done it; the actions
  applied since the start are replayed on a worker that starts again (history.py), one
  control message each. A worker that stops making progress in its replay (the next one
  not asked for within ``_SYNC_STEP_S`` and ``_SYNC_FACTOR`` times what the last one took
  the first time) is killed and started again, as one whose heartbeat stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ServerError, unavailable
from ..options import ServerOptions
from ..tracing.settings import TraceMode
from ..repository.scratch import Scratch, sweep
from ..runtime import bind_all, install_signal_handlers, write_ports
from . import shared
from .channel import Channel, ChannelClosed, Peer
from .client_limit import rows as client_rows
from .affinity import worker_cpus
from .balance import ROWS as BALANCE_ROWS
from .resources import ROWS as RESOURCE_ROWS
from .history import Entry, History, remove_upload
from .merge import merge_metrics, merge_statistics
from .shared import SharedCounters
from .trace_parts import join_parts

log = logging.getLogger("tritium")

ENV = "TRITIUM_WORKER"  # how a worker process learns its index, its sockets and its channel
_RESTART_DELAY_S = (0.1, 0.5, 1.0, 2.0, 5.0)  # after 1, 2, ... quick crashes in a row
_STOP_GRACE_S = 5.0  # past --exit-timeout-secs before a worker still running is killed
_BEAT_CHECK_S = 0.5
_START_GRACE_S = 30.0  # a starting worker imports before its first heartbeat
_SYNC_STEP_S = 20.0  # a replaying worker asks for its next action within this ...
_SYNC_FACTOR = 3.0  # ... and this many times what the last one took when first applied


@dataclass(eq=False)
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    peer: Peer | None = None
    synced: bool = False  # replayed the control history: gets every control action
    serving: bool = False  # accepting connections
    ready: bool = False  # its own readiness (strict readiness: every model ready)
    last_beat: float = 0.0
    started_at: float = 0.0
    crashes: int = 0  # quick exits in a row (the restart delay grows)
    replay: list[tuple[Entry, float]] = field(default_factory=list)  # what it replays
    deadline: float = 0.0  # replaying: its next step by then (0: not replaying)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    def __init__(
        self, options: ServerOptions, argv: list[str], bound: dict[str, list[socket.socket]]
    ) -> None:
        self.options = options
        self._argv = argv
        self._bound = bound
        self._workers = [_Worker(i) for i in range(options.workers)]
        self._stopping = False
        self._started = False  # every worker has served once
        self._failed = asyncio.Event()  # a worker failed before the server ever served
        self._all_serving = asyncio.Event()
        self._control = asyncio.Lock()  # one model-control action at a time, server-wide
        # explicit mode: the loads' file overrides, kept for the replays (history.py)
        explicit = options.repository.control_mode == "explicit"
        self._uploads = Scratch("uploads") if explicit else None
        # what a worker started again replays, in order
        self._history = History(self._uploads.path if self._uploads else None)
        self._cluster_ready = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._restarts = 0
        # the name of the workers' abstract sockets for forwarded requests (workers/forward.py)
        self._forward_name = f"tritium-{os.getpid()}-{secrets.token_hex(8)}"
        # --max-inflight-per-client's counts, every worker's (workers/client_limit.py)
        self._clients: SharedCounters | None = None
        # --rate-limit=execution_count's resources, every worker's (workers/resources.py)
        self._resources: SharedCounters | None = None
        if options.rate_limit.mode == "execution_count":
            fd = shared.create("resources", RESOURCE_ROWS, options.workers)
            self._resources = SharedCounters(fd, RESOURCE_ROWS, options.workers, -1)
        # what the workers lock together (the access log's appends and rotations)
        self._locks = shared.create_lock()
        self._client_rows = client_rows(options.workers)
        self._client_key = secrets.token_bytes(16)  # its hash's key: windows nobody can aim at
        if options.access.max_inflight_per_client > 0:
            fd = shared.create("clients", self._client_rows, options.workers)
            self._clients = SharedCounters(fd, self._client_rows, options.workers, -1)
        # --worker-affinity: the CPUs the workers run on, one each in turn (none: anywhere)
        self._cpus = worker_cpus(options.worker_affinity, options.workers)
        # --worker-sockets shared: the connections each worker holds (workers/balance.py)
        self._accepting: SharedCounters | None = None
        if options.worker_sockets == "shared":
            fd = shared.create("accepting", BALANCE_ROWS, options.workers)
            self._accepting = SharedCounters(fd, BALANCE_ROWS, options.workers, -1)

    @property
    def failed(self) -> bool:
        """A worker failed before the server ever served."""
        return self._failed.is_set()

    # -- processes -----------------------------------------------------------------------------
    def _spawn(self, worker: _Worker) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = {name: [s.fileno() for s in socks] for name, socks in self._bound.items()}
        env = dict(os.environ)
        env[ENV] = orjson.dumps(
            {
                "index": worker.index,
                "count": len(self._workers),
                "channel": theirs.fileno(),
                "sockets": fds,
                "parent": os.getpid(),
                "forward": self._forward_name,
                "reuseport": self.options.worker_sockets == "reuseport",
                "clients": self._clients.fd if self._clients else None,
                "locks": self._locks,
                "client_rows": self._client_rows,
                "client_key": self._client_key.hex(),
                "uploads": str(self._uploads.path) if self._uploads else None,
                "resources": self._resources.fd if self._resources else None,
                "accepting": self._accepting.fd if self._accepting else None,
                "cpu": self._cpus[worker.index % len(self._cpus)] if self._cpus else None,
            }
        ).decode()
        passed = [theirs.fileno(), self._locks, *(fd for group in fds.values() for fd in group)]
        tables = (self._clients, self._resources, self._accepting)
        passed += [t.fd for t in tables if t is not None]
        try:
            worker.proc = subprocess.Popen(
                [sys.executable, "-m", "tritium", *self._argv], env=env, pass_fds=passed
            )
        finally:
            theirs.close()
        worker.started_at = worker.last_beat = time.monotonic()
        worker.done = asyncio.Event()
        log.info("worker %d started (pid %d)", worker.index, worker.proc.pid)
        self._task(self._attend(worker, ours))

    def _task(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _attend(self, worker: _Worker, sock: socket.socket) -> None:
        """Serve one worker's channel until it closes (the process exited or is exiting),
        then reap it and, unless the server stops, start it again."""
        channel = await Channel.open(sock)
        peer = Peer(
            channel,
            lambda a, args: self._on_call(worker, a, args),
            lambda note: self._on_note(worker, note),
        )
        worker.peer = peer
        try:
            await peer.serve()
        except ChannelClosed:
            pass
        finally:
            channel.close()
            worker.peer = None
            worker.synced = worker.serving = worker.ready = False
            worker.replay, worker.deadline = [], 0.0
        code = await self._reap(worker)
        # its requests, executions and connections are gone with it
        for table in (self._clients, self._resources, self._accepting):
            if table is not None:
                table.clear(worker.index)
        worker.done.set()
        self._readiness_changed()
        if self._stopping:
            return
        self._restart(worker, code)

    async def _reap(self, worker: _Worker) -> int:
        proc = worker.proc
        assert proc is not None
        try:
            return await asyncio.wait_for(asyncio.to_thread(proc.wait), _STOP_GRACE_S)
        except TimeoutError:  # closed its channel but did not exit
            proc.kill()
            return await asyncio.to_thread(proc.wait)

    def _restart(self, worker: _Worker, code: int) -> None:
        pid = worker.proc.pid if worker.proc else 0
        reason = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if not self._started:
            log.error("error: worker %d (pid %d) %s while starting", worker.index, pid, reason)
            self._failed.set()
            return
        quick = time.monotonic() - worker.started_at < 10.0
        worker.crashes = worker.crashes + 1 if quick else 0
        delay = _RESTART_DELAY_S[min(worker.crashes, len(_RESTART_DELAY_S) - 1)]
        log.error(
            "worker %d (pid %d) %s: its requests in flight failed; starting it again",
            worker.index,
            pid,
            reason,
        )
        self._restarts += 1
        loop = asyncio.get_running_loop()
        loop.call_later(delay, lambda: None if self._stopping else self._spawn(worker))

    async def _watch_heartbeats(self) -> None:
        limit = self.options.worker_heartbeat_secs
        while not self._stopping:
            await asyncio.sleep(_BEAT_CHECK_S)
            now = time.monotonic()
            for worker in self._workers:
                proc = worker.proc
                if proc is None or proc.poll() is not None:
                    continue
                allowed = limit if worker.serving else limit + _START_GRACE_S
                if now - worker.last_beat > allowed:
                    log.error(
                        "worker %d (pid %d) sent no heartbeat for %.1fs: killing it",
                        worker.index,
                        proc.pid,
                        now - worker.last_beat,
                    )
                    worker.serving = False
                    proc.kill()
                elif worker.deadline and now > worker.deadline and not worker.serving:
                    log.error(
                        "worker %d (pid %d) made no progress replaying the model control "
                        "actions (%d of them) for too long: killing it",
                        worker.index,
                        proc.pid,
                        len(worker.replay),
                    )
                    worker.deadline = 0.0
                    proc.kill()

    # -- the control plane -----------------------------------------------------------------------
    def _on_note(self, worker: _Worker, note: dict[str, Any]) -> None:
        op = note.get("op")
        worker.last_beat = time.monotonic()
        if op == "serving":
            worker.serving = True
            worker.replay, worker.deadline = [], 0.0
            if all(w.serving for w in self._workers):
                self._all_serving.set()
        elif op in ("ready", "beat"):
            worker.ready = bool(note.get("ready"))
        if op in ("serving", "ready", "beat"):
            self._readiness_changed()

    def _readiness_changed(self) -> None:
        """The server is ready once every worker has served, while every worker that serves
        is ready (a worker starting again does not count: the others serve meanwhile)."""
        live = [w for w in self._workers if w.serving]
        ready = self._started and bool(live) and all(w.ready for w in live)
        if ready == self._cluster_ready:
            return
        self._cluster_ready = ready
        for worker in self._workers:
            if worker.peer is not None:
                try:
                    worker.peer.note("cluster", ready=ready)
                except ChannelClosed:
                    pass

    async def _on_call(self, worker: _Worker, action: str, args: dict[str, Any]) -> Any:
        if action == "sync":
            return await self._sync(worker)
        if action == "replay":
            return self._replay(worker, int(args["index"]))
        if action in ("load", "unload"):
            return await self._model_control(action, args)
        if action == "setting":
            return await self._setting(args)
        if action == "statistics":
            parts = await self._gather("statistics", args)
            return merge_statistics(parts)
        if action == "metrics":
            parts = await self._gather("metrics", args)
            return merge_metrics(parts) + self._own_metrics()
        raise unavailable(f"unknown control action '{action}'")

    def _own_metrics(self) -> str:
        serving = sum(1 for w in self._workers if w.serving)
        return (
            "# HELP tritium_workers Worker processes (--workers): configured, serving\n"
            "# TYPE tritium_workers gauge\n"
            f'tritium_workers{{state="configured"}} {len(self._workers)}\n'
            f'tritium_workers{{state="serving"}} {serving}\n'
            "# HELP tritium_worker_restarts_total Workers started again after they exited "
            "or hung\n"
            "# TYPE tritium_worker_restarts_total counter\n"
            f"tritium_worker_restarts_total {self._restarts}\n"
        )

    async def _sync(self, worker: _Worker) -> dict[str, Any]:
        """A worker whose models are loaded asks how many control actions were applied
        since the start (then each in turn, ``_replay``); from the answer on it gets every
        new one (the lock keeps none in between; it applies them after the replay)."""
        async with self._control:
            worker.synced = True
            worker.replay = self._history.snapshot()
            worker.deadline = time.monotonic() + _SYNC_STEP_S
            return {"count": len(worker.replay), "ready": self._cluster_ready}

    def _replay(self, worker: _Worker, index: int) -> Entry:
        """The ``index``-th action of the worker's replay: one small message each."""
        entry, took = worker.replay[index]
        worker.deadline = time.monotonic() + _SYNC_STEP_S + _SYNC_FACTOR * took
        return entry

    async def _model_control(self, action: str, args: dict[str, Any]) -> Any:
        upload = self._history.upload(args)
        async with self._control:
            started = time.monotonic()
            targets = [w for w in self._workers if w.synced and w.peer is not None]
            results = await asyncio.gather(
                *(self._apply(w, action, args) for w in targets), return_exceptions=True
            )
            errors = [r for r in results if isinstance(r, ServerError)]
            others = [r for r in results if isinstance(r, BaseException) and r not in errors]
            if len(errors) + len(others) < len(results):  # some worker applied it
                upload = self._history.model_action(action, args, time.monotonic() - started)
            await asyncio.to_thread(remove_upload, upload)  # replaced, or applied nowhere
            if errors:
                raise errors[0]
            if others:
                raise unavailable(f"model control: a worker failed: {others[0]}")
            return None

    async def _setting(self, change: dict[str, Any]) -> None:
        """A setting change (log, trace, system shared memory) on every synced worker but
        the one it came from (it applied it first); a registration that fails on one is
        taken back everywhere."""
        async with self._control:
            origin = int(change["origin"])
            targets = [w for w in self._workers if w.synced and w.index != origin]
            results = await asyncio.gather(
                *(self._apply(w, "setting", change) for w in targets), return_exceptions=True
            )
            failure = next((r for r in results if isinstance(r, BaseException)), None)
            if failure is not None and change["action"] == "shm_register":
                undo = {"action": "shm_unregister", "args": {"name": change["args"]["name"]}}
                await asyncio.gather(
                    *(self._apply(w, "setting", undo) for w in self._workers if w.synced),
                    return_exceptions=True,
                )
                change = undo
            self._history.setting(change)
            if isinstance(failure, ServerError):
                raise failure
            if failure is not None:
                raise unavailable(f"a worker failed to apply the change: {failure}")

    @staticmethod
    async def _apply(worker: _Worker, action: str, args: dict[str, Any]) -> Any:
        peer = worker.peer
        if peer is None:
            raise ChannelClosed(f"worker {worker.index} is gone")
        try:
            return await peer.call(action, args)
        except ChannelClosed:  # it died meanwhile: it replays the action when it starts again
            return None

    async def _gather(self, action: str, args: dict[str, Any]) -> list[Any]:
        """One answer per serving worker (a worker that dies meanwhile is left out)."""
        peers = [w.peer for w in self._workers if w.serving and w.peer is not None]
        results = await asyncio.gather(
            *(p.call(action, args) for p in peers), return_exceptions=True
        )
        for result in results:
            if isinstance(result, ServerError):
                raise result
        return [r for r in results if not isinstance(r, BaseException)]

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, stop: asyncio.Event) -> bool:
        """Start every worker; True once all serve, False if one fails first (or ``stop``
        is set meanwhile)."""
        await asyncio.to_thread(sweep, "uploads")  # those of supervisors killed (-9)
        for worker in self._workers:
            self._spawn(worker)
        waiting = {
            asyncio.ensure_future(self._all_serving.wait()),
            asyncio.ensure_future(self._failed.wait()),
            asyncio.ensure_future(stop.wait()),
        }
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for task in waiting:
            task.cancel()
        if self._failed.is_set() or not self._all_serving.is_set():
            return False
        self._started = True
        self._readiness_changed()
        self._task(self._watch_heartbeats())
        if self.options.repository.control_mode == "poll":
            self._task(self._poll())
        return True

    async def _poll(self) -> None:
        """``--model-control-mode=poll`` for the whole server: every ``--repository-poll-secs``
        one worker takes the repository's snapshot and every worker applies that same one."""
        while not self._stopping:
            await asyncio.sleep(self.options.repository.poll_secs)
            async with self._control:
                targets = [w for w in self._workers if w.synced and w.peer is not None]
                if not targets:
                    continue
                try:
                    snapshot = await self._apply(targets[0], "poll_snapshot", {})
                    if snapshot is None:  # that worker went away meanwhile
                        continue
                    results = await asyncio.gather(
                        *(self._apply(w, "poll_apply", {"snapshot": snapshot}) for w in targets),
                        return_exceptions=True,
                    )
                except ServerError as exc:
                    log.error("repository poll failed: %s", exc.message)
                    continue
                for result in results:
                    if isinstance(result, BaseException):
                        log.error("repository poll failed in a worker: %s", result)

    async def stop(self) -> None:
        """SIGTERM every worker (each drains within --exit-timeout-secs), close the sockets,
        kill the workers still running after the timeout and a grace."""
        self._stopping = True
        for worker in self._workers:
            if worker.proc is not None and worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        # The workers hold their own copies: a front-end stops accepting when every worker
        # closed its copy (HTTP at once, gRPC after its HTTP phase), as a single server's.
        for socks in self._bound.values():
            for sock in socks:
                sock.close()
        limit = self.options.exit_timeout_secs + _STOP_GRACE_S
        started = [w for w in self._workers if w.proc is not None]
        try:
            await asyncio.wait_for(asyncio.gather(*(w.done.wait() for w in started)), limit)
        except TimeoutError:
            for worker in started:
                if worker.proc is not None and worker.proc.poll() is None:
                    log.error(
                        "worker %d (pid %d) still running at the exit timeout: killed",
                        worker.index,
                        worker.proc.pid,
                    )
                    worker.proc.kill()
            await asyncio.gather(*(w.done.wait() for w in started))
        if self._uploads is not None:
            self._uploads.remove()
        values = self.options.tracing.values
        if values.file and values.mode is TraceMode.TRITON:  # every worker has closed its part
            join_parts(values.file, len(self._workers))


async def supervise(options: ServerOptions, argv: list[str]) -> int:
    """``tritium serve --workers N`` (N > 1): the supervisor's whole life."""
    try:
        bound = await bind_all(options, reuse_group=options.worker_sockets == "reuseport")
    except OSError as exc:
        log.error("error: %s", exc)
        return 1
    stop = asyncio.Event()
    install_signal_handlers(stop)
    supervisor = Supervisor(options, argv, bound)
    log.info("starting %d workers", options.workers)
    if not await supervisor.start(stop):
        await supervisor.stop()
        return 0 if stop.is_set() and not supervisor.failed else 1
    if options.ports_file:
        ports = {name: int(socks[0].getsockname()[1]) for name, socks in bound.items()}
        write_ports(options.ports_file, ports)
    log.info("serving with %d workers", options.workers)
    await stop.wait()
    log.info("shutting down: stopping %d workers", options.workers)
    await supervisor.stop()
    log.info("server stopped")
    return 0
