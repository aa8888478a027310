"""The pacing rule: what the pool does when the forecast says the quota runs out before the reset.

In order: (1) prefer models of a lower `quotaWeight` within the request's quality floor, as long as lighter
models are left to prefer; (2) once none is, admit fewer requests at once: the concurrency in use scaled by
the burn the rest of the window affords over the burn now (at least one), so that the window ends with
`TARGET_PERCENT` used rather than a 1308. A quota that lasts is not paced; nor one whose reset is unknown
beyond step (1).
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


def pace(forecast: Forecast | None, *, now: float, concurrency: int, lighter_left: bool) -> PacePlan:
    """The plan for `forecast`, with `concurrency` requests in flight; `lighter_left`: some request's floor
    still admits a model lighter than the ones it is served by."""
    if forecast is None or forecast.runs_out_at is None:
        return NOT_PACED
    if lighter_left or forecast.resets_at is None:
        return PacePlan(True, None, "the quota runs out before the reset: lighter models first")
    allowed = affordable_burn(forecast.used_percent, now=now, resets_at=forecast.resets_at)
    burn = forecast.burn_per_hour
    cap = concurrency if burn <= 0 else math.floor(max(concurrency, 1) * allowed / burn)
    return PacePlan(True, max(cap, 1), f"the quota runs out before the reset: at most {max(cap, 1)} at once")
