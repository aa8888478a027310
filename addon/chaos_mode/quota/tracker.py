"""The quota as the proxy knows it: z.ai's readings of each window while they are fresh, else its own
estimate (the 5-hour window's; the week's once a 1310 taught its scale); the forecast of each; what is
left to send (`budget()`: the 5-hour window's readings bounding it with the proxy's own count, or without
a key the total a 1308 taught); what `/api/status` shows of it (`status()`), the failures of the reading
included."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from chaos_mode.quota.bounds import Bounds
from chaos_mode.quota.estimate import TrafficEstimate
from chaos_mode.quota.forecast import BURN_HORIZON, Forecast, Sample, forecast
from chaos_mode.quota.ledger import Ledger
from chaos_mode.quota.reading import QuotaReading, WindowReading
from chaos_mode.quota.weights import AssumedScale
from chaos_mode.zai.quota import FIVE_HOURS, WEEK, WEEK_SECONDS, WINDOW_SECONDS

FRESH_SECONDS: Final = 900.0  # a reading of z.ai older than this gives way to the estimate
HISTORY_POINTS: Final = 60  # samples of the burn chart at most
SAME_WINDOW: Final = 2.0  # seconds: readings whose resets are this close are of one window
Source = Literal["zai", "estimate"]
Unit = Literal["prompts", "credits"]


@dataclass(frozen=True, slots=True)
class Asked:
    """The proxy's count when a reading was asked for (`QuotaTracker.asked`)."""

    lo: float
    changes: int
    credits: float = 0.0  # the credits counted (`QuotaTracker.credits`)


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


@dataclass(slots=True)
class Track:
    """One of z.ai's windows: its latest reading and the used percents read in it (time order)."""

    reading: WindowReading
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=1024))


