"""ChaosPool: eligibility, strategies through the pool, slots, cooldowns, cost guard, stickiness, status."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.quota.reading import QuotaReading, WindowReading
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, RequestInfo, Slot, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.routing.ticket import MAX_OUTPUT_TOKENS
from chaos_mode.zai.catalog import REQUEST_TIERS, TIER_RANK, RequestTier
from chaos_mode.zai.errors import FAIR_USE_SECONDS, Action, UpstreamError, classify_error
from support.design_catalog import ALL, CAPS, DESIGN_MODELS, FIXED_LIMITS, FREE, HEAVY, MEDIUM
from support.fakes import FakeClock

# 23:00 in Beijing on 2026-03-01: the next Beijing midnight is an hour away.
WALL_START = datetime(2026, 3, 1, 15, 0, 0, tzinfo=UTC).timestamp()


class Harness:
    """A pool on fake monotonic and wall clocks that move together."""

    def __init__(self, config: ModelRouting, seed: int = 0) -> None:
        self.clock = FakeClock()
        self.wall = FakeClock(WALL_START)
        self.pool = ChaosPool(config, clock=self.clock, wall_clock=self.wall, rng=random.Random(seed))

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.wall.advance(seconds)

    def fill(self, tier: RequestTier, **kwargs: Any) -> list[Slot]:
        """Acquire until the pool says no."""
        taken = []
        while (selection := self.pool.try_acquire(Ticket(tier, **kwargs))) is not None:
            taken.append(selection)
            assert len(taken) <= 100
        return taken

    def error(self, code: str, message: str = "x", status: int = 429) -> UpstreamError:
        body = json.dumps(
            {"type": "error", "error": {"type": "rate_limit_error", "code": code, "message": message}}
        )
        error = classify_error(status, body, now=self.wall())
        assert error is not None
        return error


def routing(**block: Any) -> ModelRouting:
    """A config over the design's (early-2026) catalog unless `block` gives its own `models`."""
    return parse_config({"modelRouting": {**FIXED_LIMITS, "models": DESIGN_MODELS, **block}})


def chaos(**chaos_mode: Any) -> ModelRouting:
    return routing(chaosMode=chaos_mode)


def held(pool: ChaosPool) -> dict[str, int]:
    return {
        name: m["inFlight"] for name, m in served(pool_status.status(pool))["models"].items() if m["inFlight"]
    }


# -- eligibility ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["least-loaded", "round-robin", "weighted-random"])
@pytest.mark.parametrize(
    ("tier", "models", "slots"),
    [("heavy", HEAVY, 8), ("medium", MEDIUM, 23), ("light", ALL, 28)],
)
def test_quality_floor_matrix(strategy: str, tier: RequestTier, models: list[str], slots: int) -> None:
    h = Harness(chaos(strategy=strategy))
    taken = h.fill(tier)
    assert len(taken) == slots
    assert Counter(s.model for s in taken) == {m: CAPS[m] for m in models}
    assert h.pool.in_flight() == slots
    assert h.pool.try_acquire(Ticket(tier)) is None


def test_a_lowered_floor_lets_heavy_requests_use_medium_models() -> None:
    h = Harness(chaos(qualityFloor={"heavy": "MEDIUM"}))
    assert Counter(s.model for s in h.fill("heavy")) == {m: CAPS[m] for m in MEDIUM}


def test_a_try_acquire_that_finds_nothing_takes_nothing() -> None:
    h = Harness(routing())
    first = h.pool.try_acquire(Ticket("heavy"))
    assert first is not None and first.model in HEAVY
    assert h.pool.in_flight() == 1 and h.pool.dispatched == {first.model: 1}
    assert h.pool.release(first)
    assert h.pool.in_flight() == 0
    taken = h.fill("heavy")
    before = (h.pool.in_flight(), dict(h.pool.dispatched), served(pool_status.status(h.pool)))
    assert h.pool.try_acquire(Ticket("heavy")) is None  # nothing free: no side effect
    assert (h.pool.in_flight(), dict(h.pool.dispatched), served(pool_status.status(h.pool))) == before
    for s in taken:
        assert h.pool.release(s)


def test_full_models_are_skipped() -> None:
    h = Harness(routing())
    for _ in range(3):
        assert h.pool.acquire("glm-4.7")
    assert not h.pool.acquire("glm-4.7")  # its cap
    taken = h.fill("heavy")
    assert Counter(s.model for s in taken) == {"glm-4.6": 3, "glm-4.5-x": 2}


def test_excluded_models_are_never_chosen() -> None:
    h = Harness(chaos(excludeModels=["glm-4.5", "glm-4.7"]))
    assert Counter(s.model for s in h.fill("medium")) == {"glm-4.6": 3, "glm-4.5-x": 2, "glm-4.5-air": 5}
    status = served(pool_status.status(h.pool))["models"]
    assert status["glm-4.5"]["excluded"] is True
    assert status["glm-4.6"]["excluded"] is False


def test_free_models_can_be_left_out() -> None:
    h = Harness(chaos(includeFreeModels=False))
    taken = h.fill("light")
    assert len(taken) == 26
    assert not {s.model for s in taken} & FREE


