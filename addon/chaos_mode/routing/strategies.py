"""Selection strategies: a name -> policy registry whose keys are exactly the config's allowed values."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """What a strategy knows of a model: fixed for a given config."""

    name: str
    index: int  # position in the catalog: the round-robin order
    capacity: int
    base_cost: float  # input + output price per 1M tokens: the cost when there is no request
    input_price: float
    output_price: float


class Strategy(Protocol):
    """Pick one of `candidates` (all eligible and with a free slot, at least one)."""

    name: ClassVar[str]

    def pick(self, candidates: Sequence[ModelEntry], in_flight: Sequence[int], costs: Sequence[float]) -> int:
        """Return the index into `candidates` of the chosen model."""
        ...


class LeastLoaded:
    """Most free capacity relative to the limit: score = (max - inFlight) / max.

    Ties: lower cost, then higher maxConcurrency, then round-robin among the still-tied (no bias to
    the first model of the catalog).
    """

    name: ClassVar[str] = "least-loaded"

    _MAX_TIE_SETS = 1024

    def __init__(self) -> None:
        self._turns: dict[tuple[int, ...], int] = {}  # tie set (catalog indexes) -> its own rotation

    def pick(self, candidates: Sequence[ModelEntry], in_flight: Sequence[int], costs: Sequence[float]) -> int:
        best_score = -math.inf  # a model may hold more than its limit (slots riding above it)
        best_cost = best_cap = 0.0
        tied: list[int] = []
        for i, entry in enumerate(candidates):
            cap = entry.capacity
            score = (cap - in_flight[i]) / cap
            if score < best_score:
                continue
            cost = costs[i]
            if score == best_score:
                if cost > best_cost or (cost == best_cost and cap < best_cap):
                    continue
                if cost == best_cost and cap == best_cap:
                    tied.append(i)
                    continue
            best_score, best_cost, best_cap = score, cost, cap
            tied = [i]
        if len(tied) == 1:
            return tied[0]
        key = tuple(candidates[i].index for i in tied)
        if key not in self._turns and len(self._turns) >= self._MAX_TIE_SETS:
            self._turns.clear()
        turn = self._turns[key] = self._turns.get(key, 0) + 1
        return tied[turn % len(tied)]


class RoundRobin:
    """Strict rotation through the catalog order; full or ineligible models are skipped."""

    name: ClassVar[str] = "round-robin"

    def __init__(self) -> None:
        self._next = 0  # catalog index the rotation continues from

    def pick(self, candidates: Sequence[ModelEntry], in_flight: Sequence[int], costs: Sequence[float]) -> int:
        first_after: int | None = None
        lowest = 0
        for i, entry in enumerate(candidates):
            if entry.index < candidates[lowest].index:
                lowest = i
            if entry.index >= self._next and (
                first_after is None or entry.index < candidates[first_after].index
            ):
                first_after = i
        chosen = lowest if first_after is None else first_after
        self._next = candidates[chosen].index + 1
        return chosen


class WeightedRandom:
    """Random, weighted by free slots: P(model) = free(model) / sum(free). The RNG is injected."""

    name: ClassVar[str] = "weighted-random"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, candidates: Sequence[ModelEntry], in_flight: Sequence[int], costs: Sequence[float]) -> int:
        weights = [entry.capacity - in_flight[i] for i, entry in enumerate(candidates)]
        point = self._rng.random() * sum(weights)
        for i, weight in enumerate(weights):
            point -= weight
            if point < 0:
                return i
        return len(candidates) - 1


STRATEGIES: dict[str, type[LeastLoaded] | type[RoundRobin] | type[WeightedRandom]] = {
    LeastLoaded.name: LeastLoaded,
    RoundRobin.name: RoundRobin,
    WeightedRandom.name: WeightedRandom,
}


def make_strategy(name: str, rng: random.Random) -> Strategy:
    """Build the strategy the config names; `ValueError` for an unknown name."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None
    return cls(rng) if cls is WeightedRandom else cls()  # type: ignore[call-arg]
