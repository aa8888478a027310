"""The simulator's OpenAI door against real clients on loopback: the official openai SDK (streamed and
not), a raw SSE reader, and one account shared with the Anthropic door."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from chaos_mode.doors.chat_stream import ChatStreamObserver
from chaos_mode.zai.errors import Action, classify_error
from chaos_mode_tools.sim import Fault, SimServer
from chaos_mode_tools.sim.handlers import token_text
from support.sim_client import post, stats, wait_for

CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
TEXT = "".join(token_text(i) for i in range(5))  # FAST's 5 output tokens
DOORS = ("/api/paas/v4", "/api/coding/paas/v4")


def client(server: SimServer, door: str = DOORS[0]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + door, api_key="test-key", max_retries=0, timeout=5.0)


async def chat(
    http: httpx.AsyncClient, server: SimServer, model: str, *, door: str = DOORS[0], **fields: Any
) -> httpx.Response:
    body = {"model": model, "messages": CHAT, **fields}
    return await http.post(server.base_url + door + "/chat/completions", json=body)


def assert_chat_error(response: httpx.Response, status: int, code: str | None) -> dict[str, Any]:
    """z.ai's OpenAI shape: `{"error": {"code", "message"}}`, the message without a `[code]` prefix."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert body["error"].get("code") == code
    message = body["error"]["message"]
    assert isinstance(message, str) and message and not message.startswith("[")
    return body


# -- the SDK accepts what the door sends --------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
async def test_sdk_whole_answer(sim: SimServer, door: str) -> None:
    answer = await client(sim, door).chat.completions.create(model="glm-4.7", messages=CHAT)
    assert answer.model == "glm-4.7"
    assert answer.choices[0].message.content == TEXT
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 5 and answer.usage.prompt_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 5


@pytest.mark.parametrize("door", DOORS)
async def test_sdk_stream_with_usage(sim: SimServer, door: str) -> None:
    stream = await client(sim, door).chat.completions.create(
        model="glm-4.5-flash", messages=CHAT, stream=True, stream_options={"include_usage": True}
    )
    text, finish, usage = "", None, None
    async for chunk in stream:
        assert chunk.model == "glm-4.5-flash"
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            assert not chunk.choices  # the last chunk, after the finish reason
            usage = chunk.usage
    assert (text, finish) == (TEXT, "stop")
    assert usage is not None and usage.completion_tokens == 5


async def test_sdk_stream_without_usage_has_no_usage_chunk(sim: SimServer) -> None:
    stream = await client(sim).chat.completions.create(model="glm-4.5", messages=CHAT, stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(chunk.usage is None and chunk.choices for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT


async def test_raw_sse_reader_sees_chunks_then_done_and_the_observer_reads_them(
    sim: SimServer, http: httpx.AsyncClient
) -> None:
    body = {"model": "glm-4.7", "messages": CHAT, "stream": True, "stream_options": {"include_usage": True}}
    observer = ChatStreamObserver()
    raw = b""
    async with http.stream("POST", sim.base_url + DOORS[1] + "/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for piece in response.aiter_raw():
            raw += piece
            observer.feed(piece)
    events = raw.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert all(event.startswith("data: {") for event in events[:-2])
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5
    assert (observer.output_tokens, observer.model, observer.finish_reason) == (5, "glm-4.7", "stop")
    assert observer.input_tokens == chunks[-1]["usage"]["prompt_tokens"] > 0
    assert observer.stopped


# -- errors in OpenAI's shape, classified as the Anthropic door's ---------------------------------------


async def test_errors_come_in_the_openai_shape(make_sim: Any, http: httpx.AsyncClient) -> None:
    sim = await make_sim(refuse=["glm-4.5-x"], retry_after=7)
    refused = await chat(http, sim, "glm-4.5-x")
    assert_chat_error(refused, 429, "1113")
    assert refused.headers["retry-after"] == "7"
    assert_chat_error(await chat(http, sim, "gpt-4o"), 400, "1211")
    bad = await http.post(sim.base_url + DOORS[0] + "/chat/completions", content=b"{not json")
    assert_chat_error(bad, 400, None)
    sim.add_fault(Fault(model="glm-4.7", code="1305", status=529))
    overloaded = await chat(http, sim, "glm-4.7")
    body = assert_chat_error(overloaded, 529, "1305")
    error = classify_error(529, overloaded.content, now=0.0)
    assert error is not None and (error.code, error.action) == ("1305", Action.COOLDOWN)
    assert "temporarily overloaded" in body["error"]["message"]


async def test_the_sdk_raises_its_rate_limit_error_on_a_1302(make_sim: Any) -> None:
    sim = await make_sim(limits={"glm-4.7": 0})
    with pytest.raises(openai.RateLimitError) as raised:
        await client(sim).chat.completions.create(model="glm-4.7", messages=CHAT)
    assert raised.value.status_code == 429
    assert isinstance(raised.value.body, dict) and raised.value.body.get("code") == "1302"
    error = classify_error(429, raised.value.response.content, now=0.0)
    assert error is not None and error.action is Action.CONCURRENCY


# -- one account: both doors count against the same limits ---------------------------------------------


@pytest.mark.parametrize("first_door", ["anthropic", "openai"])
async def test_both_doors_share_a_models_slots(
    make_sim: Any, http: httpx.AsyncClient, first_door: str
) -> None:
    sim = await make_sim(limits={"glm-4.7": 1}, latency_ms=2000)
    anthropic, openai_ = post(http, sim, "glm-4.7", stream=True), chat(http, sim, "glm-4.7", stream=True)
    holder, second = (anthropic, openai_) if first_door == "anthropic" else (openai_, anthropic)
    holding = asyncio.ensure_future(holder)

    async def busy() -> bool:
        return (await stats(http, sim))["models"]["glm-4.7"]["inFlight"] == 1

    await wait_for(busy)
    refused = await second
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "1302"  # either shape
    holding.cancel()


async def test_both_doors_share_the_account_limit(make_sim: Any, http: httpx.AsyncClient) -> None:
    sim = await make_sim(account_limit=1, latency_ms=2000)
    holding = asyncio.ensure_future(chat(http, sim, "glm-4.5", stream=True))

    async def busy() -> bool:
        return (await stats(http, sim))["account"]["inFlight"] == 1

    await wait_for(busy)
    refused = await post(http, sim, "glm-4.6")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "1302"
    assert_chat_error(await chat(http, sim, "glm-4.6"), 429, "1302")
    assert (await stats(http, sim))["account"]["rejected"] == 2
    holding.cancel()
