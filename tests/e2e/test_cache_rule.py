"""The cache rule (`stickyConversations`) with a key, through a real mitmdump, against the simulator's prompt
cache and credit plan: conversations stay on the model where their prompt is warm, the status shows the
cached share per model and what moves cost, the readings are the simulator's credits in both windows, and
the weights of a model the catalog does not weigh are learned from them."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest

from chaos_mode.zai.quota import GLM_5_3_CREDITS

from .conftest import MakeProxy, MakeSim
from .support import CLIENT_TIMEOUT, poll, routing, status
from .test_quota import KEY, keyed_proxy

pytestmark = pytest.mark.e2e

AGENTS, TURNS = 5, 5
MODELS = ("glm-4.7", "glm-4.6")
HEADERS = {"x-api-key": "sk-e2e-client-key", "anthropic-version": "2023-06-01"}
QUARTER = [w / 4 for w in GLM_5_3_CREDITS]  # what glm-4.6 costs on the simulator; the proxy is not told


async def converse(client: httpx.AsyncClient, url: str, index: int) -> list[str]:
    """One conversation of `TURNS` turns, its prompt growing; the models that served each turn."""
    rng = random.Random(index)
    system = f"agent {index}: " + "".join(rng.choice("abcdefgh ") for _ in range(8000))  # 2,000 tokens
    messages: list[dict[str, str]] = [{"role": "user", "content": "begin"}]
    headers = {**HEADERS, "x-claude-code-session-id": f"e2e-cache-{index}"}
    served = []
    for turn in range(TURNS):
        headers["x-sim-output-tokens"] = str(rng.randrange(10, 80))  # answers of uneven lengths
        body = {"model": "claude-opus-4-5", "max_tokens": 256, "system": system, "messages": messages}
        response = await client.post(url + "/api/anthropic/v1/messages", json=body, headers=headers)
        assert response.status_code == 200, response.text
        answer = response.json()
        served.append(answer["model"])  # the model that served it
        messages += [
            {"role": "assistant", "content": answer["content"][0]["text"]},
            {"role": "user", "content": f"turn {turn} " + "more " * 200},
        ]
    return served


async def test_conversations_stay_warm_and_the_reading_is_the_simulators_credits(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    sim = await make_sim(
        credit_caps={"5h": 100_000.0, "1w": 500_000.0},
        credit_weights={"glm-4.6": QUARTER},
        prompt_cache_seconds=300,
        quota_key=KEY,
        latency_ms=50,
        token_interval_ms=5,
    )
    weights = dict(zip(("input", "cachedInput", "output"), GLM_5_3_CREDITS, strict=True))
    config = routing(
        quota={"pollSeconds": 1},
        chaosMode={"enabled": True, "stickyConversations": True, "strategy": "least-loaded"},
        models={
            "glm-4.7": {"tier": "HEAVY", "maxConcurrency": AGENTS, "creditWeights": weights},
            "glm-4.6": {"tier": "HEAVY", "maxConcurrency": AGENTS},  # no weights: assumed the heaviest
        },
    )
    proxy = await make_proxy(**keyed_proxy(sim, config))
    await poll(lambda: status(http, proxy), lambda s: s["quota"]["readAt"] is not None, 10.0)
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        served = await asyncio.gather(*(converse(client, proxy.url, i) for i in range(AGENTS)))
    truth = (await sim.stats())["credits"]["windows"]
    cache = (await sim.stats())["promptCache"]

    def caught_up(document: dict[str, Any]) -> bool:
        return all(w["used"] == truth[w["name"]]["row"]["currentValue"] for w in document["quota"]["windows"])

    shown = await poll(lambda: status(http, proxy), caught_up, 10.0)
    said = f"{served} {shown['sticky']} {cache}"
    # Each conversation stayed on one model, warm after its first turn; both models served.
    assert all(len(set(turns)) == 1 and turns[0] in MODELS for turns in served), said
    assert {turns[0] for turns in served} == set(MODELS), said  # least-loaded spread the first turns
    assert shown["sticky"]["moves"] == 0 and shown["sticky"]["moveCredits"] == 0.0, said
    assert cache["reads"] == AGENTS * TURNS and cache["cachedShare"] > 0.7, said
    # The status's cached share per model, as the simulator counted the cached tokens.
    models = shown["modelDistribution"]
    assert sum(models[m]["tokensCached"] for m in MODELS) == cache["cachedTokens"], said
    assert sum(models[m]["tokensIn"] + models[m]["tokensCached"] for m in MODELS) == cache["inputTokens"]
    for name in MODELS:
        share = models[name]["tokensCached"] / (models[name]["tokensIn"] + models[name]["tokensCached"])
        assert models[name]["cachedShare"] == pytest.approx(share, abs=1e-3) and share > 0.7, said
    # The readings are the simulator's credits, both windows.
    windows = {w["name"]: w for w in shown["quota"]["windows"]}
    for name in ("5h", "1w"):
        row = truth[name]["row"]
        assert windows[name]["source"] == "zai", said
        assert (windows[name]["used"], windows[name]["cap"], windows[name]["left"]) == (
            row["currentValue"], row["usage"], row["remaining"],
        )  # fmt: skip
    # glm-4.6 costs a quarter of the heaviest weights: the readings taught it.
    estimate = shown["quota"]["estimate"]
    assert estimate["assumedScale"] == pytest.approx(0.25, abs=0.03), f"{estimate} {truth}"
    metrics = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
    assert "chaos_sticky_move_credits_total 0.0" in metrics
