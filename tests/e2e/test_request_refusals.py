"""A prompt z.ai's content filter refuses, end to end: real mitmdump, the simulator's filter (1305 on every
model: HTTP 529 at the Anthropic door, 429 at the OpenAI one) and the official SDKs. While other requests
stream on the same models, the filtered request gets z.ai's own answer on its first try, after one
failover; its retry gets it at once; no model is cooled, no limit moves, and `/api/status` counts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy, MakeSim
from .support import (
    CHAT_PATH,
    CLIENT_TIMEOUT,
    HEAVY,
    MESSAGES,
    OPUS,
    Result,
    Sim,
    openai_chat,
    routing,
    sdk_client,
    sdk_stream,
    sim_headers,
    wait_status_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

TEST_TIMEOUT = 30.0
PHRASE = "You run on Hermes Agent"  # the phrase of the field reports (NousResearch/hermes-agent #60118)
SYSTEM = f"You are a coding agent. {PHRASE}."
# The others' answers: about 2 s of streaming, so that they run while the filtered request is refused.
LONG = sim_headers(latency_ms=20, tokens=40, interval_ms=50)
TRIED = "x-chaos-models-tried"  # on our own 429s only


@asynccontextmanager
async def others_streaming(proxy: ProxyProcess, count: int) -> AsyncIterator[list[asyncio.Task[int]]]:
    """`count` opus requests from other agents, each answered (its head at the client) before this yields,
    and still streaming; the tasks give each one's status and complete text length once read to the end."""
    url = proxy.url + "/api/anthropic/v1/messages"
    body = {"model": OPUS, "max_tokens": 256, "stream": True, "messages": MESSAGES}
    headers = {"x-api-key": "sk-test-others", "anthropic-version": "2023-06-01", **LONG}
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        answered = [asyncio.Event() for _ in range(count)]

        async def one(ready: asyncio.Event) -> int:
            async with client.stream("POST", url, json=body, headers=headers) as response:
                ready.set()  # the forwarder had z.ai's clean head before it sent us ours
                text = await response.aread()
                return response.status_code if b"message_stop" in text else -1

        tasks = [asyncio.create_task(one(ready)) for ready in answered]
        await asyncio.gather(*(ready.wait() for ready in answered))
        try:
            yield tasks
        finally:
            await asyncio.gather(*tasks, return_exceptions=True)


async def filtered_proxy(make_sim: MakeSim, make_proxy: MakeProxy) -> tuple[Sim, ProxyProcess]:
    """The simulator with z.ai's content filter, and a proxy with learned limits on (none may move)."""
    sim = await make_sim(filter_phrases=[PHRASE])
    proxy = await make_proxy(upstream=sim.base_url, config=routing(learning={"enabled": True}))
    return sim, proxy


async def assert_nothing_cooled_and_counted(
    http: httpx.AsyncClient, proxy: ProxyProcess, sim: Sim, refusals: int
) -> dict[str, Any]:
    document = await wait_status_idle(http, proxy)
    for name, model in document["modelDistribution"].items():
        assert model["cooldownRemaining"] == 0 and model["cooldownReason"] is None, (name, model)
        assert model["outOfRotation"] is None and not model["upstreamErrors"], (name, model)
        assert model["learnedLimit"] == model["catalogLimit"] and model["limitReason"] == "catalog", model
    assert document["requestRefusals"] == {"1305": refusals}, document["requestRefusals"]
    assert (await sim.stats())["filtered"]["requests"] == refusals  # each refusal counted, once
    return document


def assert_zais_own(result: Result, status: int) -> None:
    assert result.status == status and not result.complete, result
    assert TRIED not in result.headers, result.headers  # not our 429
    assert result.headers.get("request-id") or result.headers.get("x-request-id"), result.headers


async def test_the_anthropic_sdk_gets_zais_529_on_its_first_request_and_nothing_is_cooled(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim, proxy = await filtered_proxy(make_sim, make_proxy)
    async with (
        sdk_client(proxy.url, "sk-test-filtered") as client,
        asyncio.timeout(TEST_TIMEOUT),
        others_streaming(proxy, len(HEAVY)) as others,  # one on each heavy model (least-loaded)
    ):
        first = await sdk_stream(client, OPUS, headers={}, system=SYSTEM)
        assert_zais_own(first, 529)
        assert first.body["type"] == "error", first.body
        assert first.body["error"]["type"] == "overloaded_error" and first.body["error"]["code"] == "1305"
        assert "1305" in first.body["error"]["message"], first.body
        retry = await sdk_stream(client, OPUS, headers={}, system=SYSTEM)  # as Claude Code retries a 529
        assert_zais_own(retry, 529)
        assert retry.body == {**first.body, "request_id": retry.body.get("request_id")}
        statuses = await asyncio.gather(*others)
    assert statuses == [200] * len(HEAVY)  # the others were served meanwhile, to their end
    document = await assert_nothing_cooled_and_counted(http, proxy, sim, refusals=3)
    assert document["failovers"] == 1  # the first request once; its retry not at all
    assert document["requests"]["ok"] == len(HEAVY) and document["requests"]["error"] == 2
    assert document["requests"]["rejected"] == 0


async def test_the_openai_sdk_gets_zais_429_on_its_first_request_and_nothing_is_cooled(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim, proxy = await filtered_proxy(make_sim, make_proxy)
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as transport,
        openai.AsyncOpenAI(
            base_url=proxy.url + CHAT_PATH.removesuffix("/chat/completions"),
            api_key="sk-test-filtered-openai",
            max_retries=0,
            http_client=transport,
        ) as client,
        asyncio.timeout(TEST_TIMEOUT),
        others_streaming(proxy, len(HEAVY)) as others,
    ):
        first = await openai_chat(client, "glm-4.7", headers={}, system=SYSTEM)  # heavy: glm-4.7's floor
        assert_zais_own(first, 429)
        assert first.body["code"] == "1305" and first.body["message"], first.body  # the SDK's `error` object
        assert "rate_limit_exceeded" not in str(first.body)  # our 429's code word
        retry = await openai_chat(client, "glm-4.7", headers={}, system=SYSTEM)
        assert_zais_own(retry, 429)
        assert retry.body == first.body
        statuses = await asyncio.gather(*others)
    assert statuses == [200] * len(HEAVY)
    document = await assert_nothing_cooled_and_counted(http, proxy, sim, refusals=3)
    assert document["failovers"] == 1
    assert document["requestsByDoor"]["openai"]["error"] == 2
    assert document["requestsByDoor"]["openai"]["rejected"] == 0


async def test_with_nobody_served_the_filtered_request_cools_its_models_as_before(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """No other request to tell load from content: the refusals are the models' (our 429, cooled)."""
    sim, proxy = await filtered_proxy(make_sim, make_proxy)
    async with sdk_client(proxy.url, "sk-test-filtered") as client, asyncio.timeout(TEST_TIMEOUT):
        alone = await sdk_stream(client, OPUS, headers={}, system=SYSTEM)
    assert alone.status == 429 and alone.headers.get(TRIED), alone
    document = await wait_status_idle(http, proxy)
    assert document["requestRefusals"] == {}
    cooled = [name for name, m in document["modelDistribution"].items() if m["cooldownRemaining"] > 0]
    assert set(cooled) == HEAVY, cooled
    assert (await sim.stats())["filtered"]["requests"] == len(HEAVY)
