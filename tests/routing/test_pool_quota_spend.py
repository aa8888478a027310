"""Pacing's hard stop in a closed loop: the pool, injected clocks, and a z.ai played as the simulator
plays it (a request charged as it arrives, refused 1308 once the window's quota is used, the percentage
whole and read every second). Paced, the swarm spends the whole quota within the window and never meets
1308; once the readings know the total, no request is let go that could pass it."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import parse_config
from chaos_mode.quota.reading import QuotaReading
from chaos_mode.quota.tracker import Asked
from chaos_mode.request.rate_limited import rate_limited
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.errors import Action, UpstreamError
from support.fakes import FakeClock
from support.quota_readings import five_hours

WALL = 1_700_000_000.0
TICK = 0.05  # seconds the loop moves at a time


@dataclass
class Zai:
    """The account's window as the simulator keeps it."""

    total: int
    window: float
    start: float | None = None
    used: int = 0
    refused: int = 0  # 1308s

    def roll(self, now: float) -> None:
        """The window ended: the next opens with the next request."""
        if self.start is not None and now >= self.start + self.window:
            self.start, self.used = None, 0

    def arrive(self, now: float, weight: int = 1) -> bool:
        """A request arrives: served (charged its weight) unless the quota is used."""
        self.roll(now)
        if self.used >= self.total:
            self.refused += 1
            return False
        if self.start is None:
            self.start = now
        self.used += weight
        return True

    def resets_at(self, now: float) -> float:
        return (self.start if self.start is not None else now) + self.window

    def reading(self, now: float, rounding: str = "down") -> QuotaReading:
        self.roll(now)
        share = self.used / self.total * 100
        whole = {"down": math.floor(share), "nearest": math.floor(share + 0.5), "up": math.ceil(share)}
        return five_hours(float(min(whole[rounding], 100)), self.resets_at(now))


@dataclass
class Swarm:
    """`agents` that each ask again as soon as they are answered, `latency` seconds a request."""

    pool: ChaosPool
    zai: Zai
    agents: int
    latency: float
    clock: FakeClock
    wall: FakeClock
    flying: list[tuple[float, Slot]] = field(default_factory=list)
    answers: int = 0
    last_answer: float = 0.0
    unsafe: list[str] = field(default_factory=list)  # admissions the hard stop let go past the quota

    def tick(self, *, asking: bool) -> None:
        now = self.wall()
        for done_at, slot in [f for f in self.flying if f[0] <= now]:
            self.flying.remove((done_at, slot))
            self.pool.ledger.success(slot)
            self.pool.release(slot)
            self.answers += 1
            self.last_answer = now
        while asking and len(self.flying) < self.agents:
            known = self.pool.pacer.budget() is not None
            slot = self.pool.try_acquire(Ticket("heavy"))
            if slot is None:
                return
            self.zai.roll(now)
            if known and self.zai.used + 1 > self.zai.total:
                self.unsafe.append(f"at {now - WALL:.2f} s, {self.zai.used} used")
            if self.zai.arrive(now, int(self.pool.pacer.weight(slot.model))):
                self.flying.append((now + self.latency, slot))
                continue
            spent = UpstreamError(429, "1308", Action.ACCOUNT_PAUSE, "1308", reset_at=self.zai.resets_at(now))
            self.pool.error(slot.model, spent, None, slot)
            self.pool.release(slot)

    def advance(self) -> None:
        self.clock.advance(TICK)
        self.wall.advance(TICK)


ONE_MODEL = {"glm-4.5": {"tier": "HEAVY", "maxConcurrency": 50}}


def swarm_of(
    total: int,
    window: float,
    agents: int,
    latency: float,
    *,
    queue_timeout: float = 60,
    models: dict[str, dict[str, object]] = ONE_MODEL,
) -> Swarm:
    routing = parse_config(
        {
            "modelRouting": {
                "chaosMode": {"enabled": True},
                "learning": {"enabled": False},
                "models": models,
                "queue": {"timeoutSeconds": queue_timeout},
                "quota": {"pace": True, "pollSeconds": 1, "windowSeconds": window},
            }
        }
    )
    clock, wall = FakeClock(1000.0), FakeClock(WALL)
    pool = ChaosPool(routing, clock=clock, wall_clock=wall)
    return Swarm(pool, Zai(total, window), agents, latency, clock, wall)


