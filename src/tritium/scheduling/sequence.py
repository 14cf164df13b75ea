"""Triton's sequence batcher for stateful models (``sequence_batching``).

Every request names a sequence (its correlation ID). ``SequenceSlots`` decides which slot of
which instance a sequence holds; each instance has a worker that runs the requests queued on
its slots, one execution at a time, in order within each slot:

- **direct** (``sequence_workers.py:DirectWorker``): one batch holds the next request of
  every slot that has one, at the slot's own position; empty slots below the last busy one get
  READY = false fillers. A model may keep per-slot state, since a sequence stays at one
  position until it ends.
- **oldest** (``sequence_workers.py:OldestWorker``): the next request of each candidate
  sequence (one per sequence at a time) joins a dynamic batch, oldest first, with
  ``preferred_batch_size`` and ``max_queue_delay_microseconds``.

Before a request runs it gets the control tensors and its sequence's implicit state
(``sequence_inputs.py``); the state outputs of its response become the next state.
Idle sequences lose their slot after ``max_sequence_idle_microseconds`` (the reaper), and
the slot goes to the oldest sequence waiting in the backlog. At most ``backlog_limit``
sequences wait there (``--sequence-backlog-limit``; 0: no bound): a new one beyond it is
refused at once (``SequenceSlots.route``). ``backlogged`` is the gauge
``tritium_sequence_backlog``.

With ``iterative_sequence`` (Triton's IterativeSequencer) a request without a correlation ID
gets one of the batcher's own, with START; the model may release a request with
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (the backend calls ``request.reschedule``): it goes
back to its sequence's slot, flags cleared, to run again; once it runs without being
rescheduled, its sequence ends (the slot is released after it, as the reaper releases one).

Triton's testing hooks (sequence_batch_scheduler.cc, set by its qa/L0_sequence_batcher):
with ``TRITONSERVER_DELAY_SCHEDULER=N`` the direct workers start nothing until N requests are
queued on the slots of all instances together, and with ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER
=M`` as well until M requests wait in the backlog (the second only matters with the first);
then they run as usual. The oldest strategy ignores both, as Triton's OldestSequenceBatch does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Sequence

from ..backends.base import ModelInstance, send_error
from ..config.sequence import SequenceConfig
from ..config.spec import ModelSpec
from ..errors import ServerError, internal, unavailable
from ..logs.settings import about_model
from ..request import InferenceRequest, RequestState
from ..options import delay_count
from .dynamic import DELAY_VARIABLE
from .rate_limiter import Gate
from .sequence_inputs import END_FLAG, START_FLAG, SequenceState, add_controls, add_state
from .sequence_inputs import check, state_capture
from .sequence_slots import Backlog, CorrelationId, SequenceSlots, Slot
from .sequence_workers import DirectWorker, OldestWorker, Release, Worker

log = logging.getLogger("tritium")


class SequenceScheduler:
    def __init__(
        self,
        instances: Sequence[ModelInstance],
        version: str,
        spec: ModelSpec,
        gates: Sequence[Gate] | None = None,  # the rate limiter's, one per instance
        backlog_limit: int = 0,  # sequences waiting for a slot at most; 0: no bound
    ):
        config = spec.sequence
        assert config is not None
        self._config = config
        self._spec = spec
        self._version = version
        self._slots: SequenceSlots[InferenceRequest] = SequenceSlots(
            max(len(instances), 1), config.slots, config.max_idle_ns, backlog_limit
        )
        self._kind: type[Worker] = OldestWorker if config.oldest else DirectWorker
        self._workers: list[Worker] = [
            self._kind(self, i, instance) for i, instance in enumerate(instances)
        ]
        # Instances an instance-group update removes, by worker index: the slots each still
        # holds (released as their sequences end or idle out), and what ``update`` awaits.
        self._leaving: dict[int, tuple[list[int], asyncio.Future[None]]] = {}
        for worker, gate in zip(self._workers, gates or (), strict=False):
            worker.gate = gate
        self._reaper: asyncio.TimerHandle | None = None
        self._reaper_at = 0
        self._closed = False
        self._ids = itertools.count(1)  # iterative_sequence: the IDs the batcher gives
        self._hold, self._backlog_hold = _held_counts(spec.name, config.oldest)
        for worker in self._workers:
            worker.held = bool(self._hold)

    # -- arrival -------------------------------------------------------------------------------
    def submit(self, request: InferenceRequest) -> None:
        if self._config.iterative:
            self._iterative(request)
        self._route(request)

    def _iterative(self, request: InferenceRequest) -> None:
        """Triton's IterativeSequencer: a request in no sequence starts one of its own."""
        cid = request.correlation_id
        if cid == 0 or cid == "":
            request.options = dataclasses.replace(
                request.options, correlation_id=next(self._ids), flags=START_FLAG
            )
        request.reschedule = self._rescheduled

    def _rescheduled(self, request: InferenceRequest) -> None:
        """The model released ``request`` with RESCHEDULE: back to its sequence, neither START
        nor END, without the inputs the batcher added."""
        added = self._config.added_inputs
        request.inputs = [t for t in request.inputs if t.name not in added]
        request.options = dataclasses.replace(request.options, flags=0)
        if not self._slots.holds(request.correlation_id):
            send_error(
                request,
                self._version,
                unavailable(
                    f"the iterative sequence {request.correlation_id} of model "
                    f"'{self._spec.name}' idled out (max_sequence_idle_microseconds) before "
                    "its request was rescheduled"
                ),
            )
            return
        if request.stats is not None:  # waiting again (``iterated`` tells it by this)
            request.queued(request.stats)
        else:
            request.state = RequestState.QUEUED
        self._route(request)

    def iterated(self, requests: Sequence[InferenceRequest]) -> None:
        """After an execution of an iterative model: the sequence of each request that was
        not rescheduled is over; its slot is released once the worker reaches it."""
        for request in requests:
            if request.state is RequestState.QUEUED:  # rescheduled: its sequence goes on
                continue
            cid = request.correlation_id
            slot = self._slots.end(cid)
            if slot is not None:
                self._workers[slot.instance].enqueue(slot.index, Release(cid))

    def _route(self, request: InferenceRequest) -> None:
        error = check(self._config, request)
        if error is None and self._closed:
            error = unavailable("the model is being unloaded")
        if error is not None:
            send_error(request, self._version, error)
            return
        cid, flags = request.correlation_id, request.flags
        now = time.perf_counter_ns()
        try:
            slot, conflict = self._slots.route(
                cid,
                bool(flags & START_FLAG),
                bool(flags & END_FLAG),
                request,
                now,
                request.timeout_us * 1000,
            )
        except ServerError as exc:
            send_error(request, self._version, exc)
            return
        if conflict:
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end "
                "before this sequence start. Previous sequence will be terminated early.",
                cid,
                request.model_name,
                extra=about_model(request.model_name),
            )
        if slot is not None:
            self._workers[slot.instance].enqueue(slot.index, request)
        if self._hold:
            self._look_at_hold()
        self._arm()

    def _look_at_hold(self) -> None:
        """The testing hooks (``_held_counts``): once the slots hold N requests together (and
        the backlog M), every worker starts running what it holds."""
        if sum(worker.queued() for worker in self._workers) < self._hold:
            return
        if self._backlog_hold and self._slots.backlogged_requests() < self._backlog_hold:
            return
        self._hold = 0
        for worker in self._workers:
            worker.held = False
            worker.pump()

    # -- the instance set ----------------------------------------------------------------------
    async def update(
        self,
        added: Sequence[ModelInstance],
        gates: Sequence[Gate] | None,
        removed: Sequence[ModelInstance],
    ) -> None:
        """A reload changed only the instance groups (Triton's SequenceBatchScheduler::
        Update): each ``added`` instance gets a worker and its slots (backlogged sequences
        first); each ``removed`` one takes no new sequence, and this returns once the
        sequences it holds are over (ended or idled out) and its executions are done."""
        for position, instance in enumerate(added):
            worker = self._kind(self, len(self._workers), instance)
            worker.gate = gates[position] if gates else None
            worker.held = bool(self._hold)
            self._workers.append(worker)
            for slot in self._slots.added(worker.index):
                self.release(slot)
        loop = asyncio.get_running_loop()
        leaving: list[tuple[Worker, asyncio.Future[None]]] = []
        for worker in self._workers:
            if any(worker.instance is i for i in removed):
                done: asyncio.Future[None] = loop.create_future()
                held = self._slots.retire(worker.index)
                if held:
                    self._leaving[worker.index] = ([held], done)
                else:
                    done.set_result(None)
                leaving.append((worker, done))
        for worker, done in leaving:
            await done
            running = worker.close(internal("the model instance was removed"))
            await asyncio.gather(*running, return_exceptions=True)

    # -- slots ---------------------------------------------------------------------------------
    def release(self, slot: Slot) -> None:
        """A worker's slot is free: hand it to the oldest backlogged sequence, if any (a
        removed instance's slot is not handed out again)."""
        if self._leaving and slot.instance in self._leaving:
            held, done = self._leaving[slot.instance]
            held[0] -= 1
            if not held[0]:
                del self._leaving[slot.instance]
                done.set_result(None)
            return
        backlog = self._slots.release(slot)
        if backlog is not None:
            worker = self._workers[slot.instance]
            for request in backlog.requests:
                worker.enqueue(slot.index, request, pump=False)

    def forget(self, cid: CorrelationId, slot: Slot) -> None:
        self._slots.forget(cid, slot)

    # -- the reaper ----------------------------------------------------------------------------
    def _arm(self) -> None:
        when = self._slots.wake_at()
        if when is None or self._closed:
            return
        if self._reaper is not None:
            if self._reaper_at <= when:
                return
            self._reaper.cancel()
        delay = max(when - time.perf_counter_ns(), 0) / 1e9
        self._reaper_at = when
        self._reaper = asyncio.get_running_loop().call_later(delay, self._reap)

    def _reap(self) -> None:
        self._reaper = None
        now = time.perf_counter_ns()
        for cid, slot in self._slots.idle(now):
            log.debug("sequence %s of model '%s' idled out", cid, self._spec.name)
            self._workers[slot.instance].enqueue(slot.index, Release(cid))
        for backlog in self._slots.expired(now):
            self._reject(backlog)
        if self._hold:
            self._look_at_hold()
        self._arm()

    def _reject(self, backlog: Backlog[InferenceRequest]) -> None:
        error = unavailable("timeout of the corresponding sequence has been expired")
        for request in backlog.requests:
            send_error(request, self._version, error)

    # -- unloading -----------------------------------------------------------------------------
    async def close(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        error = internal("model is being unloaded")
        for request in self._slots.drain():
            send_error(request, self._version, error)
        running = []
        for worker in self._workers:
            running.extend(worker.close(error))
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    def backlogged(self) -> int:
        """Sequences waiting in the backlog for a slot (the tritium_sequence_backlog gauge)."""
        return self._slots.backlogged

    # -- for the workers -----------------------------------------------------------------------
    @property
    def config(self) -> SequenceConfig:
        return self._config

    @property
    def version(self) -> str:
        return self._version

    @property
    def max_batch_size(self) -> int:
        """The largest batch an execution may hold (1 for a model without batching)."""
        return max(self._spec.max_batch_size, 1)

    def prepare(self, request: InferenceRequest, state: SequenceState) -> None:
        """Controls, implicit state and the state capture, just before the request runs."""
        config = self._config
        add_controls(config, request.inputs, request.flags, True, request.correlation_id)
        if config.states:
            add_state(config, request.inputs, state)
            request.extra_outputs = config.state_outputs
            assert request.sender is not None
            request.sender.capture = state_capture(config, state, request, self._spec.outputs)


BACKLOG_DELAY_VARIABLE = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"


def _held_counts(model: str, oldest: bool) -> tuple[int, int]:
    """Triton's testing hooks, read when the batcher is made: (requests queued on the slots,
    requests in the backlog) that the direct workers wait for before running anything."""
    backlog = delay_count(os.environ.get(BACKLOG_DELAY_VARIABLE))
    if backlog:
        log.info("Delaying scheduler until %d backlog queued requests...", backlog)
    held = 0 if oldest else delay_count(os.environ.get(DELAY_VARIABLE))
    if held:
        log.debug(
            "Delaying the sequence batcher of model '%s' until %d queued requests", model, held
        )
    return held, backlog
