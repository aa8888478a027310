"""The forecast of a quota window: used, burn per hour, and when it runs out at the current pace.

One estimator: the **burn** is the rise of the used percent over the last `BURN_HORIZON` (an hour, or a fifth
of a shorter window), measured
from the last sample at or before that horizon, or from the window's start (0% used then) when the window is
younger; the used percent then grows at that burn from the latest sample. The quota **runs out** when that
line reaches 100%, unless the window resets first (then it lasts: `runs_out_at` None). An hour smooths over
z.ai's whole-percent steps and agents' bursts, yet follows a pace that changed (pacing, a swarm that grew).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

BURN_HORIZON: Final = 3600.0  # seconds of history the burn is measured over (at most a fifth of the window)

Sample = tuple[float, float]  # (unix s, percent used)


@dataclass(frozen=True, slots=True)
class Forecast:
    """The window now and at the current pace (times in unix seconds)."""

    used_percent: float
    resets_at: float | None
    burn_per_hour: float  # percent of the window per hour
    runs_out_at: float | None  # None: it lasts until the reset (or nothing burns)


def burn_per_hour(
    samples: Sequence[Sample], *, now: float, window_start: float | None, horizon: float = BURN_HORIZON
) -> float:
    """Percent per hour over the last `horizon` (module docstring); samples in time order, this window's."""
    points = list(samples)
    if window_start is not None:
        points = [(window_start, 0.0), *(p for p in points if p[0] >= window_start)]
    if len(points) < 2:
        return 0.0
    since = now - horizon
    before = [p for p in points if p[0] <= since]
    base = before[-1] if before else points[0]
    last = points[-1]
    elapsed = last[0] - base[0]
    if elapsed <= 0:
        return 0.0
    return max(last[1] - base[1], 0.0) / elapsed * 3600


def runs_out_at(used: float, burn: float, *, at: float, resets_at: float | None) -> float | None:
    """When `used` percent, growing `burn` percent per hour from `at`, reaches 100; None if the reset
    (or never) comes first."""
    if used >= 100:
        return at
    if burn <= 0:
        return None
    when = at + (100 - used) / burn * 3600
    return None if resets_at is not None and when >= resets_at else when


def forecast(
    samples: Sequence[Sample],
    *,
    now: float,
    window_start: float | None,
    resets_at: float | None,
    horizon: float = BURN_HORIZON,
) -> Forecast:
    """The forecast from this window's samples of the used percent (time order)."""
    at, used = samples[-1] if samples else (now, 0.0)
    used = min(max(used, 0.0), 100.0)
    burn = burn_per_hour(samples, now=now, window_start=window_start, horizon=horizon)
    return Forecast(used, resets_at, burn, runs_out_at(used, burn, at=at, resets_at=resets_at))