def run(swarm: Swarm, *, rounding: str = "down", ask_lag: int = 2) -> None:
    """One window: a reading asked for every second, and whenever the pool asks for one, answered
    `ask_lag` ticks later (z.ai's figure taken then); the agents stop asking a second before the end."""
    zai, quota, window = swarm.zai, swarm.pool.quota, swarm.zai.window
    quota.read(zai.reading(swarm.wall()), quota.asked())  # one before the swarm, as the benchmark waits
    pending: dict[int, Asked] = {}
    step = 0

    def read_soon() -> None:
        pending.setdefault(step + ask_lag, quota.asked())

    quota.read_soon = read_soon
    for step in range(round(window / TICK)):
        if step % round(1 / TICK) == 0:
            pending.setdefault(step + ask_lag, quota.asked())
        swarm.tick(asking=step * TICK < window - 1)
        if step in pending:
            quota.read(zai.reading(swarm.wall(), rounding), pending.pop(step))
        swarm.advance()


def test_paced_the_swarm_spends_the_whole_quota_in_the_window_without_a_1308() -> None:
    """The benchmark's preset: 200 prompts a 30-s window, 8 agents at 0.4 s a request (unpaced: spent in
    10 s). Paced: all 200 answered within the window, the last in its final seconds, no 1308."""
    swarm = swarm_of(200, 30.0, agents=8, latency=0.4)
    run(swarm)
    assert swarm.zai.used == 200 and swarm.zai.refused == 0
    assert swarm.answers == 200 and swarm.last_answer - WALL > 25
    assert swarm.unsafe == []
    assert pool_status.quota(swarm.pool)["pacing"]["budget"] == 0


@settings(max_examples=40, deadline=None)
@given(
    st.integers(60, 400),
    st.integers(1, 12),
    st.sampled_from((0.1, 0.3, 0.8)),
    st.sampled_from(("down", "nearest", "up")),
    st.integers(1, 10),
)
def test_once_the_total_is_known_no_request_is_let_go_past_it(
    total: int, agents: int, latency: float, rounding: str, ask_lag: int
) -> None:
    swarm = swarm_of(total, 20.0, agents, latency)
    run(swarm, rounding=rounding, ask_lag=ask_lag)
    run(swarm, rounding=rounding, ask_lag=ask_lag)  # the next window, held to the total from its start
    assert swarm.unsafe == []  # (a 1308 before the readings knew the total is pacing's old risk)


def test_the_next_window_is_held_to_the_total_the_last_one_taught_from_its_start() -> None:
    """A window 12 agents could spend in a third of a second, before a reading bounds its total: held
    from its first request to the total the last window taught, no 1308 (before, one, then a pause)."""
    swarm = swarm_of(40, 20.0, agents=2, latency=0.3)
    run(swarm)  # the first window, spent slowly enough for the readings to learn its total
    assert swarm.answers == 40 and swarm.zai.refused == 0
    swarm.agents, swarm.latency = 12, 0.1
    run(swarm)
    assert swarm.zai.refused == 0 and swarm.unsafe == []
    assert swarm.answers == 80


# -- the hard stop, one step at a time ----------------------------------------------------------------


