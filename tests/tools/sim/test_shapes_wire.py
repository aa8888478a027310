"""The field's shapes on the wire, on loopback: soft bands and random refusals as 1302s, requests held inside
z.ai without a head, the content filter at both doors through the official SDKs, heads that come with the
first token, heavy-tailed answer lengths. Short real waits, each bounded."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from chaos_mode_tools.sim import SimServer
from chaos_mode_tools.sim.lengths import parse_lengths
from support.sim_client import MSGS, MakeSim, assert_zai_error, post, sdk, stats, wait_for

PHRASE = "You run on Hermes Agent"


async def statuses(http: httpx.AsyncClient, server: SimServer, model: str, count: int) -> list[int]:
    return [(await post(http, server, model)).status_code for _ in range(count)]


async def test_a_soft_band_answers_1302_by_chance_the_same_way_for_the_same_seed(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    # glm-4.5's 10 slots held by another client: every request is the 11th, in a band of 1 (half refused).
    settings: dict[str, Any] = {"hold": {"glm-4.5": 10}, "bands": {"glm-4.5": 1}, "fault_seed": 4}
    settings["reject_delay_ms"] = 0  # 72 requests: the 1302s at once
    first = await make_sim(**settings)
    seen = await statuses(http, first, "glm-4.5", 24)
    assert set(seen) == {200, 429} and 5 <= seen.count(429) <= 19
    s = await stats(http, first)
    assert s["refusalReasons"] == {"band": seen.count(429)} and s["models"]["glm-4.5"]["band"] == 1
    assert s["models"]["glm-4.5"]["rejected"] == {"1302": seen.count(429)}
    assert await statuses(http, await make_sim(**settings), "glm-4.5", 24) == seen
    await http.post(first.base_url + "/sim/reset")
    assert await statuses(http, first, "glm-4.5", 24) == seen  # a reset draws again from the seed
    assert (await post(http, first, "glm-4.7-flash")).status_code == 200  # no band, a clean slot


async def test_random_refusals_come_within_the_limits_as_1302s(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(fault_rates={"1302": 1.0}, hold={"glm-4.7-flash": 1})
    assert_zai_error(await post(http, server, "glm-4.5"), 429, "rate_limit_error", "1302")
    assert_zai_error(await post(http, server, "glm-4.7-flash"), 429, "rate_limit_error", "1302")
    assert (await stats(http, server))["refusalReasons"] == {"random": 1, "model": 1}


async def test_over_the_limit_z_ai_holds_the_head_until_a_slot_frees(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(over_limit="queue", latency_ms=400)
    first = asyncio.create_task(post(http, server, "glm-4.7-flash", stream=True))
    await wait_for(lambda: _in_flight(http, server, "glm-4.7-flash", 1))
    started = time.monotonic()
    second = await post(http, server, "glm-4.7-flash", stream=True)  # waits inside z.ai, then served
    assert second.status_code == 200 and (await first).status_code == 200
    assert time.monotonic() - started >= 0.2  # it waited for the first (400 ms) before its own began
    s = await stats(http, server)
    waits = s["zaiWaits"]
    assert (waits["waited"], waits["waitingNow"], waits["timedOut"]) == (1, 0, 0)
    assert 150 <= waits["maxMs"] <= 2000 and waits["maxMs"] == waits["p99Ms"]
    assert s["models"]["glm-4.7-flash"]["rejected"] == {} and s["models"]["glm-4.7-flash"]["served"] == 2


async def test_a_request_held_too_long_is_refused_and_one_whose_client_left_is_forgotten(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(over_limit="queue", queue_timeout_ms=150, hold={"glm-4.7-flash": 1})
    started = time.monotonic()
    assert_zai_error(await post(http, server, "glm-4.7-flash"), 429, "rate_limit_error", "1302")
    assert 0.14 <= time.monotonic() - started < 2.0  # at its maximum wait, without the reject delay more
    with pytest.raises(httpx.ReadTimeout):
        body = {"model": "glm-4.7-flash", "max_tokens": 5, "messages": MSGS}
        url = server.anthropic_base_url + "/v1/messages"
        await http.post(url, json=body, timeout=httpx.Timeout(5.0, read=0.05))
    await wait_for(lambda: _left(http, server))
    s = await stats(http, server)
    assert s["refusalReasons"] == {"timeout": 1} and s["account"]["inFlight"] == 0


async def _left(http: httpx.AsyncClient, server: SimServer) -> bool:
    return bool((await stats(http, server))["zaiWaits"]["left"] == 1)


async def _in_flight(http: httpx.AsyncClient, server: SimServer, model: str, count: int) -> bool:
    return bool((await stats(http, server))["models"][model]["inFlight"] == count)


async def test_the_content_filter_refuses_at_both_doors_whatever_the_load(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    # The model's only slot is held: an ordinary request would get a 1302, the filtered one gets 1305.
    server = await make_sim(filter_phrases=[PHRASE], hold={"glm-4.7-flash": 1})
    system = f"{PHRASE} (by Nous Research)."
    with pytest.raises(anthropic.APIStatusError) as caught:
        await sdk(server).messages.create(model="glm-4.7-flash", max_tokens=8, system=system, messages=MSGS)
    assert caught.value.status_code == 529
    error = caught.value.body["error"]  # type: ignore[index]
    assert (error["type"], error["code"]) == ("overloaded_error", "1305")
    assert "temporarily overloaded" in error["message"]
    chat = openai.AsyncOpenAI(base_url=server.base_url + "/api/coding/paas/v4", api_key="k", max_retries=0)
    with pytest.raises(openai.RateLimitError) as limited:
        await chat.chat.completions.create(
            model="glm-4.5",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        )
    assert limited.value.status_code == 429
    assert limited.value.body == {  # z.ai's OpenAI shape: the message without its [1305] prefix
        "code": "1305",
        "message": "The service may be temporarily overloaded, please try again later",
    }
    answer = await sdk(server).messages.create(
        model="glm-4.5", max_tokens=8, messages=MSGS, system="Be brief."
    )
    assert answer.content  # without the phrase: served
    s = await stats(http, server)
    assert s["filtered"] == {"requests": 2, "byModel": {"glm-4.7-flash": 1, "glm-4.5": 1}}
    assert all(not m["rejected"] for m in s["models"].values())  # counted apart from the load's refusals


async def test_the_head_comes_with_the_first_token_when_told(make_sim: MakeSim) -> None:
    async def head_seconds(server: SimServer) -> float:
        body = {"model": "glm-4.5", "max_tokens": 8, "messages": MSGS, "stream": True}
        async with httpx.AsyncClient(timeout=5.0) as client:
            started = time.monotonic()
            async with client.stream(
                "POST", server.anthropic_base_url + "/v1/messages", json=body
            ) as response:
                head = time.monotonic() - started
                text = (await response.aread()).decode()
        kinds = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
        assert kinds[:4] == ["message_start", "content_block_start", "ping", "content_block_delta"]
        assert kinds[-1] == "message_stop"
        return head

    assert await head_seconds(await make_sim(latency_ms=300)) < 0.2
    assert await head_seconds(await make_sim(latency_ms=300, head_with_first_token=True)) >= 0.28


async def test_answer_lengths_are_heavy_tailed_unless_the_request_says(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(
        output_tokens=6, output_lengths=parse_lengths("lognormal:1.0:40"), token_interval_ms=0
    )
    lengths = []
    for _ in range(30):
        response = await post(http, server, "glm-4.5")
        answer = json.loads(response.text)
        lengths.append(answer["usage"]["output_tokens"])
        assert len(answer["content"][0]["text"].split()) == lengths[-1]
    assert len(set(lengths)) > 4 and max(lengths) <= 40 and min(lengths) >= 1
    told = await post(http, server, "glm-4.5", headers={"x-sim-output-tokens": "3"})
    assert told.json()["usage"]["output_tokens"] == 3
