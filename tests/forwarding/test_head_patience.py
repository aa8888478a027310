"""HeadPatience: how long an unanswered attempt is waited for before a slot within the limits replaces it, and
when its wait is a stall."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.forwarding.head_baseline import STALL_FACTOR, STALL_FLOOR_SECONDS
from chaos_mode.forwarding.head_patience import (
    EARLY_FLOOR_SECONDS,
    ENOUGH,
    FACTOR,
    FLOOR_SECONDS,
    KEEP,
    QUEUE_MEMORY_SECONDS,
    UNKNOWN_STALL_SECONDS,
    HeadPatience,
)
from support.fakes import FakeClock


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
    assert slow.seconds() == pytest.approx(1.2)  # 1.5 times the heads' quartile, early too


@pytest.mark.parametrize(
    ("heads", "expected"),
    [
        ([0.01] * ENOUGH, FLOOR_SECONDS),  # fast heads: the floor
        ([0.1] * (ENOUGH - 1) + [0.3], 0.25),  # one slow head among fast ones: the quartile, not the slowest
        ([0.1] * 4 + [0.3] * 4, 0.45),  # 1.5 times the recent heads' upper quartile (none held: under 0.4)
        ([0.9] + [0.1] * KEEP, FLOOR_SECONDS),  # a slow head long ago no longer counts
        ([-1.0] * ENOUGH, FLOOR_SECONDS),  # a clock step backwards is not a negative head time
    ],
)
def test_patience_is_a_multiple_of_the_upper_quartile_of_recent_heads(
    heads: list[float], expected: float
) -> None:
    patience = HeadPatience()
    for seconds in heads:
        patience.head(seconds)
    assert patience.seconds() == pytest.approx(expected)


def test_a_fixed_patience_is_kept() -> None:
    patience = HeadPatience(fixed=0.0)
    patience.head(3.0)
    assert patience.seconds() == 0.0


def test_a_head_held_past_its_stall_says_z_ai_queues_and_no_attempt_is_left_meanwhile() -> None:
    clock = FakeClock()
    patience = HeadPatience(clock=clock)
    assert patience.stall_after() == UNKNOWN_STALL_SECONDS  # nothing known yet: a wide margin
    for _ in range(ENOUGH):
        patience.head(0.01)
    assert (patience.seconds(), patience.stall_after()) == (FLOOR_SECONDS, STALL_FLOOR_SECONDS)
    patience.head(2.5)  # held, then served: z.ai queued it
    assert patience.seconds() is None  # leaving a held request would throw away what z.ai is about to serve
    assert patience.stall_after() == STALL_FLOOR_SECONDS  # the held head does not stretch the patience
    clock.advance(QUEUE_MEMORY_SECONDS)
    assert patience.seconds() == FLOOR_SECONDS


def test_a_stall_is_measured_against_the_model_s_quickest_heads_at_its_lowest_levels() -> None:
    patience = HeadPatience()
    for _ in range(KEEP):
        patience.head(0.4, model="a")  # heads with the first token
    assert patience.stall_after(None, "a") == STALL_FACTOR * 0.4
    assert patience.stall_after(None, "b") == UNKNOWN_STALL_SECONDS  # each model's own
    held = HeadPatience()
    for _ in range(3):
        held.head(0.15, model="a", level=1)  # alone on its model: z.ai held nothing
    for _ in range(KEEP):
        held.head(0.5, model="a", level=3)  # one above a limit of 2: each held until a slot frees
    assert held.stall_after(None, "a") == STALL_FACTOR * 0.15
    for _ in range(KEEP):
        held.head(0.12, model="b", level=3)  # another model's heads do not count once "a" has enough
    for _ in range(ENOUGH):
        held.head(0.15, model="a", level=2)
    assert held.stall_after(None, "a") == STALL_FACTOR * 0.15


def test_a_larger_prompt_is_waited_for_as_its_prefill_would_take() -> None:
    """Heads with the first token come after the prompt was read: here z.ai's fixed 0.3 s and 0.1 s per
    1000 bytes. A prompt four times the largest seen gets the patience its own head needs (the part of each
    recent head above the quickest, stretched); no smaller prompt is shortened below the sizes' own."""
    patience = HeadPatience()
    for size in range(1000, 9000, 500):  # 16 heads of prompts of 1000 to 8500 bytes
        patience.head(0.3 + 0.1 * size / 1000, size)
    plain = patience.seconds()
    big = 4 * 8500
    own_head = 0.3 + 0.1 * big / 1000
    assert plain is not None and plain < own_head  # read without sizes: a head this late is a refusal
    assert (patience.seconds(big) or 0) >= FACTOR * own_head * 0.75  # read with them: it is not
    assert patience.stall_after(big) > own_head  # nor a stall
    assert patience.seconds(500) == plain and patience.stall_after(500) == patience.stall_after()


def test_heads_sent_at_once_give_a_large_prompt_no_more_patience() -> None:
    """Heads that come at once say nothing of the prompt's size: their times (jitter of 0.05 s) do not grow
    with it, and a prompt ten times the largest seen is waited for about as long as any (stretched in
    proportion instead, the jitter would have been stretched tenfold)."""
    rng = random.Random(1)
    patience = HeadPatience()
    for _ in range(KEEP):
        patience.head(0.05 + 0.05 * rng.random(), rng.randrange(1_000, 100_000))
    assert patience.seconds_per_byte() < 1e-7
    big = 1_000_000
    assert (patience.seconds(big) or 0) < 1.2 * (patience.seconds() or 0) + 0.1
    assert patience.stall_after(big) < 1.2 * patience.stall_after() + 0.1


@given(
    heads=st.lists(
        st.tuples(st.floats(0, 10), st.one_of(st.none(), st.integers(0, 10**7))), min_size=1, max_size=KEEP
    ),
    sizes=st.lists(st.integers(0, 10**8), min_size=2, max_size=2),
)
def test_patience_and_stall_never_fall_as_the_prompt_grows(
    heads: list[tuple[float, int | None]], sizes: list[int]
) -> None:
    patience = HeadPatience()
    for seconds, size in heads:
        patience.head(seconds, size)
    small, large = sorted(sizes)
    assert (patience.seconds(large) or 0) >= (patience.seconds(small) or 0)
    assert patience.stall_after(large) >= patience.stall_after(small)
    assert (patience.seconds(small) or 0) >= (patience.seconds(None) or 0) or patience.seconds() is None


def test_requests_a_few_bytes_apart_say_nothing_of_the_prefill() -> None:
    """Bodies a few bytes apart (an agent's number, a model's name), heads of +-50% jitter: read pairwise,
    their jitter over a few bytes gave 0.01 s a byte here, and a stall 0.4 s later 12 bytes up."""
    rng = random.Random(2)
    patience = HeadPatience()
    for _ in range(KEEP):
        patience.head(rng.uniform(0.15, 0.45), 300 + rng.randrange(12), model="a")
    assert patience.seconds_per_byte() == 0.0
    assert patience.stall_after(312, "a") == patience.stall_after(None, "a")
