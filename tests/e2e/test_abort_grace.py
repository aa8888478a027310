"""Why a slot freed by a client that left mid-stream goes back to the pool only after a grace.

z.ai (and the simulator, `abort_detect_ms`, 200 ms by default) keeps counting a stream for a moment after
its client went away. Released at once, the slot goes to the next queued request, which reaches the
upstream while the dead stream still counts: a 1302. The experiment runs the same burst — a model full
of streams whose clients leave mid-stream while as many requests wait in the queue — against proxies
that differ only in `streams.abortGraceSeconds`, and counts the simulator's 1302s.
`pytest -s` prints the figure.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy, MakeSim
from .support import (
    CLIENT_TIMEOUT,
    MESSAGES,
    OPUS,
    Result,
    Sim,
    httpx_stream,
    poll,
    routing,
    sim_headers,
    status,
)

pytestmark = pytest.mark.e2e

CAP = 3  # the one model's slots, in the catalog and at the simulator
ROUNDS = 3
ABORT_DETECT_MS = 200.0  # the simulator's default, stated here so the figure says what it measured
GRACES: dict[str, float | None] = {"0 s": 0.0, "0.1 s": 0.1, "0.3 s": 0.3, "0.5 s (default)": None}
VICTIM = sim_headers(latency_ms=20, tokens=40, interval_ms=25)  # a 1 s stream, left after its first delta
FOLLOWER = sim_headers(latency_ms=20, tokens=2, interval_ms=10)


@dataclass
class Tally:
    label: str
    aborted: int = 0
    rejected_1302: int = 0
    followers: list[Result] = field(default_factory=list)

    @property
    def client_429s(self) -> int:
        return sum(r.status == 429 for r in self.followers)


async def victim(client: httpx.AsyncClient, url: str, leave: asyncio.Event) -> bool:
    """Stream until the first text delta, wait for the signal, then close mid-stream; True if it did."""
    body = {"model": OPUS, "max_tokens": 256, "stream": True, "messages": MESSAGES}
    async with client.stream(
        "POST", url, json=body, headers={"x-api-key": "sk-test-grace", **VICTIM}
    ) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:") and json.loads(line[5:])["type"] == "content_block_delta":
                await leave.wait()
                return True
    return False


async def burst(proxy: ProxyProcess, model: str, sim: Sim, http: httpx.AsyncClient, tally: Tally) -> None:
    url = proxy.url + "/api/anthropic/v1/messages"
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        for _ in range(ROUNDS):
            leave = asyncio.Event()
            victims = [asyncio.create_task(victim(client, url, leave)) for _ in range(CAP)]
            full = await poll(lambda: status(http, proxy), lambda d: d["usedCapacity"] == CAP, 5.0)
            assert full["usedCapacity"] == CAP, full
            followers = [
                asyncio.create_task(httpx_stream(client, url, OPUS, headers=FOLLOWER)) for _ in range(CAP)
            ]
            queued = await poll(lambda: status(http, proxy), lambda d: d["queue"]["waiting"] == CAP, 5.0)
            assert queued["queue"]["waiting"] == CAP, queued
            leave.set()  # every victim leaves mid-stream while CAP requests wait for its slot
            tally.aborted += sum(await asyncio.gather(*victims))
            tally.followers += await asyncio.gather(*followers)
            # Next round on a calm model: the simulator idle, the addon idle, no cooldown left.
            await poll(sim.stats, lambda s: s["models"][model]["inFlight"] == 0, 5.0)
            await poll(
                lambda: status(http, proxy),
                lambda d: d["usedCapacity"] == 0 and d["modelDistribution"][model]["cooldownRemaining"] == 0,
                10.0,
            )
    tally.rejected_1302 = (await sim.stats())["models"][model]["rejected"].get("1302", 0)


async def test_abort_grace_keeps_the_upstream_from_1302(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    models = {label: f"tiny-{i}" for i, label in enumerate(GRACES)}
    sim = await make_sim(limits={m: CAP for m in models.values()}, abort_detect_ms=ABORT_DETECT_MS)
    proxies: dict[str, ProxyProcess] = {}

    async def start(label: str, grace: float | None) -> None:
        streams = {} if grace is None else {"streams": {"abortGraceSeconds": grace}}
        config = routing(
            models={models[label]: {"tier": "HEAVY", "maxConcurrency": CAP}},
            cooldown={"defaultSeconds": 0.2, "burstMultiplier": 1},  # a 1302 must not stall the next round
            **streams,
        )
        proxies[label] = await make_proxy(upstream=sim.base_url, config=config)

    tallies = {label: Tally(label) for label in GRACES}
    async with asyncio.timeout(40.0):
        await asyncio.gather(*(start(label, grace) for label, grace in GRACES.items()))
        await asyncio.gather(
            *(burst(proxies[label], models[label], sim, http, tallies[label]) for label in GRACES)
        )

    print(
        f"\n  abort grace vs. 1302 at the upstream (simulator abort-detect {ABORT_DETECT_MS:g} ms, "
        f"{ROUNDS} rounds of {CAP} streams left mid-stream with {CAP} requests queued):"
    )
    for tally in tallies.values():
        print(
            f"    grace {tally.label:>16}: {tally.aborted} aborted, {tally.rejected_1302} x 1302 at the "
            f"simulator, {tally.client_429s} client 429s"
        )
    no_grace, default = tallies["0 s"], tallies["0.5 s (default)"]
    assert no_grace.aborted == default.aborted == ROUNDS * CAP
    # Released at once, the freed slot is reused before the upstream noticed the dead stream.
    assert no_grace.rejected_1302 > 0
    # With the default grace the upstream has noticed first: no 1302, every queued request served.
    assert default.rejected_1302 == 0
    assert [r.status for r in default.followers] == [200] * ROUNDS * CAP
