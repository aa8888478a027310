"""A plan that refuses every model (1113 on each): the client hears why at once, a 403 it does not retry,
instead of a 429 with a Retry-After that it would retry in a loop; the proxy's log says which models left
rotation and why."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from support.design_catalog import DESIGN_MODELS

from .conftest import MakeProxy, MakeSim
from .support import CLIENT_TIMEOUT, OPUS, SONNET, httpx_stream, routing

pytestmark = pytest.mark.e2e

WITHIN = 10.0  # seconds: the client knows before this


async def test_a_plan_refusing_every_model_is_a_clear_error_within_seconds(
    make_sim: MakeSim, make_proxy: MakeProxy
) -> None:
    sim = await make_sim(refuse=list(DESIGN_MODELS))
    proxy = await make_proxy(upstream=sim.base_url, config=routing())
    url = proxy.url + "/api/anthropic/v1/messages"
    started = time.monotonic()
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(WITHIN),
    ):
        first = await httpx_stream(client, url, OPUS, headers={})
        later = await httpx_stream(client, url, SONNET, headers={})
        raw = await client.post(url, json={"model": OPUS, "max_tokens": 8, "messages": []})
    assert time.monotonic() - started < WITHIN
    for result in (first, later):
        assert result.status == 403, result
        error = result.body["error"]
        assert error["type"] == "permission_error", result.body
        assert "out of rotation" in error["message"] and "(1113)" in error["message"], result.body
        assert "retry-after" not in result.headers, result.headers
    assert raw.status_code == 403 and raw.reason_phrase == "Forbidden", raw
    output = proxy.output()
    assert "leaves rotation: no balance or model not in plan (1113)" in output, output[-3000:]