def test_attempted_models_are_skipped() -> None:
    h = Harness(routing())
    attempted = frozenset({"glm-4.7", "glm-4.6"})
    taken = h.fill("heavy", attempted=attempted)
    assert Counter(s.model for s in taken) == {"glm-4.5-x": 2}
    assert h.pool.try_acquire(Ticket("heavy", frozenset(HEAVY))) is None
    assert h.pool.unavailable(Ticket("heavy", frozenset(HEAVY))) == "no usable model left for heavy requests"
    assert h.pool.unavailable(Ticket("medium", frozenset(HEAVY))) is None
    for s in taken:
        h.pool.release(s)


# -- strategies through the pool ------------------------------------------------------------------


def test_least_loaded_through_the_pool() -> None:
    h = Harness(chaos(strategy="least-loaded"))
    first = h.pool.try_acquire(Ticket("medium"))
    second = h.pool.try_acquire(Ticket("medium"))
    # All idle: lowest cost wins (glm-4.5-air), then among the 2.80 $ models the larger glm-4.5.
    assert (first, second) == (Slot("glm-4.5-air", "least-loaded"), Slot("glm-4.5", "least-loaded"))
    # Every pick has the best free/cap ratio of the moment.
    for _ in range(21):
        models = served(pool_status.status(h.pool))["models"]
        best = max((CAPS[m] - models[m]["inFlight"]) / CAPS[m] for m in MEDIUM)
        selection = h.pool.try_acquire(Ticket("medium"))
        assert selection is not None
        assert (CAPS[selection.model] - models[selection.model]["inFlight"]) / CAPS[selection.model] == best
    assert h.pool.try_acquire(Ticket("medium")) is None


def test_least_loaded_spreads_idle_heavy_requests_over_tied_models() -> None:
    h = Harness(chaos(strategy="least-loaded"))
    picks: Counter[str] = Counter()
    for _ in range(10):
        selection = h.pool.try_acquire(Ticket("heavy"))
        assert selection is not None
        picks[selection.model] += 1
        h.pool.release(selection)
    assert picks == {"glm-4.7": 5, "glm-4.6": 5}


def test_round_robin_through_the_pool() -> None:
    h = Harness(chaos(strategy="round-robin"))
    picks = []
    for _ in range(16):
        selection = h.pool.try_acquire(Ticket("light"))
        assert selection is not None and selection.reason == "round-robin"
        picks.append(selection.model)
        h.pool.release(selection)
    assert picks == ALL + ALL


def test_round_robin_skips_full_models() -> None:
    h = Harness(chaos(strategy="round-robin"))
    h.pool.acquire("glm-4.6")
    h.pool.acquire("glm-4.6")
    h.pool.acquire("glm-4.6")
    picks = [s.model for s in (h.pool.try_acquire(Ticket("heavy")) for _ in range(5)) if s]
    assert picks == ["glm-4.7", "glm-4.5-x", "glm-4.7", "glm-4.5-x", "glm-4.7"]


def test_weighted_random_through_the_pool() -> None:
    h = Harness(chaos(strategy="weighted-random"), seed=42)
    draws = 28_000
    picks: Counter[str] = Counter()
    for _ in range(draws):
        selection = h.pool.try_acquire(Ticket("light"))
        assert selection is not None
        picks[selection.model] += 1
        h.pool.release(selection)
    for model in ALL:
        assert picks[model] / draws == pytest.approx(CAPS[model] / 28, abs=0.012)


def test_weighted_random_never_picks_a_full_model() -> None:
    h = Harness(chaos(strategy="weighted-random"), seed=3)
    for _ in range(9):
        h.pool.acquire("glm-4.5")
    h.pool.acquire("glm-4.5-air")
    picks: Counter[str] = Counter()
    for _ in range(2000):
        selection = h.pool.try_acquire(Ticket("medium"))
        assert selection is not None
        picks[selection.model] += 1
        h.pool.release(selection)
    # free: 3, 3, 2, 1, 4 of 13
    assert picks["glm-4.5"] / 2000 == pytest.approx(1 / 13, abs=0.03)
    assert picks["glm-4.5-air"] / 2000 == pytest.approx(4 / 13, abs=0.03)
    h.pool.acquire("glm-4.5")
    for _ in range(300):
        selection = h.pool.try_acquire(Ticket("medium"))
        assert selection is not None and selection.model != "glm-4.5"
        h.pool.release(selection)


# -- slots ----------------------------------------------------------------------------------------


def test_acquire_release_tracking_and_dispatched_counts() -> None:
    h = Harness(routing())
    taken = [h.pool.try_acquire(Ticket("heavy")) for _ in range(4)]
    assert all(taken)
    assert h.pool.in_flight() == 4
    per_model = Counter(s.model for s in taken if s)
    for model, n in per_model.items():
        assert h.pool.in_flight(model) == n
        assert h.pool.dispatched[model] == n
    assert held(h.pool) == dict(per_model)
    for s in taken:
        assert s is not None and h.pool.release(s)
    assert h.pool.in_flight() == 0
    assert h.pool.dispatched == dict(per_model)  # dispatched counts requests, not slots held
    assert served(pool_status.status(h.pool))["usedCapacity"] == 0


