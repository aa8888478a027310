"""The tracker: z.ai's reading while fresh, else the estimate; its status; the pool feeds it."""

from __future__ import annotations

import json

import pytest

from chaos_mode.config.schema import default_config, parse_config
from chaos_mode.quota.tracker import FRESH_SECONDS, QuotaTracker
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.zai.errors import classify_error
from chaos_mode.zai.quota import WINDOW_SECONDS
from support.fakes import FakeClock
from support.quota_readings import five_hours

T0 = 1_700_000_000.0
HOUR = 3600.0


def test_nothing_known_is_all_null_from_the_estimate() -> None:
    status = QuotaTracker(lambda _: 1.0, FakeClock(T0)).status()
    assert status["usedPercent"] is None and status["runsOutAt"] is None and status["burnPerHour"] is None
    assert status["source"] == "estimate" and status["error"] is None and status["history"] == []


def test_zai_while_fresh_then_the_estimate() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    reset = T0 + 4.5 * HOUR  # the window started half an hour ago
    for _ in range(20):
        tracker.answered("glm-4.7")
    tracker.read(five_hours(20.0, reset))
    status = tracker.status()
    assert status["source"] == "zai"
    assert status["usedPercent"] == 20.0 and status["resetsAt"] == round(reset)
    assert status["burnPerHour"] == pytest.approx(40.0)
    assert status["runsOutAt"] == round(T0 + 2 * HOUR)  # 80% left at 40%/h
    assert status["estimate"]["scale"] == 100.0  # 20 answers were 20%
    clock.now += FRESH_SECONDS + 1
    assert tracker.status()["source"] == "estimate"
    assert tracker.status()["usedPercent"] == 20.0  # the estimate, calibrated


def test_a_failure_is_shown_until_a_reading_succeeds() -> None:
    tracker = QuotaTracker(lambda _: 1.0, FakeClock(T0))
    tracker.failed("HTTP 500")
    assert tracker.status()["error"] == "HTTP 500"
    tracker.read(five_hours(1.0, None))
    assert tracker.status()["error"] is None


def test_a_reading_past_its_reset_says_nothing_of_the_next_window() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    tracker.read(five_hours(90.0, T0 + 60))
    clock.now += 61
    assert tracker.status()["usedPercent"] is None


def test_the_pool_counts_answers_by_weight_and_learns_the_scale_from_1308() -> None:
    config = parse_config(
        {
            "modelRouting": {
                "chaosMode": {"enabled": True},
                "models": {
                    "glm-5": {"tier": "HEAVY", "maxConcurrency": 4, "quotaWeight": 3},
                    "glm-4.5-air": {"tier": "MEDIUM", "maxConcurrency": 4},
                },
            }
        }
    )
    clock, wall = FakeClock(0.0), FakeClock(T0)
    pool = ChaosPool(config, clock=clock, wall_clock=wall)
    for _ in range(3):
        slot = pool.try_acquire(Ticket("heavy"))
        assert slot is not None and slot.model == "glm-5"
        pool.ledger.success(slot)
        pool.release(slot)
    assert pool.quota.estimate.units == 9.0
    said = "[1308][Usage limit reached for 5 hour. Your limit will reset at 2023-11-15 07:13:20]"
    message = json.dumps({"error": {"code": "1308", "message": said}})
    error = classify_error(429, message, now=wall())
    assert error is not None and error.reset_at is not None
    pool.error("glm-5", error)
    assert pool.quota.estimate.scale == 9.0
    assert pool.quota.status()["usedPercent"] == 100.0
    assert pool.quota.estimate.end == error.reset_at
    assert 0 < error.reset_at - T0 < WINDOW_SECONDS


def test_weights_follow_a_reload() -> None:
    pool = ChaosPool(default_config(), wall_clock=FakeClock(T0))
    pool.quota.answered("glm-4.7")
    config = parse_config(
        {"modelRouting": {"models": {"glm-4.7": {"tier": "HEAVY", "maxConcurrency": 3, "quotaWeight": 2.5}}}}
    )
    pool.reconfigure(config)
    pool.quota.answered("glm-4.7")
    assert pool.quota.estimate.units == 3.5


# -- the budget: what may still be sent ---------------------------------------------------------------


