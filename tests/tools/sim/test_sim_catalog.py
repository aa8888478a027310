"""The simulator's catalogs: the 2026-12 preset's aliases counted on the served model (or on their own),
the served model named in every answer at both doors, 1311 for retired names, 1211 for unknown ones, the
models endpoint, and the settings that choose them (JSON and the CLI)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode_tools.sim import SimServer, SimSettings, SimState, catalog_settings, default_limits
from chaos_mode_tools.sim.__main__ import settings_from_args
from chaos_mode_tools.sim.limits import LimitChange
from support.sim_client import MSGS, MakeSim, assert_zai_error, post, sdk, stats, wait_for

DEC = catalog_settings("2026-12")
DOORS = ("/api/paas/v4", "/api/coding/paas/v4")
CHAT: Any = [{"role": "user", "content": "hello"}]
SLOW = {"x-sim-latency-ms": "400"}


async def make_dec(make_sim: MakeSim, **overrides: Any) -> SimServer:
    return await make_sim(**{**DEC, **overrides})


def chat_client(server: SimServer, door: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + door, api_key="k", max_retries=0, timeout=5.0)


async def in_flight(http: httpx.AsyncClient, server: SimServer, total: int) -> bool:
    return bool((await stats(http, server))["account"]["inFlight"] == total)


# -- concurrency counts on the served model ----------------------------------------------------------------


@pytest.mark.parametrize(("counters", "third"), [("shared", 429), ("own", 200)])
async def test_alias_counts_on_its_targets_limit_unless_own(
    make_sim: MakeSim, http: httpx.AsyncClient, counters: str, third: int
) -> None:
    sim = await make_dec(make_sim, limits={**DEC["limits"], "glm-5.3-flash": 2}, alias_counters=counters)
    holders = [
        asyncio.create_task(post(http, sim, model, headers=SLOW)) for model in ("glm-4.7", "glm-5.3-flash")
    ]
    await wait_for(lambda: in_flight(http, sim, 2))
    response = await post(http, sim, "glm-4.7")
    assert response.status_code == third, response.text
    if third == 429:
        assert_zai_error(response, 429, "rate_limit_error", "1302")
    assert [r.status_code for r in await asyncio.gather(*holders)] == [200, 200]
    models = (await stats(http, sim))["models"]
    if counters == "shared":
        assert "glm-4.7" not in models
        assert models["glm-5.3-flash"]["peakInFlight"] == 2
        assert models["glm-5.3-flash"]["rejected"] == {"1302": 1}
    else:
        assert models["glm-4.7"]["limit"] == 2  # its own counter, with its target's limit
        assert models["glm-4.7"]["peakInFlight"] == 2
        assert models["glm-5.3-flash"]["peakInFlight"] == 1


async def test_held_slots_and_faults_count_on_the_served_model(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    sim = await make_dec(make_sim, hold={"glm-5.3": 3})
    refused = await post(http, sim, "glm-5.1")
    assert_zai_error(refused, 429, "rate_limit_error", "1302")
    await http.post(sim.base_url + "/sim/limits", json={"hold": {"glm-5.3": 0}})
    await http.post(sim.base_url + "/sim/faults", json={"model": "glm-5.3", "code": "1305"})
    assert_zai_error(await post(http, sim, "glm-5.2"), 429, "rate_limit_error", "1305")
    assert (await post(http, sim, "glm-5")).status_code == 200
    s = await stats(http, sim)
    assert s["models"]["glm-5.3"]["rejected"] == {"1302": 1, "1305": 1}
    assert s["aliasedRequests"] == {
        "glm-5.1": {"servedBy": "glm-5.3", "requests": 1},
        "glm-5.2": {"servedBy": "glm-5.3", "requests": 1},
        "glm-5": {"servedBy": "glm-5.3", "requests": 1},
    }


def test_own_counter_follows_its_targets_limit_changes() -> None:
    state = SimState({"big": 3}, None, aliases={"old": "big"}, alias_counters="own")
    state.apply(LimitChange(limits={"big": 1}), 1.0)
    assert (state.models["old"].limit, state.models["big"].limit) == (1, 1)
    assert state.account_limit == 1  # the account's sum is of the served models only
    state.restore_limits()
    assert state.models["old"].limit == 3


@given(st.lists(st.tuples(st.sampled_from(["a1", "a2", "big", "small"]), st.booleans()), max_size=60))
def test_shared_aliases_never_hold_more_than_their_targets_limit(steps: list[tuple[str, bool]]) -> None:
    aliases = {"a1": "big", "a2": "big"}
    state = SimState({"big": 2, "small": 1}, None, aliases=aliases)
    held: list[str] = []  # the counters of the requests in flight
    for name, take in steps:
        if take:
            if state.try_acquire(state.counter(name)) == "ok":
                held.append(state.counter(name))
        elif held:
            state.release(held.pop(0))
        assert held.count("big") <= 2 and held.count("small") <= 1
        assert state.models["big"].in_flight == held.count("big")
        assert set(state.models) == {"big", "small"}


# -- the answer names the served model -------------------------------------------------------------------


async def test_anthropic_door_names_the_served_model(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    sim = await make_dec(make_sim)
    whole = await sdk(sim).messages.create(model="glm-5.1", max_tokens=64, messages=MSGS)
    assert whole.model == "glm-5.3"
    async with sdk(sim).messages.stream(model="glm-4.7", max_tokens=64, messages=MSGS) as stream:
        starts = [event.message.model async for event in stream if event.type == "message_start"]
        final = await stream.get_final_message()
    assert starts == ["glm-5.3-flash"]
    assert final.model == "glm-5.3-flash"
    response = await post(http, sim, "glm-4.5-flash")
    assert response.json()["model"] == "glm-5.3-flash"
    assert response.headers["x-sim-served-model"] == "glm-5.3-flash"
    assert (await sdk(sim).messages.create(model="glm-5.4", max_tokens=64, messages=MSGS)).model == "glm-5.4"


@pytest.mark.parametrize("door", DOORS)
async def test_openai_door_names_the_served_model(make_sim: MakeSim, door: str) -> None:
    sim = await make_dec(make_sim)
    client = chat_client(sim, door)
    whole = await client.chat.completions.create(model="glm-5.2", messages=CHAT)
    assert whole.model == "glm-5.3"
    stream = await client.chat.completions.create(
        model="glm-5-turbo", messages=CHAT, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert len(chunks) > 2
    assert {chunk.model for chunk in chunks} == {"glm-5.3-flash"}


# -- names no longer served, names never served ------------------------------------------------------------


@pytest.mark.parametrize("name", ["glm-4.5", "glm-4.5-air", "glm-4.6", "glm-4.5-x", "glm-4.7-flashx"])
async def test_retired_name_answers_1311(make_sim: MakeSim, http: httpx.AsyncClient, name: str) -> None:
    sim = await make_dec(make_sim)
    body = assert_zai_error(await post(http, sim, name, stream=True), 429, "rate_limit_error", "1311")
    assert body["error"]["message"] == "[1311][The current plan does not include access to this model]"
    response = await http.post(
        sim.base_url + DOORS[1] + "/chat/completions", json={"model": name, "messages": CHAT}
    )
    assert response.status_code == 429
    assert response.json() == {
        "error": {"code": "1311", "message": "The current plan does not include access to this model"}
    }
    s = await stats(http, sim)
    assert s["retiredModels"] == {name: 2}
    assert s["account"]["peakInFlight"] == 0 and s["unknownModels"] == {}


async def test_unknown_name_answers_1211(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    sim = await make_dec(make_sim)
    assert_zai_error(await post(http, sim, "glm-9"), 400, "invalid_request_error", "1211")
    with pytest.raises(anthropic.BadRequestError):
        await sdk(sim).messages.create(model="claude-x", max_tokens=64, messages=MSGS)
    s = await stats(http, sim)
    assert s["unknownModels"] == {"glm-9": 1, "claude-x": 1}
    assert s["retiredModels"] == {}


# -- the models endpoint ---------------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
async def test_models_endpoint_lists_the_catalogs_names(
    make_sim: MakeSim, http: httpx.AsyncClient, door: str
) -> None:
    sim = await make_dec(make_sim)
    url = sim.base_url + door + "/models"
    assert (await http.get(url)).status_code == 401
    response = await http.get(url, headers={"Authorization": "some-key"})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert [row["id"] for row in body["data"]] == DEC["listed"]
    assert "glm-4.6v" not in DEC["listed"] and "glm-4.5" in DEC["listed"]  # listed is not served
    for row in body["data"]:
        assert row["object"] == "model" and row["owned_by"] == "z-ai" and isinstance(row["created"], int)
    listed = await chat_client(sim, door).models.list()
    assert [model.id async for model in listed] == DEC["listed"]
    assert (await stats(http, sim))["modelListReads"] == 3


async def test_models_endpoint_takes_only_the_accounts_key(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    sim = await make_sim(quota_key="right")
    url = sim.base_url + DOORS[1] + "/models"
    wrong = await http.get(url, headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "1002"
    assert (await http.get(url)).json()["error"]["code"] == "1001"
    right = await http.get(url, headers={"Authorization": "Bearer right"})
    assert [row["id"] for row in right.json()["data"]] == list(default_limits())  # early 2026: the served


# -- choosing a catalog ----------------------------------------------------------------------------------


def test_the_default_catalog_is_early_2026() -> None:
    settings = SimSettings()
    assert settings.limits == default_limits()
    assert (settings.aliases, settings.retired, settings.listed, settings.alias_counters) == (
        {},
        [],
        None,
        "shared",
    )
    assert SimSettings.from_mapping({"catalog": "early-2026"}) == settings


def test_catalog_from_json_and_keys_given_with_it_win() -> None:
    settings = SimSettings.from_mapping({"limits": {"glm-5.3": 7, "glm-5.3-flash": 1}, "catalog": "2026-12"})
    assert settings.limits == {"glm-5.3": 7, "glm-5.3-flash": 1}
    assert settings.aliases["glm-4.7"] == "glm-5.3-flash"
    with pytest.raises(ValueError, match="not a served model"):  # glm-5.4 has no limit any more
        SimSettings.from_mapping({"catalog": "2026-12", "limits": {"glm-5.3": 1}})
    assert SimSettings.from_mapping(SimSettings.from_mapping({"catalog": "2026-12"}).to_mapping()) == (
        SimSettings.from_mapping({"catalog": "2026-12"})
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"catalog": "2027-01"}, "catalog: one of"),
        ({"catalog": 2026}, "catalog: one of"),
        ({"aliases": {"old": "nowhere"}}, "aliases.old"),
        ({"aliases": {"glm-4.7": "glm-4.6"}}, "cannot be an alias"),
        ({"aliases": ["glm-4.7"]}, "aliases: expected"),
        ({"retired": ["glm-4.7"]}, "retired: 'glm-4.7' is served"),
        ({"retired": "glm-4.7"}, "retired: expected"),
        ({"listed": [""]}, "listed: expected"),
        ({"alias_counters": "mine"}, "alias_counters"),
    ],
)
def test_bad_catalog_settings_are_named(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimSettings.from_mapping(data)


def test_cli_catalog_and_its_options() -> None:
    settings = settings_from_args(
        ["--catalog", "2026-12", "--alias-counters", "own", "--alias", "glm-5.5=glm-5.4", "--retire", "glm-3"]
    )
    assert settings.limits == DEC["limits"]
    assert settings.alias_counters == "own"
    assert settings.aliases == {**DEC["aliases"], "glm-5.5": "glm-5.4"}
    assert settings.retired == [*DEC["retired"], "glm-3"]
    assert settings_from_args([]).limits == default_limits()


def test_cli_rejects_a_retired_name_that_is_an_alias(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        settings_from_args(["--catalog", "2026-12", "--retire", "glm-5"])
    assert "retired: 'glm-5' is served" in capsys.readouterr().err
