"""Talking to the z.ai simulator in tests: fast timings, a request, its stats, waiting for a condition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx
from anthropic.types import MessageParam

from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimServer

FAST: dict[str, Any] = {
    "latency_ms": 20,
    "token_interval_ms": 5,
    "output_tokens": 5,
    "reject_delay_ms": 60,
    "abort_detect_ms": 300,
}
TIMEOUT = httpx.Timeout(5.0)
MSGS: list[MessageParam] = [{"role": "user", "content": "hello"}]

MakeSim = Callable[..., Awaitable[SimServer]]


def sdk(server: SimServer | SimProcess) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=server.anthropic_base_url, api_key="test-key", max_retries=0, timeout=5.0
    )


async def post(
    http: httpx.AsyncClient,
    server: SimServer,
    model: str,
    *,
    stream: bool = False,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    body = {"model": model, "max_tokens": 64, "messages": MSGS, "stream": stream}
    return await http.post(
        server.anthropic_base_url + "/v1/messages?beta=true", json=body, headers=headers or {}
    )


async def stats(http: httpx.AsyncClient, server: SimServer) -> dict[str, Any]:
    response = await http.get(server.base_url + "/sim/stats")
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.01)


def assert_zai_error(response: httpx.Response, status: int, type_: str, code: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"type", "error", "request_id"}
    assert body["type"] == "error"
    assert body["request_id"]
    assert body["error"]["type"] == type_
    assert body["error"].get("code") == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body
