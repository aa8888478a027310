"""LevelEvidence: one limit's estimator, level by level, against the shapes z.ai takes in the field: a hard
limit, noise, a soft band, a limit that moves. Pure: time is a number passed in."""

from __future__ import annotations

import math
import random
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.learning.evidence import MEMORY, NOISE, LevelEvidence, chance_of_as_many

COST = 3.0  # a refusal's cost in slot-times, as on the benchmark (3 s refusals, 1-s requests)
FADE = 600.0


def fill(evidence: LevelEvidence, level: int, count: int, *, refused: bool = False, now: float = 0.0) -> None:
    for _ in range(count):
        evidence.observe(level, refused=refused, now=now)


@given(st.integers(1, 40), st.integers(0, 40), st.floats(0.001, 0.999))
def test_the_chance_of_as_many_refusals_is_the_binomial_tail(refused: int, clean: int, rate: float) -> None:
    total = refused + clean
    tail = sum(comb(total, k) * rate**k * (1 - rate) ** (total - k) for k in range(refused, total + 1))
    assert chance_of_as_many(refused, total, rate) == pytest.approx(tail, rel=1e-6, abs=1e-12)


def test_the_chance_of_as_many_refusals_at_the_edges() -> None:
    assert chance_of_as_many(0.0, 10.0, 0.2) == 1.0  # no refusal: nothing to explain
    assert chance_of_as_many(1.0, 2.0, 0.0) == 0.0
    assert chance_of_as_many(1.0, 2.0, 1.0) == 1.0
    assert chance_of_as_many(1.0, 2.0, NOISE) > 0.05  # one refusal and the prior: chance, at any level
    assert chance_of_as_many(2.0, 3.0, NOISE) < 0.01  # two: not
    assert chance_of_as_many(0.5, 2.0, 0.1) > chance_of_as_many(1.0, 2.0, 0.1)  # a shared refusal: less


def test_with_no_evidence_the_catalog_is_the_limit_and_the_account_has_none() -> None:
    assert LevelEvidence(3, 12, FADE).limit(0.0, COST) == 3
    assert LevelEvidence(None, 40, FADE).limit(0.0, COST) is None
    assert LevelEvidence(20, 40, FADE).limit(0.0, COST) == 20  # a configured account limit


def test_a_hard_limit_under_the_catalog_is_found_at_its_second_refusal() -> None:
    """glm-4.7 takes 2, not 3: z.ai never served 3 of it, and refuses the third. One refusal may be chance
    (z.ai refuses a few percent anywhere); two in a row at a level nobody was served at are not."""
    evidence = LevelEvidence(3, 12, FADE)
    fill(evidence, 1, 5)
    fill(evidence, 2, 5)
    evidence.observe(3, refused=True, now=1.0)
    assert evidence.limit(1.0, COST) == 3
    evidence.observe(3, refused=True, now=1.5)
    assert evidence.limit(1.5, COST) == 2


@settings(max_examples=200, deadline=None)
@given(
    served=st.lists(st.integers(0, 2 * MEMORY), min_size=12, max_size=12),
    at=st.integers(1, 13),
    cost=st.floats(0.05, 20.0),
    later=st.sampled_from([1.0, 60.0]),
)
def test_one_refusal_alone_never_moves_a_limit(served: list[int], at: int, cost: float, later: float) -> None:
    """Whatever z.ai served before (nothing at all, or some levels), one refusal anywhere is chance. Later,
    it refuses no level either (the clean answers it contradicts fade: rule 1, not a refused level)."""
    evidence = LevelEvidence(6, 12, FADE)
    for level, count in enumerate(served, start=1):
        fill(evidence, level, count)
    before = evidence.limit(0.0, cost)
    evidence.observe(at, refused=True, now=0.0)
    assert evidence.limit(0.0, cost) == before
    assert evidence.refused_level(cost, evidence._weights(later)) is None


def test_one_refusal_among_the_clean_answers_of_a_level_moves_nothing() -> None:
    evidence = LevelEvidence(10, 40, FADE)
    for level in range(1, 11):
        fill(evidence, level, MEMORY)
    evidence.observe(10, refused=True, now=1.0)
    assert evidence.limit(1.0, COST) == 10
    evidence.observe(4, refused=True, now=1.0)  # far under the top: its rate, pooled with the levels above
    assert evidence.limit(1.0, COST) == 10


