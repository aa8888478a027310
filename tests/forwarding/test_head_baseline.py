"""HeadBaseline: each model's quickest recent heads at its lowest concurrency, and the stall read against
them."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.forwarding.head_baseline import (
    ENOUGH,
    PER_LEVEL,
    RANK,
    STALL_FACTOR,
    STALL_FLOOR_SECONDS,
    WINDOW_SECONDS,
    HeadBaseline,
)
from support.fakes import FakeClock


def test_nothing_is_known_of_a_model_before_its_first_head() -> None:
    baseline = HeadBaseline(clock=FakeClock())
    assert baseline.quickest("a") is None and baseline.stall_after("a") is None
    baseline.seen("a", 0.3)
    assert baseline.quickest("a") == 0.3 and baseline.quickest("b") is None


def test_the_stall_is_a_multiple_of_the_quickest_heads_never_under_its_floor() -> None:
    """The baseline is the third quickest head: two odd quick ones (a cached answer) set nothing."""
    assert RANK == 2
    baseline = HeadBaseline(clock=FakeClock())
    for seconds in (0.45, 0.01, 0.3, 0.02, 0.2, 0.4):
        baseline.seen("a", seconds)
    assert baseline.stall_after("a") == pytest.approx(STALL_FACTOR * 0.2)
    for _ in range(3):
        baseline.seen("b", 0.001)
    assert baseline.stall_after("b") == STALL_FLOOR_SECONDS


def test_heads_held_one_above_a_limit_do_not_hide_the_model_s_own_pace() -> None:
    """A proxy kept one above a limit of 2 has every head at level 3 held until a slot frees: however many
    of them come, the quickest heads at levels 1 and 2 (none held) stay the baseline."""
    clock = FakeClock()
    baseline = HeadBaseline(clock=clock)
    for seconds in (0.3, 0.2, 0.25):
        baseline.seen("a", seconds, level=1)
    baseline.seen("a", 0.25, level=2)
    for _ in range(10 * PER_LEVEL):
        clock.advance(0.5)
        baseline.seen("a", 0.4, level=3)
    assert baseline.quickest("a") == 0.25


def test_a_model_with_few_heads_at_its_low_levels_reads_every_model_s_too() -> None:
    """A model kept at a low limit is rarely served at a lower level: until it has had `ENOUGH` heads under
    its highest level, the quickest heads of every model count too (never to its disfavour: the lower)."""
    baseline = HeadBaseline(clock=FakeClock())
    for _ in range(ENOUGH):
        baseline.seen("fast", 0.1, level=1)
    baseline.seen("a", 0.3, level=1)
    for _ in range(PER_LEVEL):
        baseline.seen("a", 0.6, level=3)  # one above its limit: each held
    assert baseline.quickest("a") == 0.1
    for _ in range(ENOUGH):
        baseline.seen("a", 0.3, level=2)  # enough of its own, unheld: its own pace
    assert baseline.quickest("a") == 0.3
    for _ in range(ENOUGH):
        baseline.seen("one", 0.4, level=1)  # a model only ever alone on itself reads its own
    assert baseline.quickest("one") == 0.4


def test_higher_levels_count_only_until_enough_heads_are_read() -> None:
    baseline = HeadBaseline(clock=FakeClock())
    for _ in range(ENOUGH):
        baseline.seen("a", 0.3, level=2)
    baseline.seen("a", 0.1, level=5)  # quicker, but above ENOUGH heads at lower levels
    assert baseline.quickest("a") == 0.3
    sparse = HeadBaseline(clock=FakeClock())
    sparse.seen("a", 0.3, level=1)
    for _ in range(3):
        sparse.seen("a", 0.1, level=5)  # too few heads at the lowest levels: the next level counts
    assert sparse.quickest("a") == 0.1


def test_a_model_that_slowed_reads_its_new_pace_once_it_serves_at_a_low_level_again() -> None:
    clock = FakeClock()
    baseline = HeadBaseline(clock=clock)
    baseline.seen("a", 0.1, level=1)
    clock.advance(10 * WINDOW_SECONDS)
    assert baseline.quickest("a") == 0.1  # kept full meanwhile: what it knew stands
    baseline.seen("a", 0.5, level=1)
    assert baseline.quickest("a") == 0.5  # the old head is outside the window of the newest


def test_a_larger_prompt_s_baseline_is_stretched_by_the_seconds_per_byte() -> None:
    baseline = HeadBaseline(clock=FakeClock())
    baseline.seen("a", 0.2, size=1000)
    assert baseline.quickest("a", 3000, per_byte=1e-4) == pytest.approx(0.4)
    assert baseline.quickest("a", 500, per_byte=1e-4) == 0.2  # never earlier for a smaller one
    assert baseline.quickest("a", None, per_byte=1e-4) == 0.2


def test_odd_input_is_bounded() -> None:
    baseline = HeadBaseline(clock=FakeClock())
    baseline.seen("a", -1.0, level=-5)  # a clock step backwards, a level that makes no sense
    baseline.seen("a", 0.2, level=10**9)
    assert baseline.quickest("a") == 0.2  # the slowest of too few


heads_at_levels = st.lists(
    st.tuples(st.floats(0, 60), st.integers(1, 12), st.floats(0, 30)), min_size=1, max_size=80
)


@given(heads=heads_at_levels)
def test_at_most_rank_heads_at_the_lowest_level_in_its_window_are_quicker_than_the_baseline(
    heads: list[tuple[float, int, float]],
) -> None:
    clock = FakeClock()
    baseline = HeadBaseline(clock=clock)
    seen: list[tuple[float, int, float]] = []  # (when, level, seconds)
    for seconds, level, gap in heads:
        clock.advance(gap)
        baseline.seen("a", seconds, level)
        seen.append((clock.now, level, seconds))
    lowest = min(level for _, level, _ in seen)
    kept = [(at, seconds) for at, level, seconds in seen if level == lowest][-PER_LEVEL:]
    window = [seconds for at, seconds in kept if at >= clock.now - WINDOW_SECONDS]
    quickest = baseline.quickest("a")
    assert quickest is not None and quickest >= 0
    assert sum(seconds < quickest for seconds in window) <= RANK


@given(seed=st.integers(0, 10**6), base=st.floats(0.01, 5), heads=st.integers(1, 300))
def test_a_stationary_service_never_reads_as_a_stall(seed: int, base: float, heads: int) -> None:
    """Heads that z.ai never holds, each its model's service time drawn as the simulator draws it (uniform
    within +-50% of a mean: the slowest three times the quickest, under `STALL_FACTOR`), at any level:
    none of them is a stall, however they come."""
    rng = random.Random(seed)
    clock = FakeClock()
    baseline = HeadBaseline(clock=clock)
    for _ in range(heads):
        clock.advance(rng.uniform(0, 2))
        seconds = base * rng.uniform(0.5, 1.5)
        after = baseline.stall_after("a")
        assert after is None or seconds < after
        baseline.seen("a", seconds, rng.randint(1, 8))


@given(seed=st.integers(0, 10**6), sigma=st.floats(0.1, 0.3))
def test_a_stationary_heavier_tailed_service_reads_as_a_stall_at_a_bounded_rate(
    seed: int, sigma: float
) -> None:
    """Service times of a lognormal law (sigma up to 0.3): at most 1 head in 100 reads as a stall (about 1
    in 3,000 at 0.3)."""
    rng = random.Random(seed)
    clock = FakeClock()
    baseline = HeadBaseline(clock=clock)
    stalls = 0
    total = 500
    for _ in range(total):
        clock.advance(rng.uniform(0, 1))
        seconds = 0.3 * rng.lognormvariate(0, sigma)
        after = baseline.stall_after("a")
        if after is not None and seconds >= after:
            stalls += 1
        else:
            baseline.seen("a", seconds, rng.randint(1, 4))
    assert stalls <= total // 100