def test_release_without_a_held_slot_is_clamped() -> None:
    h = Harness(routing())
    assert h.pool.release(Slot("glm-4.7", "never taken here")) is False
    slot = h.pool.acquire("glm-4.7")
    assert slot is not None and slot.model == "glm-4.7"
    assert h.pool.release(slot) is True
    assert h.pool.release(slot) is False  # already given back
    assert h.pool.release(slot) is False
    assert h.pool.in_flight("glm-4.7") == 0
    assert h.pool.in_flight() == 0
    status = served(pool_status.status(h.pool))
    assert status["spuriousReleases"] == 3
    assert status["models"]["glm-4.7"]["inFlight"] == 0
    # A later acquire still counts from zero: the clamp left no debt.
    again = h.pool.acquire("glm-4.7")
    assert again and h.pool.in_flight("glm-4.7") == 1
    # A slot given back already gives back nothing else of its model.
    assert h.pool.release(slot) is False and h.pool.in_flight("glm-4.7") == 1
    assert served(pool_status.status(h.pool))["spuriousReleases"] == 4
    assert h.pool.release(again) is True


def test_acquire_of_an_unknown_model_fails() -> None:
    h = Harness(routing())
    assert h.pool.acquire("gpt-4o") is None
    assert h.pool.in_flight() == 0


def test_all_full_is_backpressure() -> None:
    h = Harness(routing())
    taken = h.fill("light")
    assert len(taken) == 28
    for tier in REQUEST_TIERS:
        assert h.pool.try_acquire(Ticket(tier)) is None
        assert h.pool.in_flight() == 28
        assert h.pool.unavailable(Ticket(tier)) is None  # full is temporary: worth waiting
    assert h.pool.release(next(s for s in taken if s.model == "glm-4.5"))
    assert h.pool.try_acquire(Ticket("heavy")) is None  # the freed slot is below the heavy floor
    assert h.pool.try_acquire(Ticket("medium")) == Slot("glm-4.5", "least-loaded")


@pytest.mark.parametrize("cap", [1, 5, 10, 27])
def test_account_cap_is_enforced_below_the_sum(cap: int) -> None:
    h = Harness(routing(accountConcurrency=cap))
    assert len(h.fill("light")) == cap
    assert served(pool_status.status(h.pool))["totalCapacity"] == cap
    # A direct acquire of a model with room of its own is refused too.
    roomy = next(m for m in ALL if h.pool.in_flight(m) < CAPS[m])
    assert h.pool.acquire(roomy) is None
    assert h.pool.in_flight() == cap


# -- cost guard -----------------------------------------------------------------------------------

# 10k input tokens, 4k output: glm-4.7/4.6/4.5 0.0148 $, glm-4.5-x 0.0576 $, glm-4.5-air 0.0064 $,
# glm-4.7-flashx 0.0023 $, the free models 0 $.
REQUEST = RequestInfo(input_tokens=10_000, max_output_tokens=4_000)


def test_request_cost_estimate() -> None:
    h = Harness(routing())
    entries = h.pool._entries  # the cost formula on the pool's own entries
    assert REQUEST.cost(entries["glm-4.5-x"]) == pytest.approx(0.0576)
    assert REQUEST.cost(entries["glm-4.5-air"]) == pytest.approx(0.0064)
    assert RequestInfo.estimate(4000, 1000) == RequestInfo(1000, 1000)
    assert RequestInfo.estimate(-1, None) == RequestInfo(0, 4096)
    assert RequestInfo.estimate(0, True) == RequestInfo(0, 4096)  # a boolean is no budget


def test_an_output_budget_too_large_for_a_float_is_priced_at_the_largest_counted() -> None:
    """A bare JSON integer may have 4,300 digits: priced as it is, the cost guard's float arithmetic would
    overflow, in the request's own admission or in the release that dispatches it from the queue."""
    huge = RequestInfo.estimate(4000, 10**400)
    assert huge == RequestInfo(1000, MAX_OUTPUT_TOKENS)
    h = Harness(chaos(maxCostPerRequest=0.02))
    slot = h.pool.try_acquire(Ticket("heavy", request=huge))
    assert slot is not None and slot.reason.startswith("cost guard: none under $0.02")
    h.pool.release(slot)


def test_cost_guard_skips_expensive_models() -> None:
    h = Harness(chaos(maxCostPerRequest=0.02))
    taken = [h.pool.try_acquire(Ticket("heavy", request=REQUEST)) for _ in range(6)]
    assert Counter(s.model for s in taken if s) == {"glm-4.7": 3, "glm-4.6": 3}
    assert all(s is not None and s.reason == "least-loaded (cost guard)" for s in taken)
    # Only glm-4.5-x is left: nothing fits, so the cheapest eligible model, never a lower tier.
    last = h.pool.try_acquire(Ticket("heavy", request=REQUEST))
    assert last == Slot("glm-4.5-x", "cost guard: none under $0.02, cheapest eligible")


