"""The pacing rule: what the pool does when the forecast says the quota runs out before the reset.

In order: (1) prefer models of a lower `quotaWeight` within the request's quality floor, as long as lighter
models are left to prefer; (2) once none is, admit fewer requests at once: the concurrency scaled by the
burn the rest of the window affords over the burn now (at least one), so that the window ends with
`TARGET_PERCENT` used rather than a 1308. The concurrency is the mean in flight over the burn's horizon,
so a cap in force is not lowered again for the burn it inherited: in force, the cap is what the window
affords at the burn per request, and it stays worked out so until the window resets (`engaged`), even once
the forecast says the quota lasts (because of the cap). A quota that lasts and was never paced in this
window is not paced; nor, beyond step (1), one whose reset is unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from chaos_mode.quota.forecast import Forecast

TARGET_PERCENT: Final = 97.0  # aim a little short of 100: z.ai's percent is whole and lags


@dataclass(frozen=True, slots=True)
class PacePlan:
    """What pacing asks of the pool now: prefer lighter models, and at most this many in flight."""

    prefer_lower_weight: bool = False
    max_concurrency: int | None = None  # None: no cap
    reason: str = "the quota lasts"


NOT_PACED: Final = PacePlan()


def affordable_burn(used: float, *, now: float, resets_at: float) -> float:
    """Percent per hour that spends the window to `TARGET_PERCENT` exactly at its reset."""
    hours = max(resets_at - now, 1.0) / 3600
    return max(TARGET_PERCENT - used, 0.0) / hours


def pace(
    forecast: Forecast | None, *, now: float, concurrency: float, lighter_left: bool, engaged: bool = False
) -> PacePlan:
    """The plan for `forecast`; `concurrency`: the mean of the requests in flight while the burn was
    measured; `lighter_left`: some request in flight is served by a model heavier than the lightest its
    quality floor admits; `engaged`: pacing was in force earlier in this window."""
    if forecast is None or (forecast.runs_out_at is None and not engaged):
        return NOT_PACED
    if lighter_left or forecast.resets_at is None:
        return PacePlan(True, None, "the quota would run out before the reset: lighter models first")
    allowed = affordable_burn(forecast.used_percent, now=now, resets_at=forecast.resets_at)
    burn = forecast.burn_per_hour
    cap = math.ceil(concurrency) if burn <= 0 else math.floor(max(concurrency, 1.0) * allowed / burn)
    cap = max(cap, 1)
    return PacePlan(True, cap, f"what the window affords until its reset: at most {cap} at once")
