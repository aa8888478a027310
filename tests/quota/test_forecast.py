"""The forecast: the burn over the last hour, used percent in bounds, runs out earlier the faster it burns."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.forecast import Forecast, burn_per_hour, forecast, runs_out_at

HOUR = 3600.0
START = 1_700_000_000.0
RESET = START + 5 * HOUR


def test_a_steady_pace_since_the_window_start() -> None:
    """20% after half an hour: 40% an hour, spent 2.5 hours into a 5-hour window."""
    now = START + 0.5 * HOUR
    seen = forecast([(now, 20.0)], now=now, window_start=START, resets_at=RESET)
    assert seen == Forecast(20.0, RESET, pytest.approx(40.0), pytest.approx(START + 2.5 * HOUR))


def test_a_quota_that_lasts_has_no_runs_out() -> None:
    now = START + 2 * HOUR
    seen = forecast([(now, 30.0)], now=now, window_start=START, resets_at=RESET)
    assert seen.burn_per_hour == pytest.approx(15.0)
    assert seen.runs_out_at is None


def test_the_burn_follows_the_last_hour_not_the_whole_window() -> None:
    """Fast for two hours, then slow: the last hour's pace decides."""
    samples = [(START + HOUR, 40.0), (START + 2 * HOUR, 80.0), (START + 3 * HOUR, 85.0)]
    now = START + 3 * HOUR
    assert burn_per_hour(samples, now=now, window_start=START) == pytest.approx(5.0)
    assert forecast(samples, now=now, window_start=START, resets_at=RESET).runs_out_at is None


def test_no_samples_or_no_time_is_no_burn() -> None:
    assert burn_per_hour([], now=START, window_start=None) == 0.0
    assert burn_per_hour([(START, 5.0)], now=START, window_start=None) == 0.0
    assert burn_per_hour([(START, 5.0)], now=START, window_start=START) == 0.0


def test_a_spent_window_runs_out_now() -> None:
    assert runs_out_at(100.0, 0.0, at=START, resets_at=RESET) == START


def test_with_no_reset_known_it_runs_out_at_the_pace() -> None:
    assert runs_out_at(50.0, 25.0, at=START, resets_at=None) == START + 2 * HOUR


percents = st.floats(min_value=-50, max_value=200, allow_nan=False)


@given(st.lists(st.tuples(st.floats(min_value=0, max_value=5 * HOUR), percents), max_size=20))
def test_used_is_within_0_and_100_and_burn_never_negative(points: list[tuple[float, float]]) -> None:
    samples = sorted((START + t, used) for t, used in points)
    seen = forecast(samples, now=START + 5 * HOUR, window_start=START, resets_at=RESET)
    assert 0 <= seen.used_percent <= 100
    assert seen.burn_per_hour >= 0


@given(
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=1000),
    st.floats(min_value=0, max_value=1000),
)
def test_runs_out_no_later_the_faster_it_burns(used: float, burn: float, more: float) -> None:
    def later(value: float | None) -> float:
        return float("inf") if value is None else value

    slow = runs_out_at(used, burn, at=START, resets_at=RESET)
    fast = runs_out_at(used, burn + more, at=START, resets_at=RESET)
    assert later(fast) <= later(slow)