def test_cost_guard_without_a_fit_takes_the_cheapest_eligible() -> None:
    h = Harness(chaos(maxCostPerRequest=0.001))
    heavy = h.pool.try_acquire(Ticket("heavy", request=REQUEST))
    assert heavy is not None and heavy.model in ("glm-4.7", "glm-4.6")
    assert heavy.reason == "cost guard: none under $0.001, cheapest eligible"
    medium = h.pool.try_acquire(Ticket("medium", request=REQUEST))
    assert medium is not None and medium.model == "glm-4.5-air"
    light = h.pool.try_acquire(Ticket("light", request=REQUEST))
    assert light is not None and light.model in FREE and light.reason == "least-loaded (cost guard)"
    for s in (heavy, medium, light):
        h.pool.release(s)


def test_the_cost_guard_fallback_still_spreads_load_over_equally_cheap_models() -> None:
    # Nothing fits: glm-4.7 and glm-4.6 are equally cheap; the fallback must not pile onto one of them.
    h = Harness(chaos(maxCostPerRequest=0.001))
    picks = [h.pool.try_acquire(Ticket("heavy", request=REQUEST)) for _ in range(4)]
    assert Counter(s.model for s in picks if s) == {"glm-4.7": 2, "glm-4.6": 2}
    for s in picks:
        assert s is not None and s.reason.startswith("cost guard")
        h.pool.release(s)


def test_cost_guard_needs_a_request() -> None:
    h = Harness(chaos(maxCostPerRequest=0.001))
    assert Counter(s.model for s in h.fill("heavy")) == {m: CAPS[m] for m in HEAVY}


def test_cost_guard_keeps_the_floor_when_cheaper_models_are_free() -> None:
    h = Harness(chaos(maxCostPerRequest=0.000001, strategy="round-robin"))
    for _ in range(20):
        selection = h.pool.try_acquire(Ticket("heavy", request=REQUEST))
        assert selection is not None and TIER_RANK[h.pool.config.models[selection.model].tier] == 3
        assert h.pool.release(selection)


# -- upstream errors ------------------------------------------------------------------------------


def test_cooldown_models_are_skipped_until_the_clock_passes() -> None:
    h = Harness(routing())
    assert h.pool.error("glm-4.7", h.error("1302")) == 5.0
    assert h.pool.error("glm-4.6", h.error("1305"), retry_after=20.0) == 20.0
    assert Counter(s.model for s in h.fill("heavy")) == {"glm-4.5-x": 2}
    status = served(pool_status.status(h.pool))["models"]
    assert status["glm-4.7"]["cooldownRemaining"] == 5.0
    assert status["glm-4.7"]["cooldownReason"] == "concurrency limit (1302)"
    assert status["glm-4.7"]["outOfRotation"] is None
    h.advance(5.0)
    assert Counter(s.model for s in h.fill("heavy")) == {"glm-4.7": 3}
    h.advance(15.0)
    assert Counter(s.model for s in h.fill("heavy")) == {"glm-4.6": 3}
    assert served(pool_status.status(h.pool))["models"]["glm-4.6"]["cooldownReason"] is None


def test_retry_after_is_capped_for_cooldowns() -> None:
    h = Harness(routing())
    assert h.pool.error("glm-4.7", h.error("1312"), retry_after=3600.0) == 60.0


def test_out_of_rotation_shows_in_the_status() -> None:
    h = Harness(routing())
    assert h.pool.error("glm-4.5-x", h.error("1113")) == math.inf
    h.advance(1e7)
    assert Counter(s.model for s in h.fill("heavy")) == {"glm-4.7": 3, "glm-4.6": 3}
    status = served(pool_status.status(h.pool))["models"]["glm-4.5-x"]
    assert status["outOfRotation"] == "no balance or model not in plan (1113)"
    assert status["cooldownRemaining"] == 0.0
    assert status["cooldownReason"] is None
    assert h.pool.restore("glm-4.5-x") is True
    assert served(pool_status.status(h.pool))["models"]["glm-4.5-x"]["outOfRotation"] is None
    assert h.pool.try_acquire(Ticket("heavy")) == Slot("glm-4.5-x", "least-loaded")


def test_every_model_of_a_tier_out_makes_it_unavailable() -> None:
    h = Harness(routing())
    for model in HEAVY:
        h.pool.error(model, h.error("1311"))
    assert h.pool.try_acquire(Ticket("heavy")) is None
    assert h.pool.unavailable(Ticket("heavy")) == "no usable model left for heavy requests"
    assert h.pool.unavailable(Ticket("medium")) is None
    # A timed block is not "unusable for good".
    h.pool.restore("glm-4.7")
    h.pool.error("glm-4.7", h.error("1302"))
    assert h.pool.unavailable(Ticket("heavy")) is None


def test_model_day_lasts_until_the_next_beijing_midnight() -> None:
    h = Harness(routing())
    seconds = h.pool.error("glm-4.5", h.error("1304"))
    assert seconds == 3600.0  # 23:00 -> 00:00 in Beijing
    status = served(pool_status.status(h.pool))["models"]["glm-4.5"]
    assert status["outOfRotation"] == "daily call limit (1304)"
    taken = h.fill("medium")
    assert "glm-4.5" not in {s.model for s in taken}
    for s in taken:
        assert h.pool.release(s)
    assert h.pool.in_flight() == 0
    h.advance(3599.0)
    assert served(pool_status.status(h.pool))["models"]["glm-4.5"]["outOfRotation"] is not None
    h.advance(1.0)
    assert served(pool_status.status(h.pool))["models"]["glm-4.5"]["outOfRotation"] is None
    assert "glm-4.5" in {s.model for s in h.fill("medium")}


