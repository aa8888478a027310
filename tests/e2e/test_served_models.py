"""An older catalog on today's z.ai, through a real mitmdump: the names z.ai serves as other models are found
from its answers and folded into the models that serve them, then counted, sent and judged by those
(`routing.aliases`); two proxies share what one learned through a real Redis."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess, RedisProcess
from chaos_mode_tools.sim import catalog_settings
from support.redis_support import require_redis_server

from .conftest import MakeProxy, MakeSim
from .support import (
    CLIENT_TIMEOUT,
    OPUS,
    SONNET,
    Result,
    Sim,
    openai_chat,
    poll,
    routing,
    sdk_client,
    sdk_stream,
    status,
)

pytestmark = pytest.mark.e2e

# A catalog of early 2026 with two names z.ai now serves as others (2026-12 preset): glm-5.1 -> glm-5.3 (the
# same counter, 3), glm-4.7 -> glm-5.3-flash (a flash model behind a heavy name).
OLD_MODELS: dict[str, Any] = {
    "glm-5.1": {"tier": "HEAVY", "maxConcurrency": 3},
    "glm-4.7": {"tier": "HEAVY", "maxConcurrency": 3},
    "glm-5.3": {"tier": "HEAVY", "maxConcurrency": 3},
    "glm-5.3-flash": {"tier": "MEDIUM", "maxConcurrency": 5},
}
DEC: dict[str, Any] = {
    **catalog_settings("2026-12"),
    "alias_counters": "shared",
    "latency_ms": 150,
    "output_tokens": 4,
}
HEADERS = {"x-api-key": "sk-served-models"}


def old_catalog() -> dict[str, Any]:
    return routing(models=OLD_MODELS, aliases={})


async def learn_every_name(proxy: ProxyProcess, http: httpx.AsyncClient) -> dict[str, Any]:
    """Opus requests one at a time until every heavy name has answered once (least-loaded rotates among
    idle models); the status once the catalog is folded."""
    client = sdk_client(proxy.url, key=HEADERS["x-api-key"])
    for _ in range(8):
        result = await sdk_stream(client, OPUS, headers={})
        assert result.status == 200, result
        doc = await status(http, proxy)
        if {"glm-5.1", "glm-4.7"}.isdisjoint(doc["modelDistribution"]):
            return doc
    raise AssertionError(f"the aliases were not all learned: {doc['modelDistribution'].keys()}")


async def test_names_served_as_other_models_are_folded_and_never_serve_below_the_floor(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim = await make_sim(**DEC)
    proxy = await make_proxy(upstream=sim.base_url, config=old_catalog())
    doc = await learn_every_name(proxy, http)
    models = doc["modelDistribution"]
    assert models["glm-5.3"]["aliases"] == ["glm-5.1"] and models["glm-5.3"]["tier"] == "HEAVY"
    assert models["glm-5.3-flash"]["aliases"] == ["glm-4.7"] and models["glm-5.3-flash"]["tier"] == "MEDIUM"

    # Now a swarm: opus only ever served by glm-5.3, never past its true limit of 3, never refused.
    await sim.reset()
    anthropic_client = sdk_client(proxy.url, key=HEADERS["x-api-key"])
    chat = openai.AsyncOpenAI(
        base_url=proxy.url + "/api/coding/paas/v4", api_key="sk-served-models", timeout=CLIENT_TIMEOUT
    )
    jobs = [sdk_stream(anthropic_client, OPUS, headers={}) for _ in range(9)]
    jobs += [openai_chat(chat, OPUS, headers={}, stream=i % 2 == 0) for i in range(6)]
    jobs += [sdk_stream(anthropic_client, SONNET, headers={}) for _ in range(6)]
    results: list[Result] = await asyncio.gather(*jobs)
    assert all(r.status == 200 for r in results), [r for r in results if r.status != 200]
    opus = [r.served for r in results if r.requested == OPUS]
    assert set(opus) == {"glm-5.3"}, opus
    assert {r.served for r in results if r.requested == SONNET} <= {"glm-5.3", "glm-5.3-flash"}
    stats = await sim.stats()
    assert stats["models"]["glm-5.3"]["peakInFlight"] <= 3
    assert await sim.rejections() == {}
    assert stats["aliasedRequests"] == {}  # every request went out under the served model's own name


async def test_an_answer_another_addon_makes_teaches_no_alias(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """mitmproxy's `map_local` answers routed requests with a file naming "mock-model": not z.ai's word on
    what served (learned, it folded every model into the mock's name, 403 for everything after, and the
    learned-limits file kept that across restarts)."""
    mock = tmp_path / "mock.json"
    mock.write_text(json.dumps({"type": "message", "model": "mock-model", "content": [], "usage": {}}))
    sim = await make_sim(**DEC)
    extra = ["--set", f"map_local=|/v1/messages|{mock}"]
    proxy = await make_proxy(upstream=sim.base_url, config=old_catalog(), extra_args=extra)
    body = {"model": SONNET, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    url = proxy.url + "/api/anthropic/v1/messages"
    answers = [await http.post(url, json=body, headers=HEADERS) for _ in range(4)]
    assert [a.json()["model"] for a in answers] == ["mock-model"] * 4, [a.text for a in answers]
    models = (await status(http, proxy))["modelDistribution"]
    assert set(models) == set(OLD_MODELS) and all(m["aliases"] == [] for m in models.values()), models
    assert (await sim.stats())["requests"] == 0


async def test_a_request_sent_under_an_alias_says_so_in_its_comment_and_counts_once(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim = await make_sim(**DEC)
    proxy = await make_proxy(
        upstream=sim.base_url,
        config=routing(models={"glm-5.1": {"tier": "HEAVY", "maxConcurrency": 3}}, aliases={}),
    )
    client = sdk_client(proxy.url, key=HEADERS["x-api-key"])
    first = await sdk_stream(client, OPUS, headers={})
    assert first.status == 200 and first.served == "glm-5.3"
    doc = await status(http, proxy)
    assert list(doc["modelDistribution"]) == ["glm-5.3"]
    assert doc["modelDistribution"]["glm-5.3"]["inFlight"] == 0
    assert doc["modelDistribution"]["glm-5.3"]["tier"] == "HEAVY"  # z.ai's naming: glm-5.x is heavy
    again = await sdk_stream(client, OPUS, headers={})
    assert again.served == "glm-5.3" and (await sim.stats())["aliasedRequests"] == {
        "glm-5.1": {"servedBy": "glm-5.3", "requests": 1}
    }


async def test_two_proxies_share_the_aliases_one_of_them_learned(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    require_redis_server()
    sim: Sim = await make_sim(**DEC)
    config = old_catalog()
    with RedisProcess() as redis:
        share = ["--set", f"chaos_state={redis.url}"]
        first = ProxyProcess(upstream=sim.base_url, config=config, extra_args=share)
        second = ProxyProcess(upstream=sim.base_url, config=config, extra_args=share)
        with first, second:
            await learn_every_name(first, http)

            doc = await poll(
                lambda: status(http, second),
                lambda doc: {"glm-5.1", "glm-4.7"}.isdisjoint(doc["modelDistribution"]),
                timeout=10.0,
            )
            models = doc["modelDistribution"]
            assert models["glm-5.3-flash"]["aliases"] == ["glm-4.7"]


async def test_with_a_key_the_model_list_is_read_at_start(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """z.ai's list, read with the chaos_key key: a listed model the catalog lacks is offered by its family,
    a catalog model left out from the first stays (z.ai serves glm-4.6v unlisted); the key shows nowhere."""
    key = "9d8c7b6a5f4e3d2c1b0a.ServedModelsListKey"
    sim = await make_sim(**DEC, quota_key=key)
    models = {
        "glm-5.3": {"tier": "HEAVY", "maxConcurrency": 3},
        "glm-4.9-gone": {"tier": "HEAVY", "maxConcurrency": 2},
    }
    proxy = await make_proxy(
        upstream=sim.base_url,
        config=routing(
            models=models, aliases={"glm-5.1": "glm-5.3", "glm-5.2": "glm-5.3", "glm-5": "glm-5.3"}
        ),
        extra_args=["--set", "chaos_key=CHAOS_E2E_LIST_KEY"],
        env={"CHAOS_E2E_LIST_KEY": key},
    )
    doc = await poll(lambda: status(http, proxy), lambda d: "glm-5.4" in d["modelDistribution"], timeout=10.0)
    got = doc["modelDistribution"]
    assert got["glm-5.4"]["tier"] == "LIGHT" and got["glm-5.4"]["capacity"] == 1  # until seen serving
    assert got["glm-5-turbo"]["tier"] == "LIGHT"  # listed, and in truth served by glm-5.3-flash
    assert got["glm-4.9-gone"]["outOfRotation"] is None  # never listed: it may be served all the same
    assert "glm-5.1" not in got and got["glm-5.3"]["aliases"] == ["glm-5", "glm-5.1", "glm-5.2"]
    client = sdk_client(proxy.url, key=HEADERS["x-api-key"])
    results = await asyncio.gather(*(sdk_stream(client, OPUS, headers={}) for _ in range(4)))
    assert {r.served for r in results} == {"glm-5.3"} and all(r.status == 200 for r in results)
    assert key not in proxy.output()