@pytest.mark.parametrize("later", [0.0, 1.0, 5.0])
def test_one_refusal_under_a_limit_that_fell_does_not_drag_it_down_with_the_refusals_above(
    later: float,
) -> None:
    """A full pool at 10 hears its clean answers at its top. z.ai halves the limit: refusals at 6 to 10, and
    one at 4 (another limit's, or chance), where nothing else was heard. Refusals above a level say nothing
    of it: the limit is 5, not 3 (from where only a probe, paced, could bring it back)."""
    evidence = LevelEvidence(10, 40, FADE)
    for level in range(8, 11):
        fill(evidence, level, MEMORY)
    for level in range(6, 11):
        fill(evidence, level, 2, refused=True, now=later)
    evidence.observe(4, refused=True, now=later)
    assert evidence.limit(later, COST) == 5
    evidence.observe(4, refused=True, now=later)  # twice at 4: not chance
    assert evidence.limit(later, COST) == 3


@settings(max_examples=200, deadline=None)
@given(
    served=st.integers(3, 3 * MEMORY),
    at=st.integers(1, 11),
    cost=st.floats(0.05, 20.0),
)
def test_an_isolated_refusal_at_a_level_served_cleanly_moves_a_confirmed_limit_at_most_one_step(
    served: int, at: int, cost: float
) -> None:
    """z.ai served every level up to 10 (each `served` times: at least three, its memory full or not), then
    refuses once."""
    evidence = LevelEvidence(10, 40, FADE)
    for level in range(1, 11):
        fill(evidence, level, served)
    evidence.observe(at, refused=True, now=1.0)
    assert evidence.limit(1.0, cost) in (9, 10)


def test_noise_a_full_pool_sees_keeps_the_limit_at_the_catalog_nearly_all_the_time() -> None:
    """A pool that sends at its limit (and probes one above it now and then) under 3% random refusals at
    every level: the limit spends 85% of the time or more where it was, and comes back when it falls."""
    for seed in range(20):
        rng = random.Random(seed)
        evidence = LevelEvidence(10, 40, FADE)
        for level in range(1, 11):  # the first burst: every level answered once
            evidence.observe(level, refused=False, now=0.0)
        at_catalog = 0
        for step in range(1, 2001):
            now = step * 0.05
            value = evidence.limit(now, COST)
            assert value is not None
            at_catalog += value == 10
            level = value + 1 if rng.random() < 0.1 else value
            evidence.observe(level, refused=level > 10 or rng.random() < 0.03, now=now)
        assert at_catalog >= 0.85 * 2000, seed


def test_a_band_that_rises_is_refused_where_it_stops_paying() -> None:
    """Clean to 8, then refused ever more often: 3 in 10 at 9, 6 in 10 at 10. Over ten seeds, the limit
    is 8 at least half the time once the band is known (now and then a run of clean answers at 9 looks like
    it pays), and 10 hardly ever."""
    limits: dict[int, int] = {}
    for seed in range(10):
        evidence = LevelEvidence(10, 40, FADE)
        rng = random.Random(seed)
        for level in range(1, 9):
            fill(evidence, level, MEMORY)
        for step in range(400):
            level = rng.choice((9, 10))
            evidence.observe(level, refused=rng.random() < (level - 8) * 0.3, now=step * 0.1)
            if step >= 200:
                value = evidence.limit(step * 0.1, COST) or 0
                limits[value] = limits.get(value, 0) + 1
    assert set(limits) <= {8, 9, 10}
    assert limits[8] >= 0.5 * 2000
    assert limits.get(10, 0) <= 0.01 * 2000


def test_a_limit_that_fell_is_followed_down_and_back_up() -> None:
    evidence = LevelEvidence(10, 40, FADE)
    for level in range(1, 11):
        fill(evidence, level, MEMORY)
    for _ in range(3):  # z.ai now refuses at 6 and above
        for level in range(6, 11):
            evidence.observe(level, refused=True, now=1.0)
    assert evidence.limit(1.0, COST) == 5
    for _ in range(MEMORY):  # and then serves 6 again (probes at 6, answered)
        evidence.observe(6, refused=False, now=2.0)
    assert evidence.limit(2.0, COST) >= 6


def test_what_was_learned_fades_back_to_the_catalog() -> None:
    evidence = LevelEvidence(3, 12, FADE)
    fill(evidence, 1, 2)
    fill(evidence, 2, 2)
    fill(evidence, 3, 2, refused=True)
    assert evidence.limit(0.0, COST) == 2
    assert evidence.limit(10 * FADE, COST) == 3
    climbed = LevelEvidence(3, 12, FADE)
    fill(climbed, 6, 3)  # z.ai served 6 at once
    assert climbed.limit(0.0, COST) == 6
    assert climbed.limit(10 * FADE, COST) == 3


