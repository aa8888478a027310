"""z.ai's errors end to end: a 1302 fails over to another heavy model; a 1113 takes a model out; with
nothing left, or the account paused, the client gets a clean Anthropic-format 429 with a Retry-After."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx
import pytest

from .conftest import MakeProxy, MakeSim
from .support import (
    CLIENT_TIMEOUT,
    FLOOR,
    HEAVY,
    OPUS,
    Result,
    Sim,
    httpx_stream,
    routing,
    sdk_client,
    sdk_stream,
    sim_headers,
    status,
    wait_status_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

TEST_TIMEOUT = 30.0
FAULTY = "glm-4.7"
FLOOR_NAMES = tuple(FLOOR)  # one request of each tier


async def test_1302_fails_over_to_another_heavy_model(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    await sim.add_faults({"model": FAULTY, "code": "1302", "count": 3})
    headers = sim_headers(latency_ms=50, tokens=8, interval_ms=10)
    results = []
    async with sdk_client(proxy.url, "sk-test-errors") as client, asyncio.timeout(TEST_TIMEOUT):
        # Opus requests one after the other until one was sent to the faulty model (ties break randomly).
        for _ in range(10):
            results.append(await sdk_stream(client, OPUS, headers=headers))
            if (await sim.rejections()).get(FAULTY):
                break
        rejections = await sim.rejections()
        assert rejections == {FAULTY: {"1302": 1}}, rejections

        # Every client got a complete 200 answer, from a heavy model (the failed-over one from another).
        for r in results:
            assert r.status == 200 and r.complete, r
            assert r.served in HEAVY and r.header_served == r.served, r
        assert results[-1].served != FAULTY

        document = await wait_status_idle(http, proxy)
        faulty = document["modelDistribution"][FAULTY]
        assert document["failovers"] == 1, document
        failover = document["recentFailovers"][-1]
        assert failover["from"] == FAULTY and failover["to"] in HEAVY - {FAULTY}, failover
        assert faulty["upstreamErrors"] == {"1302": 1}, faulty
        assert faulty["cooldownRemaining"] > 0 and "1302" in faulty["cooldownReason"], faulty
        assert faulty["outOfRotation"] is None
        assert document["requests"]["ok"] == len(results), document["requests"]

        # While it cools down, opus traffic keeps flowing on the other heavy models.
        more = await asyncio.gather(*(sdk_stream(client, OPUS, headers=headers) for _ in range(4)))
        assert all(r.status == 200 and r.served in HEAVY - {FAULTY} for r in more), more
        assert (await sim.rejections()) == rejections


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
async def test_a_compressed_1302_is_read_for_its_code_and_fails_over(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient, coding: str
) -> None:
    """z.ai's refusal sent compressed (as a front may send JSON): the addon still reads its code, so the
    request fails over and the model cools down for 1302, not for an unknown 429."""
    sim = await make_sim(error_encoding=coding)
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    await sim.add_faults({"model": FAULTY, "code": "1302", "count": 1})
    headers = sim_headers(latency_ms=20, tokens=3, interval_ms=5)
    async with sdk_client(proxy.url, "sk-test-errors") as client, asyncio.timeout(TEST_TIMEOUT):
        results = []
        for _ in range(12):  # until one was sent to the faulty model (ties break randomly)
            results.append(await sdk_stream(client, OPUS, headers=headers))
            if (await sim.rejections()).get(FAULTY):
                break
        assert (await sim.rejections()) == {FAULTY: {"1302": 1}}
        assert all(r.status == 200 and r.complete for r in results), results
        assert results[-1].served in HEAVY - {FAULTY}, results[-1]
    document = await wait_status_idle(http, proxy)
    assert document["modelDistribution"][FAULTY]["upstreamErrors"] == {"1302": 1}


async def test_1113_takes_the_refused_model_out_of_rotation(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    refused = "glm-4.5-x"  # refused on the Coding Plan with 1113, as measured on z.ai
    sim = await make_sim(refuse=[refused])
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    headers = sim_headers(latency_ms=300, tokens=5, interval_ms=10)
    async with sdk_client(proxy.url, "sk-test-errors") as client, asyncio.timeout(TEST_TIMEOUT):
        # 8 opus requests at once fill all 8 heavy slots: some of them land on the refused model.
        first = await asyncio.gather(*(sdk_stream(client, OPUS, headers=headers) for _ in range(8)))
        second = await asyncio.gather(*(sdk_stream(client, OPUS, headers=headers) for _ in range(8)))
        for r in first + second:
            assert r.status == 200 and r.complete, r
            assert r.served in HEAVY - {refused}, r

        stats = await sim.stats()
        tried = stats["models"][refused]["rejected"].get("1113", 0)
        assert tried >= 1, stats["models"][refused]
        assert stats["models"][refused]["served"] == 0
        document = await wait_status_idle(http, proxy)
        model = document["modelDistribution"][refused]
        assert model["outOfRotation"] and "1113" in model["outOfRotation"], model
        assert model["upstreamErrors"] == {"1113": tried}, model
        assert document["requests"]["ok"] == 16, document["requests"]
        # Once out, the second batch never went there: each 1113 came from the first batch.
        assert tried <= 2 and model["dispatched"] == tried, model
        assert document["failovers"] == tried


ONE_MODEL = "glm-4.7-flash"  # limit 1 at the simulator


async def exhausted(make_proxy: MakeProxy, sim: Sim, fault: dict[str, object]) -> Result:
    """One request to a one-model catalog whose only model answers `fault`: nothing left to fail over to,
    and no queue to wait in for a slot to free (with one, a request refused for capacity waits)."""
    config = routing(models={ONE_MODEL: {"tier": "HEAVY", "maxConcurrency": 1}}, queue={"enabled": False})
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    await sim.add_faults(fault)
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        return await httpx_stream(client, proxy.url + "/api/anthropic/v1/messages", OPUS, headers={})


async def test_nothing_left_to_fail_over_to_answers_a_clean_429(make_proxy: MakeProxy, sim: Sim) -> None:
    """z.ai says 1302 with Retry-After: 120 and no other model may serve: our own 429, whose Retry-After
    stays within the 60 s clients honour, while z.ai's value is not dropped."""
    result = await exhausted(make_proxy, sim, {"model": ONE_MODEL, "code": "1302", "retryAfter": 120})
    assert result.status == 429, result
    assert result.body["type"] == "error" and result.body["error"]["type"] == "rate_limit_error", result.body
    assert result.body["error"]["message"].startswith("chaos-mode:"), result.body  # ours, not z.ai's
    assert result.headers["x-chaos-models-tried"] == ONE_MODEL
    assert 1 <= int(result.headers["retry-after"]) <= 60, result.headers
    assert result.headers["x-upstream-retry-after"] == "120", result.headers