def spend_and_read(
    tracker: QuotaTracker, clock: FakeClock, reset: float, counts: list[int], total: int
) -> int:
    """Requests sent and answered through the tracker up to each of `counts`, a reading (of a z.ai that
    floors its percentage, nothing else spending) asked for after each; the last request's key."""
    key = 0
    for upto in counts:
        while key < upto:
            key += 1
            tracker.sent(key, "glm-4.7")
            tracker.answered("glm-4.7", key)
        clock.now += 1
        asked = tracker.asked()
        tracker.read(five_hours(float(key * 100 // total), reset), asked)
    return key


def test_with_a_key_the_budget_is_known_once_the_readings_know_the_total() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    reset = T0 + 60
    spend_and_read(tracker, clock, reset, [0, 3], total=200)
    assert tracker.budget() is None and tracker.total() is None  # 1%: a prompt is anything
    spend_and_read(tracker, clock, reset, [60, 120, 180], total=200)
    budget, total = tracker.budget(), tracker.total()
    assert budget is not None and total is not None
    assert total[0] <= 200 <= total[1]
    assert 0 < budget.left <= 20 and budget.left <= budget.likely and budget.settled
    assert tracker.status()["total"] == [round(total[0], 1), round(total[1], 1)]


def test_the_budget_counts_what_is_in_flight_and_is_not_settled_meanwhile() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    spend_and_read(tracker, clock, T0 + 60, [0, 60, 120, 180], total=200)
    budget = tracker.budget()
    assert budget is not None
    tracker.sent(999, "glm-4.7")
    flying = tracker.budget()
    assert flying is not None and flying.left == budget.left - 1 and not flying.settled


def test_at_the_reset_the_next_window_holds_the_last_ones_total_until_a_reading_says_otherwise() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    last = spend_and_read(tracker, clock, T0 + 60, [0, 60, 120, 180], total=200)
    total = tracker.total()
    assert tracker.budget() is not None and total is not None
    clock.now = T0 + 60  # reset: none of the next window used, its total the last one's
    fresh = tracker.budget()
    assert fresh is not None and tracker.total() == total
    assert 190 <= fresh.left <= 200 and fresh.resets_at == T0 + 60 + WINDOW_SECONDS
    tracker.spent(T0 + 59)  # a 1308 of the last window (its whole second), come after its reset
    assert tracker.budget() == fresh
    tracker.sent(last + 1, "glm-4.7")
    sent = tracker.budget()
    assert sent is not None and sent.left == fresh.left - 1
    opened = T0 + 90 + WINDOW_SECONDS  # the window opened at its first request, later than the reset
    tracker.read(five_hours(0.0, opened), tracker.asked())
    read = tracker.budget()
    assert read is not None and read.resets_at == opened and read.left <= 200 - 1
    tracker.read(five_hours(50.0, opened), tracker.asked())  # one request is not half: another plan
    assert tracker.budget() is None  # the latest word alone: the total not known


def test_a_window_carried_to_and_never_read_is_carried_no_further() -> None:
    """Its reset was a guess (a window may open later than the last one's reset): past it, nothing."""
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    spend_and_read(tracker, clock, T0 + 60, [0, 60, 120, 180], total=200)
    clock.now = T0 + 60
    carried = tracker.budget()
    assert carried is not None
    clock.now = carried.resets_at
    assert tracker.budget() is None


def test_without_a_key_a_1308_teaches_the_total_for_the_next_window() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    for key in range(1, 41):
        tracker.sent(key, "glm-4.7")
        tracker.answered("glm-4.7", key)
    assert tracker.budget() is None  # no total taught yet
    tracker.sent(41, "glm-4.7")
    tracker.refused(41)
    tracker.spent(T0 + 600)  # 40 counted: the window's total
    clock.now = T0 + 601
    fresh = tracker.budget()
    assert fresh is not None and fresh.left == 40 and fresh.settled
    for key in range(42, 52):
        tracker.sent(key, "glm-4.7")
        tracker.answered("glm-4.7", key)
    tracker.sent(52, "glm-4.7")  # in flight
    budget = tracker.budget()
    assert budget is not None and budget.left == 40 - 11 and not budget.settled
    assert budget.resets_at == tracker.estimate.end