def test_a_1310_teaches_the_weeks_scale_a_1308_the_five_hours() -> None:
    h = Harness(routing())
    h.pool.quota.answered("glm-4.7")
    counted = h.pool.quota.week.units
    error = h.error("1310", "[1310][您的额度已用完，您的限额将在 2026-03-02 01:00:00 重置。]")
    assert h.pool.error("glm-4.7", error) == 7200.0
    assert h.pool.quota.week.scale == counted > 0 and h.pool.quota.week.end == 1772384400.0
    assert h.pool.quota.estimate.scale is None  # the 5-hour window learned nothing from the week


def test_paced_a_week_the_count_says_spent_holds_every_request_until_a_reading_says_more() -> None:
    """A week read in credits whose whole credits may all be spent: nothing goes (no 1310)."""
    h = Harness(routing(quota={"pace": True}))

    def week(used: float) -> QuotaReading:
        resets_at = WALL_START + 7 * 86400 - 60  # a minute old: too young for the forecast to pace
        row = WindowReading("1w", 7 * 86400.0, used, resets_at, 100.0, used, 100.0 - used)
        return QuotaReading((row,))

    h.pool.quota.read(week(99.0))  # whole credits: up to 100 spent
    assert h.pool.try_acquire(Ticket("light")) is None
    h.pool.quota.read(week(50.0))  # a reading that says more
    assert h.pool.try_acquire(Ticket("light")) is not None


def test_account_pause_stops_everything_until_the_reset() -> None:
    h = Harness(routing())
    # 23:00 Beijing + 2 h -> resets at 01:00 Beijing on 2026-03-02.
    error = h.error(
        "1308", "[1308][Usage limit reached for 5 hour. Your limit will reset at 2026-03-02 01:00:00]"
    )
    assert h.pool.error("glm-4.7", error) == 7200.0
    for tier in REQUEST_TIERS:
        assert h.pool.try_acquire(Ticket(tier)) is None
        assert h.pool.in_flight() == 0
        reason = h.pool.unavailable(Ticket(tier))
        assert reason == "account paused for 7200 s: 5-hour usage limit (1308)"
    assert served(pool_status.status(h.pool))["accountPause"] == {
        "remaining": 7200.0,
        "reason": "5-hour usage limit (1308)",
        "resetsAt": 1772384400.0,  # 2026-03-02 01:00 Beijing
    }
    h.advance(7199.0)
    assert h.pool.try_acquire(Ticket("light")) is None
    h.advance(1.0)
    assert served(pool_status.status(h.pool))["accountPause"] is None
    assert h.pool.unavailable(Ticket("light")) is None
    selection = h.pool.try_acquire(Ticket("light"))
    assert selection is not None
    h.pool.release(selection)


@pytest.mark.parametrize(
    "message",
    [
        "[1310][Weekly/Monthly Limit Exhausted. Your limit will reset at 2026-03-06 01:00:00]",
        "[1310][您的周限额已用完，您的限额将在 2026-03-06 01:00:00 重置。]",
    ],
)
def test_a_weekly_limit_pauses_the_account_for_days_and_says_so(message: str) -> None:
    h = Harness(routing())  # 23:00 Beijing on 2026-03-01: the reset is 4 days and 2 hours away
    seconds = 4 * 86_400 + 7200.0
    assert h.pool.error("glm-4.7", h.error("1310", message)) == seconds
    reason = h.pool.unavailable(Ticket("light"))
    assert reason == "account paused for 4 d 2 h, until 2026-03-05 17:00 UTC: weekly/monthly limit (1310)"
    assert served(pool_status.status(h.pool))["accountPause"]["remaining"] == seconds
    h.advance(seconds - 1.0)
    assert h.pool.try_acquire(Ticket("light")) is None
    h.advance(1.0)
    assert h.pool.try_acquire(Ticket("light")) is not None


@pytest.mark.parametrize(
    ("code", "retry_after", "seconds"),
    [
        ("1313", None, FAIR_USE_SECONDS),  # fair use without a reset time
        ("1313", 30.0, 30.0),  # ...or as its Retry-After says
        ("1317", None, 300.0),
        ("1310", None, 300.0),  # no reset time: accountPauseSeconds
        ("1308", None, 300.0),
        ("1310", 42.0, 42.0),  # Retry-After when the message gives no time
    ],
)
def test_account_pause_fallbacks(code: str, retry_after: float | None, seconds: float) -> None:
    h = Harness(routing())
    assert h.pool.error("glm-4.5", h.error(code), retry_after=retry_after) == seconds
    assert h.pool.try_acquire(Ticket("light")) is None
    h.advance(seconds)
    assert h.pool.try_acquire(Ticket("light")) is not None