async def test_1308_pauses_the_account(make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient) -> None:
    """z.ai's 5-hour limit is account-wide: its 429 reaches the client, later requests get ours at once."""
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    await sim.add_faults({"model": "*", "code": "1308"})
    url = proxy.url + "/api/anthropic/v1/messages"
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        first = await httpx_stream(client, url, OPUS, headers={})
        later = await asyncio.gather(*(httpx_stream(client, url, model, headers={}) for model in FLOOR_NAMES))
    assert first.status == 429 and first.body["error"]["code"] == "1308", first  # z.ai's own answer
    for r in later:
        assert r.status == 429, r
        assert "account paused" in r.body["error"]["message"], r.body
        # a quota window: the client is told to stop until the reset (about 5 h away), not to retry
        assert int(r.headers["retry-after"]) > 3600, r.headers
        assert r.headers["anthropic-ratelimit-unified-status"] == "rejected", r.headers
        assert int(r.headers["anthropic-ratelimit-unified-reset"]) > time.time() + 3600, r.headers
        # the anthropic SDK (max_retries 2) would sleep out a Retry-After of hours; told not to retry, it
        # raises at once
        sdk = anthropic.AsyncAnthropic(base_url=proxy.url + "/api/anthropic", api_key="sk-test-errors")
        async with sdk, asyncio.timeout(10):  # its default retries
            with pytest.raises(anthropic.RateLimitError, match="account paused"):
                await sdk.messages.create(
                    model=OPUS, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                )
    assert (await sim.stats())["requests"] == 1  # nothing else was sent to z.ai
    document = await status(http, proxy)
    assert document["accountPause"]["remaining"] > 3600 and "1308" in document["accountPause"]["reason"]
    assert document["usedCapacity"] == 0
