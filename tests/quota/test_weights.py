"""The factor of the assumed credit weights, learned from z.ai's currentValue against the answers counted:
alone, in the tracker, and against a z.ai whose true factor is drawn (a property)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.quota.reading import QuotaReading, WindowReading
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.quota.weights import LEARN_FROM, AssumedScale
from chaos_mode.zai.quota import WEEK, WEEK_SECONDS
from support.fakes import FakeClock

T0 = 1_700_000_000.0


def test_the_rise_less_the_known_credits_over_the_assumed_ones() -> None:
    scale = AssumedScale()
    scale.read(100.0, same=False)
    scale.charged(30.0, assumed=False)
    scale.charged(100.0, assumed=True)  # by the heaviest weights: really 50
    assert scale.factor is None  # one reading: no rise yet
    scale.read(180.0, same=True)
    assert scale.factor == 0.5


def test_a_pair_across_a_reset_and_too_few_assumed_credits_say_nothing() -> None:
    scale = AssumedScale()
    scale.read(500.0, same=False)
    scale.charged(200.0, assumed=True)
    scale.read(20.0, same=False)  # a new window: its currentValue started again
    assert scale.factor is None and scale.assumed == 0.0
    scale.charged(LEARN_FROM - 1, assumed=True)
    scale.read(20.0 + LEARN_FROM - 1, same=True)
    assert scale.factor is None  # too few to say
    scale.charged(1.0, assumed=True)
    scale.read(20.0 + LEARN_FROM, same=True)
    assert scale.factor == 1.0


@given(
    st.floats(min_value=0.1, max_value=3.0),
    st.lists(st.lists(st.tuples(st.floats(0.0, 40.0), st.booleans()), max_size=8), min_size=2, max_size=30),
)
def test_against_a_zai_of_whole_credits_the_factor_is_within_a_credit(
    truth: float, rounds: list[list[tuple[float, bool]]]
) -> None:
    """z.ai charges the assumed models `truth` times the heaviest weights and shows whole credits: the
    ratio of totals is off by less than one credit over the assumed credits counted."""
    scale, spent = AssumedScale(), 3.7
    scale.read(math.floor(spent), same=False)
    for answers in rounds:
        for credits, assumed in answers:
            scale.charged(credits, assumed=assumed)
            spent += credits * truth if assumed else credits
        scale.read(math.floor(spent), same=True)
    if scale.assumed < LEARN_FROM:
        assert scale.factor is None
    else:
        assert scale.factor is not None
        assert abs(scale.factor - truth) <= 1 / scale.assumed + 1e-9


def week(used: float) -> QuotaReading:
    row = WindowReading(WEEK, WEEK_SECONDS, used / 100, T0 + 86400, 10000.0, used, 10000.0 - used)
    return QuotaReading((row,))


def test_the_tracker_learns_it_with_a_key_and_counts_by_it_without() -> None:
    clock = FakeClock(T0)
    tracker = QuotaTracker(lambda _: 1.0, clock)
    tracker.reconfigure(lambda _: 1.0, poll_seconds=60.0, unit="credits")
    tracker.reader = "on"
    tracker.read(week(10.0))
    tracker.charged("glm-5.3", 20.0)
    tracker.charged("glm-5.3-flash", 100.0, assumed=True)  # served at a quarter of the heaviest's weights
    tracker.read(week(55.0))
    assert tracker.status()["estimate"]["assumedScale"] == 0.25
    tracker.reader = "off"  # the key is gone: the estimate counts credits, the flash model's scaled
    tracker.charged("glm-5.3-flash", 40.0, assumed=True)
    estimate = tracker.status()["estimate"]
    assert estimate["units"] == pytest.approx(10.0) and estimate["assumedWeights"] == ["glm-5.3-flash"]
