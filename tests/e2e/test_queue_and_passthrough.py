"""The queue timeout answers with our own 429; count_tokens and other traffic pass through untouched."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anthropic
import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess

from .conftest import MakeProxy
from .support import (
    CLIENT_TIMEOUT,
    OPUS,
    Result,
    Sim,
    httpx_stream,
    outcome_delta,
    poll,
    routing,
    sdk_stream,
    sim_headers,
    status,
    wait_status_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

TINY_MODEL = "glm-4.7-flash"  # the simulator's limit for it is 1, like the catalog below
QUEUE_TIMEOUT = 0.5
TEST_TIMEOUT = 20.0
HOLD = sim_headers(latency_ms=10_000, tokens=3, interval_ms=10)  # holds the only slot until cancelled


@pytest.fixture(scope="module")
def tiny_proxy(sim_process: SimProcess) -> Iterator[ProxyProcess]:
    """Reverse mode over a one-model catalog with one slot and a short queue timeout."""
    config = routing(
        models={TINY_MODEL: {"tier": "HEAVY", "maxConcurrency": 1}},
        queue={"timeoutSeconds": QUEUE_TIMEOUT},
    )
    with ProxyProcess(upstream=sim_process.base_url, config=config) as proxy:
        yield proxy


@asynccontextmanager
async def holding(
    client: httpx.AsyncClient, proxy: ProxyProcess, http: httpx.AsyncClient
) -> AsyncIterator[asyncio.Task[Result]]:
    """A long stream that holds the only slot: in flight when the block starts, left when it ends."""
    holder = asyncio.create_task(
        httpx_stream(client, proxy.url + "/api/anthropic/v1/messages", OPUS, headers=HOLD)
    )
    try:
        document = await poll(
            lambda: status(http, proxy), lambda d: d["usedCapacity"] == 1 or holder.done(), 5.0
        )
        assert document["usedCapacity"] == 1, (document, holder.done() and holder.result())
        yield holder
        assert not holder.done(), "the holder ended early: the slot was not held throughout"
    finally:
        holder.cancel()  # the client leaves mid-stream
        with contextlib.suppress(asyncio.CancelledError):
            await holder


async def test_queue_timeout_answers_429_with_retry_after(
    tiny_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient
) -> None:
    before = await status(http, tiny_proxy)
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        anthropic.AsyncAnthropic(
            base_url=tiny_proxy.url + "/api/anthropic",
            api_key="sk-test-queue",
            max_retries=0,
            timeout=CLIENT_TIMEOUT,
        ) as sdk,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        async with holding(client, tiny_proxy, http):
            started = time.monotonic()
            raw, parsed = await asyncio.gather(
                httpx_stream(client, tiny_proxy.url + "/api/anthropic/v1/messages", OPUS, headers={}),
                sdk_stream(sdk, OPUS, headers={}),
            )
            waited = time.monotonic() - started

        for r in (raw, parsed):
            assert r.status == 429, r
            retry_after = int(r.headers["retry-after"])
            assert 1 <= retry_after <= 60, r.headers
            assert r.body["type"] == "error", r.body
            assert r.body["error"]["type"] == "rate_limit_error", r.body
            assert isinstance(r.body["error"]["message"], str) and r.body["error"]["message"], r.body
        assert "RateLimitError" in (parsed.error or "")
        assert waited >= QUEUE_TIMEOUT * 0.9, waited  # they waited the queue timeout (the slot stayed held)

        stats = await sim.stats()
        assert await sim.rejections() == {}, "the simulator saw a 1302: the cap was not held"
        assert stats["requests"] == 1, stats  # the rejected requests never reached z.ai
        after = await wait_status_idle(http, tiny_proxy)
        moved = outcome_delta(before, after)
        assert moved["rejected"] == 2 and moved["aborted"] == 1 and moved["ok"] == 0, moved
        assert after["queue"]["timeouts"] - before["queue"]["timeouts"] == 2, after["queue"]


async def test_clients_gone_while_waiting_never_take_a_slot(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    """Waiters that leave the queue are dropped: the slot goes to nobody, nothing reaches z.ai."""
    config = routing(
        models={TINY_MODEL: {"tier": "HEAVY", "maxConcurrency": 1}}, queue={"timeoutSeconds": 30}
    )
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    url = proxy.url + "/api/anthropic/v1/messages"
    before = await status(http, proxy)
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        async with holding(client, proxy, http):
            waiters = [asyncio.create_task(httpx_stream(client, url, OPUS, headers={})) for _ in range(3)]
            queued = await poll(lambda: status(http, proxy), lambda d: d["queue"]["waiting"] == 3, 5.0)
            assert queued["queue"]["waiting"] == 3, queued["queue"]
            for waiter in waiters:
                waiter.cancel()  # the clients give up while waiting
            await asyncio.gather(*waiters, return_exceptions=True)
            left = await poll(lambda: status(http, proxy), lambda d: d["queue"]["waiting"] == 0, 5.0)
            assert left["queue"]["waiting"] == 0 and left["usedCapacity"] == 1, left
        after = await wait_status_idle(http, proxy)
        # The slot was not leaked to a dead waiter: the next request gets it at once.
        fresh = await httpx_stream(client, url, OPUS, headers={})
    assert fresh.status == 200 and fresh.complete, fresh
    moved = outcome_delta(before, after)
    assert moved["aborted"] == 4 and moved["ok"] == moved["rejected"] == 0, moved  # 3 waiters + the holder
    stats = await sim.stats()
    assert stats["requests"] == 2 and stats["models"][TINY_MODEL]["served"] == 2  # holder, fresh
    assert await sim.rejections() == {}


def padded_count_tokens_body() -> bytes:
    """A count_tokens body whose length is a multiple of 4: a rewritten model name would show."""
    for pad in range(4):
        raw = json.dumps(
            {"model": OPUS, "messages": [{"role": "user", "content": "count me" + "!" * pad}]},
            separators=(",", ":"),
        ).encode()
        if len(raw) % 4 == 0:
            return raw
    raise AssertionError("unreachable")


async def test_count_tokens_passes_through_and_holds_no_slot(
    tiny_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient
) -> None:
    body = padded_count_tokens_body()
    headers = {
        "content-type": "application/json",
        "x-api-key": "sk-test-count",
        "anthropic-version": "2023-06-01",
    }
    path = "/api/anthropic/v1/messages/count_tokens"
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        direct = await client.post(sim.base_url + path, content=body, headers=headers)
        async with holding(client, tiny_proxy, http):
            before = await status(http, tiny_proxy)
            # The only slot is taken, yet count_tokens answers at once (queued, it would wait, then 429).
            started = time.monotonic()
            counted = await asyncio.gather(
                *(
                    client.post(tiny_proxy.url + path + "?beta=true", content=body, headers=headers)
                    for _ in range(3)
                )
            )
            elapsed = time.monotonic() - started
            during = await status(http, tiny_proxy)

        assert direct.status_code == 200
        for response in counted:
            assert response.status_code == 200, response.text
            assert response.json() == direct.json()  # the same bytes reached the simulator
        assert elapsed < QUEUE_TIMEOUT, elapsed
        assert during["usedCapacity"] == 1 and during["queue"]["waiting"] == 0, during
        assert during["requests"] == before["requests"]
        dispatched = {name: m["dispatched"] for name, m in during["modelDistribution"].items()}
        assert dispatched == {name: m["dispatched"] for name, m in before["modelDistribution"].items()}
        assert (await sim.stats())["requests"] == 1  # only the holder's /v1/messages
        await wait_status_idle(http, tiny_proxy)


async def test_other_paths_pass_through_untouched(
    reverse_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient
) -> None:
    """Reverse mode: a non-Messages path passes byte for byte; a GET /v1/messages is not routed."""
    before = await status(http, reverse_proxy)
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        payload = {"model": OPUS, "messages": [{"role": "user", "content": "hi"}]}
        direct = await client.post(sim.base_url + "/api/paas/v4/embeddings", json=payload)
        proxied = await client.post(reverse_proxy.url + "/api/paas/v4/embeddings", json=payload)
        assert proxied.status_code == direct.status_code == 404
        assert proxied.json()["error"] == direct.json()["error"]
        assert "/api/paas/v4/embeddings" in proxied.json()["error"]["message"]

        got = await client.get(reverse_proxy.url + "/api/anthropic/v1/messages")
        assert got.status_code == 405 and got.headers.get("x-sim-served-model") is None, got.text

    after = await status(http, reverse_proxy)
    assert after["requests"] == before["requests"]
    assert after["badRequests"] == before["badRequests"]
    assert (await sim.stats())["requests"] == 0


async def test_another_host_passes_through_untouched(
    regular_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient
) -> None:
    """Regular mode: /v1/messages to a host not in upstreamHosts reaches it with its model unchanged."""
    before = await status(http, regular_proxy)
    other_host = f"http://localhost:{sim.process.port}/api/anthropic/v1/messages"  # only 127.0.0.1 is z.ai
    async with (
        httpx.AsyncClient(proxy=regular_proxy.url, trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        result = await httpx_stream(client, other_host, OPUS, headers={})
    # The simulator got claude-opus-4-5 itself (an unknown model there: 1211), not a GLM name.
    assert result.status == 400, result
    assert result.header_served == OPUS
    assert result.body["error"]["code"] == "1211", result.body
    stats = await sim.stats()
    assert stats["unknownModels"] == {OPUS: 1}, stats
    after = await status(http, regular_proxy)
    assert after["requests"] == before["requests"]
    assert after["usedCapacity"] == 0
