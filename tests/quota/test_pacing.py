"""The pacing rule: nothing while the quota lasts; lighter models first; then a concurrency that spends
what is left by its time (z.ai's percent to the target at the reset, or the budget by the end game); in
the end game no cap."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.forecast import Forecast
from chaos_mode.quota.pacing import (
    NOT_PACED,
    TARGET_PERCENT,
    Spend,
    affordable_burn,
    pace,
    spend_of_budget,
    spend_of_forecast,
)

HOUR = 3600.0
NOW = 1_700_000_000.0


def running_out(used: float = 50.0, burn: float = 50.0, hours_left: float = 2.0) -> Spend:
    forecast = Forecast(used, NOW + hours_left * HOUR, burn, NOW + (100 - used) / burn * HOUR)
    return spend_of_forecast(forecast)


def test_a_quota_that_lasts_is_not_paced() -> None:
    assert pace(None, now=NOW, concurrency=20, lighter_left=True) is NOT_PACED
    lasting = spend_of_forecast(Forecast(10.0, NOW + HOUR, 5.0, None))
    assert pace(lasting, now=NOW, concurrency=20, lighter_left=False) is NOT_PACED


def test_lighter_models_first() -> None:
    plan = pace(running_out(), now=NOW, concurrency=20, lighter_left=True)
    assert plan.prefer_lower_weight and plan.max_concurrency is None


def test_then_fewer_at_once_to_end_the_window_nearly_spent() -> None:
    """50% left for 2 hours at 50%/h: it affords (97-50)/2 = 23.5%/h, so 20 * 23.5 / 50 = 9 at once."""
    spend = running_out()
    assert spend.left == TARGET_PERCENT - 50 and spend.until == NOW + 2 * HOUR
    plan = pace(spend, now=NOW, concurrency=20, lighter_left=False)
    assert plan.prefer_lower_weight
    assert plan.max_concurrency == 9
    assert affordable_burn(spend.left, now=NOW, until=NOW + 2 * HOUR) == (TARGET_PERCENT - 50) / 2


def test_never_below_one_at_once() -> None:
    plan = pace(running_out(used=99.0, burn=500.0), now=NOW, concurrency=3, lighter_left=False)
    assert plan.max_concurrency == 1


def test_no_reset_known_only_prefers_lighter_models() -> None:
    unknown = spend_of_forecast(Forecast(50.0, None, 50.0, NOW + HOUR))
    assert pace(unknown, now=NOW, concurrency=20, lighter_left=False).max_concurrency is None


def test_the_budget_is_spent_by_the_end_game_then_goes_at_once() -> None:
    """60 units left, 2 minutes to the reset, 20 s of end game, burning 3600 units an hour (1 a second,
    4 in flight): 60 units in 100 s affords 2160 an hour, so 4 x 0.6 -> 2 at once; in the end game none."""
    spend = spend_of_budget(60.0, 3600.0, now=NOW, resets_at=NOW + 120, endgame=20)
    assert spend.until == NOW + 100 and spend.runs_out  # 120 units at this burn: more than is left
    assert pace(spend, now=NOW, concurrency=4, lighter_left=False).max_concurrency == 2
    endgame = pace(spend, now=NOW + 100, concurrency=4, lighter_left=False)
    assert endgame.prefer_lower_weight and endgame.max_concurrency is None and "end game" in endgame.reason
    lasting = spend_of_budget(60.0, 600.0, now=NOW, resets_at=NOW + 120, endgame=20)
    assert not lasting.runs_out and pace(lasting, now=NOW, concurrency=4, lighter_left=False) is NOT_PACED


@given(st.floats(min_value=1, max_value=96), st.floats(min_value=1, max_value=500), st.floats(0.1, 200))
def test_the_cap_affords_no_more_than_the_rest_of_the_window(
    used: float, burn: float, concurrency: float
) -> None:
    """Below the affordable burn it never lowers the concurrency; above, at the same burn per request, the
    capped concurrency burns at most what is affordable (or one request)."""
    forecast = Forecast(used, NOW + 3 * HOUR, burn, NOW + (100 - used) / burn * HOUR)
    spend = spend_of_forecast(forecast)
    plan = pace(spend, now=NOW, concurrency=concurrency, lighter_left=False, engaged=True)
    cap = plan.max_concurrency
    assert cap is not None
    allowed = affordable_burn(spend.left, now=NOW, until=NOW + 3 * HOUR)
    if allowed >= burn:
        assert cap >= math.ceil(concurrency)
    else:
        assert cap == 1 or cap * burn / max(concurrency, 1.0) <= allowed + 1e-9


def test_engaged_in_this_window_the_cap_stays_worked_out_once_it_lasts() -> None:
    """The cap made the quota last: pacing goes on capping at the burn per request, not off and on."""
    lasting = spend_of_forecast(Forecast(70.0, NOW + 2 * HOUR, 10.0, None))  # 10 %/h with the cap of 2
    assert pace(lasting, now=NOW, concurrency=2.0, lighter_left=False) is NOT_PACED
    plan = pace(lasting, now=NOW, concurrency=2.0, lighter_left=False, engaged=True)
    assert plan.max_concurrency == 2  # (97 - 70) / 2 h = 13.5 %/h affordable at 5 %/h a request
