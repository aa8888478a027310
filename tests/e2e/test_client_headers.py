"""The client's own headers reach z.ai as they are, on the first attempt and on a failover (real mitmdump,
the simulator recording what it got): z.ai reads them (its identity filters, Claude Code's `anthropic-beta`
that earns the rate-limit headers on a 429)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from .conftest import MakeProxy
from .support import CLIENT_TIMEOUT, MESSAGES, SONNET, Sim, fault, routing, wait_status_idle

pytestmark = pytest.mark.e2e

TEST_TIMEOUT = 30.0
# What Claude Code sends (its full beta list, its SDK's identity), byte for byte.
CLIENT_HEADERS = {
    "user-agent": "claude-cli/2.1.332 (external, cli)",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "prompt-caching-scope-2026-01-05,effort-2025-11-24",
    "x-stainless-lang": "js",
    "x-stainless-package-version": "0.71.2",
    "x-stainless-retry-count": "0",
    "x-app": "cli",
}


async def send(proxy_url: str) -> httpx.Response:
    body = {"model": SONNET, "max_tokens": 64, "messages": MESSAGES}
    headers = {**CLIENT_HEADERS, "x-api-key": "sk-test-headers", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        return await client.post(proxy_url + "/api/anthropic/v1/messages", json=body, headers=headers)


def assert_untouched(seen: dict[str, str]) -> None:
    assert {name: seen.get(name) for name in CLIENT_HEADERS} == CLIENT_HEADERS, seen


@pytest.mark.parametrize("refusals", [0, 1, 2])
async def test_client_headers_reach_zai_untouched_on_every_attempt(
    refusals: int, make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    if refusals:
        await sim.add_faults(fault("1302", count=refusals))  # each attempt refused: the next model tried
    async with asyncio.timeout(TEST_TIMEOUT):
        response = await send(proxy.url)
    assert response.status_code == 200, response.text
    seen = await sim.seen_headers()
    assert len(seen) == refusals + 1 and len({s[":model"] for s in seen}) == refusals + 1, seen
    for attempt in seen:
        assert_untouched(attempt)
    document = await wait_status_idle(http, proxy)
    assert document["failovers"] == refusals, document