@pytest.mark.parametrize(("retry_after", "seconds"), [(None, 5.0), (42.0, 42.0)])
def test_a_reset_time_in_the_past_pauses_until_it_comes(retry_after: float | None, seconds: float) -> None:
    """z.ai's clock behind ours (or the whole second it names just gone): the reset is imminent, so the
    pause is short, z.ai's Retry-After, else a cooldown's (`cooldown.defaultSeconds`), and the next 1308
    pauses again; not nothing (every request would go on to z.ai), not accountPauseSeconds (300 s lost of
    the window that has just begun)."""
    h = Harness(routing())
    error = h.error("1308", "reset at 2026-03-01 00:00:00")
    assert h.pool.error("glm-4.5", error, retry_after=retry_after) == seconds
    assert h.pool.try_acquire(Ticket("light")) is None
    h.advance(seconds)
    assert h.pool.try_acquire(Ticket("light")) is not None


@pytest.mark.parametrize(
    "error",
    [
        UpstreamError(200, "1309", Action.FATAL, "plan expired (1309)"),
        UpstreamError(400, None, Action.NONE, "bad request"),
    ],
)
def test_fatal_and_none_change_nothing(error: UpstreamError) -> None:
    h = Harness(routing())
    before = served(pool_status.status(h.pool))
    assert h.pool.error("glm-4.7", error, retry_after=30.0) == 0.0
    assert served(pool_status.status(h.pool)) == before
    assert h.pool.cooldowns.blocked() == frozenset()


# -- sticky conversations -------------------------------------------------------------------------


def sticky_config(**sticky: Any) -> ModelRouting:
    return routing(chaosMode={"stickyConversations": True}, sticky=sticky or {})


def test_a_conversation_keeps_its_model() -> None:
    h = Harness(sticky_config())
    first = h.pool.try_acquire(Ticket("heavy", sticky_key="conv-1"))
    assert first is not None
    taken = [first]
    # Least-loaded alone would now pick the other heavy model; the conversation stays.
    for _ in range(2):
        again = h.pool.try_acquire(Ticket("heavy", sticky_key="conv-1"))
        assert again == Slot(first.model, "sticky")
        taken.append(again)
    other = h.pool.try_acquire(Ticket("heavy", sticky_key="conv-2"))
    assert other is not None and other.model != first.model
    taken.append(other)
    status = served(pool_status.status(h.pool))["sticky"]
    assert status == {"enabled": True, "entries": 2, "moves": 0, "moveCredits": 0.0}
    for s in taken:
        assert s is not None and h.pool.release(s)
    assert h.pool.in_flight() == 0


def test_a_conversation_moves_off_a_cooling_model_and_sticks_to_the_new_one() -> None:
    h = Harness(sticky_config())
    first = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert first is not None
    h.pool.error(first.model, h.error("1302"))
    h.pool.release(first)
    moved = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert moved is not None and moved.model != first.model
    assert moved.reason == f"least-loaded (sticky moved from {first.model})"
    assert served(pool_status.status(h.pool))["sticky"]["moves"] == 1
    assert h.pool.release(moved)
    h.advance(60.0)  # the old model is usable again; the conversation stays where it went
    stayed = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert stayed == Slot(moved.model, "sticky")
    assert served(pool_status.status(h.pool))["sticky"]["moves"] == 1
    assert stayed is not None and h.pool.release(stayed)
    assert h.pool.in_flight() == 0


def test_a_conversation_moves_off_a_model_out_of_rotation() -> None:
    h = Harness(sticky_config())
    first = h.pool.try_acquire(Ticket("light", sticky_key="conv"))
    assert first is not None
    h.pool.release(first)
    h.pool.error(first.model, h.error("1211"))
    moved = h.pool.try_acquire(Ticket("light", sticky_key="conv"))
    assert moved is not None and moved.model != first.model and "sticky moved" in moved.reason
    h.pool.release(moved)


def test_a_move_counts_only_when_a_slot_is_taken() -> None:
    h = Harness(sticky_config())
    first = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert first is not None
    h.pool.error(first.model, h.error("1302"))
    others = h.fill("heavy")  # every other heavy model full
    assert others and first.model not in {s.model for s in others}
    assert h.pool.try_acquire(Ticket("heavy", sticky_key="conv")) is None  # nothing taken: no move
    assert served(pool_status.status(h.pool))["sticky"]["moves"] == 0
    assert h.pool.release(others.pop())
    moved = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert moved is not None and moved.model != first.model
    assert served(pool_status.status(h.pool))["sticky"]["moves"] == 1
    for s in (first, moved, *others):
        assert h.pool.release(s)


def test_sticky_is_off_unless_configured() -> None:
    h = Harness(routing())
    taken = [h.pool.try_acquire(Ticket("heavy", sticky_key="conv")) for _ in range(3)]
    picks = {s.model for s in taken if s}
    assert len(picks) > 1
    assert served(pool_status.status(h.pool))["sticky"] == {
        "enabled": False,
        "entries": 0,
        "moves": 0,
        "moveCredits": 0.0,
    }
    for s in taken:
        assert s is not None and h.pool.release(s)


def test_sticky_entries_expire() -> None:
    h = Harness(sticky_config(ttlSeconds=10))
    first = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert first is not None
    h.advance(9.0)
    refreshed = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert refreshed == Slot(first.model, "sticky")  # refreshed
    h.advance(9.0)
    again = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert again == Slot(first.model, "sticky")
    h.advance(10.0)
    after = h.pool.try_acquire(Ticket("heavy", sticky_key="conv"))
    assert after is not None and after.reason == "least-loaded"
    assert served(pool_status.status(h.pool))["sticky"]["moves"] == 0  # an expired entry is no move
    for s in (first, refreshed, again, after):
        assert s is not None and h.pool.release(s)


