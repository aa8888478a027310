"""Shapes the learner missed (issue 46): a refused request that holds its slot until its 1302
(`refused_holds`), and a z.ai that queues while every head comes with its first token. The state's
bookkeeping first (nothing waits), then the wire on loopback (short real waits, each bounded)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from chaos_mode_tools.sim import SimSettings, SimState
from chaos_mode_tools.sim.__main__ import settings_from_args
from chaos_mode_tools.sim.server import SimServer
from support.sim_client import MSGS, MakeSim, assert_zai_error, post, stats, wait_for

# -- refused requests that hold their slot: the bookkeeping ---------------------------------------------


@pytest.mark.parametrize("holds", [True, False])
def test_a_refused_request_holds_a_slot_of_its_model_and_the_account_only_when_told(holds: bool) -> None:
    state = SimState({"a": 1, "b": 5}, 2, refused_holds=holds)
    assert state.admit("a").outcome == "served"
    refused = state.admit("a")  # over a's limit of 1
    assert (refused.outcome, refused.code, refused.reason) == ("refused", "1302", "model")
    assert refused.holds == holds
    assert (state.models["a"].in_flight, state.account_in_flight) == ((2, 2) if holds else (1, 1))
    assert state.models["a"].served == 1  # a held refusal is not served
    # with the refused one holding the account's second slot, b is refused for the account
    assert state.admit("b").reason == ("account" if holds else None)
    if holds:
        state.release("a")  # its 1302 was sent: the slot goes back
        state.release("b")  # b's refusal too (it held one for the account)
    assert (state.models["a"].in_flight, state.account_in_flight) == (1, 1 if holds else 2)


def test_a_held_refusal_raises_what_the_next_request_is_judged_at() -> None:
    """In a soft band the slot a refused request holds makes every later draw a level higher."""
    held = SimState({"a": 1}, None, bands={"a": 2}, fault_seed=3, refused_holds=True)
    assert held.admit("a").outcome == "served"
    outcomes = [held.admit("a") for _ in range(6)]
    assert all(o.holds for o in outcomes if o.outcome == "refused")
    assert held.models["a"].in_flight == 1 + sum(1 for o in outcomes)  # served or refused, each holds
    assert held.snapshot()["refusalReasons"].get("model", 0) >= 3  # over the band's top after 2 more


def test_only_a_1302_holds_its_slot() -> None:
    random_1305 = SimState({"a": 3}, None, fault_rates={"1305": 1.0}, refused_holds=True)
    assert (random_1305.admit("a").code, random_1305.in_flight) == ("1305", 0)
    random_1302 = SimState({"a": 3}, None, fault_rates={"1302": 1.0}, refused_holds=True)
    admission = random_1302.admit("a")
    assert (admission.reason, admission.holds, random_1302.in_flight) == ("random", True, 1)


def test_refused_holds_is_a_setting_and_an_option() -> None:
    assert not SimSettings().refused_holds  # today's behaviour
    settings = SimSettings.from_mapping({"refusedHolds": True})
    assert settings.refused_holds and settings.new_state(lambda: 0.0).refused_holds
    assert SimSettings.from_mapping(settings.to_mapping()) == settings
    assert settings_from_args(["--refused-holds"]).refused_holds
    with pytest.raises(ValueError, match="refused_holds"):
        SimSettings.from_mapping({"refused_holds": "yes"})


# -- on the wire -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("holds", [True, False])
async def test_a_refused_request_holds_its_slot_for_the_reject_delay_only_when_told(
    make_sim: MakeSim, http: httpx.AsyncClient, holds: bool
) -> None:
    server = await make_sim(reject_delay_ms=400, refused_holds=holds, hold={"glm-4.7-flash": 1})
    refused = asyncio.create_task(post(http, server, "glm-4.7-flash"))  # its only slot held by another
    await asyncio.sleep(0.15)  # within its reject delay
    during = await stats(http, server)
    assert during["models"]["glm-4.7-flash"]["inFlight"] == (1 if holds else 0)
    assert during["account"]["inFlight"] == (1 if holds else 0)
    assert_zai_error(await refused, 429, "rate_limit_error", "1302")
    after = await stats(http, server)
    assert after["account"]["inFlight"] == 0 and after["models"]["glm-4.7-flash"]["served"] == 0


@pytest.mark.parametrize("kept", [False, True])
async def test_a_held_refusal_gives_its_slot_back_when_its_client_leaves_unless_kept(
    make_sim: MakeSim, kept: bool
) -> None:
    """Closed, a held refusal's slot goes back at once; with `refused_holds_closed`, once its 1302 was due
    (2 s after it came) all the same."""
    delay = 2000 if kept else 5000
    server = await make_sim(
        reject_delay_ms=delay, refused_holds=True, refused_holds_closed=kept, hold={"glm-4.7-flash": 1}
    )
    body = {"model": "glm-4.7-flash", "max_tokens": 5, "messages": MSGS}
    sent = time.monotonic()
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(
                server.anthropic_base_url + "/v1/messages", json=body, timeout=httpx.Timeout(5.0, read=0.2)
            )
    assert server.state.in_flight == 1 or not kept  # closed, long before its 1302 was due

    async def given_back() -> bool:
        return server.state.in_flight == 0

    await wait_for(given_back)
    assert time.monotonic() - sent >= (delay / 1000 if kept else 0.0) - 0.05


def test_refused_holds_closed_is_a_setting_and_an_option() -> None:
    assert not SimSettings().refused_holds_closed  # z.ai drops a request closed (DROPS_ON_CLOSE)
    settings = SimSettings.from_mapping({"refusedHolds": True, "refusedHoldsClosed": True})
    assert SimSettings.from_mapping(settings.to_mapping()) == settings
    assert settings_from_args(["--refused-holds", "--refused-holds-closed"]).refused_holds_closed


async def _head_and_events(server: SimServer, started: float) -> tuple[float, float, list[str]]:
    """(seconds to its head, to its answer's end, its events) of a streamed request."""
    body = {"model": "glm-4.7-flash", "max_tokens": 8, "messages": MSGS, "stream": True}
    async with (
        httpx.AsyncClient(timeout=5.0) as client,
        client.stream("POST", server.anthropic_base_url + "/v1/messages", json=body) as response,
    ):
        head = time.monotonic() - started
        text = (await response.aread()).decode()
        end = time.monotonic() - started
    kinds = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    return head, end, kinds


@pytest.mark.parametrize("late", [True, False])
async def test_a_request_held_inside_z_ai_sends_no_head_before_its_first_token_with_late_heads(
    make_sim: MakeSim, late: bool
) -> None:
    """Queuing and heads with the first token combine: the held request's head comes only once it was
    served and its first token was ready (300 ms after its slot freed), so it looks like a slow one. Read
    against the first answer's end (its slot freed then), not the clock: a loaded machine shifts both."""
    server = await make_sim(over_limit="queue", head_with_first_token=late, latency_ms=300)
    started = time.monotonic()
    first = asyncio.create_task(_head_and_events(server, started))
    await asyncio.sleep(0.05)  # the first holds glm-4.7-flash's only slot (~0.33 s)
    held_head, _, kinds = await _head_and_events(server, started)
    first_head, first_end, _ = await first
    assert server.state.stalls.doc(0.0)["waited"] == 1  # the second waited inside z.ai
    if late:
        assert first_head >= 0.28 and held_head >= first_end + 0.28  # its slot, then its first token
        assert kinds[:4] == ["message_start", "content_block_start", "ping", "content_block_delta"]
    else:  # the first's head at once, before its first token; the held one's when its slot came
        assert first_head <= first_end - 0.2 and 0.25 <= held_head < first_end + 0.25
