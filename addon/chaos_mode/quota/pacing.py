"""The pacing rule: what the pool does when the quota would run out before the reset.

What is left and how fast it goes are one `Spend`, in one unit: once the window's readings bound it
(`tracker.budget`), the quotaWeight units that may still be sent, against the burn of the proxy's own
count, to be spent by an end-game margin before the reset; before that, z.ai's used percent against the
forecast's burn, aiming at `TARGET_PERCENT` by the reset (a whole percent that lags says too little to aim
at all of it: only the budget's hard stop, in `pacer`, may go to the last unit).

In order: (1) prefer models of a lower `quotaWeight` within the request's quality floor, as long as
lighter models are left to prefer; (2) once none is, admit fewer requests at once: the concurrency
scaled by the burn the rest affords over the burn now (at least one; none while even one burns more than
the rest affords and the window is ahead of an even pace from its start, `Spend.line`, until it is back
on it: a week is not spent in its first days by a single agent either). The concurrency is the mean in
flight over the burn's horizon, so a cap in force is not lowered again for the burn it inherited: in
force, the cap is what the rest affords at the burn per request, and it stays worked out so until the
window resets (`engaged`), even once the quota lasts (because of the cap). (3) In the end game (the
budget's last margin before the reset) no cap: what is left goes at once, held to the budget by the
hard stop. A quota that lasts and was never paced in this window is not paced; nor, beyond step (1), one
whose reset is unknown.

Each of z.ai's windows (the 5-hour one, the week) is paced so, on its own, and the tightest plan binds
(`tightest`): the week's rest is spread over the days left to its reset, within what the 5-hour window
allows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from chaos_mode.quota.forecast import Forecast

TARGET_PERCENT: Final = 97.0  # z.ai's percent alone: aim a little short of 100 (it is whole and lags)


@dataclass(frozen=True, slots=True)
class PacePlan:
    """What pacing asks of the pool now: prefer lighter models, and at most this many in flight."""

    prefer_lower_weight: bool = False
    max_concurrency: int | None = None  # None: no cap
    reason: str = "the quota lasts"
    window: str | None = None  # the window whose plan this is (`tightest`)
    back_at: float | None = None  # with a cap of 0: when it is lifted (unix s)


NOT_PACED: Final = PacePlan()


@dataclass(frozen=True, slots=True)
class Spend:
    """What is left of the window to spend and the burn now (per hour), in one unit; `until`: when it is
    to be spent by (None: the reset is not known); `runs_out`: at this burn it is spent before the reset."""

    left: float
    burn: float
    until: float | None
    runs_out: bool
    line: float | None = None  # what an even pace from the window's start to `until` leaves now
    back_at: float | None = None  # when that pace's line comes down to `left` (unix s)


def spend_of_forecast(
    forecast: Forecast, *, now: float | None = None, start: float | None = None, endgame: float = 0.0
) -> Spend:
    """z.ai's percent: `TARGET_PERCENT` less the used, by `endgame` seconds before the reset; with the
    window's `start`, its even pace's line at `now`."""
    left = max(TARGET_PERCENT - forecast.used_percent, 0.0)
    until = None if forecast.resets_at is None else forecast.resets_at - endgame
    runs_out = forecast.runs_out_at is not None
    if now is None or start is None or until is None or until <= start:
        return Spend(left, forecast.burn_per_hour, until, runs_out)
    line = TARGET_PERCENT * min(max((until - now) / (until - start), 0.0), 1.0)
    back_at = until - left / TARGET_PERCENT * (until - start)
    return Spend(left, forecast.burn_per_hour, until, runs_out, line, back_at)


def spend_of_budget(left: float, burn: float, *, now: float, resets_at: float, endgame: float) -> Spend:
    """The budget in units (`left`, at `burn` units per hour), by `endgame` seconds before the reset."""
    left = max(left, 0.0)
    return Spend(left, burn, resets_at - endgame, burn * max(resets_at - now, 0.0) / 3600 > left)


def affordable_burn(left: float, *, now: float, until: float) -> float:
    """The burn per hour that spends `left` exactly by `until`."""
    hours = max(until - now, 1.0) / 3600
    return left / hours


def pace(
    spend: Spend | None, *, now: float, concurrency: float, lighter_left: bool, engaged: bool = False
) -> PacePlan:
    """The plan for `spend`; `concurrency`: the mean of the requests in flight while the burn was
    measured; `lighter_left`: some request in flight is served by a model heavier than the lightest its
    quality floor admits; `engaged`: pacing was in force earlier in this window."""
    if spend is None or not (spend.runs_out or engaged):
        return NOT_PACED
    if lighter_left or spend.until is None:
        return PacePlan(True, None, "the quota would run out before the reset: lighter models first")
    if now >= spend.until:
        return PacePlan(True, None, "the window's end game: what is left goes at once")
    allowed = affordable_burn(spend.left, now=now, until=spend.until)
    burn = spend.burn
    cap = math.floor(max(concurrency, 1.0) * allowed / burn) if burn > 0 else 0
    if allowed >= burn:  # a burn the rest affords never lowers the concurrency it runs at
        cap = max(cap, math.ceil(concurrency))
    if cap < 1 and spend.line is not None and spend.left < spend.line:
        return PacePlan(
            True, 0, "ahead of an even pace to the reset: none until back on it", back_at=spend.back_at
        )
    cap = max(cap, 1)
    return PacePlan(True, cap, f"what the window affords until its reset: at most {cap} at once")


def tightest(plans: Iterable[PacePlan]) -> PacePlan:
    """The plan that asks most of the pool: a cap before none, the lower cap first, then lighter models
    first; NOT_PACED when none asks anything."""
    return min(
        plans,
        key=lambda p: (p.max_concurrency is None, p.max_concurrency or 0, not p.prefer_lower_weight),
        default=NOT_PACED,
    )
