"""The dynamic batcher's policy on a fake clock (integer ns)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from tritium.errors import ErrorKind, ServerError
from tritium.scheduling.batch_policy import BatchConfig, DynamicBatchPolicy, QueuePolicy
from tritium.types import DataType, Tensor

US = 1000


_NO_DATA = np.zeros(0, dtype=np.float32)


def _Tensor(name: str, shape: tuple[int, ...]) -> Tensor:  # noqa: N802
    """A real Tensor (the compiled batch policy checks the type), its data unused."""
    return Tensor(name, DataType.FP32, shape, _NO_DATA)


@dataclass
class _Request:
    tag: str
    batch_size: int = 1
    priority: int = 0
    width: int = 16
    inputs: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inputs = [_Tensor("INPUT0", (self.batch_size, self.width))]


def _policy(**kwargs) -> DynamicBatchPolicy:  # type: ignore[no-untyped-def]
    kwargs.setdefault("max_batch_size", 8)
    return DynamicBatchPolicy(BatchConfig(**kwargs))


def _tags(batch: list | None) -> list[str]:
    return [r.tag for r in batch or []]


def test_no_delay_sends_what_is_there() -> None:
    policy = _policy()
    policy.enqueue(_Request("a"), now=0)
    assert _tags(policy.take(now=0)) == ["a"]
    assert policy.take(now=0) is None


def test_waits_for_the_delay_then_sends() -> None:
    policy = _policy(max_delay_ns=500 * US)
    policy.enqueue(_Request("a"), now=0)
    policy.enqueue(_Request("b"), now=100 * US)
    assert policy.take(now=200 * US) is None
    assert policy.wake_at() == 500 * US
    assert _tags(policy.take(now=500 * US)) == ["a", "b"]


def test_full_batch_goes_at_once_and_respects_the_maximum() -> None:
    policy = _policy(max_delay_ns=10_000 * US)
    for i in range(3):
        policy.enqueue(_Request(f"r{i}", batch_size=3), now=0)
    batch = policy.take(now=1)
    assert _tags(batch) == ["r0", "r1"]  # 6; a third would make 9 > 8
    assert len(policy) == 1


def test_preferred_size_goes_without_waiting() -> None:
    policy = _policy(max_delay_ns=10_000 * US, preferred=(4, 8))
    for i in range(6):
        policy.enqueue(_Request(f"r{i}"), now=0)
    assert _tags(policy.take(now=1)) == ["r0", "r1", "r2", "r3"]
    assert policy.take(now=2) is None  # 2 left, not a preferred size: wait


def test_different_shapes_are_not_batched() -> None:
    policy = _policy(max_delay_ns=10_000 * US)
    policy.enqueue(_Request("a", width=16), now=0)
    policy.enqueue(_Request("b", width=8), now=0)
    assert _tags(policy.take(now=1)) == ["a"]  # b cannot join: no reason to wait
    assert _tags(policy.take(now=10_000 * US)) == ["b"]


def test_ragged_inputs_batch_across_shapes() -> None:
    policy = _policy(max_delay_ns=0, ragged=True)
    policy.enqueue(_Request("a", width=16), now=0)
    policy.enqueue(_Request("b", width=8), now=0)
    assert _tags(policy.take(now=0)) == ["a", "b"]


def test_priorities_reorder_the_queue() -> None:
    policy = _policy(
        max_batch_size=1, levels=2, default_level=2, policies=(QueuePolicy(), QueuePolicy())
    )
    policy.enqueue(_Request("low"), now=0)
    policy.enqueue(_Request("default", priority=0), now=1)
    policy.enqueue(_Request("high", priority=1), now=2)
    assert [_tags(policy.take(now=3)) for _ in range(3)] == [["high"], ["low"], ["default"]]


def test_out_of_range_priority_uses_the_default_level() -> None:
    policy = _policy(levels=2, default_level=2, policies=(QueuePolicy(), QueuePolicy()))
    assert policy.level_of(7) == 2 and policy.level_of(0) == 2 and policy.level_of(1) == 1


def test_queue_size_limit_rejects() -> None:
    policy = _policy(max_delay_ns=10_000 * US, policies=(QueuePolicy(max_size=2),))
    policy.enqueue(_Request("a"), now=0)
    policy.enqueue(_Request("b"), now=0)
    with pytest.raises(ServerError) as info:
        policy.enqueue(_Request("c"), now=0)
    assert info.value.kind is ErrorKind.UNAVAILABLE
    assert "Exceeds maximum queue size" in info.value.message


def test_timeout_rejects_or_delays() -> None:
    reject = _policy(max_delay_ns=10_000 * US, policies=(QueuePolicy(timeout_ns=100 * US),))
    reject.enqueue(_Request("a"), now=0)
    assert reject.wake_at() == 100 * US
    assert _tags(reject.expire(now=100 * US)) == ["a"]
    assert len(reject) == 0
    delay = _policy(
        max_batch_size=1, policies=(QueuePolicy(timeout_ns=100 * US, delay_on_timeout=True),)
    )
    delay.enqueue(_Request("a"), now=0)
    delay.enqueue(_Request("b"), now=110 * US)
    assert delay.expire(now=120 * US) == []
    assert _tags(delay.take(now=120 * US)) == ["b"]  # a fell behind b
    assert _tags(delay.take(now=130 * US)) == ["a"]


def test_timeout_override_only_lowers_when_allowed() -> None:
    allowed = _policy(
        max_delay_ns=10_000 * US, policies=(QueuePolicy(timeout_ns=1000 * US, allow_override=True),)
    )
    allowed.enqueue(_Request("a"), now=0, timeout_us=100)
    assert allowed.wake_at() == 100 * US
    refused = _policy(max_delay_ns=10_000 * US, policies=(QueuePolicy(timeout_ns=1000 * US),))
    refused.enqueue(_Request("a"), now=0, timeout_us=100)
    assert refused.wake_at() == 1000 * US


def _given(tag: str, *names: str) -> _Request:
    request = _Request(tag)
    request.inputs = [_Tensor(name, (1, 16)) for name in names]
    return request


def test_optional_inputs_batch_only_with_the_same_inputs() -> None:
    # Triton's RequiredEqualInputs: with an optional input in the model, a request that
    # gives other inputs than the pending batch's cannot join it, whatever the shapes.
    policy = _policy(max_delay_ns=10_000 * US, ragged=True, optional_inputs=True)
    policy.enqueue(_given("a", "INPUT0"), now=0)
    policy.enqueue(_given("b", "INPUT1"), now=0)
    policy.enqueue(_given("c", "INPUT1", "INPUT0"), now=0)
    assert _tags(policy.take(now=1)) == ["a"]  # b cannot join: no reason to wait
    assert _tags(policy.take(now=1)) == ["b"]
    assert policy.take(now=1) is None  # c waits for company
    policy.enqueue(_given("d", "INPUT0", "INPUT1"), now=2)
    assert _tags(policy.take(now=10_000 * US)) == ["c", "d"]  # the same set, in any order


def test_without_optional_inputs_the_input_set_does_not_split_batches() -> None:
    policy = _policy(max_delay_ns=0, ragged=True)
    policy.enqueue(_given("a", "INPUT0"), now=0)
    policy.enqueue(_given("b", "INPUT1"), now=0)
    assert _tags(policy.take(now=0)) == ["a", "b"]


# Triton's rules around the largest preferred size (GetDynamicBatch; qa/L0_batcher's
# *_gt_max_preferred cases), with preferred [2, 6], max 8 and a long delay.
LONG = 10_000_000 * US


def test_a_request_above_the_largest_preferred_size_goes_at_once() -> None:
    policy = _policy(preferred=(2, 6), max_delay_ns=LONG)
    policy.enqueue(_Request("seven", batch_size=7), now=0)
    assert _tags(policy.take(now=1)) == ["seven"]


def test_the_head_within_the_largest_preferred_size_goes_when_the_next_would_pass_it() -> None:
    policy = _policy(preferred=(2, 6), max_delay_ns=LONG)
    policy.enqueue(_Request("three", batch_size=3), now=0)
    assert policy.take(now=1) is None  # 3: not preferred, room to grow: it waits
    policy.enqueue(_Request("four", batch_size=4), now=2)  # 3 + 4 > 6
    assert _tags(policy.take(now=3)) == ["three"]
    assert policy.take(now=4) is None  # 4 alone waits for the delay
    assert _tags(policy.take(now=2 + LONG)) == ["four"]


def test_a_preferred_head_goes_before_a_full_batch() -> None:
    policy = _policy(preferred=(2, 6), max_delay_ns=LONG)
    for tag, size in (("a", 2), ("b", 2), ("c", 4)):  # 8 in all: the maximum
        policy.enqueue(_Request(tag, batch_size=size), now=0)
    assert _tags(policy.take(now=1)) == ["a"]  # 2 is preferred; 4 is not; 8 passes 6
    assert _tags(policy.take(now=2)) == ["b", "c"]  # 6: preferred


def test_without_delay_a_preferred_head_still_goes_first() -> None:
    policy = _policy(preferred=(4,))
    for i in range(6):
        policy.enqueue(_Request(f"r{i}"), now=0)
    assert _tags(policy.take(now=0)) == ["r0", "r1", "r2", "r3"]
    assert _tags(policy.take(now=0)) == ["r4", "r5"]
