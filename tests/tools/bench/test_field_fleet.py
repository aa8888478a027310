"""A fleet in the virtual field model (`bench.field.virtual --proxies`): proxies with their own learning
sharing one simulated z.ai through the virtual store (`bench.fleet.virtual.Store`), probes included."""

from __future__ import annotations

import asyncio
import random

from chaos_mode.config.schema import ModelRouting
from chaos_mode.routing.pool import ChaosPool
from chaos_mode.routing.slots import ProbeClaim
from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.bench.field import virtual
from chaos_mode_tools.bench.fleet.virtual import Delays, Store, join
from chaos_mode_tools.bench.virtual_loop import VirtualLoop


def test_the_store_gives_the_right_to_probe_a_limit_to_one_proxy_at_a_time() -> None:
    """CONFIRM with a claim: the right is the first prober's; another's probe of that limit is refused (it
    says how long the right stays there), until a clean answer frees it and every proxy hears `!`."""
    heard: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        config = ModelRouting.model_validate({"models": models_block(EARLY_2026_CATALOG)})
        store = Store(loop, Delays(), config, random.Random(1))
        first, second = (join(store, ChaosPool(config, clock=loop.time), f"p{i}") for i in range(2))
        second.slots.on_probe_answered = heard.append
        claim = ProbeClaim("glm-4.7", 2.0, 0)
        taken = await first.confirm("glm-4.7", "p0#1", 3, 28, claim)
        assert taken is not None and taken.taken and taken.in_flight == 1
        refused = await second.confirm("glm-4.7", "p1#1", 3, 28, ProbeClaim("glm-4.7", 2.0, 1))
        assert refused is not None and not refused.taken and 1.9 < refused.probe_held <= 2.0
        assert refused.refused_probes == 1  # the fleet's count of the limit's refused probes
        assert (await second.confirm("glm-4.7", "p1#2", 3, 28)) is not None  # a regular slot: taken
        first.probe_answered(ProbeClaim("glm-4.7", 0.0, 0), "p0#1")  # answered cleanly: freed
        await asyncio.sleep(0.1)
        assert heard == ["glm-4.7"]
        again = await second.confirm("glm-4.7", "p1#3", 3, 28, ProbeClaim("glm-4.7", 2.0, 0))
        assert again is not None and again.taken and again.in_flight == 3
        over = await first.confirm("glm-4.7", "p0#2", 3, 28)
        assert over is not None and not over.taken  # the model's cap, whoever asks
        assert store.over == 0 and store.tally().proxies == {"p0": 1, "p1": 2}

    loop = VirtualLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_two_proxies_serve_a_field_preset_through_one_store() -> None:
    """`halved`, 2 requests per agent on 2 proxies: every request served, z.ai's slots all given back (the
    run asserts it) and the store's leases too; the proxies meet in the store (races lost to a stale
    mirror); the same run every time."""
    fleet = virtual.run("halved", 1, requests=2, proxies=2)
    assert len(fleet.per_request) == fleet.requests == 80
    assert fleet.leases_left == 0 and len(fleet.budgets) == 2
    assert fleet.lost_races > 0 and fleet.refused > 0 and fleet.bound <= fleet.makespan
    assert fleet == virtual.run("halved", 1, requests=2, proxies=2)
    alone = virtual.run("halved", 1, requests=2)
    assert alone.lost_races == 0 and alone.leases_left == 0 and alone != fleet


def test_a_store_further_away_serves_the_same_requests_later_told() -> None:
    """`--store-ms`: a store 20 ms away (each round trip, each notice) still serves every request and gets
    every lease back; what the proxies hear comes later, so the run is another one."""
    near = virtual.run("halved", 1, requests=2, proxies=2)
    far = virtual.run("halved", 1, requests=2, proxies=2, store_delay=0.02)
    assert len(far.per_request) == far.requests == 80 and far.leases_left == 0
    assert far != near
