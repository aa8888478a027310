"""API keys never show: not in mitmdump's output, not in /api/status — whatever happens to the flow."""

from __future__ import annotations

import asyncio
import secrets

import anthropic
import httpx
import pytest

from .conftest import MakeProxy
from .support import (
    CLIENT_TIMEOUT,
    HAIKU,
    OPUS,
    SONNET,
    Sim,
    httpx_stream,
    routing,
    sdk_stream,
    sim_headers,
    wait_status_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]


async def test_api_keys_never_appear_in_output_or_status(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    api_key = f"sk-e2e-secret-{secrets.token_hex(12)}"
    bearer = f"sk-e2e-secret-{secrets.token_hex(12)}"
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    url = proxy.url + "/api/anthropic/v1/messages"
    headers = sim_headers(latency_ms=50, tokens=6, interval_ms=20)
    # Failovers (1302), a refused model (1113), a fatal plan error (1309): what the addon logs about.
    await sim.add_faults({"model": "*", "code": "1302", "count": 2})
    async with (
        anthropic.AsyncAnthropic(
            base_url=proxy.url + "/api/anthropic", api_key=api_key, max_retries=0, timeout=CLIENT_TIMEOUT
        ) as sdk,
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(20.0),
    ):
        bearer_headers = {"authorization": f"Bearer {bearer}", **headers}
        results = await asyncio.gather(
            *(sdk_stream(sdk, model, headers=headers) for model in (OPUS, SONNET, SONNET, HAIKU, HAIKU)),
            sdk_stream(sdk, SONNET, headers=headers, abort_after_first=True),
            httpx_stream(client, url, SONNET, headers=bearer_headers),
            httpx_stream(client, url, OPUS, headers=bearer_headers, abort_after_first=True),
        )
        await sim.add_faults({"model": "*", "code": "1113"})
        refused = await sdk_stream(sdk, HAIKU, headers=headers)
        await sim.add_faults({"model": "*", "code": "1309"})
        fatal = await sdk_stream(sdk, HAIKU, headers=headers)
        # Bad input the addon passes on and logs: not JSON, no model.
        for content in (b"{not json", b'{"messages": []}'):
            for key_header in ({"x-api-key": api_key}, {"authorization": f"Bearer {bearer}"}):
                await client.post(
                    url, content=content, headers={"content-type": "application/json", **key_header}
                )
        document = await wait_status_idle(http, proxy)
        raw_status = (await http.get(proxy.status_url)).text

    assert [r.status for r in results] == [200] * len(results), [(r.status, r.error) for r in results]
    assert refused.status == 200 and fatal.status == 403, (refused, fatal)  # the plan expired: no retry
    # The faults were met: the secrets were in the flows when the addon logged about them.
    assert (await sim.stats())["pendingFaults"] == []
    assert document["failovers"] >= 2
    assert any(m["outOfRotation"] for m in document["modelDistribution"].values())
    output = proxy.output()
    assert "chaos mode on" in output  # the output is really the addon's
    for secret in (api_key, bearer):
        assert secret not in output
        assert secret not in raw_status
        assert secret[-12:] not in output + raw_status  # not even a tail of it
    await asyncio.to_thread(proxy.stop)  # output at shutdown, too
    assert api_key not in proxy.output() and bearer not in proxy.output()
