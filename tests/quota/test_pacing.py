"""The pacing rule: nothing while the quota lasts; lighter models first; then a concurrency that spends
the window to the target at its reset."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.forecast import Forecast
from chaos_mode.quota.pacing import NOT_PACED, TARGET_PERCENT, affordable_burn, pace

HOUR = 3600.0
NOW = 1_700_000_000.0


def running_out(used: float = 50.0, burn: float = 50.0, hours_left: float = 2.0) -> Forecast:
    return Forecast(used, NOW + hours_left * HOUR, burn, NOW + (100 - used) / burn * HOUR)


def test_a_quota_that_lasts_is_not_paced() -> None:
    assert pace(None, now=NOW, concurrency=20, lighter_left=True) is NOT_PACED
    lasting = Forecast(10.0, NOW + HOUR, 5.0, None)
    assert pace(lasting, now=NOW, concurrency=20, lighter_left=False) is NOT_PACED


def test_lighter_models_first() -> None:
    plan = pace(running_out(), now=NOW, concurrency=20, lighter_left=True)
    assert plan.prefer_lower_weight and plan.max_concurrency is None


def test_then_fewer_at_once_to_end_the_window_nearly_spent() -> None:
    """50% left for 2 hours at 50%/h: it affords (97-50)/2 = 23.5%/h, so 20 * 23.5 / 50 = 9 at once."""
    plan = pace(running_out(), now=NOW, concurrency=20, lighter_left=False)
    assert plan.prefer_lower_weight
    assert plan.max_concurrency == 9
    assert affordable_burn(50.0, now=NOW, resets_at=NOW + 2 * HOUR) == pytest.approx(
        (TARGET_PERCENT - 50) / 2
    )


def test_never_below_one_at_once() -> None:
    plan = pace(running_out(used=99.0, burn=500.0), now=NOW, concurrency=3, lighter_left=False)
    assert plan.max_concurrency == 1


def test_no_reset_known_only_prefers_lighter_models() -> None:
    unknown = Forecast(50.0, None, 50.0, NOW + HOUR)
    assert pace(unknown, now=NOW, concurrency=20, lighter_left=False).max_concurrency is None


@given(st.floats(min_value=1, max_value=96), st.floats(min_value=1, max_value=500), st.integers(1, 200))
def test_the_cap_affords_no_more_than_the_rest_of_the_window(
    used: float, burn: float, concurrency: int
) -> None:
    forecast = running_out(used=used, burn=burn, hours_left=3.0)
    if forecast.runs_out_at is not None and forecast.runs_out_at >= NOW + 3 * HOUR:
        forecast = Forecast(used, NOW + 3 * HOUR, burn, None)
    plan = pace(forecast, now=NOW, concurrency=concurrency, lighter_left=False)
    if plan.max_concurrency is None:
        assert forecast.runs_out_at is None
        return
    allowed = affordable_burn(used, now=NOW, resets_at=NOW + 3 * HOUR)
    # at the same burn per request, the capped concurrency burns at most what is affordable (or one request)
    assert plan.max_concurrency == 1 or plan.max_concurrency * burn / concurrency <= allowed + 1e-9


def test_engaged_in_this_window_the_cap_stays_worked_out_once_it_lasts() -> None:
    """The cap made the quota last: pacing goes on capping at the burn per request, not off and on."""
    lasting = Forecast(70.0, NOW + 2 * HOUR, 10.0, None)  # 10 %/h with the cap of 2 in force
    assert pace(lasting, now=NOW, concurrency=2.0, lighter_left=False) is NOT_PACED
    plan = pace(lasting, now=NOW, concurrency=2.0, lighter_left=False, engaged=True)
    assert plan.max_concurrency == 2  # (97 - 70) / 2 h = 13.5 %/h affordable at 5 %/h a request
