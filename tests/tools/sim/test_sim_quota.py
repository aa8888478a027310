"""The simulator's 5-hour quota: counted by weight, 1308 once spent, its endpoint and the ways it fails."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from chaos_mode.quota.reading import read_quota
from chaos_mode.zai.errors import classify_error
from chaos_mode.zai.quota import QUOTA_PATH
from chaos_mode_tools.sim import SimServer
from chaos_mode_tools.sim.__main__ import settings_from_args
from chaos_mode_tools.sim.quota import SimQuota
from chaos_mode_tools.sim.settings import SimSettings
from support.fakes import FakeClock
from support.sim_client import MakeSim, assert_zai_error, post, stats

KEY = "quota-key-for-tests"


def test_a_window_counts_by_weight_and_resets() -> None:
    clock = FakeClock(1_700_000_000.0)
    quota = SimQuota(10, 60.0, {"glm-5": 3}, clock)
    assert quota.resets_at() == clock.now + 60  # no window open: one opened now
    quota.charge("glm-5")
    quota.charge("glm-4.7")
    assert (quota.used, quota.percentage(), quota.spent()) == (4.0, 40, False)
    clock.now += 30
    for _ in range(6):
        quota.charge("glm-4.7")
    assert quota.spent() and quota.spent_at == clock.now and quota.percentage() == 100
    assert quota.resets_at() == clock.now + 30
    clock.now += 30
    assert not quota.spent() and quota.used == 0 and quota.percentage() == 0


def test_the_percentage_is_whole_and_rounded_down() -> None:
    quota = SimQuota(3, 60.0, {}, FakeClock(1_700_000_000.0))
    quota.charge("m")
    assert quota.percentage() == 33
    reading = read_quota(json.dumps(quota.body())).reading
    assert reading is not None and reading.windows[0].used_percent == 33
    exact = SimQuota(100, 60.0, {}, FakeClock(1_700_000_000.0))
    for _ in range(29):
        exact.charge("m")
    assert exact.percentage() == 29  # of the exact share: 29 / 100 * 100 is 28.999999999999996 in floats


def test_no_quota_never_refuses() -> None:
    quota = SimQuota(None, 60.0, {}, FakeClock(1_700_000_000.0))
    for _ in range(1000):
        quota.charge("m")
    assert not quota.spent() and quota.percentage() == 0


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"quota": 0}, "quota: must be > 0"),
        ({"quota_window_seconds": -1}, "quota_window_seconds"),
        ({"quota_weights": {"glm-5": "3"}}, "quota_weights.glm-5"),
        ({"quota_key": ""}, "quota_key"),
    ],
)
def test_bad_quota_settings_are_named(settings: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SimSettings.from_mapping(settings)


def test_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIM_QUOTA_KEY", KEY)
    settings = settings_from_args(
        [
            "--quota",
            "40",
            "--quota-window-seconds",
            "30",
            "--quota-weight",
            "glm-5=3",
            "--quota-key-env",
            "SIM_QUOTA_KEY",
        ]
    )
    assert (settings.quota, settings.quota_window_seconds, settings.quota_weights) == (40, 30, {"glm-5": 3.0})
    assert settings.quota_key == KEY


async def read(http: httpx.AsyncClient, server: SimServer, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": key} if key is not None else {}
    return await http.get(server.base_url + QUOTA_PATH, headers=headers)


async def test_spent_is_1308_on_every_model_with_the_reset_time(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(quota=3, quota_weights={"glm-4.7": 2}, quota_key=KEY)
    assert (await post(http, server, "glm-4.7")).status_code == 200
    assert (await read(http, server)).json()["data"]["limits"][0]["percentage"] == 66
    assert (await post(http, server, "glm-4.5-air")).status_code == 200
    for model in ("glm-4.5-air", "glm-4.7-flash"):
        response = await post(http, server, model)
        body = assert_zai_error(response, 429, "rate_limit_error", "1308")
        assert "Usage limit reached for 5 hour. Your limit will reset at " in body["error"]["message"]
    error = classify_error(429, response.content, now=0)
    assert error is not None and error.reset_at is not None
    assert error.reset_at == math.floor(server.quota.resets_at())  # said to the second
    figures = (await stats(http, server))["quota"]
    assert figures["used"] == 3.0 and figures["refused"] == 2 and figures["percentage"] == 100
    reading = read_quota((await read(http, server)).content).reading
    assert reading is not None and reading.windows[0].used_percent == 100
    assert reading.windows[0].resets_at == pytest.approx(server.quota.resets_at(), abs=0.001)


async def test_the_endpoint_takes_only_its_key(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(quota_key=KEY)
    assert (await read(http, server)).status_code == 200
    assert (await read(http, server, "Bearer " + KEY)).status_code == 200
    for wrong in ("another-key", None):
        response = await read(http, server, wrong)
        assert response.status_code == 401 and response.json()["success"] is False
        assert KEY not in response.text
    anyone = await make_sim()
    assert (await read(http, anyone, "any")).status_code == 200
    assert (await read(http, anyone, None)).status_code == 401


async def test_the_endpoint_fails_as_told(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(quota_key=KEY)

    async def answer(mode: str) -> None:
        told = await http.post(server.base_url + "/sim/quota", json={"answer": mode})
        assert told.status_code == 200 and told.json()["answer"] == mode

    await answer("500")
    assert (await read(http, server)).status_code == 500
    await answer("401")
    assert (await read(http, server)).status_code == 401
    await answer("junk")
    junk = await read(http, server)
    assert junk.status_code == 200 and read_quota(junk.content).reading is None
    await answer("drop")
    with pytest.raises(httpx.RemoteProtocolError):
        await read(http, server)
    await answer("hang")
    with pytest.raises(httpx.ReadTimeout):
        await http.get(server.base_url + QUOTA_PATH, headers={"Authorization": KEY}, timeout=0.3)
    await answer("ok")
    assert (await read(http, server)).status_code == 200
    assert server.quota.reads == 6


async def test_used_can_be_set_and_a_bad_order_is_400(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(quota=10)
    told = await http.post(server.base_url + "/sim/quota", json={"used": 10})
    assert told.json()["percentage"] == 100
    assert (await post(http, server, "glm-4.5")).status_code == 429
    for bad in ({"answer": "maybe"}, {"used": -1}, {"other": 1}, [1]):
        assert (await http.post(server.base_url + "/sim/quota", json=bad)).status_code == 400
