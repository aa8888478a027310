"""Exploration: the pace of one limit's probes, and the change detector whose firing says z.ai moved."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.learning.explore import TRIAL, Detector, Exploration, Pace, rose_together
from chaos_mode.zai.assumptions import NOISE

HOUR_OF_VERDICTS = 7200  # a level answering two verdicts a second, as a full pool's top level does


@settings(max_examples=20, deadline=None)
@given(rate=st.floats(0.0, 0.05), seed=st.integers(0, 2**16))
def test_a_step_fires_the_detector_within_a_few_verdicts(rate: float, seed: int) -> None:
    """A level served (a few percent refused, as noise) for 200 verdicts, then refused every time (a limit
    halved): the rise fires within eight verdicts. (Right after a firing the rates start over from the
    prior, and a step then takes longer: not the case measured here.)"""
    rng = random.Random(seed)
    detector, served = Detector(), 0
    while served < 200:
        served += 1
        if detector.verdict(3, rng.random() < rate):
            detector, served = Detector(), 0  # a false alarm: the level's rate starts over
    for _ in range(8):
        if detector.verdict(3, True) == 1:
            break
    else:
        raise AssertionError("the step was not detected within 8 verdicts")


def test_a_restore_after_a_move_fires_at_the_first_clean_answer() -> None:
    """Refused since z.ai moved, a level answered cleanly once (a probe): while z.ai moved lately, that is
    a fall at once; otherwise it takes a second clean answer."""
    for moved, answers in ((True, 1), (False, 2)):
        detector = Detector()
        for _ in range(8):
            detector.verdict(3, True, moved=moved)
        fired = [detector.verdict(3, False, moved=moved) for _ in range(answers)]
        assert fired[-1] == -1 and fired[:-1] == [0] * (answers - 1)


@settings(max_examples=200, deadline=None)
@given(
    verdicts=st.lists(st.tuples(st.integers(1, 3), st.booleans()), max_size=80),
    last=st.tuples(st.integers(1, 3), st.booleans()),
)
def test_a_refusal_never_says_a_limit_was_restored_nor_a_clean_answer_that_it_fell(
    verdicts: list[tuple[int, bool]], last: tuple[int, bool]
) -> None:
    """Whatever came before (levels served, refused, a fall under test elsewhere), a refusal never adds to
    the evidence of a restore, and a clean answer never to that of a fall."""
    detector = Detector()
    for level, refused in verdicts:
        detector.verdict(level, refused)
    level, refused = last
    before = detector.rise, detector.fall
    detector.verdict(level, refused)
    assert (detector.fall if refused else detector.rise) <= before[refused]


def test_a_refusal_at_a_level_served_cleanly_does_not_feed_a_restore_under_test() -> None:
    """Level 1 served cleanly (its rate under z.ai's noise), level 3 refused and then answered once (a
    restore under test): a refusal at level 1 leaves that test where it was."""
    detector = Detector()
    for _ in range(30):
        detector.verdict(1, False)
    for _ in range(8):
        detector.verdict(3, True)
    detector.verdict(3, False)
    under_test = detector.fall
    assert 0.0 < under_test < 3.0
    assert detector.verdict(1, True) == 0 and detector.fall <= under_test


@settings(max_examples=10, deadline=None)
@given(rate=st.floats(0.1, 0.5), seed=st.integers(0, 2**16))
def test_a_stationary_band_fires_the_detector_under_once_an_hour(rate: float, seed: int) -> None:
    """Over eight hours (a false rise is often followed by a false restore a few verdicts later: an hour
    may hold two or three firings, the hours on average well under one; over four hours, 5 firings came
    once in about 200 seeds, over eight at most 7 in 900)."""
    rng = random.Random(seed)
    detector = Detector()
    fired = sum(detector.verdict(3, rng.random() < rate) != 0 for _ in range(8 * HOUR_OF_VERDICTS))
    assert fired <= 8


@settings(max_examples=30, deadline=None)
@given(refused=st.floats(0.2, 1.0), seed=st.integers(0, 2**16))
def test_under_a_stationary_z_ai_probes_per_minute_are_bounded_and_fall(refused: float, seed: int) -> None:
    """A limit at its true value in a z.ai that does not move: each probe refused at `refused`, and a level a
    probe opened lowered again (a band's luck). Probes go no more than one per base wait, and a later
    minute never sees more of them than an earlier one."""
    rng = random.Random(seed)
    pace = Pace(base=5.0, most=60.0, fade=600.0)
    explore = Exploration()
    probes = [0] * 10
    now = 0.0
    while now < 600.0:
        now = max(now, explore.due(pace))
        if now >= 600.0:
            break
        probes[int(now // 60.0)] += 1
        explore.probe_since = now
        if rng.random() < refused:
            explore.failed(now + 0.25, pace)
        else:
            explore.answered()
            explore.failed(now + 2.0, pace)  # the level it opened, refused again
        now += 0.25
    assert all(count <= 60.0 / pace.base for count in probes)
    assert probes[-1] <= probes[0]
    assert sorted(probes[1:], reverse=True) == probes[1:]


@settings(max_examples=80, deadline=None)
@given(
    top=st.integers(2, 20),
    move=st.integers(-5, 5).filter(bool),
    verdicts=st.lists(st.booleans(), max_size=3 * TRIAL),
)
def test_a_level_on_trial_closes_only_at_more_refusals_than_noise_explains(
    top: int, move: int, verdicts: list[bool]
) -> None:
    """A limit that moved to `top` (rose from under it, or fell from above: the catalog's value may lie in
    a band), then verdicts at its top: the level closes (held under it until a probe is answered above
    it, no probe for `most`) once its refusals pass what noise explains before `TRIAL` clean answers end
    the trial; later refusals are the estimator's."""
    pace, explore = Pace(base=5.0, most=60.0, fade=600.0), Exploration()
    assert explore.held(max(top - move, 1), top) == top
    clean = refusals = 0
    closed_at = None
    for i, refused in enumerate(verdicts):
        explore.verdict(10.0 + i, pace, top, top, refused=refused)
        if closed_at is None and clean < TRIAL:
            clean, refusals = clean + (not refused), refusals + refused
            closed_at = 10.0 + i if refusals > NOISE * TRIAL else None
    assert explore.held(top, top) == (top if closed_at is None else top - 1)
    if closed_at is not None:
        assert explore.due(pace) >= closed_at + pace.most
        explore.answered()
        assert explore.held(top - 1, top) == top


@settings(max_examples=40, deadline=None)
@given(
    top=st.integers(3, 20), before=st.lists(st.booleans(), max_size=TRIAL - 1), after=st.lists(st.booleans())
)
def test_a_fall_within_a_trial_keeps_its_count(top: int, before: list[bool], after: list[bool]) -> None:
    """A limit that rose to `top`, and fell back a level while its levels were on trial: the level left
    stays on trial with the answers and refusals counted so far (a band's level refused, lowered, then
    raised again by a clean answer would otherwise never close)."""
    pace, explore = Pace(base=5.0, most=60.0, fade=600.0), Exploration()
    explore.held(top - 2, top)  # top - 1 and top on trial
    expected, clean, refusals = None, 0, 0
    for i, refused in enumerate([*before, *after]):
        level = top if i < len(before) else top - 1
        if i == len(before):
            if explore.opened_from is None:
                break
            assert explore.held(top, top - 1) == top - 1  # the estimator lowered it a level
        explore.verdict(float(i), pace, level, level, refused=refused)
        clean, refusals = clean + (not refused), refusals + refused
        if expected is None and clean < TRIAL and refusals > NOISE * TRIAL:
            expected = level - 1
    assert explore.closed == expected


@settings(max_examples=40, deadline=None)
@given(start=st.integers(0, 6).filter(lambda n: n != 1), verdicts=st.lists(st.booleans(), max_size=3 * TRIAL))
def test_a_trial_never_closes_a_models_first_level(start: int, verdicts: list[bool]) -> None:
    """A limit that moved to 1 (rose from 0, or fell from above): however often z.ai refuses there, the
    trial never closes level 1, which would leave the model nothing to serve and no probe for `most` (the
    estimator lowers it to 0 when z.ai refuses nearly every request)."""
    pace, explore = Pace(base=5.0, most=60.0, fade=600.0), Exploration()
    assert explore.held(start, 1) == 1
    for i, refused in enumerate(verdicts):
        explore.verdict(10.0 + i, pace, 1, 1, refused=refused)
    assert explore.closed is None and explore.held(1, 1) == 1
    assert explore.due(pace) <= 10.0 + len(verdicts) + pace.base


@settings(max_examples=8, deadline=None)
@given(rate=st.floats(0.02, 0.5), seed=st.integers(0, 2**16))
def test_eight_stationary_bands_rise_together_about_as_seldom_as_one_alone(rate: float, seed: int) -> None:
    """Eight models in stationary bands for two hours, each level answering two verdicts a second: two of
    them rising together (`rose_together`) fire the plan's detection about as seldom as the eight detectors
    do alone (a CUSUM passes x about e^-x of the time: 28 pairs x 12e^-12 against 8e^-8)."""
    rng = random.Random(seed)
    detectors = [Detector() for _ in range(8)]
    alone = together = 0
    for index in range(2 * HOUR_OF_VERDICTS * 8):
        refused = rng.random() < rate
        if detectors[index % 8].verdict(3, refused):
            alone += 1
        elif refused and rose_together(detectors):
            together += 1
    assert together <= alone + 2
