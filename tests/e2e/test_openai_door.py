"""The OpenAI door end to end: chat completions through a real mitmdump (reverse and regular mode) share the
pool, floors, queue and failover with Anthropic messages, with the official openai SDK and a raw SSE reader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import openai
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy
from .support import (
    CHAT_MODEL,
    CHAT_PATH,
    CLIENT_TIMEOUT,
    CODING_CHAT_PATH,
    FLOOR,
    HEAVY,
    OPUS,
    SONNET,
    Result,
    Sim,
    chat_sse_stream,
    expected_text,
    httpx_stream,
    openai_chat,
    poll,
    routing,
    sim_headers,
    status,
    wait_status_idle,
)
from .swarm import Planned, run_swarm, swarm_plan

pytestmark = pytest.mark.e2e

TEST_TIMEOUT = 30.0
TOKENS = 12
INTERVAL_MS = 40.0  # 12 tokens 40 ms apart: a streamed answer spreads over about 0.44 s
SLOW = sim_headers(latency_ms=20, tokens=TOKENS, interval_ms=INTERVAL_MS)


def proxy_for(request: pytest.FixtureRequest, mode: str) -> ProxyProcess:
    proxy: ProxyProcess = request.getfixturevalue(f"{mode}_proxy")
    return proxy


def base_of(proxy: ProxyProcess, sim: Sim, mode: str) -> str:
    """Where a client sends its requests: the proxy itself (reverse), or z.ai through the proxy (regular)."""
    return proxy.url if mode == "reverse" else sim.base_url


@asynccontextmanager
async def sdk_client(
    proxy: ProxyProcess, sim: Sim, mode: str, path: str
) -> AsyncIterator[openai.AsyncOpenAI]:
    """The openai SDK pointed at a chat-completions door (OPENAI_BASE_URL, or HTTPS_PROXY in regular mode)."""
    http_client = httpx.AsyncClient(
        proxy=proxy.url if mode == "regular" else None, trust_env=False, timeout=CLIENT_TIMEOUT
    )
    base_url = base_of(proxy, sim, mode) + path.removesuffix("/chat/completions")
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test-openai-door", max_retries=0, http_client=http_client
    ) as client:
        yield client


def assert_streamed(result: Result, tokens: int = TOKENS) -> None:
    """All the text arrived, over time (not in one piece), and the stream ended with its usage."""
    assert result.status == 200 and result.complete and not result.error, result
    assert result.text == expected_text(tokens), result
    assert len(result.deltas) == tokens, result
    assert result.delta_span >= 0.5 * (tokens - 1) * INTERVAL_MS / 1000, result.deltas
    assert result.stop_reason == "stop" and result.output_tokens == tokens, result


@pytest.mark.parametrize("mode", ["reverse", "regular"])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_the_openai_sdk_is_routed_in_both_modes(
    request: pytest.FixtureRequest, mode: str, stream: bool, sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = proxy_for(request, mode)
    before = await status(http, proxy)
    async with sdk_client(proxy, sim, mode, CHAT_PATH) as client, asyncio.timeout(TEST_TIMEOUT):
        result = await openai_chat(client, "glm-4.5", headers=SLOW, stream=stream)
    if stream:
        assert_streamed(result)
    else:
        assert result.status == 200 and result.complete, result
        assert (result.text, result.stop_reason, result.output_tokens) == (
            expected_text(TOKENS),
            "stop",
            TOKENS,
        )
    assert result.served in FLOOR[SONNET] and result.header_served == result.served, result
    after = await wait_status_idle(http, proxy)
    doors = {
        door: after["requestsByDoor"][door]["ok"] - before["requestsByDoor"][door]["ok"]
        for door in after["requestsByDoor"]
    }
    assert doors == {"anthropic": 0, "openai": 1}, doors
    served = result.served
    assert served is not None
    tokens_out = (
        after["modelDistribution"][served]["tokensOut"] - before["modelDistribution"][served]["tokensOut"]
    )
    assert tokens_out == TOKENS  # the usage chunk (or the JSON answer) reached the statistics


@pytest.mark.parametrize("mode", ["reverse", "regular"])
@pytest.mark.parametrize("path", [CHAT_PATH, CODING_CHAT_PATH], ids=["paas", "coding"])
async def test_a_raw_sse_reader_gets_the_stream_to_done(
    request: pytest.FixtureRequest, mode: str, path: str, sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = proxy_for(request, mode)
    async with (
        httpx.AsyncClient(proxy=proxy.url if mode == "regular" else None, trust_env=False) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        result = await chat_sse_stream(client, base_of(proxy, sim, mode) + path, "glm-4.7", headers=SLOW)
    assert_streamed(result)
    assert result.served in HEAVY, result
    assert "x-chaos-forward" not in result.headers
    await wait_status_idle(http, proxy)


@pytest.mark.parametrize("code", ["1302", "1113"])
async def test_a_refusal_at_the_openai_door_fails_over_and_still_streams(
    code: str, make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    await sim.add_faults({"model": "*", "code": code})
    async with sdk_client(proxy, sim, "reverse", CODING_CHAT_PATH) as client, asyncio.timeout(TEST_TIMEOUT):
        result = await openai_chat(client, "glm-4.7", headers=SLOW)
    assert_streamed(result)
    rejected = await sim.rejections()
    assert sum(codes.get(code, 0) for codes in rejected.values()) == 1, rejected
    assert result.served in HEAVY and result.served not in rejected, result
    document = await wait_status_idle(http, proxy)
    assert document["failovers"] == 1, document
    assert document["requestsByDoor"]["openai"]["ok"] == 1, document


async def test_our_429_at_the_openai_door_speaks_openai(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    """Every heavy slot held (by both doors) and the queue times out: the SDK gets our 429 in OpenAI's
    shape, with a Retry-After, and the holders finish untouched."""
    proxy = await make_proxy(upstream=sim.base_url, config=routing(queue={"timeoutSeconds": 0.3}))
    hold = sim_headers(latency_ms=1500, tokens=2, interval_ms=10)
    url = proxy.url + "/api/anthropic/v1/messages"
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as raw,
        sdk_client(proxy, sim, "reverse", CHAT_PATH) as client,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        holders = [
            httpx_stream(raw, url, OPUS, headers=hold)
            if i % 2
            else chat_sse_stream(raw, proxy.url + CHAT_PATH, "glm-4.6", headers=hold)
            for i in range(8)  # glm-4.7 3 + glm-4.6 3 + glm-4.5-x 2
        ]
        running = asyncio.gather(*holders)
        full = await poll(lambda: status(http, proxy), lambda d: d["usedCapacity"] == 8, 10.0)
        assert full["usedCapacity"] == 8, full
        refused = await openai_chat(client, "glm-4.7", headers={})
        done = await running
    assert [r.status for r in done] == [200] * 8
    assert refused.status == 429, refused
    assert isinstance(refused.body, dict), refused
    assert refused.body["type"] == "rate_limit_error" and refused.body["code"] == "rate_limit_exceeded"
    assert refused.body["message"].startswith("chaos-mode: "), refused.body
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    document = await wait_status_idle(http, proxy)
    assert document["requestsByDoor"]["openai"]["rejected"] == 1, document
    assert (await sim.stats())["requests"] == 8  # the refused one never reached z.ai


@pytest.mark.parametrize("mode", ["reverse", "regular"])
async def test_a_mixed_door_swarm_keeps_every_cap(
    request: pytest.FixtureRequest, mode: str, sim: Sim, http: httpx.AsyncClient
) -> None:
    """48 streams at once, every second one a chat completion (both z.ai chat paths): one pool, no 429
    anywhere, the simulator never above a model's limit, every answer at or above its floor."""
    proxy = proxy_for(request, mode)
    base = base_of(proxy, sim, mode)
    client = httpx.AsyncClient(
        proxy=proxy.url if mode == "regular" else None, trust_env=False, timeout=CLIENT_TIMEOUT
    )
    before = await status(http, proxy)

    async def send(p: Planned) -> Result:
        if p.index % 2 == 0:
            return await httpx_stream(
                client,
                base + "/api/anthropic/v1/messages",
                p.model,
                headers=p.headers,
                abort_after_first=p.abort,
            )
        path = CODING_CHAT_PATH if p.index % 4 == 1 else CHAT_PATH
        result = await chat_sse_stream(
            client, base + path, CHAT_MODEL[p.model], headers=p.headers, abort_after_first=p.abort
        )
        result.requested = p.model  # judged against the same floor as the Anthropic name of its tier
        return result

    async with client:
        await run_swarm(swarm_plan(), send, sim, http, proxy)
    after = await status(http, proxy)
    for door in ("anthropic", "openai"):
        moved = sum(after["requestsByDoor"][door].values()) - sum(before["requestsByDoor"][door].values())
        assert moved == 24, (door, moved)