def known(
    total: int = 200,
    used: int = 190,
    *,
    queue_timeout: float = 60,
    models: dict[str, dict[str, object]] = ONE_MODEL,
    window: float = 30.0,
) -> Swarm:
    """A pool whose readings know the total: `used` of `total` spent through it, one request at a time, a
    reading at each tenth and whenever the hard stop held, the window's reset `window` - 10 s away."""
    swarm = swarm_of(total, window, agents=1, latency=0.0, queue_timeout=queue_timeout, models=models)
    pool, zai = swarm.pool, swarm.zai
    zai.start, tenth = swarm.wall() - 10, 0
    pool.quota.read(zai.reading(swarm.wall()), pool.quota.asked())
    while zai.used < used:
        if zai.used // (total // 10) > tenth:
            tenth = zai.used // (total // 10)
            pool.quota.read(zai.reading(swarm.wall()), pool.quota.asked())
        slot = pool.try_acquire(Ticket("heavy"))
        if slot is None:  # held: what the next reading says is left
            pool.quota.read(zai.reading(swarm.wall()), pool.quota.asked())
            slot = pool.try_acquire(Ticket("heavy"))
        assert slot is not None and zai.arrive(swarm.wall(), int(pool.pacer.weight(slot.model)))
        pool.ledger.success(slot)
        pool.release(slot)
    pool.quota.read(zai.reading(swarm.wall()), pool.quota.asked())
    return swarm


def test_the_hard_stop_lets_go_what_is_left_and_not_one_more() -> None:
    swarm = known()
    pool, zai = swarm.pool, swarm.zai
    budget = pool.pacer.budget()
    assert budget is not None and 0 < budget.left <= 10 and budget.settled
    taken = [pool.try_acquire(Ticket("heavy")) for _ in range(int(budget.left))]
    assert all(slot is not None for slot in taken)
    assert pool.try_acquire(Ticket("heavy")) is None  # held: the budget is spent
    assert pool_status.quota(pool)["pacing"]["budget"] == 0
    for slot in taken:
        assert slot is not None and zai.arrive(WALL)
        pool.ledger.success(slot)
        pool.release(slot)
    assert zai.used <= zai.total and zai.refused == 0


def test_a_refusal_gives_its_weight_back_and_a_request_with_no_verdict_keeps_it() -> None:
    pool = known().pool
    budget = pool.pacer.budget()
    assert budget is not None
    refused, unreached, gone = (pool.try_acquire(Ticket("heavy")) for _ in range(3))
    assert refused is not None and unreached is not None and gone is not None
    busy = UpstreamError(429, "1302", Action.CONCURRENCY, "1302")
    pool.error(refused.model, busy, None, refused)  # z.ai refused it: not charged
    pool.error(unreached.model, UpstreamError(502, None, Action.UNREACHED, "no answer"), None, unreached)
    for slot in (refused, unreached, gone):
        pool.release(slot)  # the client of `gone` left before any answer: perhaps charged
    after = pool.pacer.budget()
    assert after is not None and after.left == budget.left - 2 and not after.settled


async def test_held_by_the_hard_stop_a_request_waits_and_a_reading_that_raises_the_budget_serves_it() -> None:
    swarm = known(used=150)
    pool, zai = swarm.pool, swarm.zai
    budget = pool.pacer.budget()
    assert budget is not None
    taken = [pool.try_acquire(Ticket("heavy")) for _ in range(int(budget.left))]
    asked = pool.quota.asked()
    waiter = asyncio.ensure_future(pool.admit(Ticket("heavy", session="agent-1"), timeout=5.0))
    await asyncio.sleep(0)
    assert not waiter.done() and pool_status.quota(pool)["pacing"]["pacedWaits"] == 1
    for slot in taken:  # answered: the count is exact again, and the next reading says more is left
        assert slot is not None and zai.arrive(WALL)
        pool.ledger.success(slot)
        pool.release(slot)
    pool.quota.read(zai.reading(WALL), asked)
    assert not waiter.done()  # asked for before the answers: it says nothing new
    pool.quota.read(zai.reading(WALL), pool.quota.asked())
    slot = await asyncio.wait_for(waiter, 1.0)
    assert slot is not None and pool.rejected == 0
    pool.release(slot)


