"""Exploration: when a probe may go above one limit, and when z.ai is seen to move.

A probe above a limit pays a refusal when z.ai has no room there, and a level opened in a soft band (by a
probe, or a clean answer above the limit) is paid for by the requests sent at it. So the pace of probes is
a rule of its own, separate from the estimator (`evidence`):

- **One backoff per limit.** A probe goes only when its limit's wait is over, one at a time (one out holds
  the next for the wait at most). An exploration round that failed (a probe refused or given up) adds one
  to the limit's failures; the wait is `base` doubled per failure, up to `most`. The failures fade with
  the evidence (half-life `fade`): a limit nobody tried for long explores again at the base pace. A probe
  answered cleanly above the limit lets the next follow at once (a climb); any refusal of the limit holds
  the next probe for `base` (p never falls as n grows: zai.assumptions.REFUSALS_RISE_WITH_LOAD).
- **A level the limit moves to is on trial.** A rise puts the levels above the value it rose from on
  trial, a fall its new top level (the catalog's value may lie in a band, and a band's level stays under
  one that closed), until `TRIAL` clean answers at them (never level 1: a band there still answers, 0
  nothing); more refusals there than z.ai's noise explains among as many say z.ai serves them only at
  times, a band: the round failed, the limit is held under the level refused (`closed`) until a probe is
  answered above it, and the next probe waits `most`. The estimator would take tens of requests to refuse
  a band's first level (refused one time in six to nine), and a cheap refusal makes it worth holding.
- **A change detector per limit** (`Detector`): two CUSUMs of each verdict's log-likelihood ratio against its
  level's recent rate (`BASELINE`), one for a rise of the refusals (a limit that fell) and one for a fall (a
  limit restored). A step fires one within a few verdicts; a stationary rate (noise, a band) drifts it back
  to zero; two models rising at once, each short of firing, fire too (`rose_together`). Only a detected
  change says z.ai moved: z.ai moves its limits plan-wide (zai.assumptions.LIMITS_MOVE_TOGETHER), so every
  limit forgets its failures (not what a trial closed) and starts its wait over (at once after a rise: the
  others may have risen too, else after the base wait), and for `most` seconds each explores at the base
  pace (a halving is often followed by its restore).

Pure state, times passed in (monotonic).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from chaos_mode.zai.assumptions import NOISE

# A CUSUM fires at this many nats of evidence for a change. A rise: at a level served cleanly, two to five
# refusals in a row (its rate 0-5%); a stationary rate fires it about once in 7,000 verdicts at 1-2% (an
# hour of a level answering two a second), less often from 5% to 50% (tests/learning/test_explore.py). A
# fall: two clean answers where z.ai refused nearly every request.
RISE_NATS: Final = 8.0
FALL_NATS: Final = 3.0
# Two models' rises, each short of `RISE_NATS`, that sum to this say the plan moved. A CUSUM passes x about
# e^-x of the time, so over 8 models' 28 pairs this is about as rare as one of 8 detectors alone (28 x
# 12e^-12 against 8e^-8; measured on stationary bands of 2-50 %: half as many firings again).
PAIR_RISE_NATS: Final = 1.5 * RISE_NATS
# While z.ai lowered its limits lately, a move back is likelier (a halving, then its restore): a fall fires
# at its first clean answer. Not after a rise: a band's lucky answers would fire one after another.
FALL_AFTER_MOVE_NATS: Final = 1.0
# The rates a step is tested for, from a level's recent rate r: a rise to halfway to refusing every
# request, (1 + r) / 2; a fall, at a level refused three times in four or more (r over `REFUSING`), to the
# noise z.ai sends anywhere (a limit back above the level), and on while that test's sum is above zero (the
# clean answers of a restore bring the rate under `REFUSING`: a level refused by two probes, then answered,
# fires the fall that tells the other limits). A band, or a level barely seen, says nothing of a restore,
# and a refusal never does (at a level refused under the noise rate, it would have added to that test).
FALL_TO: Final = NOISE
REFUSING: Final = 0.75
# A level's recent rate: its last verdicts, each older one faded by 1 - 1/BASELINE per new one (slower than
# the estimator's memory, so that a step shows against it), from half a refusal in one verdict.
BASELINE: Final = 32.0
PRIOR: Final = (0.5, 1.0)
# A level on trial: this many clean answers, among which z.ai's noise explains two refusals (a third: a band).
TRIAL: Final = round(2.0 / NOISE)


@dataclass(slots=True)
class Detector:
    """The two CUSUMs of one limit and its levels' recent rates (see the module)."""

    rise: float = 0.0
    fall: float = 0.0
    levels: dict[int, tuple[float, float]] = field(default_factory=dict)  # (refusals, verdicts) per level

    def verdict(self, level: int, refused: bool, weight: float = 1.0, *, moved: bool = False) -> int:
        """One verdict (`weight` of it: a shared refusal) at `level`: +1 when a rise fired, -1 when a fall
        did (either then starts over), else 0. `moved`: z.ai moved lately (a fall fires sooner)."""
        refusals, verdicts = self.levels.get(level, PRIOR)
        rate = min(max(refusals / verdicts, 1e-3), 1.0 - 1e-3)
        risen = (1.0 + rate) / 2.0
        fallen = FALL_TO if rate > REFUSING or self.fall > 0.0 else rate
        if refused:
            up, down = math.log(risen / rate), min(math.log(fallen / rate), 0.0)
        else:
            up, down = math.log((1.0 - risen) / (1.0 - rate)), math.log((1.0 - fallen) / (1.0 - rate))
        keep = 1.0 - weight / BASELINE
        self.levels[level] = (refusals * keep + (weight if refused else 0.0), verdicts * keep + weight)
        self.rise = max(self.rise + weight * up, 0.0)
        self.fall = max(self.fall + weight * down, 0.0)
        fall_at = FALL_AFTER_MOVE_NATS if moved else FALL_NATS
        fired = -1 if self.fall >= fall_at else int(self.rise >= RISE_NATS)
        if fired:
            self.start_over()
        return fired

    def start_over(self) -> None:
        """A change detected: the CUSUMs and the levels' rates start over (they spoke of z.ai before it)."""
        self.rise = self.fall = 0.0
        self.levels.clear()


