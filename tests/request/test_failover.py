"""Failing over in the pure core: the refused attempt is judged, and the request waits again in the queue
keeping its first arrival, without counting again against its conversation."""

from __future__ import annotations

import asyncio
import json

from chaos_mode.config.schema import parse_config
from chaos_mode.doors.messages import parse_message
from chaos_mode.observe.stats import Stats
from chaos_mode.request.failover import Answer, settle
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from support.design_catalog import FIXED_LIMITS
from support.fakes import FakeClock

BODY = json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": []}).encode()
REFUSAL = Answer(429, [], json.dumps({"error": {"code": "1302", "message": "busy"}}).encode())
MODELS = {"a": {"tier": "HEAVY", "maxConcurrency": 1}, "b": {"tier": "HEAVY", "maxConcurrency": 1}}


class RecordingPool(ChaosPool):
    """The real pool, keeping each ticket that waits in `admit` and the arrival it waits with."""

    waits: list[tuple[Ticket, float | None]]

    async def admit(
        self, ticket: Ticket, *, since: float | None = None, timeout: float | None = None
    ) -> Slot | None:
        self.waits.append((ticket, since))
        return await super().admit(ticket, since=since, timeout=timeout)


def make_pool(clock: FakeClock) -> tuple[RecordingPool, Stats]:
    config = parse_config(
        {"modelRouting": {"models": MODELS, **FIXED_LIMITS, "chaosMode": {"enabled": True}}}
    )
    pool = RecordingPool(config, clock=clock, wall_clock=clock)
    pool.waits = []
    return pool, Stats(config, clock)


def routed(pool: RecordingPool, stats: Stats, session: str | None, arrived: float) -> RoutedRequest:
    request = RoutedRequest(
        parse_message(BODY, limit=1 << 20),
        "heavy",
        pool=pool,
        stats=stats,
        later=lambda *_: None,
        session=session,
    )
    request.arrived = arrived
    return request


async def test_a_failover_keeps_its_first_arrival_and_does_not_count_again() -> None:
    clock = FakeClock()
    pool, stats = make_pool(clock)
    first = routed(pool, stats, "conv", clock())
    selection = pool.admit_now(first.ticket())
    assert selection is not None and first.hold(selection)
    other = pool.admit_now(routed(pool, stats, None, clock()).ticket())  # the other model is taken too
    assert other is not None
    clock.advance(1.0)
    later = asyncio.create_task(pool.admit(Ticket("heavy")))  # came at 1 s
    await asyncio.sleep(0)
    clock.advance(2.0)
    # z.ai refuses the first request's attempt at 3 s: it waits again, as if it had come at 0 s.
    failing_over = asyncio.create_task(settle(first, REFUSAL, now=clock()))
    await asyncio.sleep(0)
    assert pool.waiting() == 2
    pool.release(other)
    verdict = await asyncio.wait_for(failing_over, 1)
    assert isinstance(verdict, Slot) and verdict.model == other.model
    assert not later.done()
    # It waited as its conversation's, from its first arrival, and not counted as a new admission.
    ticket, since = pool.waits[-1]
    assert (ticket.session, ticket.counts, since) == ("conv", False, first.arrived)
    assert first.mirror()["failovers"] == 1
    first.finish("ok")  # gives `verdict` back: the request that came at 1 s has it
    served_later = await asyncio.wait_for(later, 1)
    assert served_later is not None and pool.release(served_later)
    assert pool.in_flight() == 0 and pool.waiting() == 0
    assert pool.spurious_releases == 0
