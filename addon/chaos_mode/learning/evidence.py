"""What z.ai said at each level of one limit, and the limit that evidence supports.

The model of z.ai it assumes (`zai.assumptions.REFUSALS_RISE_WITH_LOAD`, `zai.assumptions.NOISE`,
`zai.assumptions.MAY_QUEUE`; the field's shapes, docs/learning.md): z.ai refuses a request that arrives
with n requests in flight on a limit (a model's, or the account's; the request itself included) with a
probability p(n) that never falls as n grows. Zero up to a clean level, then rising: at once (a hard
limit) or through a band (a soft one), and a little at any level (noise: "works again a few seconds
later"). Holding a request's head instead of refusing it (a z.ai that queues) is a refusal here too.

One estimator, three rules:

1. **Evidence.** Each verdict is an observation at one level: what z.ai served when its request came
   (`routing.arrivals`: a refusal, a stall), or for a clean answer that or what z.ai serves at once now,
   whichever is more. A level remembers its last `MEMORY` observations: each new one there weighs 1 and
   the older ones fade by `1 - 1/MEMORY`, so a level's word is recent whatever the pace of the traffic,
   and a level nobody sends at keeps its word until a probe tests it again. Every observation also fades
   with time (half-life `fade_seconds`): what was learned long ago gives way to the catalog's value.
   Each level also counts one clean answer of prior that never fades (`PRIOR`). **A word contradicted by
   a newer one fades fast**: p never falls as n grows, so a refusal at n says z.ai refuses at every level
   from n up, and a clean answer at n that it serves every level up to n. A level's clean answers older
   than a refusal at or under it, and its refusals older than a clean answer at or above it, count half
   for every `CONTRADICTED_HALF_LIFE` between the two: they speak of a z.ai that has since moved (a limit
   halved, then restored), unless the side contradicted speaks again. While both kinds keep coming (noise,
   a band) the gap is short and so is the discount.
2. **A level is refused** when using it loses answers (`goodput`). Operating at n (a full pool sends
   every request at its top level), each slot answers at the rate `goodput` gives for p(n); level n pays
   over n - 1 (refused at `NOISE`) while p(n) is at most `tolerated(n, cost)`, a threshold set by the price
   alone. Level n is refused when the evidence of n with the levels just under it (each window of up to
   `WINDOW` levels ending at n: p never falls as n grows, so their rate is at most p(n)) holds more refusals
   than tau_n explains: an exact binomial test (a prior clean answer included) at `SIGNIFICANCE`. Refusals
   above a level say nothing of it. The thresholds do not depend on the evidence, so a refusal never
   raises a limit and a clean answer never lowers one. One refusal never passes (one in two tries is that
   likely at `NOISE`); two at a level nobody was served at do (`UNSERVED`: a hard limit is found at its second
   refusal); noise under tau_n moves no limit; a band that rises over it does (a soft limit, a fallen one).
3. **A level is served** when z.ai answered cleanly at it or above it (its memory holds such an answer),
   or when it is within the catalog's value. **The limit is the highest served level under the lowest
   refused one.** Above it, only probes go (the pool's, one at a time, paced: see `limits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from chaos_mode.zai.assumptions import NOISE
from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

MEMORY: Final = 12  # observations a level remembers (older ones fade by 1 - 1/MEMORY per new one)
SERVED_WEIGHT: Final = 0.05  # a clean answer this faded no longer shows a level as served
PRIOR: Final = 1.0  # a clean answer assumed at every level before any is seen (it never fades)
# A level is refused when its refusals are less likely than this under the highest rate worth the level:
# as likely as one refusal in two tries at the noise rate (one refusal and the prior), so that one refusal
# alone never refuses a level.
SIGNIFICANCE: Final = 1.0 - (1.0 - NOISE) ** 2
# The highest rate a level z.ai never served (no clean answer remembered at it or above) is held to: under
# it, two refusals there (with the prior clean answer, the first faded by the second) are less likely than
# `SIGNIFICANCE`, so that a hard limit is found at its second refusal even where a refusal costs little
# (levels 1 to 3 at a price of 3 slot-times). Nothing says such a level is worth a slot.
UNSERVED: Final = 1.0 / 6.0
# The half-life of a word contradicted by a newer one (rule 1): z.ai's quickest refusal. A z.ai that still
# served a level would have answered there again within that; one that moved has not.
CONTRADICTED_HALF_LIFE: Final = EARLIEST_REFUSAL_SECONDS
# The levels a level's test reads, itself included (rule 2): a limit that fell is refused over the levels a
# full pool sends at, a refusal or two at each.
WINDOW: Final = 3

type Weights = list[tuple[float, float]]  # each level's (clean, refused) as they count now; index = level


@dataclass(slots=True)
class Level:
    """The decayed counts of one level: clean answers and refusals (stalls included)."""

    clean: float = 0.0
    refused: float = 0.0
    at: float = 0.0  # when these weights were last brought up to date (monotonic)
    clean_at: float = -math.inf  # the latest clean answer here
    refused_at: float = -math.inf  # the latest refusal here


def goodput(refused: float, cost: float) -> float:
    """What one slot answers per slot-time when z.ai refuses its requests at the rate `refused`: a clean
    request holds the slot one slot-time (the pool's moving average of its requests' service), a refused one
    `cost` slot-times (the time it blocks the slot, plus what a refusal costs beyond time:
    `LearnedLimits.cost`). A refused request is sent again, so a refusal loses its time, not its answer:
    (1 - p) / ((1 - p) + p * cost)."""
    return (1.0 - refused) / ((1.0 - refused) + refused * cost)


def tolerated(level: int, cost: float) -> float:
    """tau_n: the highest refusal rate at which `level` answers at least as much as the level under it does
    at `NOISE`, level * goodput(tau_n) = (level - 1) * goodput(NOISE) (level 1 is held to level 2's rate). In
    odds x = p / (1 - p): x_n = (n * (1 + cost * x_noise) - (n - 1)) / (cost *
    (n - 1))."""
    under = max(level - 1, 1)
    noise = NOISE / (1.0 - NOISE)
    odds = ((under + 1) * (1.0 + cost * noise) - under) / (cost * under)
    return odds / (1.0 + odds)


def chance_of_as_many(refused: float, total: float, rate: float) -> float:
    """How likely `refused` or more refusals in `total` tries are when z.ai refuses at `rate`: the binomial
    tail, I_rate(refused, total - refused + 1) (the regularized incomplete beta function, which takes the
    faded counts as they are). 1 for no refusal at all."""
    if refused <= 0.0 or rate >= 1.0:
        return 1.0
    if rate <= 0.0:
        return 0.0
    return _regularized_beta(rate, refused, max(total - refused, 0.0) + 1.0)


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 < x < 1, a, b > 0: by its continued fraction (modified Lentz), on the side where it
    converges fast."""
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 200):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-10:
            break
    return min(max(front * fraction / a, 0.0), 1.0)


