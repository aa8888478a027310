"""Pacing against every window z.ai counts: each paced on its own, the tightest plan binds; the week's
credits spread over the days left to its reset, within what the 5-hour window allows (injected clock)."""

from __future__ import annotations

import pytest

from chaos_mode.quota.pacer import Pacer
from chaos_mode.quota.pacing import NOT_PACED, PacePlan, tightest
from chaos_mode.quota.reading import QuotaReading, WindowReading
from chaos_mode.quota.tracker import QuotaTracker
from support.fakes import FakeClock

HOUR = 3600.0
DAY = 24 * HOUR
FIVE_H, WEEK = 5 * HOUR, 7 * DAY


def five(used: float, hours_in: float, now: float) -> WindowReading:
    return WindowReading(
        "5h", FIVE_H, used, now + FIVE_H - hours_in * HOUR, 2000.0, used * 20, 2000 - used * 20
    )


def week(used: float, days_in: float, now: float) -> WindowReading:
    cap = 10000.0
    return WindowReading("1w", WEEK, used, now + WEEK - days_in * DAY, cap, used * 100, cap - used * 100)


def pacer_in_flight(in_flight: int) -> tuple[Pacer, QuotaTracker, FakeClock]:
    """A pacer with `in_flight` requests in flight for the last hour, no lighter model left."""
    clock = FakeClock(1_700_000_000.0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    pacer = Pacer(tracker, clock, clock)
    pacer.reconfigure(True, {"glm-5.3": 1.0})
    pacer.alone = False  # no hard stop from the 5-hour budget: the forecasts alone
    for slot in range(in_flight):
        pacer.taken(slot, "heavy", slot + 1)
    clock.advance(HOUR)
    return pacer, tracker, clock


def plan(pacer: Pacer) -> PacePlan:
    return pacer.plan(lambda _: False)


def test_the_week_binds_when_it_would_be_spent_in_its_first_days() -> None:
    """40% of the week gone in a day (1.7%/h) while the days left afford 0.4%/h: a quarter of the
    concurrency, though the 5-hour window lasts."""
    pacer, tracker, clock = pacer_in_flight(8)
    tracker.read(QuotaReading((five(10.0, 2.0, clock()), week(40.0, 1.0, clock()))))
    paced = plan(pacer)
    assert paced.window == "1w" and paced.max_concurrency == 1  # 8 x 0.40 / 1.67 = 1.9
    assert pacer.status(lambda _: False)["window"] == "1w"
    forecast = tracker.forecast("1w")
    assert forecast is not None and forecast.runs_out_at is not None
    assert forecast.runs_out_at - clock() == round(60 / (40 / 24) * HOUR)  # 1.5 days at this pace


def test_a_week_that_lasts_leaves_the_five_hours_to_bind() -> None:
    pacer, tracker, clock = pacer_in_flight(8)
    tracker.read(QuotaReading((five(60.0, 1.5, clock()), week(10.0, 1.0, clock()))))
    paced = plan(pacer)
    assert paced.window == "5h" and paced.max_concurrency is not None and paced.max_concurrency < 8


def test_when_both_run_out_the_tighter_cap_binds() -> None:
    pacer, tracker, clock = pacer_in_flight(8)
    tracker.read(QuotaReading((five(60.0, 1.5, clock()), week(40.0, 1.0, clock()))))
    paced = plan(pacer)
    assert paced.window == "1w" and paced.max_concurrency == 1
    both_lasting = QuotaReading((five(10.0, 2.0, clock()), week(10.0, 1.0, clock())))
    clock.advance(HOUR)
    tracker.read(both_lasting)
    assert plan(pacer).window == "1w"  # engaged in this week: it stays worked out until the week resets


def test_a_weekly_row_alone_is_paced() -> None:
    pacer, tracker, clock = pacer_in_flight(4)
    tracker.read(QuotaReading((week(40.0, 1.0, clock()),)))
    assert tracker.windows() == ["5h", "1w"]
    assert plan(pacer).window == "1w"
    assert tracker.status()["usedPercent"] is None  # no 5-hour window read, nothing estimated yet


def test_nothing_paced_while_every_window_lasts() -> None:
    pacer, tracker, clock = pacer_in_flight(8)
    tracker.read(QuotaReading((five(10.0, 2.0, clock()), week(10.0, 1.0, clock()))))
    assert plan(pacer) is NOT_PACED


def test_tightest_orders_caps_then_lighter_models_then_nothing() -> None:
    lighter, cap2, cap5 = (
        PacePlan(True, None, "l", "a"),
        PacePlan(True, 2, "2", "b"),
        PacePlan(True, 5, "5", "c"),
    )
    assert tightest([NOT_PACED, lighter, cap5, cap2]) is cap2
    assert tightest([NOT_PACED, lighter]) is lighter
    assert tightest([]) is NOT_PACED


def test_a_short_five_hour_window_scales_the_week_alike() -> None:
    """A simulator's 60-s "5 hours" make its week 33.6 minutes: the week's start and burn follow."""
    _, tracker, clock = pacer_in_flight(8)
    tracker.reconfigure(lambda _: 1.0, poll_seconds=1.0, window_seconds=60.0)
    week_seconds = 60.0 * 33.6
    window = WindowReading("1w", WEEK, 30.0, clock() + week_seconds * 0.8, 100.0, 30.0, 70.0)
    tracker.read(QuotaReading((window,)))
    assert tracker.seconds_of("1w") == week_seconds
    forecast = tracker.forecast("1w")
    assert forecast is not None
    assert forecast.burn_per_hour == pytest.approx(30.0 / (week_seconds * 0.2) * HOUR)  # from its start


def test_ahead_of_an_even_week_even_one_agent_waits_until_back_on_it() -> None:
    """60% of the week in a day with one request at a time: one burns ten times what the days left
    afford, so none goes until the week's even line comes down to what is left (3.33 days on)."""
    pacer, tracker, clock = pacer_in_flight(1)
    reset = clock() + 6 * DAY
    tracker.read(QuotaReading((week(60.0, 1.0, clock()),)))
    held = plan(pacer)
    assert (held.window, held.max_concurrency) == ("1w", 0) and pacer.capped(0)
    until = reset - 3 * 60  # the end game: three polls (and requests, none ended yet) before the reset
    back = until - 37 / 97 * (until - (reset - WEEK))
    assert held.back_at == pytest.approx(back) and pacer.lifts_in() == pytest.approx(back - clock())
    clock.advance(back - clock() + 1)
    tracker.read(QuotaReading((WindowReading("1w", WEEK, 60.0, reset, 10000.0, 6000.0, 4000.0),)))
    again = plan(pacer)
    assert again.max_concurrency == 1 and not pacer.capped(0) and pacer.lifts_in() is None


def test_a_window_read_in_credits_holds_every_request_once_the_count_says_it_is_spent() -> None:
    """100 credits, 90 read spent (whole credits: up to 91), 6 answers of a credit counted since the
    reading was asked for, and one more that may not be counted yet: 2 left, requests go; two more
    answers: none until a reading says more."""
    pacer, tracker, clock = pacer_in_flight(1)
    asked = tracker.asked()
    tracker.charged("glm-5.3", 1.0)  # counted after the reading was asked for: maybe not in it
    tracker.read(QuotaReading((WindowReading("1w", WEEK, 90.0, clock() + DAY, 100.0, 90.0, 10.0),)), asked)
    for _ in range(5):
        tracker.charged("glm-5.3", 1.0)
    assert tracker.credits_left("1w") == pytest.approx(2.0) and not pacer.capped(0)
    tracker.charged("glm-5.3", 1.0)
    tracker.charged("glm-5.3", 1.0)
    assert pacer.capped(0) and pacer.spent()
    pacer.reconfigure(False, {"glm-5.3": 1.0})
    assert not pacer.capped(0)  # pacing off: z.ai's 1310 says it
    pacer.reconfigure(True, {"glm-5.3": 1.0})
    clock.advance(DAY)
    assert tracker.credits_left("1w") is None and not pacer.capped(0)  # the week reset: the next reading says


def test_in_the_weeks_end_game_what_is_left_goes_at_once() -> None:
    """A week paced since its first day; in its end game (three polls and requests before the reset, the
    requests here of an hour) no cap: what the swarm has in flight then finishes the week."""
    pacer, tracker, clock = pacer_in_flight(4)
    for slot in range(4):
        pacer.released(slot, 3 - slot)  # requests of an hour
    reset = clock() + 6 * DAY
    tracker.read(QuotaReading((week(60.0, 1.0, clock()),)))
    assert plan(pacer).window == "1w"  # engaged in this week
    endgame = 3 * (60 + pacer.request_seconds)
    assert endgame == pytest.approx(3 * (60 + HOUR))
    clock.now = reset - endgame - 60
    tracker.read(QuotaReading((WindowReading("1w", WEEK, 96.0, reset, 10000.0, 9600.0, 400.0),)))
    assert "end game" not in plan(pacer).reason
    clock.advance(61)
    last = plan(pacer)
    assert last.max_concurrency is None and "end game" in last.reason, last


def test_a_credit_row_of_no_cap_holds_nothing() -> None:
    pacer, tracker, clock = pacer_in_flight(1)
    tracker.read(QuotaReading((WindowReading("1w", WEEK, 0.0, clock() + DAY, 0.0, 5.0, 0.0),)))
    assert tracker.credits_left("1w") is None and not pacer.spent()
