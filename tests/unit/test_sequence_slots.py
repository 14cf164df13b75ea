"""SequenceSlots: Triton's slot, backlog and idle rules on a fake clock."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tritium.errors import ServerError
from tritium.scheduling.sequence_slots import SequenceSlots, Slot

MS = 1_000_000


@dataclass
class Req:
    cid: int | str
    model_name: str = "m"


def route(slots: SequenceSlots, cid, start=False, end=False, now=0, timeout=0):
    return slots.route(cid, start, end, Req(cid), now, timeout)


def test_a_sequence_keeps_its_slot_until_its_end():
    slots = SequenceSlots(instances=1, slots_per_instance=2, max_idle_ns=100 * MS)
    first, _ = route(slots, 1, start=True)
    assert route(slots, 1)[0] == first
    assert route(slots, 1, end=True)[0] == first
    assert slots.active == 0
    slots.release(first)
    with pytest.raises(ServerError, match="must specify the START flag on the first request"):
        route(slots, 1)


def test_free_slots_go_lowest_index_first_across_instances():
    slots = SequenceSlots(instances=2, slots_per_instance=2, max_idle_ns=MS)
    got = [route(slots, cid, start=True)[0] for cid in (1, 2, 3, 4)]
    assert got == [Slot(0, 0), Slot(0, 1), Slot(1, 0), Slot(1, 1)]


def test_without_a_free_slot_a_sequence_waits_in_the_backlog_with_all_its_requests():
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=MS)
    held, _ = route(slots, "a", start=True)
    assert route(slots, "b", start=True) == (None, False)
    assert route(slots, "b") == (None, False)
    assert route(slots, "c", start=True, end=True) == (None, False)
    assert slots.backlogged == 2
    backlog = slots.release(held)
    assert backlog is not None and backlog.cid == "b" and len(backlog.requests) == 2
    assert route(slots, "b")[0] == held  # "b" now holds the slot
    assert route(slots, "b", end=True)[0] == held
    backlog = slots.release(held)
    assert backlog is not None and backlog.cid == "c" and backlog.ended
    assert slots.release(held) is None  # nothing waits: the slot is free again
    assert route(slots, "d", start=True)[0] == held


def test_a_start_over_a_sequence_in_progress_is_a_conflict_in_the_same_slot():
    slots = SequenceSlots(instances=1, slots_per_instance=2, max_idle_ns=MS)
    first, conflict = route(slots, 7, start=True)
    assert not conflict
    assert route(slots, 7, start=True) == (first, True)


def test_idle_sequences_lose_their_slot_and_backlogged_ones_are_kept():
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=10 * MS)
    held, _ = route(slots, 1, start=True, now=0)
    route(slots, 2, start=True, now=5 * MS)  # backlogged
    assert slots.wake_at() == 10 * MS
    assert slots.idle(9 * MS) == []
    assert slots.idle(10 * MS) == [(1, held)]
    assert slots.idle(15 * MS) == []  # 2 is backlogged: looked at again a period later
    assert slots.tracked == 1
    with pytest.raises(ServerError):
        route(slots, 1, now=16 * MS)


def test_an_ended_id_is_forgotten_by_the_reaper():
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=MS)
    held, _ = route(slots, 1, start=True, end=True, now=0)
    slots.release(held)
    assert slots.idle(2 * MS) == []
    assert slots.tracked == 0 and slots.wake_at() is None


def test_a_backlogged_sequence_past_its_timeout_is_expired():
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=100 * MS)
    route(slots, 1, start=True)
    route(slots, 2, start=True, now=0, timeout=5 * MS)
    route(slots, 3, start=True, now=0)
    assert slots.wake_at() == 5 * MS
    assert slots.expired(4 * MS) == []
    gone = slots.expired(5 * MS)
    assert [b.cid for b in gone] == [2]
    assert slots.backlogged == 1
    with pytest.raises(ServerError):
        route(slots, 2, now=6 * MS)


def test_many_abandoned_sequences_leave_nothing_behind():
    slots = SequenceSlots(instances=1, slots_per_instance=4, max_idle_ns=MS)
    now = 0
    for cid in range(1, 10_001):
        slot, _ = route(slots, cid, start=True, now=now)
        now += 1
        if slot is None:
            for _, idle in slots.idle(now + MS):
                backlog = slots.release(idle)
                while backlog is not None and backlog.ended:
                    backlog = slots.release(idle)
    while slots.backlogged or slots.active:
        now += 2 * MS
        for _, idle in slots.idle(now):
            slots.release(idle)
    now += 2 * MS
    slots.idle(now)
    assert slots.tracked == 0 and slots.active == 0 and slots.backlogged == 0


def test_a_new_sequence_beyond_the_backlog_bound_is_refused_at_once():
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=MS, max_backlog=2)
    held, _ = route(slots, "a", start=True)
    assert route(slots, "b", start=True) == (None, False)
    assert route(slots, "c", start=True) == (None, False)
    with pytest.raises(ServerError, match="Exceeds maximum queue size: 2 sequences") as info:
        route(slots, "d", start=True)
    assert info.value.kind.name == "UNAVAILABLE"
    assert slots.backlogged == 2 and slots.tracked == 3  # "d" left nothing behind
    assert route(slots, "b") == (None, False)  # sequences in progress are not refused
    assert route(slots, "a")[0] == held
    assert route(slots, "c", start=True) == (None, True)  # a restart stays in its place
    slots.release(held)  # "b" takes the slot: room for one more in the backlog
    assert route(slots, "d", start=True) == (None, False)


def test_without_a_bound_the_backlog_takes_every_sequence():
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=MS, max_backlog=0)
    for cid in range(5000):
        route(slots, cid, start=True)
    assert slots.backlogged == 4999


def test_an_iterative_sequence_ends_when_its_request_is_released():
    """``end``: the sequence's slot, taken from it (to release once the worker reaches it);
    ``holds`` tells whether a rescheduled request still has its sequence."""
    slots = SequenceSlots(instances=1, slots_per_instance=1, max_idle_ns=100 * MS)
    slot, _ = route(slots, 7, start=True)
    assert slots.holds(7) and route(slots, 7)[0] == slot  # rescheduled: the same slot
    assert route(slots, 8, start=True)[0] is None and slots.holds(8)  # waits in the backlog
    assert slots.end(7) == slot and not slots.holds(7) and slots.tracked == 1
    assert slots.end(7) is None  # already over
    backlog = slots.release(slot)
    assert backlog is not None and backlog.cid == 8 and slots.holds(8)
    with pytest.raises(ServerError, match="must specify the START flag"):
        route(slots, 7)


def test_a_retired_instance_gives_no_new_slot_and_counts_what_it_still_holds():
    """An instance-group update (issue 45 item 1): a removed instance's free slots go at
    once; the ones its sequences hold are counted, to be waited for."""
    slots = SequenceSlots(instances=2, slots_per_instance=2, max_idle_ns=MS)
    assert route(slots, 1, start=True)[0] == Slot(0, 0)
    assert route(slots, 2, start=True)[0] == Slot(0, 1)
    assert slots.retire(1) == 1  # slot 0 of instance 1 holds sequence 2
    got = [route(slots, cid, start=True)[0] for cid in (3, 4)]
    assert got == [Slot(1, 0), None]  # instance 1 takes no new sequence: 4 waits
    assert route(slots, 2)[0] == Slot(0, 1)  # sequence 2 keeps its slot meanwhile
    assert slots.added(2) == [Slot(0, 2), Slot(1, 2)]
