"""Pacing in the pool (`quota.pace`): while the forecast runs out before the reset, the lightest models by
quotaWeight first, then at most the paced concurrency in flight, the rest waiting in the fair queue
(counted apart), no 429; nothing of it while the quota lasts or pacing is off."""

from __future__ import annotations

import asyncio
from typing import Any

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.quota.pacer import PACE_EVERY
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.quota import WINDOW_SECONDS
from support.fakes import FakeClock
from support.quota_readings import five_hours

HOUR = 3600.0
WALL = 1_700_000_000.0


def config(*, pace: bool = True, **models: dict[str, Any]) -> ModelRouting:
    catalog = models or {
        "glm-5": {"tier": "HEAVY", "maxConcurrency": 10, "quotaWeight": 3},
        "glm-4.7": {"tier": "HEAVY", "maxConcurrency": 2},
    }
    return parse_config(
        {
            "modelRouting": {
                "chaosMode": {"enabled": True},
                "learning": {"enabled": False},
                "models": catalog,
                "quota": {"pace": pace},
            }
        }
    )


def pool_of(routing: ModelRouting) -> tuple[ChaosPool, FakeClock, FakeClock]:
    clock, wall = FakeClock(1000.0), FakeClock(WALL)
    return ChaosPool(routing, clock=clock, wall_clock=wall), clock, wall


def running_out(pool: ChaosPool, wall: FakeClock) -> None:
    """60% used 1.5 h into the window: 40%/h, spent in an hour, 3.5 h before the reset."""
    pool.quota.read(five_hours(60.0, wall() + WINDOW_SECONDS - 1.5 * HOUR))


def lasting(pool: ChaosPool, wall: FakeClock) -> None:
    """10% used 2 h into the window: 5%/h, it lasts."""
    pool.quota.read(five_hours(10.0, wall() + WINDOW_SECONDS - 2 * HOUR))


def take(pool: ChaosPool, n: int = 1) -> list[Slot]:
    slots = [pool.try_acquire(Ticket("heavy")) for _ in range(n)]
    assert all(slot is not None for slot in slots), slots
    return [slot for slot in slots if slot is not None]


def test_running_out_it_prefers_the_lighter_model_within_the_floor() -> None:
    pool, clock, wall = pool_of(config())
    assert take(pool)[0].model == "glm-5"  # least-loaded: glm-5 has the most room
    running_out(pool, wall)
    clock.advance(PACE_EVERY)  # the plan is worked out again
    assert [slot.model for slot in take(pool, 2)] == ["glm-4.7", "glm-4.7"]
    assert take(pool)[0].model == "glm-5"  # the lighter one is full: the heavier serves, nobody waits
    status = pool_status.quota(pool)["pacing"]
    assert status["enabled"] and status["preferLowerWeight"] and status["maxConcurrency"] is None


def test_while_the_quota_lasts_or_pacing_is_off_nothing_changes() -> None:
    for pace, situation in ((True, lasting), (False, running_out)):
        pool, _, wall = pool_of(config(pace=pace))
        situation(pool, wall)
        assert take(pool)[0].model == "glm-5", (pace, situation)
        assert pool_status.quota(pool)["pacing"]["maxConcurrency"] is None


def test_with_no_lighter_model_left_it_admits_fewer_at_once() -> None:
    pool, clock, wall = pool_of(config(**{"glm-4.5": {"tier": "HEAVY", "maxConcurrency": 10}}))
    held = take(pool, 8)
    clock.advance(100)  # 8 in flight all along: the burn was burnt with 8
    running_out(pool, wall)
    # It affords (97 - 60) / 3.5 h = 10.6 %/h of the 40 %/h it burns: 8 x 10.6 / 40 -> 2 at once.
    assert pool.try_acquire(Ticket("heavy")) is None
    pacing = pool_status.quota(pool)["pacing"]
    assert pacing["maxConcurrency"] == 2 and "at most 2 at once" in pacing["reason"]
    for slot in held[1:]:
        pool.release(slot)
    assert take(pool)[0].model == "glm-4.5"  # 1 in flight: one more
    assert pool.try_acquire(Ticket("heavy")) is None  # 2: the cap
    clock.advance(PACE_EVERY)
    assert pool_status.quota(pool)["pacing"]["maxConcurrency"] == 2  # not lowered again for what it inherited


async def test_paced_requests_wait_in_the_fair_queue_counted_apart_and_get_their_slot() -> None:
    pool, clock, wall = pool_of(config(**{"glm-4.5": {"tier": "HEAVY", "maxConcurrency": 10}}))
    held = take(pool, 8)
    clock.advance(100)
    running_out(pool, wall)
    for slot in held[2:]:
        pool.release(slot)
    waiter = asyncio.ensure_future(pool.admit(Ticket("heavy", session="agent-1"), timeout=5.0))
    await asyncio.sleep(0)
    assert not waiter.done() and pool.first_in_line()[0] == 1
    assert pool_status.quota(pool)["pacing"]["pacedWaits"] == 1
    pool.release(held[0])
    slot = await asyncio.wait_for(waiter, 1.0)
    assert slot is not None and slot.model == "glm-4.5" and pool.rejected == 0
    for other in (held[1], slot):
        pool.release(other)
    assert pool.in_flight() == 0 and pool.spurious_releases == 0


def test_once_paced_in_a_window_the_cap_holds_until_the_window_resets() -> None:
    pool, clock, wall = pool_of(config(**{"glm-4.5": {"tier": "HEAVY", "maxConcurrency": 10}}))
    held = take(pool, 8)
    clock.advance(100)
    running_out(pool, wall)
    assert pool.try_acquire(Ticket("heavy")) is None  # paced: at most 2
    for slot in held[2:]:
        pool.release(slot)
    reset = wall() + WINDOW_SECONDS - 1.5 * HOUR
    wall.advance(HOUR)
    clock.advance(HOUR)
    pool.quota.read(five_hours(65.0, reset))  # 2 at once for an hour: 5 %/h, it lasts now
    forecast = pool.quota.forecast()
    assert forecast is not None and forecast.runs_out_at is None
    # Still paced in this window, at what it affords: (97 - 65) / 2.5 h = 12.8 %/h at 2.5 %/h a request.
    assert pool_status.quota(pool)["pacing"]["maxConcurrency"] == 5
    held[2:] = take(pool, 3)
    assert pool.try_acquire(Ticket("heavy")) is None
    wall.advance(3 * HOUR)  # a new window: nothing said of it yet, nothing paced
    clock.advance(3 * HOUR)
    assert pool_status.quota(pool)["pacing"]["maxConcurrency"] is None
    for slot in held:
        pool.release(slot)
