"""The simulator's credit plan: credits per answer from its usage, a 5-hour window that starts at first
use and a week, 1308 / 1310 once either is spent, the CREDIT_LIMIT rows the reader reads."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import pytest

from chaos_mode.quota.reading import read_quota
from chaos_mode.zai.errors import BEIJING, classify_error
from chaos_mode.zai.quota import QUOTA_PATH
from chaos_mode_tools.sim.__main__ import settings_from_args
from chaos_mode_tools.sim.credits import SimCredits
from chaos_mode_tools.sim.settings import SimSettings
from support.fakes import FakeClock
from support.sim_client import MakeSim, assert_zai_error, post, stats

HOUR, DAY = 3600.0, 86400.0


def credits(clock: FakeClock, five: float = 100.0, week: float = 250.0) -> SimCredits:
    return SimCredits({"5h": five, "1w": week}, {}, {}, clock)


def test_an_answer_costs_glm_5_3s_weights_per_thousand_tokens() -> None:
    plan = SimCredits({"5h": 10.0}, {}, {"glm-4.7": [1, 0, 2]}, FakeClock())
    assert plan.cost("glm-5.3", 1000, 1000, 1000) == pytest.approx(6.9 + 24 + 1.7)
    assert plan.cost("glm-4.7", 2000, 500) == pytest.approx(3.0)


def test_the_five_hours_start_at_first_use_and_the_week_runs_on() -> None:
    clock = FakeClock(1_700_000_000.0)
    plan = credits(clock)
    five, week = plan.body()["data"]["limits"]
    assert "nextResetTime" not in five and five["currentValue"] == 0
    assert week["nextResetTime"] == int((clock.now + 7 * DAY) * 1000)
    clock.advance(HOUR)
    plan.charge("glm-5.3", 10_000, 1000)  # 69 + 24 = 93 credits
    five, week = plan.body()["data"]["limits"]
    assert five["nextResetTime"] == int((clock.now + 5 * HOUR) * 1000)
    assert (five["usage"], five["currentValue"], five["remaining"], five["percentage"]) == (100, 93, 7, 93)
    assert (week["currentValue"], week["percentage"]) == (93, 37)
    clock.advance(5 * HOUR)  # the 5 hours reset, not started again until the next answer
    five, week = plan.body()["data"]["limits"]
    assert "nextResetTime" not in five and five["currentValue"] == 0 and week["currentValue"] == 93


def test_1308_when_the_five_hours_are_spent_1310_when_the_week_is_even_after_a_reset() -> None:
    clock = FakeClock(1_700_000_000.0)
    plan = credits(clock)
    assert plan.refusal() is None
    plan.charge("glm-5.3", 10_000, 2000)  # 117 credits: the 5 hours overshoot
    code, message = plan.refusal() or ("", "")
    assert code == "1308" and "Usage limit reached for 5 hour" in message
    clock.advance(5 * HOUR)
    assert plan.refusal() is None  # a new 5-hour window
    plan.charge("glm-5.3", 20_000, 0)
    plan.charge("glm-5.3", 0, 1000)  # 138 + 24: the 5 hours spent again
    clock.advance(5 * HOUR)
    plan.charge("glm-5.3", 0, 1000)  # the week: 117 + 162 + 24 = 303 of 250
    clock.advance(5 * HOUR)  # the 5-hour window reset: the week still refuses
    code, message = plan.refusal() or ("", "")
    week_reset = dt.datetime.fromtimestamp(1_700_000_000.0 + 7 * DAY, dt.UTC).astimezone(BEIJING)
    assert code == "1310" and f"您的限额将在 {week_reset:%Y-%m-%d %H:%M:%S} 重置" in message
    assert plan.snapshot()["refused"] == {"1308": 1, "1310": 1}
    assert plan.snapshot()["windows"]["1w"]["spentAt"] == 1_700_000_000.0 + 5 * HOUR  # 117 + 162
    week = plan.body()["data"]["limits"][1]
    assert week["currentValue"] == 303 and week["remaining"] == 0 and week["percentage"] == 100


def test_the_reader_reads_the_simulators_rows_as_they_are() -> None:
    clock = FakeClock(1_700_000_000.0)
    plan = credits(clock)
    plan.charge("glm-5.3", 3000, 500)  # 20.7 + 12 = 32.7 credits
    result = read_quota(json.dumps(plan.body()))
    assert result.warnings == () and result.reading is not None
    five, week = result.reading.window("5h"), result.reading.window("1w")
    assert five is not None and (five.used, five.cap, five.left) == (32.0, 100.0, 68.0)
    assert week is not None and week.resets_at == clock.now + 7 * DAY  # the week began with the plan


def test_settings_plans_and_their_checks() -> None:
    assert SimSettings(credit_plan="lite").caps == {"5h": 2000.0, "1w": 10000.0}
    assert SimSettings(credit_plan="pro", credit_caps={"5h": 5}).caps == {"5h": 5, "1w": 60000.0}
    assert settings_from_args(["--credit-plan", "max"]).caps["1w"] == 140000.0
    assert SimSettings.from_mapping({"creditCaps": {"1w": 50}}).caps == {"1w": 50}
    for bad in ({"credit_plan": "gold"}, {"credit_caps": {"1d": 5}}, {"credit_caps": {"5h": 0}},
                {"credit_window_seconds": {"5h": -1}}, {"credit_weights": {"m": [1, 2]}}):  # fmt: skip
        with pytest.raises(ValueError):
            SimSettings(**bad).validate()  # type: ignore[arg-type]


async def test_served_answers_are_charged_and_a_spent_window_refused(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(credit_caps={"5h": 1.0, "1w": 1000.0}, output_tokens=50)
    assert (await post(http, server, "glm-4.7")).status_code == 200
    figures = (await stats(http, server))["credits"]["windows"]
    assert 1.2 < figures["5h"]["used"] == figures["1w"]["used"]  # 50 output tokens: 1.2, and the input
    response = await post(http, server, "glm-4.7", stream=True)
    body = assert_zai_error(response, 429, "rate_limit_error", "1308")
    error = classify_error(429, response.content, now=0)
    assert error is not None and error.reset_at == int(figures["5h"]["resetsAt"])
    rows = (await http.get(server.base_url + QUOTA_PATH, headers={"Authorization": "k"})).json()
    rows = rows["data"]["limits"]
    assert [row["type"] for row in rows] == ["CREDIT_LIMIT", "CREDIT_LIMIT"] and body
