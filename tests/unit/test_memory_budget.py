"""The server's one memory budget (frontends/memory.py): charges add up over connections,
past the limit new calls are refused, and relief takes from the largest holders first down to
seven eighths of the limit: on a refusal, or by itself a quarter past the limit."""

from __future__ import annotations

import asyncio

from tritium.frontends.accept import Connections
from tritium.frontends.memory import DEFAULT_BUDGET, MemoryBudget
from tritium.options import ServerOptions


class _Holder:
    """Holds ``pieces`` (bytes each), charged on ``budget``; gives up the largest first."""

    def __init__(self, budget: MemoryBudget, *pieces: int) -> None:
        self.budget = budget
        self.pieces = sorted(pieces)
        self.relieved: list[int] = []  # what it was asked to free, each time
        budget.join(self)
        for piece in pieces:
            budget.charge(piece)

    def budget_held(self) -> int:
        return sum(self.pieces)

    def relieve(self, need: int) -> int:
        self.relieved.append(need)
        freed = 0
        while self.pieces and freed < need:
            piece = self.pieces.pop()
            self.budget.charge(-piece)
            freed += piece
        return freed


def test_charges_of_every_holder_add_up_and_come_back() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        a, b = _Holder(budget, 30, 20), _Holder(budget, 40)
        assert budget.held == 90 and not budget.over()
        budget.charge(11)
        assert budget.over()  # past the limit: new calls are refused
        budget.charge(-11)
        for holder in (a, b):
            holder.relieve(1 << 30)
        assert budget.held == 0 and not budget.over()

    asyncio.run(main())


def test_a_quarter_past_the_limit_the_largest_holders_give_up_bytes_on_the_next_turn() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        small = _Holder(budget, 10, 10)
        large = _Holder(budget, 30, 30, 30)
        assert budget.held == 110 and budget.over()
        await asyncio.sleep(0)
        assert not small.relieved and not large.relieved  # between the limit and 1.25 x: no
        middle = _Holder(budget, 25)
        assert budget.held == 135
        assert not large.relieved  # not inside the charging call
        await asyncio.sleep(0)
        assert large.relieved == [135 - 88]  # down to 7/8 of the limit, the largest first
        assert not middle.relieved and not small.relieved
        assert budget.held == 75 and budget.relieved == 60

    asyncio.run(main())


def test_a_refused_call_makes_the_largest_holders_give_up_bytes() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        first = _Holder(budget, 20, 25)
        second = _Holder(budget, 30, 30)
        assert budget.over()
        budget.relieve_soon()  # what a refused call does
        budget.relieve_soon()  # once per turn
        await asyncio.sleep(0)
        assert second.relieved == [105 - 88] and not first.relieved
        assert budget.held == 75 and not budget.over()

    asyncio.run(main())


def test_relief_goes_on_to_the_next_holder_when_the_largest_is_not_enough() -> None:
    async def main() -> None:
        budget = MemoryBudget(100)
        holders = [_Holder(budget, 45), _Holder(budget, 44), _Holder(budget, 41)]
        await asyncio.sleep(0)
        assert [h.relieved for h in holders] == [[130 - 88], [], []]
        budget.charge(60)  # 145 now: past 1.25 x again
        await asyncio.sleep(0)
        assert holders[1].relieved == [145 - 88] and holders[2].relieved == [145 - 44 - 88]
        assert budget.held == 60

    asyncio.run(main())


def test_one_budget_per_server_from_its_options() -> None:
    assert Connections().memory.limit == DEFAULT_BUDGET == ServerOptions().connection_memory_bytes
    assert Connections(5 << 20).memory.limit == 5 << 20