def test_a_cheap_refusal_tolerates_more() -> None:
    """Long answers (a refusal costs a tenth of a slot's time) pay for a refusal rate short ones do not."""
    evidence = LevelEvidence(10, 40, FADE)
    for level in range(1, 10):
        fill(evidence, level, MEMORY)
    for index in range(2 * MEMORY):  # a level's memory full: one refusal in three
        evidence.observe(10, refused=index % 3 == 0, now=1.0)
    assert evidence.limit(1.0, COST) == 9
    assert evidence.limit(1.0, 0.1) == 10


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(1, 12),
    events=st.lists(st.tuples(st.integers(-3, 60), st.booleans(), st.floats(0.0, 1.0)), max_size=80),
)
def test_a_limit_never_leaves_zero_and_the_ceiling(start: int, events: list[tuple[int, bool, float]]) -> None:
    evidence = LevelEvidence(start, 4 * start, FADE)
    now = 0.0
    for level, refused, weight in events:
        now += 1.0
        evidence.observe(level, refused=refused, now=now, weight=weight)
        value = evidence.limit(now, COST)
        assert value is not None and 0 <= value <= evidence.ceiling


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), true=st.integers(2, 12))
def test_driven_by_a_hard_limit_it_settles_at_the_limit(seed: int, true: int) -> None:
    """A pool that sends at its limit and probes one above it now and then settles where the answers
    per second are most: the true limit (above it every request is refused)."""
    rng = random.Random(seed)
    evidence = LevelEvidence(6, 24, FADE)
    now = 0.0
    for _ in range(600):
        now += 0.05
        value = evidence.limit(now, COST)
        assert value is not None
        level = value + 1 if rng.random() < 0.1 else rng.randint(max(value - 1, 1), max(value, 1))
        evidence.observe(level, refused=level > true, now=now)
    assert evidence.limit(now, COST) == true


def replay(events: list[tuple[int, bool, float, float]], start: int | None) -> tuple[LevelEvidence, float]:
    """A limit fed `events` (level, refused, seconds since the last one, weight): the evidence, the time."""
    evidence = LevelEvidence(start, 12, FADE)
    now = 0.0
    for level, refused, later, weight in events:
        now += later
        evidence.observe(level, refused=refused, now=now, weight=weight)
    return evidence, now


def as_bound(limit: int | None) -> float:
    return math.inf if limit is None else limit  # no limit known bounds nothing


EVENTS = st.lists(
    st.tuples(
        st.integers(1, 8),
        st.booleans(),
        st.sampled_from([0.0, 0.0, 0.0, 0.1, 1.0, 4.0, 60.0, 900.0]),  # one instant, or fading by time
        st.sampled_from([1.0, 1.0, 0.5, 0.2]),  # a refusal shared with another limit counts in part
    ),
    max_size=40,
)


@settings(max_examples=1000, deadline=None)
@given(
    events=EVENTS,
    at=st.integers(0, 40),
    level=st.integers(1, 8),
    refused=st.booleans(),
    weight=st.sampled_from([1.0, 0.5]),
    start=st.sampled_from([None, 3, 6]),
    cost=st.sampled_from([0.5, 3.0, 10.0]),
    later=st.sampled_from([0.0, 2.0, 300.0]),
)
def test_a_refusal_never_raises_a_limit_and_a_clean_answer_never_lowers_one(
    events: list[tuple[int, bool, float, float]],
    at: int,
    level: int,
    refused: bool,
    weight: float,
    start: int | None,
    cost: float,
    later: float,
) -> None:
    """One more verdict anywhere in a history (memory, fading and contradicted words included), read at its
    end or later: a refusal leaves the limit where it was or lower, a clean answer where it was or higher."""
    at = min(at, len(events))
    without, now = replay(events, start)
    extra = (level, refused, 0.0, weight)
    with_it, _ = replay([*events[:at], extra, *events[at:]], start)
    before, after = as_bound(without.limit(now + later, cost)), as_bound(with_it.limit(now + later, cost))
    assert after <= before if refused else after >= before


@settings(max_examples=200, deadline=None)
@given(
    served=st.lists(st.integers(0, 2 * MEMORY), min_size=12, max_size=12),
    at=st.integers(1, 13),
    cost=st.floats(0.05, 20.0),
    apart=st.sampled_from([0.0, 1.0, 30.0]),
)
def test_two_refusals_at_a_level_never_served_move_the_limit_under_it(
    served: list[int], at: int, cost: float, apart: float
) -> None:
    """z.ai served the levels under `at` (any number of times) and never `at` or above: two refusals there
    are a limit, whatever a refusal costs (a level never served is held to `UNSERVED`)."""
    evidence = LevelEvidence(13, 13, FADE)
    for level, count in enumerate(served[: at - 1], start=1):
        fill(evidence, level, count)
    evidence.observe(at, refused=True, now=0.0)
    evidence.observe(at, refused=True, now=apart)
    limit = evidence.limit(apart, cost)
    assert limit is not None and limit < at
