"""Helpers of the end-to-end tests: streamed clients that time every delta, sim and status control."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from anthropic.types import MessageParam
from mitmproxy import http as mhttp
from mitmproxy import io

from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim.handlers import token_text
from support.design_catalog import DESIGN_MODELS

HEAVY = frozenset({"glm-4.7", "glm-4.6", "glm-4.5-x"})
MEDIUM = frozenset({"glm-4.5", "glm-4.5-air"})
LIGHT = frozenset({"glm-4.7-flashx", "glm-4.7-flash", "glm-4.5-flash"})

OPUS = "claude-opus-4-5"
SONNET = "claude-sonnet-4-5"
HAIKU = "claude-3-5-haiku-latest"
# The models each incoming name may be served by: its quality floor and everything above it.
FLOOR: dict[str, frozenset[str]] = {OPUS: HEAVY, SONNET: HEAVY | MEDIUM, HAIKU: HEAVY | MEDIUM | LIGHT}
# What an OpenAI-door client asks for at the same tier (a catalog model's own tier is its floor).
CHAT_MODEL: dict[str, str] = {OPUS: "glm-4.7", SONNET: "glm-4.5", HAIKU: "glm-4.5-flash"}
CHAT_PATH = "/api/paas/v4/chat/completions"
CODING_CHAT_PATH = "/api/coding/paas/v4/chat/completions"

MESSAGES: list[MessageParam] = [{"role": "user", "content": "Say something about chaos mode."}]
CLIENT_TIMEOUT = 20.0  # seconds; every client call is bounded
POLL_SECONDS = 0.05


# The e2e tests of the fixed-limit behaviour (the queue at the catalog's caps) turn learning off; the
# learned-limit tests turn it on.
FIXED_LIMITS: dict[str, Any] = {"learning": {"enabled": False}}


def routing(**overrides: Any) -> dict[str, Any]:
    """A modelRouting block for the simulator on loopback, chaos mode on, with `overrides` on top; over the
    design's (early-2026) catalog, the simulator's default, unless `overrides` gives its own `models`."""
    base: dict[str, Any] = {
        "upstreamHosts": ["127.0.0.1"],
        "chaosMode": {"enabled": True},
        "models": DESIGN_MODELS,
        **FIXED_LIMITS,
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict) and key != "models":
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def sim_headers(*, latency_ms: float, tokens: int, interval_ms: float) -> dict[str, str]:
    """Per-request timings for the simulator."""
    return {
        "x-sim-latency-ms": f"{latency_ms:g}",
        "x-sim-output-tokens": str(tokens),
        "x-sim-token-interval-ms": f"{interval_ms:g}",
    }


def expected_text(tokens: int) -> str:
    return "".join(token_text(i) for i in range(tokens))


# A streamed answer that takes a while: 12 tokens 40 ms apart spread over about 0.44 s.
TOKENS = 12
INTERVAL_MS = 40.0
SLOW = sim_headers(latency_ms=20, tokens=TOKENS, interval_ms=INTERVAL_MS)


def fault(code: str, **extra: object) -> dict[str, object]:
    """A simulator fault for any model: the next request refused with z.ai's `code`."""
    return {"model": "*", "code": code, **({"type": code} if code == "1113" else {}), **extra}


def sdk_client(proxy_url: str, key: str = "sk-test-streamed", **options: Any) -> anthropic.AsyncAnthropic:
    """The official SDK pointed at a proxy in reverse mode (`options`: e.g. its `http_client`)."""
    return anthropic.AsyncAnthropic(
        base_url=proxy_url + "/api/anthropic", api_key=key, max_retries=0, timeout=CLIENT_TIMEOUT, **options
    )


def trust(proxy: ProxyProcess) -> ssl.SSLContext:
    """What NODE_EXTRA_CA_CERTS does for Claude Code: trust the proxy's CA (`own_ca=True`)."""
    return ssl.create_default_context(cafile=str(proxy.ca_cert))


def read_flows(path: Path) -> list[mhttp.HTTPFlow]:
    """The HTTP flows mitmdump saved with `-w`."""
    with path.open("rb") as handle:
        return [f for f in io.FlowReader(handle).stream() if isinstance(f, mhttp.HTTPFlow)]


@dataclass
class Result:
    """What one client saw of one request."""

    requested: str
    status: int | None = None
    served: str | None = None  # message_start's model
    header_served: str | None = None  # the simulator's x-sim-served-model header
    deltas: list[float] = field(default_factory=list)  # client-side arrival time of every text delta
    text: str = ""
    stop_reason: str | None = None
    output_tokens: int | None = None
    complete: bool = False  # message_stop seen (SSE) / final message parsed (SDK)
    aborted: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    http_version: str | None = None  # what the client spoke (httpx_stream): HTTP/1.1, HTTP/2
    body: Any = None  # the JSON body of a non-streamed (error) answer
    error: str | None = None

    @property
    def delta_span(self) -> float:
        return self.deltas[-1] - self.deltas[0] if len(self.deltas) >= 2 else 0.0


