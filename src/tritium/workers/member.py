"""One worker's end of the control plane (``runtime.py:WorkerLink`` and ``server.py:Cluster``).

The supervisor started this process with ``TRITIUM_WORKER`` set: its index, the inherited
listening sockets, its channel and the supervisor's pid. The worker dies with the supervisor
(``PR_SET_PDEATHSIG``, and a check for the race before it took effect); it stops (drains)
when the channel closes.

What must be the whole server's goes to the supervisor (load, unload, statistics, metrics,
the log and trace settings, system shared-memory registrations);
what the supervisor applies on every worker comes back as a call (``_on_call``); a heartbeat
note, carrying this worker's own readiness, goes every ``_BEAT_S``.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from ..access.policy import ClientLimiter
from ..errors import internal, invalid_arg, unavailable
from ..frontends.sockets import listen_again
from ..metrics.render import CpuSampler, render
from ..metrics.render_latency import SUMMARIES
from ..options import ServerOptions
from ..tracing.settings import TraceMode
from ..server import InferenceRequest, InferenceServer, ResponseSender
from .channel import Channel, ChannelClosed, Peer
from .balance import ROWS as BALANCE_ROWS
from .balance import AcceptBalance
from .client_limit import SharedClientLimiter
from .forward import Forwarder, SequenceOwner, owner_of, socket_path
from .resources import ROWS as RESOURCE_ROWS
from .resources import SharedRateLimiter
from .shared import SharedCounters
from .supervisor import ENV
from .trace_parts import part_suffix

log = logging.getLogger("tritium")

_BEAT_S = 0.5
_PR_SET_PDEATHSIG = 1


def from_environment() -> Member | None:
    """This process's Member when the supervisor started it, else None."""
    text = os.environ.pop(ENV, "")
    if not text:
        return None
    plan = orjson.loads(text)
    _die_with(int(plan["parent"]))
    sockets = {
        name: [socket.socket(fileno=int(fd)) for fd in fds]
        for name, fds in dict(plan["sockets"]).items()
    }
    for socks in sockets.values():
        for sock in socks:
            sock.setblocking(False)
    channel = socket.socket(fileno=int(plan["channel"]))
    index, count = int(plan["index"]), int(plan["count"])
    if plan.get("cpu") is not None:
        _pin(int(plan["cpu"]))
    member = Member(index, count, str(plan["forward"]), sockets, channel)
    member.reuseport = bool(plan.get("reuseport"))
    member.locks = int(plan["locks"])
    member.uploads = Path(plan["uploads"]) if plan.get("uploads") else None
    if plan.get("resources") is not None:
        member.resources = SharedCounters(int(plan["resources"]), RESOURCE_ROWS, count, index)
    if plan.get("clients") is not None:
        rows = int(plan["client_rows"])
        member.clients = SharedCounters(int(plan["clients"]), rows, count, index)
        member.client_key = bytes.fromhex(str(plan["client_key"]))
    if plan.get("accepting") is not None:
        table = SharedCounters(int(plan["accepting"]), BALANCE_ROWS, count, index)
        member.balance = AcceptBalance(table)
    return member


