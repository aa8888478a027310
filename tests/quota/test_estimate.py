"""The proxy's own count of the window: weights, the window's life, the scale learned from a 1308."""

from __future__ import annotations

import itertools

import pytest

from chaos_mode.quota.estimate import SAMPLE_EVERY, TrafficEstimate
from chaos_mode.zai.quota import WINDOW_SECONDS

T0 = 1_700_000_000.0


def weights(model: str) -> float:
    return {"glm-5": 3.0}.get(model, 1.0)


def test_counts_by_weight_and_says_no_percent_before_a_scale() -> None:
    estimate = TrafficEstimate()
    estimate.answered("glm-4.7", weights("glm-4.7"), T0)
    estimate.answered("glm-5", weights("glm-5"), T0 + 1)
    assert estimate.units == 4.0
    assert estimate.by_model == {"glm-4.7": 1.0, "glm-5": 3.0}
    assert estimate.used_percent(T0 + 2) is None
    assert estimate.samples(T0 + 2) == []
    assert (estimate.start, estimate.end) == (T0, T0 + WINDOW_SECONDS)


def test_a_1308_learns_the_scale_and_ends_the_window_at_its_reset() -> None:
    estimate = TrafficEstimate()
    for i in range(40):
        estimate.answered("glm-4.7", weights("glm-4.7"), T0 + i * 10)
    reset = T0 + 3600
    estimate.spent(T0 + 400, reset)
    assert estimate.scale == 40.0
    assert estimate.used_percent(T0 + 400) == 100.0
    assert estimate.used_percent(reset) == 0.0  # a new window: nothing counted yet
    estimate.answered("glm-4.7", weights("glm-4.7"), reset + 10)
    assert estimate.used_percent(reset + 10) == pytest.approx(2.5)
    assert estimate.end == reset + 10 + WINDOW_SECONDS


def test_a_window_ends_after_five_hours() -> None:
    estimate = TrafficEstimate()
    estimate.answered("glm-4.7", weights("glm-4.7"), T0)
    estimate.answered("glm-4.7", weights("glm-4.7"), T0 + WINDOW_SECONDS)  # the first of the next window
    assert estimate.units == 1.0 and estimate.start == T0 + WINDOW_SECONDS


def test_zai_calibrates_the_scale_only_when_it_says_enough() -> None:
    estimate = TrafficEstimate()
    for i in range(10):
        estimate.answered("glm-4.7", weights("glm-4.7"), T0 + i)
    estimate.calibrate(5.0, T0 + 10)
    assert estimate.scale is None
    estimate.calibrate(20.0, T0 + 10)
    assert estimate.scale == 50.0
    assert estimate.used_percent(T0 + 10) == pytest.approx(20.0)


def test_answers_close_together_share_one_sample() -> None:
    estimate = TrafficEstimate()
    estimate.spent(T0, None)  # no scale from an empty window
    assert estimate.scale is None
    estimate.calibrate(100.0, T0)
    for i in range(100):
        estimate.answered("glm-4.7", weights("glm-4.7"), T0 + i * 0.1)
    estimate.calibrate(10.0, T0 + 10)
    times = [t - T0 for t, _ in estimate.samples(T0 + 10)]
    assert times[0] == 0.0 and times[-1] == pytest.approx(9.9)  # the first, and the latest
    kept = times[:-1]
    assert all(b - a >= SAMPLE_EVERY - 0.1 - 1e-6 for a, b in itertools.pairwise(kept))
    assert len(times) <= 4
