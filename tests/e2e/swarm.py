"""The swarm: many concurrent streamed requests of mixed tiers, and what must hold after it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from chaos_mode_tools.devtools.processes import ProxyProcess

from .support import (
    FLOOR,
    HAIKU,
    OPUS,
    SONNET,
    Result,
    Sim,
    expected_text,
    idle,
    outcome_delta,
    sim_headers,
    status,
    wait_status_idle,
)

SWARM = 48  # > 28 slots in all, > 8 heavy slots for the opus third
INTERVAL_MS = 30
# Seconds between the first and the last delta of a completed stream: nominally >= 19 x 30 ms = 0.57 s;
# a stream buffered whole shows ~1 ms. The margin absorbs a busy proxy holding back the first deltas.
MIN_SPAN = 0.2
ABORT_EVERY = 10  # requests 3, 13, 23, 33, 43 leave after their first delta
ABORTED_TOKENS = 100
SWARM_TIMEOUT = 45.0


@dataclass(frozen=True)
class Planned:
    index: int
    model: str
    latency_ms: int
    tokens: int
    abort: bool

    @property
    def headers(self) -> dict[str, str]:
        return sim_headers(latency_ms=self.latency_ms, tokens=self.tokens, interval_ms=INTERVAL_MS)


def swarm_plan(size: int = SWARM, first_token_ms: int = 300) -> list[Planned]:
    """Mixed tiers, 300-600 ms to the first token, 20-28 tokens 30 ms apart: the streams overlap.
    Every tenth client leaves after its first delta."""
    models = (OPUS, SONNET, HAIKU)
    plan = []
    for i in range(size):
        abort = i % ABORT_EVERY == 3
        # A client that leaves does so after its first delta, long before its (long) stream would end.
        tokens = ABORTED_TOKENS if abort else 20 + i % 9
        plan.append(Planned(i, models[i % 3], first_token_ms + (i * 37) % 300, tokens, abort))
    return plan


async def run_swarm(
    plan: list[Planned],
    send: Callable[[Planned], Awaitable[Result]],
    sim: Sim,
    http: httpx.AsyncClient,
    proxy: ProxyProcess,
) -> list[Result]:
    """Send the whole plan at once through `send`, then check everything the swarm must show."""
    before = await status(http, proxy)
    async with asyncio.timeout(SWARM_TIMEOUT):
        results = list(await asyncio.gather(*(send(p) for p in plan)))
        await check_swarm(plan, results, sim, http, proxy, before)
    return results


async def check_swarm(
    plan: list[Planned],
    results: list[Result],
    sim: Sim,
    http: httpx.AsyncClient,
    proxy: ProxyProcess,
    before: dict[str, Any],
) -> None:
    aborters = sum(p.abort for p in plan)
    assert aborters >= 2

    # Every request answered 200, none saw a 429: the queue absorbed what the slots could not take.
    problems = [(r.requested, r.status, r.error, r.body) for r in results if r.status != 200 or r.error]
    assert not problems, problems
    assert not [r for r in results if r.status == 429]

    for p, r in zip(plan, results, strict=True):
        # The served model is at or above the request's floor, by message_start and by the simulator.
        assert r.served in FLOOR[p.model], (p.model, r.served)
        assert r.header_served == r.served, (r.header_served, r.served)
        if p.abort:
            assert r.aborted and len(r.deltas) == 1
            continue
        # A complete message, parsed.
        assert r.complete, r
        assert r.text == expected_text(p.tokens)
        assert r.stop_reason in ("end_turn", "stop")  # Anthropic's, or OpenAI's at the chat door
        assert r.output_tokens == p.tokens
        assert len(r.deltas) == p.tokens
        # Incremental: the first delta arrived well before the last one (not buffered whole).
        assert r.delta_span > MIN_SPAN, (p, r.delta_span)

    # The simulator never saw more than a model's limit, and rejected nothing.
    stats = await sim.wait_idle()
    for name, model in stats["models"].items():
        assert model["peakInFlight"] <= model["limit"], (name, model)
        assert model["rejected"] == {}, (name, model["rejected"])
    assert stats["account"]["rejected"] == 0
    assert stats["requests"] == len(plan)  # no failover, no retry: one upstream request per client request
    assert stats["aborted"] == aborters
    served = {name: m["served"] for name, m in stats["models"].items() if m["served"]}
    assert sum(served.values()) == len(plan)
    assert stats["account"]["peakInFlight"] > 8, stats["account"]  # the swarm really overlapped

    # The addon holds no slot once the abort grace has passed, and its counters add up.
    after = await wait_status_idle(http, proxy)
    assert idle(after), after
    moved = outcome_delta(before, after)
    assert moved["ok"] + moved["aborted"] == len(plan), moved
    assert moved["aborted"] == aborters, moved
    assert moved["rejected"] == moved["error"] == 0, moved
    spans = sorted(r.delta_span for p, r in zip(plan, results, strict=True) if not p.abort)
    print(
        f"\n  {len(plan)} streams, {aborters} left early; served {dict(sorted(served.items()))}; "
        f"sim peak {stats['account']['peakInFlight']}; first-to-last delta {spans[0]:.2f}-{spans[-1]:.2f} s"
    )