def rose_together(detectors: Iterable[Detector]) -> bool:
    """Whether two models' rises, each short of firing, sum to `PAIR_RISE_NATS`: the plan moved (both start
    over)."""
    top = sorted(detectors, key=lambda detector: detector.rise)[-2:]
    if len(top) < 2 or top[0].rise + top[1].rise < PAIR_RISE_NATS:
        return False
    for detector in top:
        detector.start_over()
    return True


@dataclass(slots=True)
class Exploration:
    """The pace of one limit's probes (see the module)."""

    failures: float = 0.0  # failed rounds, faded
    failed_at: float = -math.inf  # when `failures` was last brought up to date
    ready_at: float = -math.inf  # no probe before this
    probe_since: float | None = None  # a probe out, unanswered
    opened_from: int | None = None  # the levels above this are on trial (the least value the limit rose from)
    trial: tuple[int, int] = (0, 0)  # clean answers since the latest rise, refusals since the trial began
    closed: int | None = None  # a band's level refused on trial: the limit held under it

    def faded(self, now: float, fade: float) -> int:
        """The failed rounds as they count at `now`, rounded."""
        if now > self.failed_at and self.failures:
            self.failures *= 0.5 ** ((now - self.failed_at) / fade)
        self.failed_at = max(self.failed_at, now)
        return round(self.failures)

    def failed(self, now: float, pace: Pace) -> None:
        """A round failed: a probe refused or given up, or a level on trial refused."""
        self.probe_since = None
        self.faded(now, pace.fade)
        self.failures += 1.0
        wait = min(pace.base * float(2 ** min(self.faded(now, pace.fade), 30)), pace.most)
        self.ready_at = max(self.ready_at, now + (pace.base if pace.moved_lately(now) else wait))

    def answered(self) -> None:
        """A probe answered cleanly above the limit: the next may go at once."""
        self.probe_since, self.ready_at, self.closed = None, -math.inf, None

    def held(self, value: int | None, learned: int | None) -> int | None:
        """The limit, from `value`, when the evidence says `learned`: under a closed level; a rise puts the
        levels above `value` on trial, a fall to a level not on trial that level."""
        if learned is None or value is None:
            return learned
        learned = learned if self.closed is None else min(learned, self.closed)
        if learned > value:
            opened = value if self.opened_from is None else min(self.opened_from, value)
            self.opened_from, self.trial = opened, (0, 0 if self.opened_from is None else self.trial[1])
        elif learned < value and (self.opened_from is None or learned <= self.opened_from):
            self.opened_from, self.trial = learned - 1, (0, 0)
        return learned

    def verdict(self, now: float, pace: Pace, level: int, value: int | None, *, refused: bool) -> None:
        """A verdict at `level` (the limit `value` before the verdict moves it): refused, no probe for the
        base wait; at a level on trial, counted (see the module)."""
        if refused:
            self.ready_at = max(self.ready_at, now + pace.base)
        if self.opened_from is None or value is None or not max(self.opened_from, 1) < level <= value:
            return
        self.trial = (self.trial[0] + (not refused), self.trial[1] + refused)
        if self.trial[1] > NOISE * TRIAL:  # a band: the level closed, the trial over
            self.closed, self.opened_from = level - 1, None
            self.failed(now, pace)
            self.ready_at = max(self.ready_at, now + pace.most)
        elif self.trial[0] >= TRIAL:
            self.opened_from = None

    def due(self, pace: Pace) -> float:
        """When a probe may go (monotonic): its wait over, none out (one out holds for the base wait)."""
        out = -math.inf if self.probe_since is None else self.probe_since + pace.base
        return max(self.ready_at, out)


@dataclass(slots=True)
class Pace:
    """The pace every limit's exploration follows: `base` and `most` seconds of wait, failures fading over
    `fade` seconds, and the latest detected change (`rose`: the limits rose)."""

    base: float
    most: float
    fade: float
    changed_at: float = -math.inf
    rose: bool = False
    seen: tuple[int, int] = (0, 0)  # changes detected so far: the limits fell, the limits rose

    def moved_lately(self, now: float) -> bool:
        """Whether z.ai was seen to move within `most` seconds."""
        return now - self.changed_at < self.most
