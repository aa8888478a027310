"""Selection strategies: least-loaded, round-robin, weighted-random, and the name registry."""

from __future__ import annotations

import random
from collections import Counter
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.config.schema import StrategyName
from chaos_mode.routing.strategies import (
    STRATEGIES,
    LeastLoaded,
    ModelEntry,
    RoundRobin,
    WeightedRandom,
    make_strategy,
)


def entry(name: str, index: int, capacity: int, cost: float = 1.0) -> ModelEntry:
    return ModelEntry(
        name=name, index=index, capacity=capacity, base_cost=cost, input_price=cost, output_price=0.0
    )


def costs_of(candidates: list[ModelEntry]) -> list[float]:
    return [e.base_cost for e in candidates]


# -- least-loaded ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "in_flight", "costs", "expected"),
    [
        ([3, 10, 5], [1, 2, 4], [1, 1, 1], 1),  # scores 0.67, 0.8, 0.2
        ([3, 10, 5], [0, 9, 0], [9, 1, 1], 2),  # 1.0 vs 1.0: cost decides; 0.1 loses
        ([10, 5], [0, 0], [2.8, 1.3], 1),  # the design's glm-4.5 vs glm-4.5-air: lower cost wins
        ([3, 10, 5], [0, 0, 0], [1, 1, 1], 1),  # same score and cost: higher maxConcurrency
        ([1, 3], [0, 2], [0, 0], 0),  # score beats both cost and capacity
        ([10, 1], [5, 0], [0, 5], 1),  # 0.5 vs 1.0: the expensive free model wins on score
        ([4, 2], [1, 0], [0, 0], 1),  # 0.75 vs 1.0
        ([1, 2], [3, 5], [0, 0], 1),  # held over twice the limit (slots riding above it): -2.0 vs -1.5
    ],
)
def test_least_loaded_picks(caps: list[int], in_flight: list[int], costs: list[float], expected: int) -> None:
    candidates = [entry(f"m{i}", i, cap, cost) for i, (cap, cost) in enumerate(zip(caps, costs, strict=True))]
    assert LeastLoaded().pick(candidates, in_flight, costs) == expected


@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(0, 60), st.sampled_from([0.0, 1.0, 2.5])), min_size=1)
)
def test_least_loaded_always_picks_one_of_the_candidates(rows: list[tuple[int, int, float]]) -> None:
    """Whatever is held: a candidate may hold more than its limit while slots ride above it."""
    candidates = [entry(f"m{i}", i, cap, cost) for i, (cap, _, cost) in enumerate(rows)]
    strategy = LeastLoaded()
    for _ in range(3):
        assert 0 <= strategy.pick(candidates, [held for _, held, _ in rows], costs_of(candidates)) < len(rows)


def test_least_loaded_exact_ties_rotate_fairly() -> None:
    strategy = LeastLoaded()
    candidates = [entry(n, i, 3) for i, n in enumerate("abc")] + [entry("dear", 3, 3, cost=2.0)]
    picks = Counter(
        candidates[strategy.pick(candidates, [0, 0, 0, 0], costs_of(candidates))].name for _ in range(300)
    )
    assert picks == {"a": 100, "b": 100, "c": 100}


def test_least_loaded_rotation_is_not_biased_to_the_first_model() -> None:
    strategy = LeastLoaded()
    candidates = [entry("a", 0, 2), entry("b", 1, 2)]
    first = [candidates[strategy.pick(candidates, [0, 0], [1, 1])].name for _ in range(4)]
    assert sorted(first) == ["a", "a", "b", "b"]
    assert first[0] != first[1]


def test_least_loaded_ties_stay_fair_when_two_tie_groups_alternate() -> None:
    # Opus and haiku requests alternating on an idle pool: {glm-4.7, glm-4.6} tie for heavy,
    # {glm-4.7-flash, glm-4.5-flash} tie for light. Each group must rotate within itself.
    strategy = LeastLoaded()
    heavy = [entry("glm-4.7", 0, 3, 2.8), entry("glm-4.6", 1, 3, 2.8)]
    light = [entry("glm-4.7-flash", 6, 1, 0.0), entry("glm-4.5-flash", 7, 1, 0.0)]
    picks: Counter[str] = Counter()
    for _ in range(100):
        for group in (heavy, light):
            picks[group[strategy.pick(group, [0, 0], costs_of(group))].name] += 1
    assert picks == {"glm-4.7": 50, "glm-4.6": 50, "glm-4.7-flash": 50, "glm-4.5-flash": 50}


