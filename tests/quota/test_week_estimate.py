"""The week estimated without a key: a 1310 teaches its scale as a 1308 teaches the 5-hour window's;
status and pacing then use it (injected clock)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.pacer import Pacer
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.zai.quota import FIVE_HOURS, WEEK
from support.fakes import FakeClock

T0 = 1_700_000_000.0
HOUR = 3600.0
DAY = 24 * HOUR


def credit_tracker(clock: FakeClock) -> QuotaTracker:
    tracker = QuotaTracker(lambda _: 1.0, clock)
    tracker.reconfigure(lambda _: 1.0, poll_seconds=60.0, unit="credits")
    return tracker


def window(status: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(w for w in status["windows"] if w["name"] == name)
    return found


def test_a_1310_teaches_the_weeks_scale_and_the_next_week_reads_against_it() -> None:
    clock = FakeClock(T0)
    tracker = credit_tracker(clock)
    for credits in (300.0, 500.0, 200.0):
        tracker.charged("glm-5.3", credits)
        clock.advance(6 * HOUR)
    assert tracker.windows() == [FIVE_HOURS]  # nothing says there is a week yet
    reset = T0 + 6 * DAY
    tracker.spent(reset, WEEK)  # the 1310: 1,000 credits are the week
    assert tracker.windows() == [FIVE_HOURS, WEEK]
    spent = window(tracker.status(), WEEK)
    assert (spent["source"], spent["usedPercent"], spent["resetsAt"]) == ("estimate", 100.0, round(reset))
    assert (spent["used"], spent["cap"], spent["left"]) == (1000.0, 1000.0, 0.0)
    assert spent["seconds"] == 7 * DAY
    assert tracker.status()["usedPercent"] is None  # the 5-hour window learned nothing from it
    clock.now = reset + 10  # the next week opens with its first answer
    tracker.charged("glm-5.3", 150.0)
    week = window(tracker.status(), WEEK)
    assert (week["usedPercent"], week["used"], week["cap"], week["left"]) == (15.0, 150.0, 1000.0, 850.0)
    assert week["resetsAt"] == round(reset + 10 + 7 * DAY)


def test_a_1308_and_a_1310_each_teach_their_own_window() -> None:
    clock = FakeClock(T0)
    tracker = credit_tracker(clock)
    tracker.charged("glm-5.3", 40.0)
    tracker.spent(T0 + HOUR)  # the 1308: 40 credits are five hours
    assert tracker.estimate.scale == 40.0 and tracker.week.scale is None
    clock.now = T0 + HOUR + 1
    tracker.charged("glm-5.3", 20.0)
    tracker.spent(T0 + 2 * DAY, WEEK)  # the 1310: the week counted 60
    assert tracker.estimate.scale == 40.0 and tracker.week.scale == 60.0
    assert tracker.estimate.end == T0 + HOUR + 1 + 5 * HOUR and tracker.week.end == T0 + 2 * DAY


def test_with_a_scaled_window_the_week_scales_alike() -> None:
    tracker = QuotaTracker(lambda _: 1.0, FakeClock(T0))
    tracker.reconfigure(lambda _: 1.0, poll_seconds=5.0, window_seconds=10.0, unit="credits")
    assert tracker.week.window_seconds == pytest.approx(10.0 * 7 * 24 / 5)
    assert tracker.seconds_of(WEEK) == pytest.approx(336.0)


def test_pacing_spreads_the_next_week_by_the_scale_a_1310_taught() -> None:
    """1,000 credits a week; the next week spends 100 in its first two hours with 8 in flight: far
    ahead of an even pace, so the week's plan binds and holds every request until back on it."""
    clock = FakeClock(T0)
    tracker = credit_tracker(clock)
    pacer = Pacer(tracker, clock, clock)
    pacer.reconfigure(True, {"glm-5.3": 1.0})
    tracker.charged("glm-5.3", 1000.0)
    tracker.spent(T0 + DAY, WEEK)
    clock.now = T0 + DAY + 1
    for slot in range(8):
        pacer.taken(slot, "heavy", slot + 1)
    for _ in range(20):
        tracker.charged("glm-5.3", 5.0)
        clock.advance(360)
    paced = pacer.plan(lambda _: False)
    assert paced.window == WEEK and paced.max_concurrency == 0, paced
    assert paced.back_at is not None and paced.back_at > clock()


def test_a_key_keeps_the_week_to_its_readings() -> None:
    """With a key the estimate counts prompts and a 1310's week is z.ai's reading's, the estimate's
    shown only while no fresh reading has a week."""
    tracker = credit_tracker(FakeClock(T0))
    tracker.reader = "on"
    tracker.answered("glm-5.3")
    tracker.spent(T0 + DAY, WEEK)
    assert tracker.week.scale == 1.0 and tracker.status()["estimate"]["unit"] == "prompts"
    assert window(tracker.status(), WEEK)["used"] is None  # prompts: no credits to show


@given(st.lists(st.floats(min_value=0.01, max_value=1000.0), min_size=1, max_size=30))
def test_after_a_1310_the_next_weeks_percent_is_its_credits_over_the_last(costs: list[float]) -> None:
    clock = FakeClock(T0)
    tracker = credit_tracker(clock)
    for cost in costs:
        tracker.charged("glm-5.3", cost)
    tracker.spent(T0 + 60, WEEK)
    clock.now = T0 + 61
    tracker.charged("glm-5.3", costs[0])
    used = window(tracker.status(), WEEK)["usedPercent"]
    assert used == pytest.approx(min(costs[0] / sum(costs) * 100, 100.0), abs=0.05)
