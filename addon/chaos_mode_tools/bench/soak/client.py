"""One request of the soak: what the client does (finish, leave early, leave mid-stream) and what it saw."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Final, Literal

from chaos_mode_tools.bench.swarm.workload import CLAUDE_MODELS
from chaos_mode_tools.devtools.client import httpx

Behaviour = Literal["normal", "abort-queued", "abort-mid-stream"]
CLIENT_FAULTS: Final[tuple[Behaviour, ...]] = ("abort-queued", "abort-mid-stream")
# What the client saw; `aborted` is the client's own doing, the others are what the proxy gave it.
OUTCOMES: Final = ("ok", "aborted", "rejected-429", "upstream-error", "broken", "timeout")
MODELS: Final = (CLAUDE_MODELS["heavy"], CLAUDE_MODELS["medium"], CLAUDE_MODELS["light"])
MODEL_WEIGHTS: Final = (0.3, 0.4, 0.3)
PATH: Final = "/api/anthropic/v1/messages"
SIM_SERVER: Final = "chaos-sim"  # the simulator's Server header; the proxy's own 429 has none


@dataclass(frozen=True, slots=True)
class Plan:
    """One request: its model, whether it streams, its simulated timings, and what the client does."""

    model: str
    stream: bool
    latency_ms: int
    behaviour: Behaviour = "normal"
    leave_after: float = 0.0  # seconds after sending, for abort-queued

    def body(self) -> bytes:
        messages = [{"role": "user", "content": "soak"}]
        return json.dumps(
            {"model": self.model, "max_tokens": 16, "stream": self.stream, "messages": messages}
        ).encode()

    def headers(self) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "x-api-key": "sk-soak-not-a-key",
            "x-sim-latency-ms": str(self.latency_ms),
            "x-sim-output-tokens": "5",
            "x-sim-token-interval-ms": "5",
        }


def plan_request(rng: random.Random, client_fault_share: float) -> Plan:
    """A request drawn from the soak's mix; `client_fault_share` of them leave early (half while queued,
    half mid-stream). A heavy request is the one that leaves while queued: heavy slots are the scarcest."""
    draw = rng.random()
    latency = rng.randint(20, 60)
    if draw < client_fault_share / 2:
        return Plan(CLAUDE_MODELS["heavy"], True, latency, "abort-queued", rng.uniform(0.0, 0.02))
    if draw < client_fault_share:
        return Plan(_model(rng), True, latency, "abort-mid-stream")
    return Plan(_model(rng), rng.random() < 0.7, latency)


def _model(rng: random.Random) -> str:
    return rng.choices(MODELS, MODEL_WEIGHTS)[0]


@dataclass(frozen=True, slots=True)
class Seen:
    outcome: str
    retry_after: float = 0.0  # our 429's Retry-After: the client waits that long (capped) before the next


async def send(client: httpx.AsyncClient, base_url: str, plan: Plan) -> Seen:
    """Send one request as `plan` says and classify what came back."""
    try:
        if plan.behaviour == "abort-queued":
            try:
                async with asyncio.timeout(plan.leave_after):
                    return await _exchange(client, base_url, plan)
            except TimeoutError:
                return Seen("aborted")
        return await _exchange(client, base_url, plan)
    except httpx.TimeoutException:
        return Seen("timeout")
    except httpx.TransportError:
        return Seen("broken")


async def _exchange(client: httpx.AsyncClient, base_url: str, plan: Plan) -> Seen:
    async with client.stream("POST", base_url + PATH, content=plan.body(), headers=plan.headers()) as answer:
        if answer.status_code == 429 and answer.headers.get("server") != SIM_SERVER:  # ours, not z.ai's
            await answer.aread()
            return Seen("rejected-429", _seconds(answer.headers.get("retry-after")))
        if answer.status_code != 200:
            await answer.aread()
            return Seen("upstream-error")
        if plan.behaviour == "abort-mid-stream":
            async for _ in answer.aiter_raw():
                return Seen("aborted")  # leaving the block closes the connection mid-stream
        content = await answer.aread()
    complete = b"message_stop" in content if plan.stream else content.startswith(b"{")
    return Seen("ok" if complete else "broken")


def _seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value or 0))
    except ValueError:
        return 0.0