def assert_streamed(result: Result) -> None:
    """All the SLOW answer arrived, and over time: the first token well before the last (not in one piece)."""
    assert result.status == 200 and result.complete, result
    assert len(result.deltas) == TOKENS, result
    assert result.delta_span >= 0.5 * (TOKENS - 1) * INTERVAL_MS / 1000, result.deltas


async def sdk_stream(
    client: anthropic.AsyncAnthropic,
    model: str,
    *,
    headers: Mapping[str, str],
    abort_after_first: bool = False,
    system: str | None = None,
) -> Result:
    """One `messages.stream` call through the official SDK; leaves early after one delta if asked."""
    result = Result(model)
    extra: dict[str, Any] = {} if system is None else {"system": system}
    try:
        async with client.messages.stream(
            model=model, max_tokens=256, messages=MESSAGES, extra_headers=dict(headers), **extra
        ) as stream:
            result.status = stream.response.status_code
            result.headers = dict(stream.response.headers)
            result.header_served = stream.response.headers.get("x-sim-served-model")
            async for event in stream:
                if event.type == "message_start":
                    result.served = event.message.model
                elif event.type == "text":
                    result.deltas.append(time.monotonic())
                    if abort_after_first:
                        result.aborted = True
                        return result  # leaving the context closes the connection mid-stream
            message = await stream.get_final_message()
            result.text = "".join(block.text for block in message.content if block.type == "text")
            result.stop_reason = message.stop_reason
            result.output_tokens = message.usage.output_tokens
            result.complete = True
    except anthropic.APIStatusError as exc:
        result.status = exc.status_code
        result.headers = dict(exc.response.headers)
        result.body = exc.body
        result.error = f"{type(exc).__name__}: {exc}"
    except anthropic.APIError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


async def _read_head(result: Result, response: httpx.Response) -> bool:
    """The answer's status and headers into `result`, and its body when it is not SSE; True for SSE."""
    result.status = response.status_code
    result.http_version = response.http_version
    result.headers = dict(response.headers)
    result.header_served = response.headers.get("x-sim-served-model")
    if "text/event-stream" in response.headers.get("content-type", ""):
        return True
    raw = await response.aread()
    try:
        result.body = json.loads(raw)
    except ValueError:
        result.body = raw.decode(errors="replace")
    return False


async def httpx_stream(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    *,
    headers: Mapping[str, str],
    abort_after_first: bool = False,
    stream: bool = True,
) -> Result:
    """One POST /v1/messages with httpx, reading the SSE answer line by line as it arrives."""
    result = Result(model)
    body = {"model": model, "max_tokens": 256, "stream": stream, "messages": MESSAGES}
    all_headers = {"x-api-key": "sk-test-e2e", "anthropic-version": "2023-06-01", **headers}
    try:
        async with client.stream("POST", url, json=body, headers=all_headers) as response:
            if not await _read_head(result, response):
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = json.loads(line[5:])
                kind = data.get("type")
                if kind == "message_start":
                    result.served = data["message"]["model"]
                elif kind == "content_block_delta" and data["delta"].get("type") == "text_delta":
                    result.deltas.append(time.monotonic())
                    result.text += data["delta"]["text"]
                    if abort_after_first:
                        result.aborted = True
                        return result  # leaving the context closes the connection mid-stream
                elif kind == "message_delta":
                    result.stop_reason = data["delta"].get("stop_reason")
                    result.output_tokens = data.get("usage", {}).get("output_tokens")
                elif kind == "message_stop":
                    result.complete = True
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


async def chat_sse_stream(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    *,
    headers: Mapping[str, str],
    abort_after_first: bool = False,
    stream: bool = True,
) -> Result:
    """One POST to a chat-completions URL (the OpenAI door) with httpx, reading the SSE answer line by
    line as it arrives; usage asked for with `stream_options.include_usage`. `complete`: `[DONE]` seen."""
    result = Result(model)
    body: dict[str, Any] = {"model": model, "max_tokens": 256, "stream": stream, "messages": MESSAGES}
    if stream:
        body["stream_options"] = {"include_usage": True}
    all_headers = {"authorization": "Bearer sk-test-e2e-chat", **headers}
    try:
        async with client.stream("POST", url, json=body, headers=all_headers) as response:
            if not await _read_head(result, response):
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                if line[5:].strip() == "[DONE]":
                    result.complete = True
                    continue
                chunk = json.loads(line[5:])
                result.served = result.served or chunk.get("model")
                if chunk.get("usage"):
                    result.output_tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices") or []:
                    if choice.get("finish_reason"):
                        result.stop_reason = choice["finish_reason"]
                    if text := (choice.get("delta") or {}).get("content"):
                        result.deltas.append(time.monotonic())
                        result.text += text
                        if abort_after_first:
                            result.aborted = True
                            return result  # leaving the context closes the connection mid-stream
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


