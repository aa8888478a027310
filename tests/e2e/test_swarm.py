"""A swarm of concurrent streamed requests of mixed tiers through a real mitmdump with the addon.

More requests than the catalog's 28 slots arrive at once: the queue absorbs them (no 429), the
simulator never sees more than a model's limit (no 1302), every answer comes from a model at or above
the request's floor, SSE arrives incrementally, and after the run (with some clients leaving
mid-stream) the addon holds no slot and its counters add up.
"""

from __future__ import annotations

import asyncio
import gzip
import json

import anthropic
import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .support import CLIENT_TIMEOUT, FLOOR, MESSAGES, OPUS, Result, Sim, httpx_stream, sdk_stream
from .swarm import Planned, run_swarm, swarm_plan

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]


def proxy_for(request: pytest.FixtureRequest, mode: str) -> ProxyProcess:
    proxy: ProxyProcess = request.getfixturevalue(f"{mode}_proxy")
    return proxy


async def test_sdk_swarm(reverse_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient) -> None:
    """The official anthropic SDK, `messages.stream`, 48 at once, in reverse mode
    (ANTHROPIC_BASE_URL=<proxy>/api/anthropic). The SDK through HTTPS_PROXY: test_connections."""
    client = anthropic.AsyncAnthropic(
        base_url=reverse_proxy.url + "/api/anthropic",
        api_key="sk-test-swarm",
        max_retries=0,
        timeout=CLIENT_TIMEOUT,
    )

    async def send(p: Planned) -> Result:
        return await sdk_stream(client, p.model, headers=p.headers, abort_after_first=p.abort)

    async with client:
        await run_swarm(swarm_plan(), send, sim, http, reverse_proxy)


@pytest.mark.parametrize("mode", ["regular", "reverse"])
async def test_httpx_swarm(
    request: pytest.FixtureRequest, mode: str, sim: Sim, http: httpx.AsyncClient
) -> None:
    """Raw httpx streaming, reading SSE lines as they arrive, 48 at once; half with Claude Code's
    `?beta=true` query."""
    proxy = proxy_for(request, mode)
    if mode == "reverse":
        url = proxy.url + "/api/anthropic/v1/messages"
        client = httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT)
    else:
        url = sim.messages_url
        client = httpx.AsyncClient(proxy=proxy.url, trust_env=False, timeout=CLIENT_TIMEOUT)

    async def send(p: Planned) -> Result:
        target = url + "?beta=true" if p.index % 2 else url
        return await httpx_stream(client, target, p.model, headers=p.headers, abort_after_first=p.abort)

    async with client:
        await run_swarm(swarm_plan(), send, sim, http, proxy)


async def test_gzip_request_body_is_routed(reverse_proxy: ProxyProcess, sim: Sim) -> None:
    """A gzip-encoded body is decoded, rewritten, and sent on (the simulator decodes it too)."""
    body = json.dumps({"model": OPUS, "max_tokens": 64, "stream": True, "messages": MESSAGES}).encode()
    headers = {"content-encoding": "gzip", "content-type": "application/json", "x-api-key": "sk-test-gzip"}
    url = reverse_proxy.url + "/api/anthropic/v1/messages"
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client, asyncio.timeout(20.0):
        response = await client.post(url, content=gzip.compress(body), headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["x-sim-served-model"] in FLOOR[OPUS]
    assert "event: message_stop" in response.text
    assert (await sim.stats())["unknownModels"] == {}