def test_spent_for_good_a_request_waits_for_a_reset_within_its_timeout_else_is_told_at_once() -> None:
    pool = known(used=200).pool  # the reset 20 s away: worth the queue's 60 s
    assert pool.try_acquire(Ticket("heavy")) is None and pool.unavailable(Ticket("heavy")) is None
    pool = known(used=200, queue_timeout=10).pool
    budget = pool.pacer.budget()
    assert budget is not None and budget.left < 1 and budget.settled
    why = pool.unavailable(Ticket("heavy"))
    assert why is not None and "quota is spent" in why and "resets in 20 s" in why
    reply, _ = rate_limited(pool, "heavy", [], None, WALL)
    assert reply.status == 429 and ("retry-after", "20") in reply.headers
    assert "x-should-retry" not in dict(reply.headers)  # within a minute: the client retries then


def test_spent_for_good_until_a_reset_past_a_minute_the_client_is_told_to_stop_until_it() -> None:
    """As for a 1308's pause: the real seconds to the reset, and the headers that stop Claude Code and the
    SDKs from retrying (they would sleep it out, or retry at once)."""
    pool = known(used=200, queue_timeout=10, window=130.0).pool
    assert pool.quota_spent_for() == 120.0
    reply, _ = rate_limited(pool, "heavy", [], None, WALL)
    assert reply.status == 429 and b"spent as pacing counts it" in reply.body
    headers = dict(reply.headers)
    assert headers["retry-after"] == "120" and headers["x-should-retry"] == "false"
    assert headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert headers["anthropic-ratelimit-unified-reset"] == str(int(WALL) + 120)


async def test_at_the_reset_the_hard_stop_lifts_and_the_waiters_go() -> None:
    swarm = known(used=200)
    pool = swarm.pool
    swarm.wall.advance(19.95)  # 50 ms to the reset
    waiter = asyncio.ensure_future(pool.admit(Ticket("heavy"), timeout=5.0))
    await asyncio.sleep(0)
    assert not waiter.done() and pool.pacer.lifts_in() == pytest.approx(0.05)
    swarm.wall.advance(0.05)  # the window resets: the next one holds the same total, none of it used
    slot = await asyncio.wait_for(waiter, 1.0)  # woken by the timer set for the reset
    budget = pool.pacer.budget()
    assert slot is not None and budget is not None and 190 < budget.left <= 200 - 1  # the waiter's sent
    assert budget.resets_at == WALL + 20.0 + 30.0  # a window after the last one's, until a reading says
    pool.release(slot)


def test_near_the_end_only_a_model_whose_weight_fits_in_what_is_left_is_chosen() -> None:
    heavy = {"glm-5": {"tier": "HEAVY", "maxConcurrency": 50, "quotaWeight": 3}, **ONE_MODEL}
    pool = known(used=180, models=heavy).pool
    left = pool.pacer.left()
    assert left is not None and left >= 3
    taken: list[Slot] = []
    while True:
        before = pool.pacer.left()
        slot = pool.try_acquire(Ticket("heavy"))
        if slot is None:
            break
        assert before is not None and pool.pacer.weight(slot.model) <= before
        taken.append(slot)
    assert {slot.model for slot in taken} == {"glm-5", "glm-4.5"}  # the light one to the last unit
    assert sum(pool.pacer.weight(slot.model) for slot in taken) == left
    for slot in taken:
        pool.release(slot)


def test_held_with_all_it_let_go_answered_the_pool_asks_for_a_reading_at_once() -> None:
    swarm = known()
    pool, zai = swarm.pool, swarm.zai
    asked: list[int] = []
    pool.quota.read_soon = lambda: asked.append(pool.quota.ledger.open)
    left = pool.pacer.left()
    assert left is not None
    taken = [pool.try_acquire(Ticket("heavy")) for _ in range(int(left))]
    for slot in taken:
        assert slot is not None and zai.arrive(WALL)
        pool.ledger.success(slot)
        pool.release(slot)
    assert asked == [0]  # once, when the last was answered: nothing in flight
    pool.quota.read(zai.reading(WALL), pool.quota.asked())
    pool.pacer.drained()
    assert asked == [0]  # settled: a reading now would say nothing new
