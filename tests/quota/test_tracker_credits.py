"""The estimate in credits on a credit plan: each answer's credits count, the scale comes from a 1308."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.zai.quota import FIVE_HOURS, WINDOW_SECONDS
from support.fakes import FakeClock

T0 = 1_700_000_000.0


def credit_tracker(clock: FakeClock) -> QuotaTracker:
    tracker = QuotaTracker(lambda _: 3.0, clock)
    tracker.reconfigure(lambda _: 3.0, poll_seconds=60.0, unit="credits")
    return tracker


def five(status: dict[str, Any]) -> dict[str, Any]:
    window: dict[str, Any] = next(w for w in status["windows"] if w["name"] == FIVE_HOURS)
    return window


def test_credits_count_not_prompts_and_the_scale_comes_from_a_1308() -> None:
    clock = FakeClock(T0)
    tracker = credit_tracker(clock)
    for key, credits in enumerate([4.0, 20.0, 6.0], 1):
        tracker.sent(key, "glm-5.3")
        tracker.answered("glm-5.3", key)  # a clean answer counts nothing by itself here...
        clock.now += 10
        tracker.charged("glm-5.3", credits)  # ...its credits, as its usage ends, do
    status = tracker.status()
    assert status["estimate"]["unit"] == "credits" and status["estimate"]["units"] == 30.0
    assert status["usedPercent"] is None and five(status)["used"] == 30.0 and five(status)["cap"] is None
    tracker.spent(T0 + 600)  # the 1308: 30 credits are the window
    assert tracker.status()["usedPercent"] == 100.0 and tracker.budget() is None  # no budget in credits
    clock.now = T0 + 601  # the next window
    tracker.charged("glm-5.3", 7.5)
    status = tracker.status()
    assert status["usedPercent"] == 25.0
    assert (five(status)["used"], five(status)["cap"], five(status)["left"]) == (7.5, 30.0, 22.5)
    assert tracker.estimate.start == T0 + 601 and tracker.estimate.end == T0 + 601 + WINDOW_SECONDS


def test_a_model_counted_with_assumed_weights_is_named() -> None:
    tracker = credit_tracker(FakeClock(T0))
    tracker.charged("glm-5.3", 2.0)
    tracker.charged("glm-5.3-flash", 2.0, assumed=True)
    estimate = tracker.status()["estimate"]
    assert estimate["assumedWeights"] == ["glm-5.3-flash"]
    assert estimate["byModel"] == {"glm-5.3": 2.0, "glm-5.3-flash": 2.0}


def test_on_a_plan_of_prompts_or_with_a_key_credits_count_nothing() -> None:
    """With a key the estimate counts the ledger's unit, prompts by quotaWeight (the budget paces by
    its burn); readings calibrate its scale."""
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 3.0, clock)
    tracker.answered("glm-5.3")
    tracker.charged("glm-5.3", 9.0)
    assert tracker.status()["estimate"] == {
        "unit": "prompts", "units": 3.0, "assumedWeights": [], "assumedScale": None,
        "byModel": {"glm-5.3": 3.0}, "scale": None,
    }  # fmt: skip
    keyed = credit_tracker(clock)
    keyed.reader = "on"
    keyed.charged("glm-5.3", 9.0)
    keyed.answered("glm-5.3")
    assert keyed.status()["estimate"]["unit"] == "prompts" and keyed.estimate.units == 3.0
    keyed.reader = "off"  # the key is gone: credits from now on, the prompts counted dropped
    keyed.charged("glm-5.3", 9.0)
    assert keyed.status()["estimate"]["unit"] == "credits" and keyed.estimate.units == 9.0


@given(st.lists(st.floats(min_value=0.0, max_value=1000.0), min_size=1, max_size=30))
def test_after_a_1308_the_next_window_reads_its_credits_against_the_learned_scale(costs: list[float]) -> None:
    clock = FakeClock(T0)
    tracker = credit_tracker(clock)
    for cost in costs:
        tracker.charged("glm-5.3", cost)
    tracker.spent(T0 + 60)
    clock.now = T0 + 61
    tracker.charged("glm-5.3", costs[0])
    used = tracker.estimate.used_percent(clock.now)
    total = sum(costs)
    if total == 0:
        assert used is None
    else:
        assert used == pytest.approx(min(costs[0] / total * 100, 100.0))
