"""The built-in catalog (no `models` in the config) in front of a simulator serving z.ai's Coding Plan of
December 2026: every tier is served by a model at or above its floor, judged by the model that answered,
and no request reaches a name the plan no longer serves (1311) or does not know (1211)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from chaos_mode_tools.sim import catalog_settings
from support.design_catalog import DEC_2026, DEC_2026_ALL, DEC_2026_HEAVY, DEC_2026_MEDIUM

from .conftest import MakeProxy, MakeSim
from .support import CLIENT_TIMEOUT, HAIKU, OPUS, SLOW, SONNET, httpx_stream

pytestmark = pytest.mark.e2e

FLOOR = {OPUS: set(DEC_2026_HEAVY), SONNET: set(DEC_2026_MEDIUM), HAIKU: set(DEC_2026_ALL)}
EACH = 3  # requests per tier, all at once: 9 of the catalog's 12 slots


async def test_the_default_config_serves_every_tier_at_its_floor_on_the_plan_of_december_2026(
    make_sim: MakeSim, make_proxy: MakeProxy
) -> None:
    sim = await make_sim(**catalog_settings("2026-12"))
    config = {"upstreamHosts": ["127.0.0.1"], "chaosMode": {"enabled": True}}  # the built-in catalog
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    url = proxy.url + "/api/anthropic/v1/messages"
    asked = [model for model in (OPUS, SONNET, HAIKU) for _ in range(EACH)]
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        results = await asyncio.gather(*(httpx_stream(client, url, model, headers=SLOW) for model in asked))
    for result in results:
        assert result.status == 200 and result.complete, result
        # What answered, by the answer's own `model` and by the simulator's header: a served model of the
        # request's floor, never an older name z.ai routes elsewhere.
        assert result.served == result.header_served, result
        assert result.served in FLOOR[result.requested], result
    stats = await sim.stats()
    served = {name: m["served"] for name, m in stats["models"].items() if m["served"]}
    assert set(served) <= set(DEC_2026) and sum(served.values()) == len(asked), stats["models"]
    assert stats["retiredModels"] == {} and stats["unknownModels"] == {}, stats
    assert stats["aliasedRequests"] == {}, stats["aliasedRequests"]  # sent under the served model's name
    refused = [(name, m["rejected"]) for name, m in stats["models"].items() if m["rejected"]]
    assert not [r for r in refused if {"1311", "1211"} & set(r[1])], refused