class LevelEvidence:
    """The evidence of one limit, level by level (1 .. ceiling + 1), and the limit it supports."""

    __slots__ = ("_levels", "_top", "ceiling", "fade_seconds", "start")

    def __init__(self, start: int | None, ceiling: int, fade_seconds: float) -> None:
        self.start = start  # the catalog's (or the config's) value: served without evidence; None: none
        self.ceiling = ceiling
        self.fade_seconds = fade_seconds  # the half-life of every observation
        self._levels = [Level() for _ in range(ceiling + 2)]  # index = level; 0 unused
        self._top = 0  # the highest level observed: nothing above it to look at

    def observe(self, level: int, *, refused: bool, now: float, weight: float = 1.0) -> None:
        """One verdict at `level` (clamped to 1 .. ceiling + 1), `weight` of it (a refusal that may be
        another limit's counts in part)."""
        level = min(max(level, 1), self.ceiling + 1)
        self._top = max(self._top, level)
        entry = self._levels[level]
        self._age(entry, now)
        keep = 1.0 - weight / MEMORY
        entry.clean *= keep
        entry.refused *= keep
        if refused:
            entry.refused += weight
            entry.refused_at = now
        else:
            entry.clean += weight
            entry.clean_at = now

    def _age(self, entry: Level, now: float) -> None:
        if now > entry.at:
            if entry.clean or entry.refused:
                factor = 0.5 ** ((now - entry.at) / self.fade_seconds)
                entry.clean *= factor
                entry.refused *= factor
            entry.at = now

    def _weights(self, now: float) -> Weights:
        """Each level's (clean, refused) weights as they count now (index = level, up to the highest one
        observed): faded with time, and discounted where a newer word contradicts them (rule 1)."""
        levels = self._levels
        top = self._top
        newest_refusal = [-math.inf] * (top + 2)  # the latest refusal at or under each level
        for level in range(1, top + 1):
            self._age(levels[level], now)
            newest_refusal[level] = max(newest_refusal[level - 1], levels[level].refused_at)
        weights = [(0.0, 0.0)] * (top + 1)
        newest_clean = -math.inf  # the latest clean answer at or above the level
        for level in range(top, 0, -1):
            entry = levels[level]
            newest_clean = max(newest_clean, entry.clean_at)
            weights[level] = (
                entry.clean * _contradicted(newest_refusal[level] - entry.clean_at),
                entry.refused * _contradicted(newest_clean - entry.refused_at),
            )
        return weights

    def refusal_estimate(self, level: int, now: float) -> float:
        """How likely a request sent at `level` is refused, as far as the evidence says: the level's own
        refusals against the clean answers at it and above (p never falls as n grows, so z.ai serving more
        says it serves this many), with the level's prior and one refusal of prior (a Beta posterior's mean).
        It shares a refusal between the limits it may belong to."""
        level = min(max(level, 1), self.ceiling + 1)
        weights = self._weights(now)
        refused = weights[level][1] if level <= self._top else 0.0
        clean = sum(weight[0] for weight in weights[level:])
        return (refused + 1.0) / (refused + clean + PRIOR + 1.0)

    def refused_level(self, now: float, cost: float, weights: Weights | None = None) -> int | None:
        """The lowest level refused (rule 2), else None. `cost`: a refusal's cost in slot-times (how long z.ai
        takes to refuse over how long a slot serves); `weights`: `_weights(now)`, when already worked out."""
        weights = self._weights(now) if weights is None else weights
        top = len(weights) - 1  # the highest level observed: the windows above it read up to it
        refusals = [refused for _, refused in weights]
        served = max((n for n in range(1, top + 1) if weights[n][0] >= SERVED_WEIGHT), default=0)
        for level in range(1, min(top + WINDOW, self.ceiling + 2)):
            lowest = max(level - WINDOW + 1, 1)
            if sum(refusals[lowest : level + 1]) <= 1.0:
                continue  # one refusal never passes
            pays = tolerated(level, cost) if level <= served else min(tolerated(level, cost), UNSERVED)
            refused = clean = 0.0
            for under in range(min(level, top), lowest - 1, -1):
                clean += weights[under][0]
                refused += weights[under][1]
                total = refused + clean + PRIOR
                above = refused - pays * total  # the refusals over those the rate explains
                # the tail read only a standard deviation over (passing takes 1.29 or more)
                if (
                    above > 0.0
                    and above * above > total * pays * (1.0 - pays)
                    and chance_of_as_many(refused, total, pays) < SIGNIFICANCE
                ):
                    return level
        return None

    def limit(self, now: float, cost: float) -> int | None:
        """The highest served level under the lowest refused one; None when nothing bounds it (an account
        with no configured limit, before any refusal). `cost` as for `refused_level`."""
        weights = self._weights(now)  # once for both rules
        refused = self.refused_level(now, cost, weights)
        # the highest level served (rule 3): a clean answer remembered at it or above, or the catalog's
        start = self.start or 0
        served = next((n for n in range(self._top, start, -1) if weights[n][0] >= SERVED_WEIGHT), start)
        served = min(served, self.ceiling)
        if refused is None:
            return None if self.start is None else served
        return min(served, refused - 1)

    def answered_at(self, value: int, now: float) -> bool:
        """Whether z.ai answered cleanly at `value` or above lately (not only the catalog's word)."""
        weights = self._weights(now)
        return any(clean >= SERVED_WEIGHT for clean, _ in weights[max(value, 1) :])

    def answered_since(self, value: int, since: float) -> bool:
        """Whether z.ai answered cleanly at `value` or above at `since` (monotonic) or later."""
        return any(entry.clean_at >= since for entry in self._levels[max(value, 1) : self._top + 1])

    def forget(self) -> None:
        """Back to no evidence at all."""
        self._levels = [Level() for _ in range(self.ceiling + 2)]
        self._top = 0


def _contradicted(seconds: float) -> float:
    """What a word still counts when a contradicting one came `seconds` after it (none later, or no word at
    all: NaN or less than 0, 1)."""
    return 0.5 ** (seconds / CONTRADICTED_HALF_LIFE) if seconds > 0.0 else 1.0
