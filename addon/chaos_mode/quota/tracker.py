"""The quota as the proxy knows it: z.ai's readings while they are fresh, else its own estimate; the
forecast of either; what `/api/status` shows of it (`status()`), the failures of the reading included."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Literal

from chaos_mode.quota.estimate import TrafficEstimate
from chaos_mode.quota.forecast import BURN_HORIZON, Forecast, Sample, forecast
from chaos_mode.quota.reading import QuotaReading
from chaos_mode.zai.quota import WINDOW_SECONDS

FRESH_SECONDS: Final = 900.0  # a reading of z.ai older than this gives way to the estimate
HISTORY_POINTS: Final = 60  # samples of the burn chart at most
Source = Literal["zai", "estimate"]


class QuotaTracker:
    """Fed by the pool (answers, 1308s) and the poller (readings, failures); read by status and pacing."""

    def __init__(
        self,
        weight: Callable[[str], float],
        clock: Callable[[], float] = time.time,
        *,
        fresh_seconds: float = FRESH_SECONDS,
    ) -> None:
        self._clock = clock
        self.fresh_seconds = fresh_seconds
        self.window_seconds = WINDOW_SECONDS
        self.estimate = TrafficEstimate(weight)
        self.error: str | None = None  # the last failure of the reading, until a reading succeeds
        self.reader = "off"  # "on" while a key is configured to read z.ai's quota with
        self.read_failures = 0
        self.read_at: float | None = None
        self._reading: QuotaReading | None = None
        self._readings: deque[Sample] = deque(maxlen=1024)  # z.ai's, this window's

    def reconfigure(
        self, weight: Callable[[str], float], *, poll_seconds: float, window_seconds: float = WINDOW_SECONDS
    ) -> None:
        """New weights and window; a reading stays fresh for three polls (at least `FRESH_SECONDS`)."""
        self.estimate.weight = weight
        self.estimate.window_seconds = self.window_seconds = window_seconds
        self.fresh_seconds = max(FRESH_SECONDS, 3 * poll_seconds)

    # -- fed by the pool and the poller ------------------------------------------------------------

    def answered(self, model: str) -> None:
        self.estimate.answered(model, self._clock())

    def spent(self, reset_at: float | None) -> None:
        self.estimate.spent(self._clock(), reset_at)

    def read(self, reading: QuotaReading) -> None:
        now = self._clock()
        previous = self._reading
        if previous is not None and previous.resets_at != reading.resets_at:
            self._readings.clear()  # a new window
        self._reading, self.read_at, self.error = reading, now, None
        self._readings.append((now, reading.used_percent))
        self.estimate.calibrate(reading.used_percent, now)

    def failed(self, error: str) -> None:
        self.error = error
        self.read_failures += 1

    # -- read ---------------------------------------------------------------------------------------

    @property
    def horizon(self) -> float:
        """The burn's horizon: an hour, or a fifth of a shorter window."""
        return min(BURN_HORIZON, self.window_seconds / 5)

    @property
    def source(self) -> Source:
        fresh = self.read_at is not None and self._clock() - self.read_at <= self.fresh_seconds
        return "zai" if fresh and self._reading is not None else "estimate"

    def _samples(self) -> tuple[list[Sample], float | None, float | None]:
        """(samples, window start, reset) of the source in use."""
        now = self._clock()
        if self.source == "zai" and self._reading is not None:
            resets_at = self._reading.resets_at
            if resets_at is not None and now >= resets_at:
                return [], None, None  # z.ai's window reset since: nothing known of the next one yet
            start = resets_at - self.window_seconds if resets_at is not None else None
            return list(self._readings), start, resets_at
        estimate = self.estimate
        return estimate.samples(now), estimate.start, estimate.end

    def forecast(self) -> Forecast | None:
        """The forecast, None while nothing says how much of the window is used."""
        samples, start, resets_at = self._samples()
        if not samples:
            return None
        return forecast(
            samples, now=self._clock(), window_start=start, resets_at=resets_at, horizon=self.horizon
        )

    def status(self) -> dict[str, Any]:
        """`/api/status`'s `quota`: times in unix seconds, percents of the window."""
        seen = self.forecast()
        samples, _, _ = self._samples()
        step = max(1, -(-len(samples) // HISTORY_POINTS))
        history = [[round(t), round(used, 1)] for t, used in samples[::step]]
        estimate = self.estimate
        return {
            "usedPercent": None if seen is None else round(seen.used_percent, 1),
            "resetsAt": None if seen is None or seen.resets_at is None else round(seen.resets_at),
            "burnPerHour": None if seen is None else round(seen.burn_per_hour, 2),
            "runsOutAt": None if seen is None or seen.runs_out_at is None else round(seen.runs_out_at),
            "source": self.source,
            "reader": self.reader,
            "error": self.error,
            "readAt": None if self.read_at is None else round(self.read_at),
            "level": self._reading.level if self._reading is not None else None,
            "estimate": {
                "units": round(estimate.units, 2),
                "byModel": {name: round(units, 2) for name, units in estimate.by_model.items()},
                "scale": None if estimate.scale is None else round(estimate.scale, 2),
            },
            "history": history,
        }