# -- round-robin ----------------------------------------------------------------------------------


def test_round_robin_rotates_in_catalog_order() -> None:
    strategy = RoundRobin()
    candidates = [entry(n, i, 1) for i, n in enumerate("abcd")]
    picks = [candidates[strategy.pick(candidates, [0] * 4, [1] * 4)].name for _ in range(9)]
    assert picks == list("abcdabcda")


def test_round_robin_skips_models_missing_from_the_candidates() -> None:
    strategy = RoundRobin()
    a, b, c, d = (entry(n, i, 1) for i, n in enumerate("abcd"))
    sequence = [[a, b, c, d], [a, c, d], [a, b, d], [a, b, c], [b, c], [a, b, c, d]]
    picks = [cands[strategy.pick(cands, [0] * len(cands), [1] * len(cands))].name for cands in sequence]
    # a; b is full -> c; next after c is d; wraps to a; after a comes b; after b comes c.
    assert picks == ["a", "c", "d", "a", "b", "c"]


def test_round_robin_ignores_load_and_cost() -> None:
    strategy = RoundRobin()
    candidates = [entry("a", 0, 10, cost=100.0), entry("b", 1, 1, cost=0.0)]
    picks = [candidates[strategy.pick(candidates, [9, 0], [100.0, 0.0])].name for _ in range(4)]
    assert picks == ["a", "b", "a", "b"]


def test_round_robin_follows_the_catalog_index_not_the_list_order() -> None:
    strategy = RoundRobin()
    candidates = [entry("c", 2, 1), entry("a", 0, 1), entry("b", 1, 1)]
    picks = [candidates[strategy.pick(candidates, [0] * 3, [1] * 3)].name for _ in range(4)]
    assert picks == ["a", "b", "c", "a"]


# -- weighted-random ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "in_flight", "expected"),
    [
        ([6, 3, 1], [0, 0, 0], [0.6, 0.3, 0.1]),
        ([10, 5, 3], [7, 0, 1], [0.3, 0.5, 0.2]),  # weights 3, 5, 2
        ([3, 3, 1], [0, 3, 0], [0.75, 0.0, 0.25]),  # a full model is never picked
    ],
)
def test_weighted_random_is_proportional_to_free_slots(
    caps: list[int], in_flight: list[int], expected: list[float]
) -> None:
    strategy = WeightedRandom(random.Random(1234))
    candidates = [entry(f"m{i}", i, cap) for i, cap in enumerate(caps)]
    draws = 20_000
    counts = Counter(strategy.pick(candidates, in_flight, costs_of(candidates)) for _ in range(draws))
    for i, share in enumerate(expected):
        assert counts[i] / draws == pytest.approx(share, abs=0.015)
        if share == 0.0:
            assert counts[i] == 0


def test_weighted_random_is_reproducible_with_a_seed() -> None:
    candidates = [entry(f"m{i}", i, cap) for i, cap in enumerate([3, 3, 2, 10])]

    def run(seed: int) -> list[int]:
        strategy = WeightedRandom(random.Random(seed))
        return [strategy.pick(candidates, [0, 1, 0, 4], costs_of(candidates)) for _ in range(50)]

    assert run(7) == run(7)
    assert run(7) != run(8)


# -- registry -------------------------------------------------------------------------------------


def test_registry_keys_are_the_config_values() -> None:
    assert set(STRATEGIES) == set(get_args(StrategyName))
    for name, cls in STRATEGIES.items():
        assert cls.name == name


@pytest.mark.parametrize(
    ("name", "cls"),
    [("least-loaded", LeastLoaded), ("round-robin", RoundRobin), ("weighted-random", WeightedRandom)],
)
def test_make_strategy(name: str, cls: type) -> None:
    strategy = make_strategy(name, random.Random(0))
    assert isinstance(strategy, cls)
    assert strategy.name == name


def test_make_strategy_gives_a_fresh_instance() -> None:
    assert make_strategy("least-loaded", random.Random(0)) is not make_strategy(
        "least-loaded", random.Random(0)
    )


@pytest.mark.parametrize("name", ["fastest", "", "Least-Loaded", "least_loaded"])
def test_make_strategy_unknown_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown strategy .*least-loaded, round-robin, weighted-random"):
        make_strategy(name, random.Random(0))