def _pin(cpu: int) -> None:
    """``--worker-affinity``: this process on ``cpu``; the threads already running (the log
    writer) set one by one, those started later inherit it."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: this thread alone
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, {cpu})
        except OSError as exc:  # the thread ended meanwhile, or the CPU is no longer ours
            if tid in (0, os.getpid()):
                log.warning("worker: cannot run on CPU %d (%s): left unpinned", cpu, exc)
                return


def _die_with(parent: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(1)


class Member:
    def __init__(
        self,
        index: int,
        count: int,
        forward_name: str,
        sockets: dict[str, list[socket.socket]],
        channel: socket.socket,
    ) -> None:
        self.index = index
        self._count = count
        self._forward_name = forward_name
        self._forwarder = Forwarder(forward_name)
        self._owner: SequenceOwner | None = None
        self.reuseport = False  # --worker-sockets reuseport: listen on sockets of our own
        self.clients: SharedCounters | None = None  # --max-inflight-per-client's table
        self.client_key = b""  # its hash's key, the supervisor's secret
        self.locks = -1  # the supervisor's lock descriptor (the access log's)
        self.uploads: Path | None = None  # where a load's files go for every worker
        self.resources: SharedCounters | None = None  # the rate limiter's resources
        # --worker-sockets shared: the connections every worker holds (workers/balance.py)
        self.balance: AcceptBalance | None = None
        self._sockets = sockets
        self._channel_sock = channel
        self._peer: Peer | None = None
        self._server: InferenceServer | None = None
        self._cluster_ready = False
        self._control = asyncio.Lock()  # actions applied here one at a time, in order
        self._tasks: list[asyncio.Task[None]] = []
        self._cpu: CpuSampler | None = None

    # -- runtime.py:WorkerLink -------------------------------------------------------------------
    def sockets(self) -> dict[str, list[socket.socket]]:
        return self._sockets

    def accept_balance(self) -> AcceptBalance | None:
        """How this worker shares the listening sockets' connections with the others."""
        return self.balance

    def client_limiter(self, limit: int) -> ClientLimiter | None:
        """The whole server's in-flight counts per client (the supervisor's table)."""
        if self.clients is None:
            return None
        return SharedClientLimiter(limit, self.clients, self.client_key)

    async def attach(self, server: InferenceServer, stop: asyncio.Event) -> None:
        # Ctrl-C in a terminal reaches the whole process group: the supervisor stops the
        # workers itself (SIGTERM), so a worker must not exit first and look crashed.
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._server = server
        server.cluster = self
        if self.resources is not None and server.repository.limiter is not None:
            # before any model loads: the resources are the whole server's
            given = server.options.rate_limit.resources
            server.repository.share_limiter(SharedRateLimiter(given, self.resources))
        server.control.own_poller = False  # poll mode: the supervisor polls for every worker
        if server.options.metrics.allow_cpu:
            self._cpu = CpuSampler(server.options.metrics.interval_ms / 1000)
        channel = await Channel.open(self._channel_sock)
        self._peer = Peer(channel, self._on_call, self._on_note)
        self._tasks = [
            asyncio.ensure_future(self._serve(stop)),
            asyncio.ensure_future(self._beat()),
        ]

    async def synced(self) -> None:
        """Apply what the other workers applied since the start (the lock is held from the
        ask on: an action broadcast meanwhile waits for the replay)."""
        async with self._control:
            answer = await self._call("sync", {})
            self._cluster_ready = bool(answer["ready"])
            for index in range(int(answer["count"])):  # one message each, however many
                action = await self._call("replay", {"index": index})
                await self._apply(str(action["action"]), dict(action["args"]))
        if self.reuseport:  # join the ports' SO_REUSEPORT groups only now, ready to accept
            self._listen_own()
        # the sequences this worker owns may come from the others from now on
        self._owner = SequenceOwner(self._here(), socket_path(self._forward_name, self.index))
        await self._owner.start()

    def _listen_own(self) -> None:
        """``--worker-sockets reuseport``: a listening socket of this worker's own on each
        port, in place of the supervisor's bound ones in the same dict (the one
        ``runtime.run`` got from ``sockets()`` and hands to its listeners next). Not before:
        connections hashed to a worker still loading its models would wait for it."""
        for name, held in list(self._sockets.items()):
            self._sockets[name] = [listen_again(sock) for sock in held]
            for sock in held:
                sock.close()

    def serving(self) -> None:
        self._note("serving")

    def detach(self) -> None:
        if self._owner is not None:
            self._owner.close()
        for task in self._tasks:
            task.cancel()
        if self._peer is not None:
            self._peer.channel.close()

    # -- server.py:Cluster -----------------------------------------------------------------------
    async def load(
        self, name: str, config_json: str | None, files: dict[str, bytes] | None
    ) -> None:
        upload = None
        if files and self.uploads is not None:  # explicit mode (else every worker refuses)
            upload = await asyncio.to_thread(_spool, self.uploads, files)
        await self._call("load", {"name": name, "config": config_json, "upload": upload})

    async def unload(self, name: str, unload_dependents: bool) -> None:
        await self._call("unload", {"name": name, "dependents": unload_dependents})

    def ready(self) -> bool:
        return self._cluster_ready

    async def statistics(self, name: str, version: str) -> dict[str, Any]:
        result = await self._call("statistics", {"name": name, "version": version})
        assert isinstance(result, dict)
        return result

    async def metrics(self) -> bytes:
        return str(await self._call("metrics", {})).encode()

    def sequence_owner(self, correlation_id: int | str) -> int | None:
        if not correlation_id:
            return None  # no sequence: the sequence batcher answers its error here
        owner = owner_of(correlation_id, self._count)
        return None if owner == self.index else owner

    def cache_owner(self, key: bytes) -> int | None:
        owner = int.from_bytes(key[:8], "big") % self._count
        return None if owner == self.index else owner

    def worker_options(self, options: ServerOptions) -> ServerOptions:
        """This worker's options: the supervisor writes the ports file; each worker's
        response cache holds the keys it owns, so the server's cache is the size asked."""
        tracing = options.tracing
        if tracing.values.file and tracing.values.mode is TraceMode.TRITON:
            tracing = replace(tracing, file_suffix=part_suffix(self.index))
        tracing = replace(tracing, ids=(self.index + 1, self._count))
        return replace(
            options,
            tracing=tracing,
            logging=replace(options.logging, access_log_lock_fd=self.locks),
            workers=1,
            ports_file="",
            response_cache_size=(
                max(1, options.response_cache_size // self._count)
                if options.response_cache_size > 0
                else 0
            ),
        )

    def forward(self, owner: int, request: InferenceRequest, sender: ResponseSender) -> None:
        self._forwarder.forward(owner, request, sender)

    async def broadcast(self, action: str, args: dict[str, Any]) -> None:
        await self._call("setting", {"action": action, "args": args, "origin": self.index})

    # -- the channel -----------------------------------------------------------------------------
    async def _call(self, action: str, args: dict[str, Any]) -> Any:
        if self._peer is None:
            raise unavailable("the server is starting")
        try:
            return await self._peer.call(action, args)
        except ChannelClosed:
            raise unavailable("the server is shutting down") from None

    def _note(self, op: str, **fields: Any) -> None:
        if self._peer is not None:
            try:
                self._peer.note(op, **fields)
            except ChannelClosed:
                pass

    async def _serve(self, stop: asyncio.Event) -> None:
        assert self._peer is not None
        try:
            await self._peer.serve()
        except ChannelClosed:
            pass
        if not stop.is_set():
            log.error("worker %d: the supervisor went away: stopping", self.index)
            stop.set()

    async def _beat(self) -> None:
        """The heartbeat, from the event loop itself: a blocked loop stops it."""
        while True:
            server = self._server
            self._note("beat", ready=server is not None and server.is_ready_here())
            await asyncio.sleep(_BEAT_S)

    def _on_note(self, note: dict[str, Any]) -> None:
        if note.get("op") == "cluster" and self._server is not None:
            self._cluster_ready = bool(note.get("ready"))
            self._server.readiness.changed()

    async def _on_call(self, action: str, args: dict[str, Any]) -> Any:
        if action in ("load", "unload"):
            async with self._control:
                await self._apply(action, args)
            self._note("ready", ready=self._here().is_ready_here())
            return None
        if action == "setting":
            self._here().apply_setting(str(args["action"]), dict(args["args"]))
            return None
        if action == "poll_snapshot":
            return await self._here().control.snapshot()
        if action == "poll_apply":
            async with self._control:
                await self._here().control.apply_poll_doc(list(args["snapshot"]))
            self._note("ready", ready=self._here().is_ready_here())
            return None
        if action == "statistics":
            return self._here().statistics(str(args["name"]), str(args["version"]))
        if action == "metrics":
            return self._metrics()
        raise unavailable(f"unknown control action '{action}'")

    def _here(self) -> InferenceServer:
        assert self._server is not None
        return self._server

    async def _apply(self, action: str, args: dict[str, Any]) -> None:
        control = self._here().control
        if action == "setting":
            self._here().apply_setting(str(args["action"]), dict(args["args"]))
        elif action == "load":
            upload = args.get("upload")
            files = await asyncio.to_thread(_unspool, upload) if upload else None
            await control.load(str(args["name"]), args.get("config"), files)
        else:
            await control.unload(str(args["name"]), bool(args.get("dependents")))

    def _metrics(self) -> dict[str, Any]:
        """This worker's exposition and the window sketches of its summaries."""
        server = self._here()
        models = server.stats_snapshot()
        index = server.repository_index()
        text = render(models, self._cpu, server.custom_metrics, index, server.openai_metrics)
        now = time.perf_counter_ns()
        sketches: dict[str, Any] = {}
        for stats in models:
            if stats.summaries is None:
                continue
            for attribute, name, _ in SUMMARIES:
                summary = getattr(stats.summaries, attribute)
                if summary is None:
                    continue
                cells = [[k, c, t] for k, (c, t) in summary.window(now).items()]
                sketches[f"{name}{{{stats.labels}"] = {
                    "quantiles": list(summary.quantile_points),
                    "cells": cells,
                }
        return {"text": text.decode(), "sketches": sketches}


def _spool(uploads: Path, files: dict[str, bytes]) -> dict[str, object]:
    """A load's files written for every worker (and for the replays): a fresh directory in
    the supervisor's uploads, one file per override, named by its place (no path is made
    of a key: the keys are checked by each worker's load, as without workers)."""
    for key, content in files.items():
        if not isinstance(content, bytes):
            raise invalid_arg(f"File parameter '{key}' must have bytes type for its value")
    try:
        holder = Path(tempfile.mkdtemp(prefix="load-", dir=uploads))
    except OSError as exc:
        raise internal(f"cannot keep the load's files: {exc.strerror}") from None
    try:
        for place, content in enumerate(files.values()):
            (holder / str(place)).write_bytes(content)
    except OSError as exc:  # e.g. the disk is full: nothing half-written stays
        shutil.rmtree(holder, ignore_errors=True)
        raise internal(f"cannot keep the load's files: {exc.strerror}") from None
    return {"dir": str(holder), "keys": list(files)}


def _unspool(upload: dict[str, object]) -> dict[str, bytes]:
    """The files ``_spool`` wrote, by key."""
    holder = Path(str(upload["dir"]))
    keys = upload["keys"]
    assert isinstance(keys, list)
    return {str(key): (holder / str(place)).read_bytes() for place, key in enumerate(keys)}