def test_sticky_entries_are_evicted_least_recent_first() -> None:
    h = Harness(sticky_config(maxEntries=2))
    models = {}
    for key in ("a", "b", "c"):
        selection = h.pool.try_acquire(Ticket("light", sticky_key=key))
        assert selection is not None
        models[key] = selection.model
        h.pool.release(selection)
    assert served(pool_status.status(h.pool))["sticky"]["entries"] == 2
    c_again = h.pool.try_acquire(Ticket("light", sticky_key="c"))
    assert c_again == Slot(models["c"], "sticky")
    a_again = h.pool.try_acquire(Ticket("light", sticky_key="a"))
    assert a_again is not None and a_again.reason != "sticky"
    for s in (c_again, a_again):
        assert s is not None and h.pool.release(s)


# -- reconfigure and status -----------------------------------------------------------------------


def test_reconfigure_keeps_in_flight_counts_and_cooldowns() -> None:
    h = Harness(routing())
    taken = h.fill("heavy")
    assert len(taken) == 8
    h.pool.error("glm-4.5", h.error("1302"))
    h.pool.reconfigure(chaos(strategy="round-robin", excludeModels=["glm-4.5-air"]))
    assert h.pool.in_flight() == 8
    assert h.pool.try_acquire(Ticket("heavy")) is None  # still full
    assert served(pool_status.status(h.pool))["models"]["glm-4.5"]["cooldownRemaining"] == 5.0
    selection = h.pool.try_acquire(Ticket("medium"))
    assert selection is None  # glm-4.5 cooling, glm-4.5-air excluded: no medium-grade slot
    for s in taken:
        assert h.pool.release(s)
    assert h.pool.in_flight() == 0


def test_reconfigure_lowering_caps_below_what_is_held() -> None:
    h = Harness(routing())
    taken = h.fill("heavy")
    assert len(taken) == 8
    h.pool.reconfigure(routing(accountConcurrency=4))
    assert h.pool.try_acquire(Ticket("light")) is None
    status = served(pool_status.status(h.pool))
    assert (status["usedCapacity"], status["inLimits"], status["aboveLimits"]) == (8, 4, 4)
    assert status["utilization"] == 1.0  # never above 100%: the 4 held above the new cap are said apart

    def give_back(model: str) -> None:
        assert h.pool.release(taken.pop(next(i for i, s in enumerate(taken) if s.model == model)))

    for model in ["glm-4.7"] * 3 + ["glm-4.6"]:
        give_back(model)
    assert h.pool.try_acquire(Ticket("light")) is None  # 4 held, cap 4
    give_back("glm-4.6")
    assert h.pool.try_acquire(Ticket("light")) is not None


def test_capacity_counts_only_slots_a_request_can_use() -> None:
    """glm-4.5-x out of rotation with every other slot full: 26/26, its 2 slots shown apart (issue 13)."""
    h = Harness(routing())
    assert h.pool.acquire("glm-4.5-x")
    assert h.pool.error("glm-4.5-x", h.error("1113")) == math.inf
    h.fill("light")
    status = served(pool_status.status(h.pool))
    assert status["totalCapacity"] == 26
    assert status["usedCapacity"] == 27  # every slot held, the one finishing on glm-4.5-x included
    assert status["utilization"] == 1.0
    why = "no balance or model not in plan (1113)"
    assert status["outCapacity"] == {"slots": 2, "inFlight": 1, "models": {"glm-4.5-x": why}}
    assert status["models"]["glm-4.5-x"]["usable"] is False
    assert status["models"]["glm-4.7"]["usable"] is True


@pytest.mark.parametrize(
    ("block", "model", "why"),
    [
        ({"chaosMode": {"excludeModels": ["glm-4.5"]}}, "glm-4.5", "excluded (chaosMode.excludeModels)"),
        ({"chaosMode": {"includeFreeModels": False}}, "glm-4.5-flash", "free models off"),
        ({"chaosMode": {"qualityFloor": {"light": "MEDIUM"}}}, "glm-4.7-flashx", "below every quality floor"),
    ],
)
def test_a_model_no_tier_may_use_is_not_usable_capacity(block: dict[str, Any], model: str, why: str) -> None:
    h = Harness(routing(**block))
    status = served(pool_status.status(h.pool))
    out = status["outCapacity"]
    assert why in out["models"][model]
    assert status["totalCapacity"] == 28 - out["slots"]
    assert out["slots"] == sum(h.pool.config.models[name].max_concurrency for name in out["models"])


def test_reconfigure_dropping_a_model_that_is_held() -> None:
    h = Harness(routing())
    slot = h.pool.acquire("glm-4.5-x")
    assert slot is not None
    small = routing(models={"glm-4.7": {"tier": "HEAVY", "maxConcurrency": 3}})
    h.pool.reconfigure(small)
    status = served(pool_status.status(h.pool))
    assert status["models"]["glm-4.5-x"]["inFlight"] == 1
    assert status["models"]["glm-4.5-x"]["capacity"] == 0
    assert status["totalCapacity"] == 3
    assert status["outCapacity"]["models"] == {"glm-4.5-x": "not in the catalog (dropped by a reload)"}
    assert h.pool.release(slot) is True
    assert h.pool.in_flight() == 0


