"""The pool's pacing (`quota.pace`): the plan in force (`quota.pacing`), worked out again at most once a
`PACE_EVERY` for each window the tracker knows (the 5-hour one from the budget, else the forecast; any
other from its forecast; each with an end game before its reset), the tightest binding, from the mean in
flight and whether a lighter model is left to prefer; the window instance each was engaged in (it stays
engaged until that window resets); the hard stop (no request whose weight is over the budget, worked out
at each request; none while a window read in credits is spent as the proxy counts it,
`tracker.credits_left`); the waits it caused.

The hard stop needs the budget (`tracker.budget`), which counts this proxy's requests only: with a fleet
sharing the account (`alone` False) there is none, and the plan aims at `pacing.TARGET_PERCENT`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from chaos_mode.quota.concurrency import MeanConcurrency
from chaos_mode.quota.pacing import (
    NOT_PACED,
    PacePlan,
    Spend,
    pace,
    spend_of_budget,
    spend_of_forecast,
    tightest,
)
from chaos_mode.quota.tracker import SAME_WINDOW, Budget, QuotaTracker
from chaos_mode.zai.quota import FIVE_HOURS

PACE_EVERY: Final = 1.0  # seconds: the plan is worked out at most this often (the forecast is not cheap)
ENDGAME_ROUNDS: Final = 3  # the end game: this many polls of the quota and requests (its readings settle
# what was in flight), and a request for each prompt of the window's last percent (a reading there says
# only that not all is used: the hard stop lets go a prompt a reading); at most ENDGAME_SHARE of the window
ENDGAME_SHARE: Final = 0.2
SMOOTHING: Final = 0.2  # weight of the latest request in the mean time a request holds its slot


class Pacer:
    """Pacing's state for one pool. Off (`on` False) it costs the pool two calls per selection."""

    def __init__(
        self, tracker: QuotaTracker, clock: Callable[[], float], wall_clock: Callable[[], float]
    ) -> None:
        self._tracker = tracker
        self._clock = clock
        self._wall_clock = wall_clock
        self.on = False
        self.alone = True  # no other proxy shares the account's slots (a fleet's do)
        self._weights: Mapping[str, float] = {}
        self._lightest = 1.0
        self._plan: PacePlan = NOT_PACED
        self._planned_at = -math.inf
        self._engaged: dict[str, tuple[float, bool]] = {}  # by window: the instance engaged in (`_spend`)
        self._concurrency = MeanConcurrency(clock)
        self._tiers: dict[int, str] = {}  # the request tier of each held slot (its quality floor)
        self._taken_at: dict[int, float] = {}  # when each held slot was taken
        self.request_seconds = 0.0  # the mean time a request held its slot
        self.waits = 0  # requests that waited because of pacing: its concurrency in flight, or the hard stop

    def reconfigure(self, on: bool, weights: Mapping[str, float]) -> None:
        self.on = on
        self._weights = weights
        self._lightest = min(weights.values(), default=1.0)
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
            plans, engaged_in = [], {}
            concurrency, lighter = self._concurrency.mean(), lighter_left(self._tiers)
            for name in self._tracker.windows():
                spend, window = self._spend(name)
                was = self._engaged.get(name)
                engaged = (
                    window is not None
                    and was is not None
                    and window[1] == was[1]
                    and abs(window[0] - was[0]) < SAME_WINDOW
                )
                plan = pace(
                    spend,
                    now=self._wall_clock(),
                    concurrency=concurrency,
                    lighter_left=lighter,
                    engaged=engaged,
                )
                if plan.prefer_lower_weight and window is not None:
                    engaged_in[name] = window
                plans.append(replace(plan, window=name) if plan is not NOT_PACED else plan)
            self._engaged, self._plan = engaged_in, tightest(plans)
        return self._plan

    def _spend(self, name: str) -> tuple[Spend | None, tuple[float, bool] | None]:
        """(what is left of the window `name` and its burn, (the reset of its instance, whether the
        budget's)): the 5-hour window's budget, else the forecast's once the window is half a horizon old
        (a younger one's burn is its first burst)."""
        tracker, now = self._tracker, self._wall_clock()
        budget = self.budget() if name == FIVE_HOURS else None
        if budget is not None:
            burn = tracker.estimate.burn(now, tracker.horizon)
            request = self._concurrency.mean() / burn * 3600 if burn > 0 else 0.0  # seconds (Little's law)
            last_percent = budget.total / 100 / self._lightest
            endgame = ENDGAME_ROUNDS * (tracker.poll_seconds + request) + last_percent * request
            endgame = min(endgame, ENDGAME_SHARE * tracker.window_seconds)
            spend = spend_of_budget(budget.likely, burn, now=now, resets_at=budget.resets_at, endgame=endgame)
            return spend, (budget.resets_at, True)
        forecast = tracker.forecast(name)
        if forecast is None or forecast.resets_at is None:
            return (None if forecast is None else spend_of_forecast(forecast)), None
        seconds = tracker.seconds_of(name)
        start = forecast.resets_at - seconds
        if now < start + tracker.horizon_of(name) / 2:
            return None, None
        endgame = min(ENDGAME_ROUNDS * (tracker.poll_seconds + self.request_seconds), ENDGAME_SHARE * seconds)
        spend = spend_of_forecast(forecast, now=now, start=start, endgame=endgame)
        return spend, (forecast.resets_at, False)

    def budget(self) -> Budget | None:
        """What may still be sent this window (None: not known, or a fleet's: no hard stop)."""
        return self._tracker.budget() if self.alone else None

    def left(self) -> float | None:
        """The weight the hard stop lets go now (None: no hard stop)."""
        budget = self.budget() if self.on else None
        return None if budget is None else budget.left

    def affords(self, model: str) -> bool:
        """Whether the hard stop lets a request on `model` go: its weight within the budget."""
        left = self.left()
        return left is None or left >= self.weight(model)

    def spent(self) -> bool:
        """Whether pacing holds every request because a window read in credits is spent as the proxy
        counts it (`tracker.credits_left`): z.ai would refuse it (1308, 1310)."""
        tracker = self._tracker
        if not self.on:
            return False
        lefts = (tracker.credits_left(name) for name in tracker.windows())
        return any(left is not None and left <= 0 for left in lefts)

    def _held(self) -> Budget | None:
        """The budget while the hard stop holds even the lightest model, else None."""
        budget = self.budget() if self.on else None
        return budget if budget is not None and budget.left < self._lightest else None

    def held_until(self) -> float | None:
        """The reset (unix s) while the hard stop holds every model and nothing can lift it before: the
        budget settled below the lightest weight. None otherwise."""
        held = self._held()
        return held.resets_at if held is not None and held.settled else None

    def lifts_in(self) -> float | None:
        """Seconds until the waiters may go: the reset while the hard stop holds every model, else the
        return to an even pace while the plan holds every request (None: neither holds)."""
        held = self._held()
        if held is not None:
            return max(held.resets_at - self._wall_clock(), 0.0)
        back_at = self._plan.back_at if self.on and self._plan.max_concurrency == 0 else None
        return None if back_at is None else max(back_at - self._wall_clock(), PACE_EVERY)

    def drained(self) -> None:
        """A request ended: while the hard stop holds, the reading that may lift it is asked for now."""
        if self._held() is not None:
            self._tracker.ask_soon()

    def capped(self, in_flight: int) -> bool:
        """Whether pacing lets no more requests be in flight: the plan in force (as last worked out) or
        the hard stop."""
        cap = self._plan.max_concurrency if self.on else None
        held = self._held() is not None or self.spent()
        return (cap is not None and in_flight >= cap) or held

    def lightest(self, names: Sequence[str]) -> list[int]:
        """The indexes of the lightest of `names` by quotaWeight."""
        weights = [self.weight(name) for name in names]
        low = min(weights)
        return [i for i, w in enumerate(weights) if w == low]

    def taken(self, slot_id: int, tier: str | None, in_flight: int) -> None:
        if self.on:
            if tier is not None:
                self._tiers[slot_id] = tier
            self._taken_at[slot_id] = self._clock()
            self._concurrency.level(in_flight)

    def released(self, slot_id: int, in_flight: int) -> None:
        self._tiers.pop(slot_id, None)
        taken_at = self._taken_at.pop(slot_id, None)
        if taken_at is not None:
            held, mean = self._clock() - taken_at, self.request_seconds
            self.request_seconds = held if mean == 0 else mean + SMOOTHING * (held - mean)
        if self.on:
            self._concurrency.level(in_flight)

    def status(self, lighter_left: Callable[[Mapping[int, str]], bool]) -> dict[str, Any]:
        plan = self.plan(lighter_left)
        budget = self.budget() if self.on else None
        return {
            "enabled": self.on,
            "preferLowerWeight": plan.prefer_lower_weight,
            "maxConcurrency": plan.max_concurrency,
            "budget": None if budget is None else round(max(budget.left, 0.0), 2),
            "reason": plan.reason if self.on else "quota.pace is off",
            "window": plan.window if self.on else None,
            "pacedWaits": self.waits,
        }
