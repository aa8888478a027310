"""The simulator's prompt cache: per model and conversation, a prompt's earlier part cached within the TTL,
reported at both doors, charged at the cached weight, and its first token sooner."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from chaos_mode_tools.sim.prompt_cache import PromptCache, conversation
from chaos_mode_tools.sim.settings import SimSettings
from support.fakes import FakeClock
from support.sim_client import MakeSim, stats

CHAT = "/api/coding/paas/v4/chat/completions"


def test_a_conversation_is_warm_on_the_model_that_read_it_within_the_ttl() -> None:
    clock = FakeClock()
    cache = PromptCache(300.0, clock)
    assert cache.read("glm-4.7", "a", 1000) == 0  # first read: cold
    clock.advance(10)
    assert cache.read("glm-4.7", "a", 1500) == 1000  # the earlier part: what was read before
    assert cache.read("glm-4.6", "a", 1600) == 0  # another model: cold there (per model)
    assert cache.read("glm-4.7", "b", 1600) == 0  # another conversation
    clock.advance(299)
    assert cache.read("glm-4.7", "a", 1700) == 1500  # a switch is not an eviction: still warm
    clock.advance(300)
    assert cache.read("glm-4.7", "a", 1800) == 0  # expired
    assert cache.read("glm-4.7", "a", 500) == 500  # a shorter prompt: at most all of it
    assert cache.snapshot()["cachedTokens"] == 1000 + 1500 + 500


def test_the_first_token_comes_sooner_the_more_is_cached() -> None:
    assert PromptCache.latency(400.0, 1000, 0) == 400.0
    assert PromptCache.latency(400.0, 1000, 1000) == pytest.approx(100.0)
    assert 100.0 < PromptCache.latency(400.0, 1000, 500) < 400.0


def test_the_conversation_is_the_session_else_how_it_begins() -> None:
    first: dict[str, Any] = {"system": "s", "messages": [{"role": "user", "content": "q"}]}
    later = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "a"}]}
    assert conversation(first, "id-1") == "session:id-1"
    assert conversation(first, None) == conversation(later, None)
    assert conversation({**first, "system": "t"}, None) != conversation(first, None)
    chat = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    assert conversation(chat, None) != conversation({"messages": chat["messages"][:1]}, None)
    assert conversation({"messages": "junk"}, None).startswith("prefix:")


def test_a_bad_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="prompt_cache_seconds"):
        SimSettings(prompt_cache_seconds=0).validate()


async def _ask(http: httpx.AsyncClient, url: str, body: dict[str, Any], session: str) -> dict[str, Any]:
    response = await http.post(url, json=body, headers={"x-claude-code-session-id": session})
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


async def test_both_doors_report_cached_tokens_and_credits_charge_them_lower(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(prompt_cache_seconds=60, credit_caps={"5h": 1e6}, output_tokens=0)
    messages = [{"role": "user", "content": "x" * 4000}]
    body = {"model": "glm-4.7", "max_tokens": 8, "messages": messages}
    url = server.anthropic_base_url + "/v1/messages"
    cold = (await _ask(http, url, body, "s1"))["usage"]
    assert cold["cache_read_input_tokens"] == 0
    spent = (await stats(http, server))["credits"]["windows"]["5h"]["used"]
    warm = (await _ask(http, url, body, "s1"))["usage"]
    total = cold["input_tokens"]
    assert warm["cache_read_input_tokens"] == total and warm["input_tokens"] == 0
    again = (await stats(http, server))["credits"]["windows"]["5h"]["used"] - spent
    assert again == pytest.approx(spent * 1.7 / 6.9, rel=0.01)  # cached input: its lower weight
    other = (await _ask(http, url, {**body, "model": "glm-4.6"}, "s1"))["usage"]
    assert other["cache_read_input_tokens"] == 0  # per model
    chat = (await _ask(http, server.base_url + CHAT, body, "s1"))["usage"]
    assert chat["prompt_tokens_details"]["cached_tokens"] > 0  # the OpenAI door says it its way
    figures = (await stats(http, server))["promptCache"]
    assert figures["reads"] == 4 and 0 < figures["cachedShare"] < 1


async def test_without_the_setting_nothing_is_cached(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim()
    body = {"model": "glm-4.7", "max_tokens": 8, "messages": [{"role": "user", "content": "q"}]}
    url = server.anthropic_base_url + "/v1/messages"
    for _ in range(2):
        assert (await _ask(http, url, body, "s"))["usage"]["cache_read_input_tokens"] == 0
    assert (await stats(http, server))["promptCache"] is None
