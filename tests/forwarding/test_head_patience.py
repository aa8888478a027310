"""HeadPatience: how long an unanswered attempt is waited for before a slot within the limits replaces it."""

from __future__ import annotations

import pytest

from chaos_mode.forwarding.head_patience import EARLY_FLOOR_SECONDS, ENOUGH, FLOOR_SECONDS, KEEP, HeadPatience


def test_a_wider_margin_before_enough_heads_were_seen() -> None:
    patience = HeadPatience()
    assert patience.seconds() is None  # no head yet: how fast z.ai sends them is not known at all
    for _ in range(ENOUGH - 1):
        patience.head(0.01)
        assert patience.seconds() == EARLY_FLOOR_SECONDS  # barely known: a wide margin
    patience.head(0.01)
    assert patience.seconds() == FLOOR_SECONDS
    slow = HeadPatience()
    slow.head(0.8)
    assert slow.seconds() == pytest.approx(1.6)  # twice the slowest head, early too


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
    patience = HeadPatience()
    for seconds in heads:
        patience.head(seconds)
    assert patience.seconds() == pytest.approx(expected)


def test_a_fixed_patience_is_kept() -> None:
    patience = HeadPatience(fixed=0.0)
    patience.head(3.0)
    assert patience.seconds() == 0.0