async def openai_chat(
    client: openai.AsyncOpenAI,
    model: str,
    *,
    headers: Mapping[str, str],
    stream: bool = True,
    system: str | None = None,
) -> Result:
    """One chat completion through the official openai SDK, streamed (with usage) or whole; `system`: a
    system message first."""
    result = Result(model)
    messages: list[Any] = [dict(m) for m in MESSAGES]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    try:
        if not stream:
            raw = await client.chat.completions.with_raw_response.create(
                model=model, max_tokens=256, messages=messages, extra_headers=dict(headers)
            )
            result.status = raw.status_code
            result.headers = dict(raw.headers)
            result.header_served = raw.headers.get("x-sim-served-model")
            completion = raw.parse()
            result.served = completion.model
            result.text = completion.choices[0].message.content or ""
            result.stop_reason = completion.choices[0].finish_reason
            result.output_tokens = completion.usage.completion_tokens if completion.usage else None
            result.complete = True
            return result
        async with await client.chat.completions.create(
            model=model,
            max_tokens=256,
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=dict(headers),
        ) as chunks:
            result.status = chunks.response.status_code
            result.headers = dict(chunks.response.headers)
            result.header_served = chunks.response.headers.get("x-sim-served-model")
            async for chunk in chunks:
                result.served = result.served or chunk.model
                if chunk.usage is not None:
                    result.output_tokens = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    if choice.finish_reason:
                        result.stop_reason = choice.finish_reason
                    if choice.delta.content:
                        result.deltas.append(time.monotonic())
                        result.text += choice.delta.content
            result.complete = True
    except openai.APIStatusError as exc:
        result.status = exc.status_code
        result.headers = dict(exc.response.headers)
        result.body = exc.body
        result.error = f"{type(exc).__name__}: {exc}"
    except openai.APIError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


class Sim:
    """Control of a simulator process through its /sim/* endpoints."""

    def __init__(self, process: SimProcess, client: httpx.AsyncClient) -> None:
        self.process = process
        self.client = client

    @property
    def base_url(self) -> str:
        return self.process.base_url

    @property
    def messages_url(self) -> str:
        return self.process.anthropic_base_url + "/v1/messages"

    async def stats(self) -> dict[str, Any]:
        response = await self.client.get(self.base_url + "/sim/stats")
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats

    async def reset(self) -> None:
        (await self.client.post(self.base_url + "/sim/reset")).raise_for_status()

    async def add_faults(self, *faults: dict[str, Any]) -> None:
        (await self.client.post(self.base_url + "/sim/faults", json=list(faults))).raise_for_status()

    async def wait_idle(self, timeout: float = 5.0) -> dict[str, Any]:
        """Stats once no request holds a slot any more (streams of aborted clients included)."""
        return await poll(self.stats, lambda s: s["account"]["inFlight"] == 0, timeout)

    async def seen_headers(self) -> list[dict[str, str]]:
        """The headers of the last requests the simulator got for a model (":model": the model), oldest
        first, the key's left out."""
        response = await self.client.get(self.base_url + "/sim/headers")
        response.raise_for_status()
        seen: list[dict[str, str]] = response.json()["requests"]
        return seen

    async def rejections(self) -> dict[str, dict[str, int]]:
        """{model: {code: count}} of every model that rejected something."""
        stats = await self.stats()
        return {name: m["rejected"] for name, m in stats["models"].items() if m["rejected"]}


async def status(client: httpx.AsyncClient, proxy: ProxyProcess) -> dict[str, Any]:
    response = await client.get(proxy.status_url)
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def idle(document: dict[str, Any]) -> bool:
    """No slot held and nobody waiting, by the addon's own account."""
    models = document["modelDistribution"].values()
    return (
        document["usedCapacity"] == 0
        and all(m["inFlight"] == 0 for m in models)
        and document["queue"]["waiting"] == 0
    )


async def wait_status_idle(
    client: httpx.AsyncClient, proxy: ProxyProcess, timeout: float = 5.0
) -> dict[str, Any]:
    return await poll(lambda: status(client, proxy), idle, timeout)


async def poll[T](
    fetch: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    timeout: float,
    interval: float = POLL_SECONDS,
) -> T:
    """Call `fetch` until `done(value)`; return the last value (done or not) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await fetch()
        if done(value) or time.monotonic() >= deadline:
            return value
        await asyncio.sleep(interval)


def outcome_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """How each request outcome counter of /api/status moved between two snapshots."""
    return {key: after["requests"][key] - before["requests"].get(key, 0) for key in after["requests"]}
