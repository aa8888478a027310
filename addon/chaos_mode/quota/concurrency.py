"""The mean number of requests in flight over the burn's horizon: what the burn of the forecast was burnt
with, so that pacing scales the concurrency by burn per request (not by what it already lowered)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from chaos_mode.quota.forecast import BURN_HORIZON

MARK_EVERY: Final = 5.0  # seconds between the kept marks of the running integral...
MARKS_PER_HORIZON: Final = 12  # ...or less over a short horizon: at least this many marks a horizon


class MeanConcurrency:
    """Time-weighted mean of a level (requests in flight), over the last `horizon` seconds."""

    def __init__(self, clock: Callable[[], float], horizon: float = BURN_HORIZON) -> None:
        self._clock = clock
        self.horizon = horizon
        self._level = 0
        self._at = clock()
        self._integral = 0.0  # level x seconds since the start
        self._marks: deque[tuple[float, float]] = deque([(self._at, 0.0)])  # (time, integral then)

    def level(self, in_flight: int) -> None:
        """The level is `in_flight` from now on."""
        self._advance(self._clock())
        self._level = in_flight

    def mean(self) -> float:
        now = self._clock()
        self._advance(now)
        since, integral = self._marks[0]
        elapsed = now - since
        return float(self._level) if elapsed <= 0 else (self._integral - integral) / elapsed

    def _advance(self, now: float) -> None:
        self._integral += self._level * max(now - self._at, 0.0)
        self._at = now
        if now - self._marks[-1][0] >= min(MARK_EVERY, self.horizon / MARKS_PER_HORIZON):
            self._marks.append((now, self._integral))
        while len(self._marks) > 1 and self._marks[1][0] <= now - self.horizon:
            self._marks.popleft()
