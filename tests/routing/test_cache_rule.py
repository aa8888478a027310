"""Conversations stay on their cache: the rule alone (fake models) and in the pool (fake clock, its own
queue), and its invariant: it never picks a model over its limit or outside the free ones."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.config.schema import parse_config
from chaos_mode.routing import pool_status
from chaos_mode.routing.cache_rule import (
    REREAD_CREDITS_PER_TOKEN,
    WAIT,
    WAIT_CREDITS_PER_SECOND,
    CacheRule,
    reread_credits,
)
from chaos_mode.routing.pool import ChaosPool, RequestInfo, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.routing.strategies import ModelEntry
from support.design_catalog import DESIGN_MODELS, FIXED_LIMITS
from support.fakes import FakeClock

MODELS = ["a", "b", "c", "d"]


def entry(name: str, capacity: int = 2) -> ModelEntry:
    return ModelEntry(name, MODELS.index(name), capacity, 1.0, 0.5, 0.5)


def no_one(model: str, default: int) -> int:
    return default


def test_the_latest_warm_model_with_room_serves() -> None:
    rule = CacheRule()
    free = [entry("a"), entry("b"), entry("c")]
    assert rule.step(["b", "a"], free, free, no_one, 10_000) == "b"
    assert rule.step(["d", "a"], free, free, no_one, 10_000) == "a"  # d full or gone: a is warm too


def test_a_full_warm_model_is_waited_for_while_the_wait_costs_less_than_the_reread() -> None:
    rule = CacheRule()
    rule.ended("d", 4.0)  # answers of 4 s on a model of 2 slots: one frees every 2 s
    usable = [entry("a"), entry("d")]
    full = {"d": 2}.get
    wait = 4.0 / 2 * WAIT_CREDITS_PER_SECOND  # what 2 s of waiting are worth, in credits
    just_over = int(wait / REREAD_CREDITS_PER_TOKEN) + 1  # a prompt whose reread costs more than that
    assert rule.step(["d"], [entry("a")], usable, full, just_over) == WAIT
    assert rule.step(["d"], [entry("a")], usable, full, just_over - 2) is None  # cheaper to go cold
    slow = CacheRule()
    slow.ended("d", 400.0)  # a slot every 200 s: 240 credits of waiting, more than 30,000 tokens reread
    assert slow.step(["d"], [entry("a")], usable, full, 30_000) is None
    assert slow.step(["d"], [entry("a")], usable, full, 50_000) == WAIT  # 260 credits to reread


def test_a_warm_model_not_usable_or_not_full_is_not_waited_for() -> None:
    rule = CacheRule()
    # d cooling or already tried: not among the usable ones, so cold at once whatever the prompt
    assert rule.step(["d"], [entry("a")], [entry("a")], {"d": 2}.get, 10**6) is None
    # d not full but not free either (paced, or beyond this proxy's share): nothing to wait for
    assert rule.step(["d"], [entry("a")], [entry("a"), entry("d")], {"d": 1}.get, 10**6) is None


def test_reread_credits_follow_the_cached_discount() -> None:
    assert reread_credits(1000) == (6.9 - 1.7)
    assert reread_credits(-5) == 0


@given(
    warm=st.lists(st.sampled_from(MODELS), unique=True, max_size=4),
    free=st.sets(st.sampled_from(MODELS)),
    usable=st.sets(st.sampled_from(MODELS)),
    held=st.dictionaries(st.sampled_from(MODELS), st.integers(0, 4)),
    seconds=st.floats(0, 1000),
    tokens=st.integers(0, 500_000),
)
def test_never_a_model_outside_the_free_ones(
    warm: list[str], free: set[str], usable: set[str], held: dict[str, int], seconds: float, tokens: int
) -> None:
    """Whatever it is told, the rule names a free model (within the limits and the floor), waits only for a
    usable full warm model, or goes cold."""
    rule = CacheRule()
    for model in MODELS:
        rule.ended(model, seconds)
    free_entries = [entry(m) for m in MODELS if m in free]
    usable_entries = [entry(m) for m in MODELS if m in usable | free]
    step = rule.step(warm, free_entries, usable_entries, held.get, tokens)
    if step == WAIT:
        assert any(m in usable | free and held.get(m, 0) >= 2 for m in warm)
    elif step is not None:
        assert step in free and step in warm
        assert all(m not in free for m in warm[: warm.index(step)])  # the latest warm one with room
    else:
        assert not set(warm) & free


# -- in the pool ---------------------------------------------------------------------------------

BIG = RequestInfo(input_tokens=100_000, max_output_tokens=1000)  # 520 credits to read again
SMALL = RequestInfo(input_tokens=10, max_output_tokens=1000)


def pool(clock: FakeClock, sticky: bool = True) -> ChaosPool:
    config = parse_config(
        {
            "modelRouting": {
                **FIXED_LIMITS,
                "models": DESIGN_MODELS,
                "chaosMode": {"enabled": True, "stickyConversations": sticky},
                "queue": {"timeoutSeconds": 30},
            }
        }
    )
    return ChaosPool(config, clock=clock, rng=random.Random(0))


def heavy(key: str, request: RequestInfo = BIG) -> Ticket:
    return Ticket("heavy", request=request, sticky_key=key, session=key)


async def test_a_conversation_waits_for_its_warm_model_and_others_pass_it() -> None:
    clock = FakeClock()
    p = pool(clock)
    first = p.try_acquire(heavy("conv"))
    assert first is not None
    clock.advance(3.0)
    p.release(first)  # answers on it take 3 s
    mine = [p.try_acquire(heavy(f"fill-{i}")) for i in range(8)]  # fills every heavy slot
    assert all(mine)
    warm = [s for s in mine if s is not None and s.model == first.model]
    cold = [s for s in mine if s is not None and s.model != first.model]
    waiter = asyncio.ensure_future(p.admit(heavy("conv")))
    # another conversation, as served lately as this one and come after it: behind it in the queue
    others = asyncio.ensure_future(
        p.admit(Ticket("heavy", request=BIG, sticky_key="other", session="fill-0"))
    )
    await asyncio.sleep(0)
    p.release(cold[0])  # another heavy model has room now
    await asyncio.sleep(0)
    assert not waiter.done()  # waits for the warm one: 1 s expected, worth far less than 520 credits
    other = await asyncio.wait_for(others, 1.0)  # one with nothing warm is not held behind it
    assert other is not None and other.model == cold[0].model
    p.release(warm[0])
    slot = await asyncio.wait_for(waiter, 1.0)
    assert slot is not None and slot.model == first.model and slot.reason == "sticky"
    status = served(pool_status.status(p))["sticky"]
    assert status["moves"] == 0 and status["moveCredits"] == 0.0
    for s in [*warm[1:], *cold[1:], other, slot]:
        assert s is not None and p.release(s)
    assert p.in_flight() == 0


def test_a_small_prompt_goes_cold_and_the_move_is_counted_with_its_credits() -> None:
    clock = FakeClock()
    p = pool(clock)
    first = p.try_acquire(heavy("conv", SMALL))
    clock.advance(10.0)  # answers of 10 s: a slot of 3 frees every 3.3 s, worth 4 credits of waiting
    assert first is not None and p.release(first)
    mine = [p.try_acquire(heavy(f"fill-{i}")) for i in range(8)]
    cold = next(s for s in mine if s is not None and s.model != first.model)
    p.release(cold)
    moved = p.try_acquire(heavy("conv", SMALL))  # rereading 10 tokens costs less than any wait
    assert moved is not None and moved.model == cold.model
    assert moved.reason == f"least-loaded (sticky moved from {first.model})"
    status = served(pool_status.status(p))["sticky"]
    assert status["moves"] == 1 and status["moveCredits"] == reread_credits(10)
    clock.advance(1.0)  # now warm on both: the latest one first
    for s in [*mine, moved]:
        if s is not None and s is not cold:
            p.release(s)
    again = p.try_acquire(heavy("conv", SMALL))
    assert again is not None and again.model == cold.model and again.reason == "sticky"
    p.release(again)


def test_a_model_stays_warm_for_the_ttl_only() -> None:
    clock = FakeClock()
    p = pool(clock)
    first = p.try_acquire(heavy("conv"))
    assert first is not None and p.release(first)
    clock.advance(299.0)
    back = p.try_acquire(heavy("conv"))
    assert back is not None and back.model == first.model and back.reason == "sticky"
    p.release(back)
    clock.advance(300.0)  # past z.ai's cache time: a new conversation for the rule, no move counted
    fresh = p.try_acquire(heavy("conv"))
    assert fresh is not None and fresh.reason == "least-loaded"
    assert served(pool_status.status(p))["sticky"]["moves"] == 0
    p.release(fresh)


def test_off_a_conversation_spreads_as_least_loaded_has_it() -> None:
    p = pool(FakeClock(), sticky=False)
    taken = [p.try_acquire(heavy("conv")) for _ in range(3)]
    assert len({s.model for s in taken if s is not None}) == 3
