"""ProbePatience: how long an unanswered probe is waited for before a slot within the limits replaces it."""

from __future__ import annotations

import pytest

from chaos_mode.patience import ENOUGH, FLOOR_SECONDS, KEEP, ProbePatience


def test_no_patience_before_enough_heads_were_seen() -> None:
    patience = ProbePatience()
    for _ in range(ENOUGH - 1):
        patience.head(0.01)
        assert patience.seconds() is None  # how fast z.ai sends its heads is not known yet
    patience.head(0.01)
    assert patience.seconds() == FLOOR_SECONDS


@pytest.mark.parametrize(
    ("heads", "expected"),
    [
        ([0.01] * ENOUGH, FLOOR_SECONDS),  # fast heads: the floor
        ([0.1] * (ENOUGH - 1) + [1.5], 3.0),  # twice the slowest recent head
        ([5.0] + [0.1] * KEEP, FLOOR_SECONDS),  # a slow head long ago no longer counts
        ([-1.0] * ENOUGH, FLOOR_SECONDS),  # a clock step backwards is not a negative head time
    ],
)
def test_patience_is_twice_the_slowest_recent_head(heads: list[float], expected: float) -> None:
    patience = ProbePatience()
    for seconds in heads:
        patience.head(seconds)
    assert patience.seconds() == pytest.approx(expected)


def test_a_fixed_patience_is_kept() -> None:
    patience = ProbePatience(fixed=0.0)
    patience.head(3.0)
    assert patience.seconds() == 0.0