STATUS_KEYS = {
    "enabled",
    "strategy",
    "models",
    "totalCapacity",
    "usedCapacity",
    "inLimits",
    "aboveLimits",
    "outCapacity",
    "utilization",
    "accountPause",
    "queue",
    "sticky",
    "spuriousReleases",
    "accountLimit",
    "account",
    "learning",
}
MODEL_KEYS = {
    "aboveLimit",
    "probes",
    "overdue",
    "tier",
    "dispatched",
    "inFlight",
    "capacity",
    "cooldownRemaining",
    "outOfRotation",
    "cooldownReason",
    "excluded",
    "free",
    "usable",
    "catalogLimit",
    "learnedLimit",
    "limitCeiling",
    "limitReason",
    "limitChangedAt",
    "probing",
    "aliases",
    "vision",
}


def test_status() -> None:
    h = Harness(chaos(enabled=True, strategy="round-robin"))
    idle = served(pool_status.status(h.pool))
    assert set(idle) == STATUS_KEYS
    assert idle["enabled"] is True
    assert idle["strategy"] == "round-robin"
    assert list(idle["models"]) == ALL
    assert idle["totalCapacity"] == 28
    assert (idle["usedCapacity"], idle["utilization"], idle["accountPause"]) == (0, 0.0, None)
    assert idle["outCapacity"] == {"slots": 0, "inFlight": 0, "models": {}}
    assert idle["queue"] == {
        "waiting": 0,
        "waitingByTier": {"heavy": 0, "medium": 0, "light": 0},
        "longestWait": 0.0,
        "timeouts": 0,
        "admitted": 0,
        "rejected": 0,
        "avgWaitMs": 0.0,
    }
    for name, model in idle["models"].items():
        assert set(model) == MODEL_KEYS
        assert model["capacity"] == CAPS[name]
        assert model["free"] is (name in FREE)
        assert model["tier"] == h.pool.config.models[name].tier
    h.fill("medium")
    busy = served(pool_status.status(h.pool))
    assert busy["usedCapacity"] == 23
    assert busy["utilization"] == round(23 / 28, 4)
    assert busy["models"]["glm-4.5"] | {} == {
        "tier": "MEDIUM",
        "dispatched": 10,
        "inFlight": 10,
        "capacity": 10,
        "aboveLimit": 0,
        "probes": 0,
        "overdue": 0,
        "cooldownRemaining": 0.0,
        "outOfRotation": None,
        "cooldownReason": None,
        "excluded": False,
        "free": False,
        "usable": True,
        "aliases": [],
        "vision": False,
        "catalogLimit": 10,
        "learnedLimit": 10,
        "limitCeiling": 40,
        "limitReason": "catalog",
        "limitChangedAt": None,
        "probing": False,
    }
    json.dumps(busy)  # serialisable as it is


def test_a_model_leaving_rotation_and_coming_back_is_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(routing())
    caplog.set_level("INFO", logger="chaos_mode")
    for _ in range(3):  # requests in flight refused alike: one line
        h.pool.error("glm-4.5-x", h.error("1113"))
    h.pool.error("glm-4.5", h.error("1304"))  # until the next Beijing midnight, an hour away
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "chaos-mode: glm-4.5-x leaves rotation: no balance or model not in plan (1113),"
        " until the proxy restarts",
        "chaos-mode: glm-4.5 leaves rotation: daily call limit (1304), until 2026-03-01 16:00 UTC",
    ]
    caplog.clear()
    h.advance(3600.0)
    h.fill("light")
    h.fill("light")
    assert [r.getMessage() for r in caplog.records] == [
        "chaos-mode: glm-4.5 is back in rotation (was out: daily call limit (1304))"
    ]
    caplog.clear()
    h.pool.restore("glm-4.5-x")
    assert [r.getMessage() for r in caplog.records] == [
        "chaos-mode: glm-4.5-x is back in rotation (was out: no balance or model not in plan (1113))"
    ]


def test_a_tier_whose_every_model_is_out_for_good_is_a_dead_end() -> None:
    h = Harness(routing())
    assert h.pool.dead_end("heavy") is None
    for model in HEAVY[:-1]:
        h.pool.error(model, h.error("1113"))
    h.pool.error(HEAVY[-1], h.error("1304"))  # until tomorrow: waiting fixes it
    assert h.pool.dead_end("heavy") is None
    h.pool.error(HEAVY[-1], h.error("1311"))
    reason = h.pool.dead_end("heavy")
    assert reason == (
        "every model a heavy request may use is out of rotation ("
        f"{', '.join(HEAVY[:-1])}: no balance or model not in plan (1113);"
        f" {HEAVY[-1]}: model not in plan (1311))"
    )
    assert h.pool.dead_end("medium") is None  # the medium models serve it
    h.pool.restore(HEAVY[0])
    assert h.pool.dead_end("heavy") is None
