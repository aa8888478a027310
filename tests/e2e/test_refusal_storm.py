"""A refusal storm through a real mitmdump: the heavy models' true limits fall for good mid-run, to a third
or a half, while a swarm of agents sends streamed requests one after another. Requests refused for
capacity by every model they try wait in the fair queue for a slot to free: no client gets our 429
while the queue's timeout has not passed, and every request is answered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy, MakeSim
from .support import CLIENT_TIMEOUT, HEAVY, OPUS, Result, httpx_stream, routing, sim_headers

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

AGENTS = 16
REQUESTS = 4  # each agent's, one after another
ANSWER = sim_headers(latency_ms=300, tokens=10, interval_ms=30)  # about 0.6 s per answer
FALLEN = {"glm-4.7": 1, "glm-4.6": 1, "glm-4.5-x": 1}  # from 3, 3, 2: for good
FALL_AFTER = 1.0  # seconds into the run
QUEUE_TIMEOUT = 60.0


async def agent(client: httpx.AsyncClient, url: str) -> list[tuple[Result, float]]:
    """One agent's requests, each sent once its previous one ended: (what it saw, seconds it took)."""
    seen = []
    for _ in range(REQUESTS):
        started = time.monotonic()
        result = await httpx_stream(client, url, OPUS, headers=ANSWER)
        seen.append((result, time.monotonic() - started))
    return seen


async def test_limits_that_fall_for_good_mid_run_never_send_a_client_our_429(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim = await make_sim()
    config = routing(learning={"enabled": True}, queue={"timeoutSeconds": QUEUE_TIMEOUT})
    proxy: ProxyProcess = await make_proxy(upstream=sim.base_url, config=config)
    url = proxy.url + "/api/anthropic/v1/messages"

    async def fall() -> None:
        await asyncio.sleep(FALL_AFTER)  # the swarm's first answers are streaming
        (await http.post(sim.base_url + "/sim/limits", json={"limits": FALLEN})).raise_for_status()

    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        falling = asyncio.create_task(fall())
        runs = await asyncio.gather(*(agent(client, url) for _ in range(AGENTS)))
        await falling
    seen = [pair for run in runs for pair in run]
    stats: dict[str, Any] = await sim.wait_idle()
    refused = sum(stats["models"][m]["rejected"].get("1302", 0) for m in HEAVY)
    ours = [(r.status, r.body, took) for r, took in seen if r.status == 429]
    print(  # the figures, with -s
        f"\nrefusal storm: {len(seen)} requests, {len(ours)} client 429s, {refused} upstream 1302s, "
        f"longest {max(took for _, took in seen):.1f} s"
    )
    # Our 429 only once the queue's timeout had passed (none here: the run is far shorter).
    assert [o for o in ours if o[2] < QUEUE_TIMEOUT] == []
    assert [(r.status, r.error, r.body) for r, _ in seen if r.status != 200 or not r.complete] == []
    assert refused > 0  # the limits fell while requests were in flight: z.ai refused some
    assert {r.served for r, _ in seen} <= HEAVY
