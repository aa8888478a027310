"""The proxy's own count of the 5-hour window, for when z.ai's reading is not to be had.

Each answer z.ai served counts its units in the current window: its model's `quotaWeight` on a plan of
prompts, its credits (usage by the served model's `creditWeights`) on a credit plan. A window
opens with the first answer after the last one ended and lasts `quota.windowSeconds` (z.ai's 5 hours), or
until the reset a 1308 names. The **scale** (the units a whole window holds) is learned: at a 1308 the
window is spent, so what was counted then is 100%; a reading from z.ai of at least `CALIBRATE_FROM` percent
sets it too (counted / used). Until a scale is known the estimate counts but says no percent. It counts
only this proxy's traffic: other clients of the account (or other proxies of a fleet) make it read low.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from chaos_mode.quota.forecast import Sample, burn_per_hour
from chaos_mode.zai.quota import WINDOW_SECONDS

CALIBRATE_FROM: Final = 10.0  # percent: below, z.ai's whole-percent steps say too little about the scale
SAMPLE_EVERY: Final = 5.0  # seconds between the samples of the count kept (the latest aside)...
SAMPLES_PER_WINDOW: Final = 600  # ...or less in a short window: at least this many samples a window
MAX_SAMPLES: Final = 4096


class TrafficEstimate:
    """The units counted in the current window, by model, and the learned scale."""

    def __init__(self, window_seconds: float = WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self.scale: float | None = None
        self.start: float | None = None
        self.end: float | None = None
        self.units = 0.0
        self.by_model: dict[str, float] = {}
        self._samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)  # (unix s, units counted)

    def answered(self, model: str, units: float, now: float) -> None:
        """z.ai served a request on `model` that counts `units` in the window."""
        self._roll(now)
        if self.start is None:
            self.start, self.end = now, now + self.window_seconds
        self.units += units
        self.by_model[model] = self.by_model.get(model, 0.0) + units
        every = min(SAMPLE_EVERY, self.window_seconds / SAMPLES_PER_WINDOW)
        if len(self._samples) > 1 and now - self._samples[-2][0] < every:
            self._samples.pop()  # the latest sample moves on: kept ones stay `every` apart
        self._samples.append((now, self.units))

    def spent(self, now: float, reset_at: float | None) -> None:
        """A 1308: the window is spent, what was counted is its scale; it ends at `reset_at` if named."""
        self._roll(now)
        if self.units > 0:
            self.scale = self.units
            self._samples.append((now, self.units))  # spent now, not at the last answer
        if reset_at is not None and reset_at > now:
            self.end = reset_at
            if self.start is None:
                self.start = reset_at - self.window_seconds

    def calibrate(self, used_percent: float, now: float) -> None:
        """z.ai says `used_percent` of the window is used: the scale follows, when it says enough."""
        self._roll(now)
        if used_percent >= CALIBRATE_FROM and self.units > 0:
            self.scale = self.units * 100 / used_percent

    def used_percent(self, now: float) -> float | None:
        self._roll(now)
        if self.scale is None:
            return None
        return min(self.units / self.scale * 100, 100.0)

    def samples(self, now: float) -> list[Sample]:
        """This window's used percent over time; none until a scale is known."""
        self._roll(now)
        scale = self.scale
        if scale is None:
            return []
        return [(t, min(units / scale * 100, 100.0)) for t, units in self._samples]

    def burn(self, now: float, horizon: float) -> float:
        """Units per hour counted over the last `horizon` seconds (`forecast.burn_per_hour` of the count)."""
        self._roll(now)
        return burn_per_hour(self._samples, now=now, window_start=self.start, horizon=horizon)

    def _roll(self, now: float) -> None:
        if self.end is not None and now >= self.end:
            self.start = self.end = None
            self.units = 0.0
            self.by_model = {}
            self._samples.clear()
