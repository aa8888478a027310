"""The quota as the proxy knows it: z.ai's readings while they are fresh, else its own estimate; the
forecast of either; what is left to send (`budget()`: the window's readings bounding it with the proxy's
own count, or without a key the total a 1308 taught); what `/api/status` shows of it (`status()`), the
failures of the reading included."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from chaos_mode.quota.bounds import Bounds
from chaos_mode.quota.estimate import TrafficEstimate
from chaos_mode.quota.forecast import BURN_HORIZON, Forecast, Sample, forecast
from chaos_mode.quota.ledger import Ledger
from chaos_mode.quota.reading import QuotaReading
from chaos_mode.zai.quota import WINDOW_SECONDS

FRESH_SECONDS: Final = 900.0  # a reading of z.ai older than this gives way to the estimate
HISTORY_POINTS: Final = 60  # samples of the burn chart at most
SAME_WINDOW: Final = 2.0  # seconds: readings whose resets are this close are of one window
Source = Literal["zai", "estimate"]


@dataclass(frozen=True, slots=True)
class Asked:
    """The proxy's count when a reading was asked for (`QuotaTracker.asked`)."""

    lo: float
    changes: int


@dataclass(frozen=True, slots=True)
class Budget:
    """What may still be sent this window without passing the quota, in quotaWeight units: `left` at
    most the truth (the hard stop), `likely` the middle of what the readings allow (the pace), of a
    window of at most `total` units; until `resets_at` (unix s); `settled`: nothing is in flight and
    nothing the proxy sent since changed it, so no reading will raise it before the reset."""

    left: float
    likely: float
    total: float
    resets_at: float
    settled: bool


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
        self.poll_seconds = 60.0
        self.whole = True  # every weight a whole number: the bounds pin whole units
        self.estimate = TrafficEstimate(weight)
        self.ledger = Ledger()
        self.changed: Callable[[], None] | None = None  # told when a reading or a 1308 moved the budget
        self.read_soon: Callable[[], None] | None = None  # the poller's: read before the next poll
        self._bounds: Bounds | None = None  # of the window z.ai's readings are of
        self._bounds_reset: float | None = None  # that window's reset
        self._headroom = (0.0, 0.0)  # the bounds' least and greatest headroom, worked out at each reading
        self._asked_changes: int | None = None  # the ledger's changes when the latest reading was asked for
        self._taught: float | None = None  # the total the last 1308 taught (units counted then)
        self._window_lo = 0.0  # the ledger's lo when the estimate's window opened
        self.error: str | None = None  # the last failure of the reading, until a reading succeeds
        self.reader = "off"  # "on" while a key is configured to read z.ai's quota with
        self.read_failures = 0
        self.read_at: float | None = None
        self._reading: QuotaReading | None = None
        self._readings: deque[Sample] = deque(maxlen=1024)  # z.ai's, this window's

    def reconfigure(
        self,
        weight: Callable[[str], float],
        *,
        poll_seconds: float,
        window_seconds: float = WINDOW_SECONDS,
        whole: bool = True,
    ) -> None:
        """New weights (`whole`: all whole numbers) and window; a reading stays fresh for three polls (at
        least `FRESH_SECONDS`)."""
        self.estimate.weight = weight
        self.estimate.window_seconds = self.window_seconds = window_seconds
        self.poll_seconds = poll_seconds
        self.fresh_seconds = max(FRESH_SECONDS, 3 * poll_seconds)
        if whole != self.whole:
            self.whole, self._bounds = whole, None  # bounds of whole units hold no more

    # -- fed by the pool and the poller ------------------------------------------------------------

    def sent(self, key: int, model: str) -> None:
        """A request went to z.ai on `model` (`key`: its slot)."""
        self.ledger.sent(key, self.estimate.weight(model))

    def answered(self, model: str, key: int | None = None) -> None:
        """z.ai answered the request `key` cleanly."""
        estimate, now = self.estimate, self._clock()
        opened = not self._window_open(now)
        estimate.answered(model, now)
        if opened:
            self._window_lo = self.ledger.lo  # this answer opened the estimate's window: it counts in it
        if key is not None:
            self.ledger.answered(key)

    def refused(self, key: int) -> None:
        """z.ai refused the request `key` with an error answer: not charged."""
        self.ledger.refused(key)

    def ended(self, key: int) -> None:
        """The request `key` ended; with no verdict of z.ai it may have been charged."""
        self.ledger.ended(key)

    def spent(self, reset_at: float | None) -> None:
        """z.ai answered 1308 (the refused request already told, `refused`)."""
        now = self._clock()
        estimate = self.estimate
        estimate.spent(now, reset_at)
        if estimate.units > 0:
            self._taught = estimate.units  # z.ai's whole window, as counted (the estimate's scale)
        bounds = self._current_bounds(now)
        if bounds is not None:
            bounds.spent(self.ledger.hi)
            self._headroom = bounds.headroom()
        self._tell()

    def ask_soon(self) -> None:
        """A reading now would say more than the last (nothing in flight, some answered since it was
        asked for): the poller is asked for one before its next poll."""
        if (
            self.read_soon is not None
            and self.ledger.open == 0
            and self._asked_changes != self.ledger.changes
        ):
            self.read_soon()

    def asked(self) -> Asked:
        """The count as a reading is asked for: give it back to `read` with the reading."""
        return Asked(self.ledger.lo, self.ledger.changes)

    def read(self, reading: QuotaReading, asked: Asked | None = None) -> None:
        """z.ai's reading, asked for when the count was `asked` (None: not known, so no lower bound)."""
        now = self._clock()
        previous = self._reading
        if previous is not None and previous.resets_at != reading.resets_at:
            self._readings.clear()  # a new window
        self._reading, self.read_at, self.error = reading, now, None
        self._readings.append((now, reading.used_percent))
        self.estimate.calibrate(reading.used_percent, now)
        self._bound(reading, asked)
        self._tell()

    def _bound(self, reading: QuotaReading, asked: Asked | None) -> None:
        resets_at = reading.resets_at
        if resets_at is None:
            self._bounds = self._bounds_reset = None  # no window known
            return
        if (
            self._bounds is None
            or self._bounds_reset is None
            or abs(resets_at - self._bounds_reset) >= SAME_WINDOW
        ):
            self._bounds = Bounds(whole=self.whole)  # a new window
        self._bounds_reset = resets_at
        self._bounds.read(reading.used_percent, asked.lo if asked is not None else 0.0, self.ledger.hi)
        self._headroom = self._bounds.headroom()
        self._asked_changes = asked.changes if asked is not None else None

    def _current_bounds(self, now: float) -> Bounds | None:
        """The bounds of the window still running, if any."""
        reset = self._bounds_reset
        return self._bounds if reset is not None and now < reset else None

    def _window_open(self, now: float) -> bool:
        estimate = self.estimate
        return estimate.start is not None and estimate.end is not None and now < estimate.end

    def _tell(self) -> None:
        if self.changed is not None:
            self.changed()

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

    def budget(self) -> Budget | None:
        """What may still be sent this window (None: not known, no hard stop): with z.ai's readings, once
        they bound the total, the least headroom less all that may have been charged of the proxy's
        requests; without, once a 1308 taught the total, that total less what was sent since the
        estimate's window opened (the window assumed z.ai's, no other client spending)."""
        now, ledger = self._clock(), self.ledger
        bounds = self._current_bounds(now)
        if bounds is not None and bounds.known and self._bounds_reset is not None:
            settled = ledger.open == 0 and self._asked_changes == ledger.changes
            least, greatest = self._headroom
            likely = (least + greatest) / 2 - ledger.hi
            return Budget(least - ledger.hi, likely, bounds.total()[1], self._bounds_reset, settled)
        if self._taught is None or self.source == "zai":
            return None
        estimate = self.estimate
        window_lo = self._window_lo if self._window_open(now) else ledger.lo
        end = (
            estimate.end if self._window_open(now) and estimate.end is not None else now + self.window_seconds
        )
        left = self._taught - (ledger.hi - window_lo)
        return Budget(left, left, self._taught, end, ledger.open == 0)

    def total(self) -> tuple[float, float] | None:
        """The window's total (units) as the readings bound it: (least, greatest); None until they do."""
        bounds = self._current_bounds(self._clock())
        return bounds.total() if bounds is not None and bounds.known else None

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
        estimate, total = self.estimate, self.total()
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
            "total": None if total is None else [round(total[0], 1), round(total[1], 1)],
            "estimate": {
                "units": round(estimate.units, 2),
                "byModel": {name: round(units, 2) for name, units in estimate.by_model.items()},
                "scale": None if estimate.scale is None else round(estimate.scale, 2),
            },
            "history": history,
        }
