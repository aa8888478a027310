"""The mean in flight over the burn's horizon: time-weighted, forgetting what is older than the horizon."""

from __future__ import annotations

import pytest

from chaos_mode.quota.concurrency import MARK_EVERY, MeanConcurrency
from support.fakes import FakeClock


def test_the_mean_is_weighted_by_time() -> None:
    clock = FakeClock(0.0)
    mean = MeanConcurrency(clock, horizon=3600)
    assert mean.mean() == 0.0
    mean.level(8)
    clock.advance(30)
    mean.level(2)
    clock.advance(90)
    assert mean.mean() == pytest.approx((8 * 30 + 2 * 90) / 120)


def test_what_is_older_than_the_horizon_is_forgotten() -> None:
    clock = FakeClock(0.0)
    mean = MeanConcurrency(clock, horizon=100)
    mean.level(10)
    for _ in range(40):  # 200 s at 10, marks every MARK_EVERY
        clock.advance(MARK_EVERY)
        mean.mean()
    mean.level(1)
    for _ in range(40):  # then 200 s at 1: the 10s are past the horizon
        clock.advance(MARK_EVERY)
        mean.mean()
    assert mean.mean() == pytest.approx(1.0)
