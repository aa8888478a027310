"""Failover after z.ai errors, with the real in-process simulator: the addon's forwarder (real loopback
HTTP) sends each attempt, and the test plays mitmproxy's part between the client and the forwarder."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from chaos_mode.doors.error_bodies import TRIED_HEADER
from chaos_mode.forwarding.forwarder import TOKEN_HEADER
from chaos_mode.mitm.addon import META, ChaosMode
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool_status import served
from chaos_mode_tools.sim import Fault, SimServer, SimSettings
from chaos_mode_tools.sim.content_filter import ContentFilter
from support.design_catalog import DESIGN_MODELS, FIXED_LIMITS

HEAVY = [name for name, spec in DESIGN_MODELS.items() if spec["tier"] == "HEAVY"]
FAST: dict[str, Any] = {"latency_ms": 5, "token_interval_ms": 1, "output_tokens": 4, "reject_delay_ms": 0}
API_KEY = "sk-ant-api03-FailoverTestKey0123456789"
MESSAGES = b"/api/anthropic/v1/messages?beta=true"
CHAT = b"/api/coding/paas/v4/chat/completions"


class Clock:
    """Time stands still: cooldowns never run out during a test."""

    def __init__(self) -> None:
        self.mono = 5000.0
        self.wall = 1_757_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall


@dataclass
class Rig:
    addon: ChaosMode
    tctx: taddons.context
    sim: SimServer
    client: httpx.AsyncClient
    tmp: Path
    clock: Clock

    def configure(self, **routing: Any) -> None:
        # The simulator serves the design's (early-2026) catalog: so does the proxy.
        config = {
            "chaosMode": {"enabled": True},
            "upstreamHosts": ["127.0.0.1"],
            "models": DESIGN_MODELS,
            **FIXED_LIMITS,
            **routing,
        }
        path = self.tmp / "chaos.json"
        path.write_text(json.dumps({"modelRouting": config}), encoding="utf-8")
        self.tctx.configure(self.addon, chaos_config=str(path), chaos_enabled="auto", chaos_web="")

    def flow(
        self,
        model: str = "claude-opus-4-5",
        *,
        stream: bool = False,
        path: bytes = MESSAGES,
        system: str | None = None,
    ) -> http.HTTPFlow:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": 64,
            "stream": stream,
            "messages": [{"role": "user", "content": "hello"}],
        }
        if system is not None:
            body["system"] = system
        if path != MESSAGES and stream:
            body["stream_options"] = {"include_usage": True}
        content = json.dumps(body).encode()
        host = f"127.0.0.1:{self.sim.port}"
        request = tutils.treq(
            method=b"POST",
            host="127.0.0.1",
            port=self.sim.port,
            scheme=b"http",
            path=path,
            content=content,
            headers=http.Headers(
                [
                    (b"host", host.encode()),
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(content)).encode()),
                    (b"x-api-key", API_KEY.encode()),
                ]
            ),
        )
        return tflow.tflow(req=request)

    async def forward(self, f: http.HTTPFlow) -> None:
        """Play mitmproxy's part: send the (rewritten) request where the flow points (the forwarder), run
        the response hooks."""
        request = f.request
        headers = [(k, v) for k, v in request.headers.items(multi=True) if k.lower() != "content-length"]
        answer = await self.client.request(
            request.method, request.url, headers=headers, content=request.raw_content or b""
        )
        f.response = http.Response.make(
            answer.status_code,
            b"",
            [(k.encode(), v.encode()) for k, v in answer.headers.multi_items()],
        )
        self.addon.responseheaders(f)
        stream = f.response.stream
        if callable(stream):
            for i in range(0, len(answer.content), 50):
                stream(answer.content[i : i + 50])
            stream(b"")
        else:
            f.response.raw_content = answer.content
        await self.addon.response(f)

    async def run(
        self,
        model: str = "claude-opus-4-5",
        *,
        stream: bool = False,
        path: bytes = MESSAGES,
        system: str | None = None,
    ) -> http.HTTPFlow:
        f = self.flow(model, stream=stream, path=path, system=system)
        async with asyncio.timeout(10):
            await self.addon.request(f)
            if f.response is None:
                await self.forward(f)
            else:
                await self.addon.response(f)  # our own answer: mitmproxy goes straight to `response`
        return f

    def models(self) -> dict[str, dict[str, Any]]:
        status: dict[str, dict[str, Any]] = served(pool_status.status(self.addon.pool))["models"]
        return status


@pytest.fixture
async def rig(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Rig]:
    caplog.set_level(logging.INFO)
    clock = Clock()
    addon = ChaosMode(clock=clock.monotonic, wall_clock=clock.time)
    sim = SimServer(SimSettings(**FAST))
    await sim.start()
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            with taddons.context(addon) as tctx:
                tctx.configure(addon, chaos_web="", chaos_limits_file=str(tmp_path / "limits.json"))
                rig = Rig(addon, tctx, sim, client, tmp_path, clock)
                rig.configure()
                addon.running()  # the forwarder listens
                yield rig
                assert addon.pool.in_flight() == 0
                assert addon.pool.spurious_releases == 0
                assert sim.state.in_flight == 0
                assert not [r for r in caplog.records if "internal error" in r.getMessage()]
                addon.done()
    finally:
        await sim.stop(timeout=2.0)


def meta_of(f: http.HTTPFlow) -> dict[str, Any]:
    meta = f.metadata[META]
    assert isinstance(meta, dict)
    return meta


def body_of(f: http.HTTPFlow) -> dict[str, Any]:
    data = json.loads(f.request.get_content() or b"")
    assert isinstance(data, dict)
    return data


async def test_a_request_without_trouble_is_served_once(rig: Rig) -> None:
    f = await rig.run(stream=True)
    meta = meta_of(f)
    assert f.response is not None and f.response.status_code == 200
    assert meta["failovers"] == 0
    assert meta["usage"][1] == FAST["output_tokens"]
    assert rig.sim.stats()["models"][meta["model"]]["served"] == 1


async def test_1302_fails_over_to_another_eligible_model(rig: Rig) -> None:
    rig.sim.add_fault(Fault(model="*", code="1302", count=1, retry_after=9))
    f = await rig.run(stream=True)
    meta = meta_of(f)
    first, second = meta["attempted"]
    assert first != second and {first, second} <= set(HEAVY)
    assert f.response is not None and f.response.status_code == 200
    assert meta["failovers"] == 1
    assert meta["model"] == second
    assert f"failover from {first} (1302)" in f.comment
    assert f.comment.startswith(f"claude-opus-4-5 → {second} · ")
    assert body_of(f)["model"] == second
    assert f.response.headers["x-sim-served-model"] == second
    assert meta["stopped"] is True  # the stream went through the observer to its end
    assert f.request.host == "127.0.0.1" and f.request.port == rig.sim.port  # z.ai's address again
    assert "x-chaos-forward" not in f.request.headers
    sim = rig.sim.stats()["models"]
    assert sim[first]["rejected"] == {"1302": 1}
    assert sim[second]["served"] == 1
    models = rig.models()
    assert models[first]["cooldownRemaining"] == pytest.approx(9.0)
    assert models[second]["cooldownRemaining"] == 0
    stats = rig.addon.chaos_stats()
    assert stats["failovers"] == 1
    assert stats["recentFailovers"][0]["from"] == first
    assert stats["recentFailovers"][0]["to"] == second
    assert stats["requests"]["ok"] == 1
    assert stats["modelDistribution"][second]["tokensOut"] == FAST["output_tokens"]


async def test_refused_for_capacity_after_max_failovers_it_waits_and_is_served(rig: Rig) -> None:
    """With nothing else in flight, nothing frees a slot: it waits in line for a cooldown to end (z.ai's
    Retry-After, else `cooldown.defaultSeconds`), never our 429 within the queue's timeout, and never a
    trial of a model cooling down (it refused this request a moment ago: it would again)."""
    cooldown = {"defaultSeconds": 0.05, "maxSeconds": 0.2}
    rig.configure(streams={"maxFailovers": 1}, queue={"timeoutSeconds": 3600}, cooldown=cooldown)
    rig.sim.add_fault(Fault(model="*", code="1302", count=5))

    async def time_passes() -> None:  # the rig's clock stands still but for this
        while True:
            await asyncio.sleep(0.01)
            rig.clock.mono += 0.01

    passing = asyncio.ensure_future(time_passes())
    try:
        f = await rig.run()
    finally:
        passing.cancel()
    meta = meta_of(f)
    assert f.response is not None and f.response.status_code == 200
    assert meta["refusals"] == ["1302"] * 5 + [None] and meta["failovers"] == 5 > 1
    assert rig.addon.chaos_stats()["requests"]["rejected"] == 0
    assert rig.sim.stats()["requests"] == 6


# Without the fair queue there is nothing to wait in: what would fail over with none left gets our 429.


async def test_after_max_failovers_our_429_lists_the_models_tried(rig: Rig) -> None:
    rig.configure(streams={"maxFailovers": 1}, queue={"enabled": False})
    rig.sim.add_fault(Fault(model="*", code="1302", count=5, retry_after=7))
    f = await rig.run()
    meta = meta_of(f)
    assert meta["failovers"] == 1
    assert len(meta["attempted"]) == 2
    response = f.response
    assert response is not None and response.status_code == 429
    assert response.headers[TRIED_HEADER] == ", ".join(meta["attempted"])
    assert response.headers["retry-after"] == "7"  # z.ai's own, kept
    payload = json.loads(response.content or b"")
    assert payload["type"] == "error" and payload["error"]["type"] == "rate_limit_error"
    assert rig.addon.chaos_stats()["requests"]["rejected"] == 1
    assert rig.sim.stats()["requests"] == 2


async def test_when_no_model_is_left_our_429_lists_every_one_tried(rig: Rig) -> None:
    rig.configure(queue={"enabled": False})
    rig.sim.add_fault(Fault(model="*", code="1302", count=10, retry_after=3))
    f = await rig.run()
    meta = meta_of(f)
    assert sorted(meta["attempted"]) == sorted(HEAVY)
    assert meta["failovers"] == len(HEAVY) - 1
    response = f.response
    assert response is not None and response.status_code == 429
    assert sorted(response.headers[TRIED_HEADER].split(", ")) == sorted(HEAVY)
    # Ours covers the cooldowns it set (at least z.ai's 3 s, at most 60); z.ai's own value is kept.
    assert 3 <= int(response.headers["retry-after"]) <= 60
    assert response.headers["x-upstream-retry-after"] == "3"
    assert all(rig.models()[name]["cooldownRemaining"] > 0 for name in HEAVY)
    assert rig.sim.stats()["requests"] == len(HEAVY)


async def test_1113_takes_the_model_out_of_rotation_and_fails_over(rig: Rig) -> None:
    rig.sim.add_fault(Fault(model="*", code="1113", count=1, error_type="1113"))
    f = await rig.run("claude-sonnet-4-5")
    meta = meta_of(f)
    refused, served = meta["attempted"]
    assert meta["model"] == served != refused
    assert f.response is not None and f.response.status_code == 200
    assert meta["failovers"] == 1
    assert "(1113)" in f.comment
    assert rig.models()[refused]["outOfRotation"] is not None
    # it stays out: later requests never go there
    for _ in range(4):
        later = await rig.run("claude-sonnet-4-5")
        assert meta_of(later)["model"] != refused
    assert rig.sim.stats()["models"][refused]["served"] == 0


async def test_1308_passes_through_and_pauses_the_account(rig: Rig) -> None:
    rig.sim.add_fault(Fault(model="*", code="1308", count=1))
    f = await rig.run()
    meta = meta_of(f)
    assert meta["failovers"] == 0
    response = f.response
    assert response is not None and response.status_code == 429
    assert json.loads(response.content or b"")["error"]["code"] == "1308"  # z.ai's answer
    assert TRIED_HEADER not in response.headers
    pause = served(pool_status.status(rig.addon.pool))["accountPause"]
    assert pause is not None
    later = await rig.run("claude-haiku-4-5")
    assert later.response is not None and later.response.status_code == 429
    # a quota window: the client is told to stop until the reset, not to retry within a minute
    assert int(later.response.headers["retry-after"]) >= pause["remaining"] - 1 > 60
    assert later.response.headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert rig.sim.stats()["requests"] == 1  # the later one never reached z.ai
    assert rig.addon.chaos_stats()["requests"]["rejected"] == 1


# -- the OpenAI door ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["1302", "1113"])
async def test_a_refusal_at_the_openai_door_fails_over_and_the_answer_still_streams(
    rig: Rig, code: str
) -> None:
    rig.sim.add_fault(Fault(model="*", code=code, count=1, retry_after=9))
    f = await rig.run("glm-4.7", stream=True, path=CHAT)
    meta = meta_of(f)
    first, second = meta["attempted"]
    assert first != second and {first, second} <= set(HEAVY)
    response = f.response
    assert response is not None and response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert callable(response.stream)  # streamed through the observer, not buffered
    assert f"failover from {first} ({code})" in f.comment
    assert body_of(f)["model"] == second
    assert meta["stopped"] is True  # data: [DONE] came through
    assert meta["usage"][1] == FAST["output_tokens"]  # from the final usage chunk
    sim = rig.sim.stats()["models"]
    assert sim[first]["rejected"] == {code: 1}
    assert sim[second]["served"] == 1
    stats = rig.addon.chaos_stats()
    assert stats["requestsByDoor"]["openai"]["ok"] == 1
    assert stats["modelDistribution"][second]["tokensOut"] == FAST["output_tokens"]
    assert stats["modelDistribution"][first]["upstreamErrors"] == {code: 1}


async def test_at_the_openai_door_our_429_after_the_last_failover_speaks_openai(rig: Rig) -> None:
    rig.configure(streams={"maxFailovers": 1}, queue={"enabled": False})
    rig.sim.add_fault(Fault(model="*", code="1302", count=5, retry_after=7))
    f = await rig.run("glm-4.7", path=CHAT)
    meta = meta_of(f)
    response = f.response
    assert response is not None and response.status_code == 429
    assert response.headers[TRIED_HEADER] == ", ".join(meta["attempted"])
    assert response.headers["retry-after"] == "7"
    payload = json.loads(response.content or b"")
    assert set(payload) == {"error"}
    assert payload["error"]["code"] == "rate_limit_exceeded"
    assert "concurrency limit (1302)" in payload["error"]["message"]
    assert rig.addon.chaos_stats()["requestsByDoor"]["openai"]["rejected"] == 1


FILTERED = "You run on Hermes Agent."  # z.ai's content filter refuses it in a system prompt, on every model


async def test_a_prompt_refused_by_two_serving_models_gets_zais_529_and_cools_nothing(rig: Rig) -> None:
    rig.sim.content_filter = ContentFilter((FILTERED,))
    for _ in range(30):  # plain requests until every heavy model has served one (time stands still)
        await rig.run(stream=True)
        if all(rig.sim.stats()["models"][m]["served"] for m in HEAVY):
            break
    f = await rig.run(stream=True, system=f"You are an agent. {FILTERED}")
    meta = meta_of(f)
    assert f.response is not None and f.response.status_code == 529
    body = json.loads(f.response.content or b"")
    assert body["error"]["type"] == "overloaded_error" and body["error"]["code"] == "1305"  # z.ai's own
    assert TRIED_HEADER not in f.response.headers
    first, second = meta["attempted"]
    assert meta["failovers"] == 1 and meta["rejected"] is None and meta["ownRefusal"]
    assert f.marked == ":speech_balloon:"
    assert "z.ai's refusal passed on, nothing cooled" in f.comment, f.comment
    assert f"{first}, {second} refused it with 1305" in f.comment, f.comment
    assert all(m["cooldownRemaining"] == 0 and m["cooldownReason"] is None for m in rig.models().values())
    stats = rig.addon.chaos_stats()
    assert stats["requestRefusals"] == {"1305": 2}
    assert all(not m["upstreamErrors"] for m in stats["modelDistribution"].values())
    assert rig.sim.stats()["filtered"]["requests"] == 2
    # Its retry: z.ai's answer at once from the first model tried, nothing cooled.
    again = await rig.run(stream=True, system=f"You are an agent. {FILTERED}")
    assert again.response is not None and again.response.status_code == 529
    assert meta_of(again)["failovers"] == 0 and "remembered" in again.comment
    assert rig.addon.chaos_stats()["requestRefusals"] == {"1305": 3}
    assert all(m["cooldownRemaining"] == 0 for m in rig.models().values())
    metrics = rig.addon.metrics.registry.get_sample_value("chaos_request_refusals_total", {"code": "1305"})
    assert metrics == 3.0


async def test_a_flow_another_addon_answers_leaves_no_token_behind(rig: Rig) -> None:
    """A later addon answers the flow in its request hook: mitmproxy never connects to the forwarder, and the
    token it was given must not stay good for anyone who sends it."""
    f = rig.flow()
    async with asyncio.timeout(10):
        await rig.addon.request(f)
        token, url = f.request.headers[TOKEN_HEADER], f.request.url  # the forwarder's address
        f.response = http.Response.make(200, b"{}", {"content-type": "application/json"})
        await rig.addon.response(f)
        answer = await rig.client.post(url, headers={TOKEN_HEADER: token}, content=f.request.raw_content)
    assert answer.status_code == 403
    assert sum(model["served"] for model in rig.sim.stats()["models"].values()) == 0
