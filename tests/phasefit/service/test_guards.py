"""The cardinality budget, the admission gate and the per-token limit on requests in progress."""

from __future__ import annotations

import asyncio

import pytest

from phasefit.service.guards import (
    CardinalityExceededError,
    CardinalityGuard,
    OverloadedError,
    TokenBusyError,
    TokenSlots,
    WriteGate,
)


def test_the_budget_slides_over_the_window_and_failed_writes_give_it_back() -> None:
    now = [0.0]
    guard = CardinalityGuard(10, lambda: now[0], window_s=3600)
    assert guard.reserve("a", 0) is None
    first = guard.reserve("a", 6)
    now[0] = 1000
    guard.reserve("a", 4)
    with pytest.raises(CardinalityExceededError) as refused:
        guard.reserve("a", 1)
    assert refused.value.retry_after_s == 2600  # when the first 6 leave the window
    guard.reserve("b", 10)  # budgets are per token
    guard.release(first)
    guard.reserve("a", 6)
    with pytest.raises(CardinalityExceededError) as never:
        guard.reserve("c", 11)
    assert never.value.retry_after_s == 3600
    now[0] = 4600.5
    guard.reserve("a", 6)  # everything before 1000.5 s has left the window


def test_admission_is_bounded() -> None:
    gate = WriteGate(max_pending=1, retry_after_s=3)

    async def run() -> None:
        async with gate.admitted():
            with pytest.raises(OverloadedError) as refused:
                async with gate.admitted():
                    pass
            assert refused.value.retry_after_s == 3
        async with gate.admitted():
            assert gate.pending == 1

    asyncio.run(run())
    assert gate.pending == 0


def test_one_token_holds_at_most_its_limit_and_others_are_unaffected() -> None:
    slots = TokenSlots(limit=2, retry_after_s=4)

    async def run() -> None:
        async with slots.taken("a"), slots.taken("a"):
            with pytest.raises(TokenBusyError) as refused:
                async with slots.taken("a"):
                    pass
            assert refused.value.retry_after_s == 4
            assert "token 'a' already has 2 ingest requests in progress (at most 2 per token" in str(
                refused.value
            )
            async with slots.taken("b"):
                assert (slots.held("a"), slots.held("b")) == (2, 1)
        with pytest.raises(RuntimeError):
            async with slots.taken("a"):
                raise RuntimeError("a failed request gives its slot back")
        assert slots.held("a") == 0

    asyncio.run(run())
