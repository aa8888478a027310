"""The pool's pacing (`quota.pace`): the plan in force (`quota.pacing`), worked out again at most once a
`PACE_EVERY`, from the forecast, the mean in flight and whether a lighter model is left to prefer; the
window it was engaged in (it stays engaged until that window resets); the waits it caused."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from chaos_mode.quota.concurrency import MeanConcurrency
from chaos_mode.quota.pacing import NOT_PACED, PacePlan, pace
from chaos_mode.quota.tracker import QuotaTracker

PACE_EVERY: Final = 1.0  # seconds: the plan is worked out at most this often (the forecast is not cheap)
PACE_SAME_WINDOW: Final = 2.0  # seconds: two resets this close are one window (z.ai's and a 1308's differ)


class Pacer:
    """Pacing's state for one pool. Off (`on` False) it costs the pool one attribute read per selection."""

    def __init__(
        self, tracker: QuotaTracker, clock: Callable[[], float], wall_clock: Callable[[], float]
    ) -> None:
        self._tracker = tracker
        self._clock = clock
        self._wall_clock = wall_clock
        self.on = False
        self._weights: Mapping[str, float] = {}
        self._plan: PacePlan = NOT_PACED
        self._planned_at = -math.inf
        self._window: float | None = None  # the reset of the window pacing was engaged in
        self._concurrency = MeanConcurrency(clock)
        self._tiers: dict[int, str] = {}  # the request tier of each held slot (its quality floor)
        self.waits = 0  # requests that waited because the paced concurrency was in flight

    def reconfigure(self, on: bool, weights: Mapping[str, float]) -> None:
        self.on = on
        self._weights = weights
        self._concurrency.horizon = self._tracker.horizon
        self._planned_at = -math.inf

    def weight(self, model: str) -> float:
        return self._weights.get(model, 1.0)

    def plan(self, lighter_left: Callable[[Mapping[int, str]], bool]) -> PacePlan:
        """The plan in force (NOT_PACED while off); `lighter_left(tiers)` says, from the held slots' tiers,
        whether a request in flight is served by a model heavier than the lightest its floor admits."""
        if not self.on:
            return NOT_PACED
        now = self._clock()
        if now - self._planned_at >= PACE_EVERY:
            self._planned_at = now
            forecast = self._tracker.forecast()
            window = forecast.resets_at if forecast is not None else None
            engaged = (
                window is not None
                and self._window is not None
                and abs(window - self._window) < PACE_SAME_WINDOW
            )
            self._plan = pace(
                forecast,
                now=self._wall_clock(),
                concurrency=self._concurrency.mean(),
                lighter_left=lighter_left(self._tiers),
                engaged=engaged,
            )
            self._window = window if self._plan.prefer_lower_weight else None
        return self._plan

    def capped(self, in_flight: int) -> bool:
        """Whether the plan in force (as last worked out) lets no more requests be in flight."""
        cap = self._plan.max_concurrency if self.on else None
        return cap is not None and in_flight >= cap

    def lightest(self, names: Sequence[str]) -> list[int]:
        """The indexes of the lightest of `names` by quotaWeight."""
        weights = [self.weight(name) for name in names]
        low = min(weights)
        return [i for i, w in enumerate(weights) if w == low]

    def taken(self, slot_id: int, tier: str | None, in_flight: int) -> None:
        if self.on:
            if tier is not None:
                self._tiers[slot_id] = tier
            self._concurrency.level(in_flight)

    def released(self, slot_id: int, in_flight: int) -> None:
        self._tiers.pop(slot_id, None)
        if self.on:
            self._concurrency.level(in_flight)

    def status(self, lighter_left: Callable[[Mapping[int, str]], bool]) -> dict[str, Any]:
        plan = self.plan(lighter_left)
        return {
            "enabled": self.on,
            "preferLowerWeight": plan.prefer_lower_weight,
            "maxConcurrency": plan.max_concurrency,
            "reason": plan.reason if self.on else "quota.pace is off",
            "pacedWaits": self.waits,
        }
