"""Learned limits through a real mitmdump in front of a simulator whose true limits differ from the catalog:
the proxy finds lower limits without a cooldown spiral, finds higher ones by probing, and keeps what it
learned across a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy, MakeSim
from .support import (
    CLIENT_TIMEOUT,
    OPUS,
    Result,
    fault,
    httpx_stream,
    poll,
    routing,
    sim_headers,
    status,
    wait_status_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

LEARNING: dict[str, Any] = {"enabled": True}
SLOW = sim_headers(latency_ms=300, tokens=5, interval_ms=40)  # about half a second per answer


async def waves(proxy: ProxyProcess, count: int, size: int, model: str = OPUS) -> list[Result]:
    """`count` waves of `size` concurrent streamed requests, each wave after the last has ended."""
    url = proxy.url + "/api/anthropic/v1/messages"
    results: list[Result] = []
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        for _ in range(count):
            wave = [httpx_stream(client, url, model, headers=SLOW) for _ in range(size)]
            results += await asyncio.gather(*wave)
    return results


def all_answered(results: list[Result]) -> None:
    assert [r for r in results if r.status != 200 or not r.complete] == []


async def test_limits_below_the_catalog_are_learned_without_cooldowns(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    # Heavy models: glm-4.7 takes 2 (catalog 3), glm-4.6 takes 1 (3), glm-4.5-x is refused by the plan.
    sim = await make_sim(limits={"glm-4.7": 2, "glm-4.6": 1, "glm-4.5-x": 2}, refuse=["glm-4.5-x"])
    config = routing(learning={**LEARNING, "probeIntervalSeconds": 60})
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    results = await waves(proxy, count=3, size=8)
    all_answered(results)  # every opus request answered by a heavy model; no 429 reached a client
    assert {r.served for r in results} <= {"glm-4.7", "glm-4.6"}
    document = await wait_status_idle(http, proxy)
    models = document["modelDistribution"]
    assert (models["glm-4.7"]["learnedLimit"], models["glm-4.6"]["learnedLimit"]) == (2, 1)
    assert models["glm-4.7"]["catalogLimit"] == 3
    assert models["glm-4.7"]["limitReason"].startswith("1302 at")
    assert models["glm-4.5-x"]["outOfRotation"] is not None
    assert all(m["cooldownReason"] is None for m in models.values())  # a 1302 is no outage
    stats = await sim.stats()
    for name in ("glm-4.7", "glm-4.6"):
        # One burst over the limit at the start (a level is refused at its second or third refusal: one
        # alone may be chance; and perhaps a probe before the first answer came back), then never again
        # within the probe interval.
        assert stats["models"][name]["rejected"].get("1302", 0) <= 6, stats["models"][name]


async def test_limits_above_the_catalog_are_found_by_probing(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim = await make_sim(limits={"solo": 6})
    config = routing(models={"solo": {"tier": "HEAVY", "maxConcurrency": 2}}, learning=LEARNING)
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    all_answered(await waves(proxy, count=4, size=10))
    document = await wait_status_idle(http, proxy)
    solo = document["modelDistribution"]["solo"]
    stats = await sim.stats()
    assert 5 <= solo["learnedLimit"] <= 6, solo
    assert stats["models"]["solo"]["peakInFlight"] >= 5  # the extra slots were used
    assert stats["models"]["solo"]["rejected"].get("1302", 0) <= 4  # probes above 6: few, and paced


async def test_a_request_z_ai_is_slow_to_refuse_leaves_its_place_to_the_next_one(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """z.ai takes seconds to refuse, and holds no slot for the request it refuses: once that request has
    had no head within its patience, the next one is served in its place meanwhile, and the refused one
    fails over when its 1302 comes."""
    sim = await make_sim(limits={"solo": 1})
    spec = {"tier": "HEAVY", "maxConcurrency": 1, "ceiling": 1}  # no probe above 1 could take its place
    proxy = await make_proxy(upstream=sim.base_url, config=routing(models={"solo": spec}, learning=LEARNING))
    all_answered(await waves(proxy, count=8, size=1))  # heads come at once: the patience is known
    await sim.add_faults(fault("1302", delayMs=4000))  # the next request: refused, 4 s after it came
    url = proxy.url + "/api/anthropic/v1/messages"
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        refused = asyncio.ensure_future(httpx_stream(client, url, OPUS, headers=SLOW))
        document = await poll(
            lambda: status(http, proxy), lambda d: d["modelDistribution"]["solo"]["overdue"] == 1, 3.0
        )
        solo = document["modelDistribution"]["solo"]
        assert (solo["overdue"], solo["inFlight"], solo["capacity"]) == (1, 1, 1)
        after = await httpx_stream(client, url, OPUS, headers=SLOW)  # in the overdue one's place
        # served before the refused one had its verdict: no 1302 has reached the proxy yet
        assert (await status(http, proxy))["modelDistribution"]["solo"]["upstreamErrors"] == {}
        assert not refused.done()
        first = await refused
    all_answered([after, first])
    stats = await sim.stats()
    assert stats["models"]["solo"]["rejected"] == {"1302": 1} and stats["models"]["solo"]["peakInFlight"] == 1
    document = await wait_status_idle(http, proxy)
    assert document["modelDistribution"]["solo"]["overdue"] == 0


async def test_what_was_learned_survives_a_restart(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    sim = await make_sim(limits={"solo": 1})
    state = tmp_path / "limits.json"
    config = routing(
        models={"solo": {"tier": "HEAVY", "maxConcurrency": 3}},
        learning={**LEARNING, "probeIntervalSeconds": 60},
    )
    extra = ["--set", f"chaos_limits_file={state}"]
    first = await make_proxy(upstream=sim.base_url, config=config, extra_args=extra)
    all_answered(await waves(first, count=1, size=3))
    assert (await status(http, first))["modelDistribution"]["solo"]["learnedLimit"] == 1
    await asyncio.to_thread(first.stop)
    saved = json.loads(state.read_text(encoding="utf-8"))
    assert saved["models"]["solo"]["limit"] == 1
    second = await make_proxy(upstream=sim.base_url, config=config, extra_args=extra)
    solo = (await status(http, second))["modelDistribution"]["solo"]
    # The reason as saved: which of two simultaneous 1302s is judged first decides its wording.
    assert solo["learnedLimit"] == 1 and solo["limitReason"] == saved["models"]["solo"]["reason"]
    assert solo["limitReason"].startswith("1302 at ")


async def test_a_corrupt_state_file_is_ignored_with_one_warning_and_never_written_over(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    sim = await make_sim(limits={"solo": 3})
    state = tmp_path / "limits.json"
    state.write_text("{not json", encoding="utf-8")
    config = routing(models={"solo": {"tier": "HEAVY", "maxConcurrency": 3}}, learning=LEARNING)
    proxy = await make_proxy(
        upstream=sim.base_url, config=config, extra_args=["--set", f"chaos_limits_file={state}"]
    )
    solo = (await status(http, proxy))["modelDistribution"]["solo"]
    assert solo["learnedLimit"] == 3
    all_answered(await waves(proxy, count=1, size=2))
    await asyncio.to_thread(proxy.stop)
    log = proxy.output()
    assert log.count("learned limits not restored") == 1 and "not valid JSON" in log
    assert "Traceback" not in log
    assert state.read_text(encoding="utf-8") == "{not json"  # maybe another file of the user's: kept