class QuotaTracker:
    """Fed by the pool (answers, 1308s, 1310s) and the poller (readings, failures); read by status, pacing."""

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
        self.weight = weight  # a request's quotaWeight: the ledger's unit, and the estimate's on prompts
        self.unit: Unit = "prompts"  # what the estimate counts (`_counting`)
        self._configured: Unit = "prompts"  # quota.unit
        self.assumed: set[str] = set()  # models whose credits the estimate counted with assumed weights
        self.scale_of_assumed = AssumedScale()  # their weights' factor, learned from readings
        self.credits = 0.0  # every answer's credits counted since the start, with a key or not
        self.charges = 0  # the answers counted in it
        self._credits_read = 0.0  # `credits` when the latest reading was asked for
        self.estimate = TrafficEstimate()
        self.week = TrafficEstimate(WEEK_SECONDS)  # the week's count, in the estimate's unit
        self.ledger = Ledger()
        self.changed: Callable[[], None] | None = None  # told when a reading or a 1308 moved the budget
        self.read_soon: Callable[[], None] | None = None  # the poller's: read before the next poll
        self._bounds: Bounds | None = None  # of the window z.ai's readings are of
        self._bounds_reset: float | None = None  # that window's reset
        self._rolled = False  # the bounds are the next window's, carried at the reset: no reading of it yet
        self._headroom = (0.0, 0.0)  # the bounds' least and greatest headroom, worked out at each reading
        self._asked_changes: int | None = None  # the ledger's changes when the latest reading was asked for
        self._asked_lo = 0.0  # the ledger's lo then
        self._taught: float | None = None  # the total the last 1308 taught (units counted then)
        self._window_lo = 0.0  # the ledger's lo when the estimate's window opened
        self.error: str | None = None  # the last failure of the reading, until a reading succeeds
        self.reader = "off"  # "on" while a key is configured to read z.ai's quota with
        self.read_failures = 0
        self.read_at: float | None = None
        self.level: str | None = None  # the plan, as the latest reading said
        self._windows: dict[str, Track] = {}  # z.ai's windows as the latest reading had them, by name

    def reconfigure(
        self,
        weight: Callable[[str], float],
        *,
        poll_seconds: float,
        window_seconds: float = WINDOW_SECONDS,
        whole: bool = True,
        unit: Unit = "prompts",
    ) -> None:
        """New weights (`whole`: all whole numbers), window and estimate's unit; a reading stays fresh for
        three polls (at least `FRESH_SECONDS`)."""
        self.weight = weight
        self._configured = unit
        self.estimate.window_seconds = self.window_seconds = window_seconds
        self.week.window_seconds = self._week_seconds()
        self.poll_seconds = poll_seconds
        self.fresh_seconds = max(FRESH_SECONDS, 3 * poll_seconds)
        if whole != self.whole:
            self.whole, self._bounds = whole, None  # bounds of whole units hold no more

    # -- fed by the pool and the poller ------------------------------------------------------------

    def sent(self, key: int, model: str) -> None:
        """A request went to z.ai on `model` (`key`: its slot)."""
        self.ledger.sent(key, self.weight(model))

    def answered(self, model: str, key: int | None = None) -> None:
        """z.ai answered the request `key` cleanly: on a plan of prompts its model's weight counts."""
        if self._counting() == "prompts":
            self._count(model, self.weight(model))
        if key is not None:
            self.ledger.answered(key)

    def charged(self, model: str, credits: float, *, assumed: bool = False) -> None:
        """An answer served by `model` ended, costing `credits` by its usage (`assumed`: by weights the
        catalog does not give `model`: the heaviest's, scaled once readings taught by how much): on a
        credit plan they count."""
        self.scale_of_assumed.charged(credits, assumed=assumed)
        factor = self.scale_of_assumed.factor if assumed else None
        self.credits += credits if factor is None else credits * factor
        self.charges += 1
        if self._counting() != "credits":
            return
        self._count(model, credits if factor is None else credits * factor)
        if assumed:
            self.assumed.add(model)

    def _counting(self) -> Unit:
        """What the estimate counts now: credits on a credit plan (`quota.unit`) without a key; with one,
        prompts by quotaWeight, the unit of the ledger whose budget paces by the estimate's burn (the
        readings calibrate its scale). What it counted in another unit is dropped."""
        unit = self._configured if self.reader != "on" else "prompts"
        if unit != self.unit:
            self.unit, self.assumed, self._taught = unit, set(), None
            self.estimate = TrafficEstimate(self.window_seconds)
            self.week = TrafficEstimate(self._week_seconds())
        return unit

    def _count(self, model: str, units: float) -> None:
        estimate, now = self.estimate, self._clock()
        opened = not self._window_open(now)
        estimate.answered(model, units, now)
        self.week.answered(model, units, now)
        if opened:
            self._window_lo = self.ledger.lo  # this answer opened the estimate's window: it counts in it

    def refused(self, key: int) -> None:
        """z.ai refused the request `key` with an error answer: not charged."""
        self.ledger.refused(key)

    def ended(self, key: int) -> None:
        """The request `key` ended; with no verdict of z.ai it may have been charged."""
        self.ledger.ended(key)

    def spent(self, reset_at: float | None, window: str = FIVE_HOURS) -> None:
        """z.ai answered 1308 (`window` the 5-hour one) or 1310 (the week): the window is spent until
        `reset_at`; the refused request was already told (`refused`)."""
        now = self._clock()
        if window == WEEK:
            self.week.spent(now, reset_at)  # what the week counted is its scale
            self._tell()
            return
        estimate = self.estimate
        estimate.spent(now, reset_at)
        if estimate.units > 0:
            self._taught = estimate.units  # z.ai's whole window, as counted (the estimate's scale)
        bounds, reset = self._current_bounds(now), self._bounds_reset
        if bounds is not None and (reset_at is None or reset is None or reset_at > reset - SAME_WINDOW):
            bounds.spent(self.ledger.hi)  # (one naming an earlier reset is of the last window)
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
        return Asked(self.ledger.lo, self.ledger.changes, self.credits)

    def read(self, reading: QuotaReading, asked: Asked | None = None) -> None:
        """z.ai's reading, asked for when the count was `asked` (None: not known, so no lower bound)."""
        now = self._clock()
        credits = reading.window(WEEK) or reading.window()  # either rises by the same credits
        if credits is not None and credits.used is not None:
            last = self._windows.get(credits.name)
            same = last is not None and last.reading.resets_at == credits.resets_at
            self.scale_of_assumed.read(credits.used, same=same)
        windows: dict[str, Track] = {}
        for window in reading.windows:
            track = self._windows.get(window.name)
            if track is None or track.reading.resets_at != window.resets_at:
                track = Track(window)  # a new window
            track.reading = window
            track.samples.append((now, window.used_percent))
            windows[window.name] = track
        self._windows, self.level, self.read_at, self.error = windows, reading.level, now, None
        self._credits_read = asked.credits if asked is not None else self.credits
        five = reading.window()
        if five is not None:
            self.estimate.calibrate(five.used_percent, now)
            self._bound(five, asked)
        else:
            self._bounds = self._bounds_reset = None
        self._tell()

    def _bound(self, reading: WindowReading, asked: Asked | None) -> None:
        resets_at = reading.resets_at
        if resets_at is None:
            self._bounds = self._bounds_reset = None  # no window known
            return
        if (
            self._bounds is None
            or self._bounds_reset is None
            or abs(resets_at - self._bounds_reset) >= SAME_WINDOW
        ):
            # a new window, of the last one's total
            self._bounds = Bounds(whole=self.whole) if self._bounds is None else self._bounds.carried()
        self._bounds_reset, self._rolled = resets_at, False
        self._asked_lo = asked.lo if asked is not None else 0.0
        self._bounds.read(reading.used_percent, self._asked_lo, self.ledger.hi)
        self._headroom = self._bounds.headroom()
        self._asked_changes = asked.changes if asked is not None else None

    def _current_bounds(self, now: float) -> Bounds | None:
        """The bounds of the window running now, if any: past the reset of one read whose total was
        known, the next one's, of that total and nothing of it used at the reset (what was answered when
        the latest reading was asked for was charged before it; what was sent by now may have been),
        ending a window later (a window opens at the last one's reset or later) until a reading says."""
        bounds, reset = self._bounds, self._bounds_reset
        if bounds is None or reset is None or (now >= reset and (self._rolled or not bounds.known)):
            return None
        if now >= reset:
            bounds = self._bounds = bounds.carried()
            bounds.read(0.0, self._asked_lo, self.ledger.hi)
            self._headroom, self._rolled = bounds.headroom(), True
            windows = math.floor((now - reset) / self.window_seconds) + 1
            self._bounds_reset = reset + windows * self.window_seconds
        return bounds

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
        """The 5-hour window's burn horizon (`horizon_of`)."""
        return self.horizon_of(FIVE_HOURS)

    def credits_left(self, name: str) -> float | None:
        """What is left of the window `name` in credits at most: its fresh reading's cap less what it
        said was spent (whole credits: up to one more), what the proxy counted since the reading was
        asked for (answers it counted before z.ai did, counted twice) and an answer's mean credits (the
        answer whose end freed a slot is counted a moment later). None: no reading in credits."""
        track = self._windows.get(name) if self._fresh() else None
        window = None if track is None else track.reading
        if window is None or window.cap is None or window.cap <= 0 or window.used is None:
            return None  # no cap in credits said (0: not one to hold requests to)
        if window.resets_at is not None and self._clock() >= window.resets_at:
            return None  # the window reset since: the next reading says
        mean = self.credits / self.charges if self.charges else 0.0
        return window.cap - window.used - 1 - (self.credits - self._credits_read) - mean

    def _fresh(self) -> bool:
        return self.read_at is not None and self._clock() - self.read_at <= self.fresh_seconds

    @property
    def source(self) -> Source:
        """The 5-hour window's: z.ai's reading while fresh, else the estimate."""
        return "zai" if self._fresh() and FIVE_HOURS in self._windows else "estimate"

    def windows(self) -> list[str]:
        """The windows known now: the 5-hour one (read or estimated), every other z.ai's fresh reading
        has, and the week estimated once a 1310 taught its scale."""
        others = [name for name in self._windows if name != FIVE_HOURS] if self._fresh() else []
        if WEEK not in others and self.week.scale is not None:
            others.append(WEEK)
        return [FIVE_HOURS, *others]

    def seconds_of(self, name: str) -> float:
        """The window's length: the 5-hour one's as configured (`quota.windowSeconds`), any other z.ai's
        scaled alike (a simulator's short windows keep z.ai's proportions)."""
        track = self._windows.get(name)
        if name == FIVE_HOURS or (track is None and name != WEEK):
            return self.window_seconds
        seconds = WEEK_SECONDS if track is None else track.reading.seconds
        return seconds * self.window_seconds / WINDOW_SECONDS

    def _week_seconds(self) -> float:
        return WEEK_SECONDS * self.window_seconds / WINDOW_SECONDS

    def horizon_of(self, name: str) -> float:
        """The burn's horizon in `name`: an hour, or a fifth of a shorter window."""
        return min(BURN_HORIZON, self.seconds_of(name) / 5)

    def _samples(self, name: str = FIVE_HOURS) -> tuple[list[Sample], float | None, float | None]:
        """(samples, window start, reset) of the source in use for the window `name`."""
        now = self._clock()
        track = self._windows.get(name) if self._fresh() else None
        if track is not None:
            resets_at = track.reading.resets_at
            if resets_at is not None and now >= resets_at:
                return [], None, None  # z.ai's window reset since: nothing known of the next one yet
            start = resets_at - self.seconds_of(name) if resets_at is not None else None
            return list(track.samples), start, resets_at
        if name not in (FIVE_HOURS, WEEK):
            return [], None, None
        estimate = self.estimate if name == FIVE_HOURS else self.week
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
        if self._taught is None or self.source == "zai" or self._counting() == "credits":
            return None  # the ledger counts quotaWeight, not credits
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

    def forecast(self, name: str = FIVE_HOURS) -> Forecast | None:
        """The forecast of the window `name`, None while nothing says how much of it is used."""
        samples, start, resets_at = self._samples(name)
        if not samples:
            return None
        return forecast(
            samples, now=self._clock(), window_start=start, resets_at=resets_at, horizon=self.horizon_of(name)
        )

    def _window_status(self, name: str) -> dict[str, Any]:
        """One window as `status` shows it: z.ai's figures (credits where said) and the forecast."""
        seen = self.forecast(name)
        track = self._windows.get(name) if self._fresh() else None
        window = track.reading if track is not None else None
        counted = (window.used, window.cap, window.left) if window is not None else self._counted(name)
        used, cap, left = counted
        return {
            "name": name,
            "seconds": self.seconds_of(name),
            "source": "zai" if window is not None else "estimate",
            "started": True if window is None else window.started,
            "usedPercent": None if seen is None else round(seen.used_percent, 1),
            "used": None if used is None else round(used, 2),
            "cap": None if cap is None else round(cap, 2),
            "left": None if left is None else round(left, 2),
            "resetsAt": None if seen is None or seen.resets_at is None else round(seen.resets_at),
            "burnPerHour": None if seen is None else round(seen.burn_per_hour, 2),
            "runsOutAt": None if seen is None or seen.runs_out_at is None else round(seen.runs_out_at),
        }

    def _counted(self, name: str) -> tuple[float | None, float | None, float | None]:
        """(used, cap, left) in credits of the window `name` as the estimate counts them (cap and left
        once its scale is known); nothing on a plan of prompts."""
        if self._counting() != "credits":
            return None, None, None
        estimate = self.week if name == WEEK else self.estimate
        estimate.used_percent(self._clock())  # rolls a window past its end
        scale = estimate.scale
        left = None if scale is None else max(scale - estimate.units, 0.0)
        return estimate.units, scale, left

    def status(self) -> dict[str, Any]:
        """`/api/status`'s `quota`: times in unix seconds, percents of the window."""
        seen = self.forecast()
        samples, _, _ = self._samples()
        step = max(1, -(-len(samples) // HISTORY_POINTS))
        history = [[round(t), round(used, 1)] for t, used in samples[::step]]
        estimate, total, factor = self.estimate, self.total(), self.scale_of_assumed.factor
        return {
            "usedPercent": None if seen is None else round(seen.used_percent, 1),
            "resetsAt": None if seen is None or seen.resets_at is None else round(seen.resets_at),
            "burnPerHour": None if seen is None else round(seen.burn_per_hour, 2),
            "runsOutAt": None if seen is None or seen.runs_out_at is None else round(seen.runs_out_at),
            "source": self.source,
            "reader": self.reader,
            "error": self.error,
            "readAt": None if self.read_at is None else round(self.read_at),
            "level": self.level,
            "windows": [self._window_status(name) for name in self.windows()],
            "total": None if total is None else [round(total[0], 1), round(total[1], 1)],
            "estimate": {
                "unit": self._counting(),
                "units": round(estimate.units, 2),
                "assumedWeights": sorted(self.assumed),
                "assumedScale": None if factor is None else round(factor, 3),
                "byModel": {name: round(units, 2) for name, units in estimate.by_model.items()},
                "scale": None if estimate.scale is None else round(estimate.scale, 2),
            },
            "history": history,
        }
