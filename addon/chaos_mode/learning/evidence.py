"""What z.ai said at each level of one limit, and the limit that evidence supports.

The model of z.ai (`zai.assumptions.REFUSALS_RISE_WITH_LOAD`, `NOISE`, `MAY_QUEUE`): a request that arrives
with n requests in flight on a limit (itself included) is refused with a probability p(n) that never falls
as n grows: zero up to a clean level, then rising at once (a hard limit) or through a band (a soft one), and
a little at any level (noise). A head held instead of a refusal (a z.ai that queues) is a refusal here too.

1. **Evidence.** Each verdict is an observation at one level: what z.ai served when its request came
   (`routing.arrivals`), or for a clean answer what it serves at once now if more. A level remembers its
   last `MEMORY` observations (each new one weighs 1, the older fade by `1 - 1/MEMORY`): its word is recent
   whatever the pace, and kept until a probe tests it again. Every observation also fades with time
   (half-life `fade_seconds`) toward the catalog's value; each level counts a clean answer of prior that
   never fades (`PRIOR`). **A word contradicted by a newer one fades fast**: a refusal at n says z.ai
   refuses every level from n up, a clean answer that it serves every level up to n, so a level's clean
   answers older than a refusal at or under it, and its refusals older than a clean answer at or above it,
   count half per `CONTRADICTED_HALF_LIFE` between the two (a limit halved, then restored; under noise or
   a band both kinds keep coming, and the discount stays small).
2. **A level is refused** when using it loses answers. A slot's goodput at the refusal rate p is
   (1 - p) / ((1 - p) + p * cost) answers per slot-time: a clean request holds it one slot-time (the pool's
   average service), a refused one `cost` (`LearnedLimits.cost`) and is sent again, so a refusal loses its
   time, not its answer. Level n pays over n - 1 (refused at `NOISE`) while p(n) is at most
   `tolerated(n, cost)`, a threshold set by the price alone. Level n is refused when a window of up to
   `WINDOW` levels ending at n (their rates are at most p(n)) holds more refusals than that explains: an
   exact binomial test, the prior included, at `SIGNIFICANCE`. Refusals above a level say nothing of it. As
   the thresholds ignore the evidence, a refusal never raises a limit and a clean answer never lowers one.
   One refusal never passes, two at an unserved level do (`UNSERVED`); so does a band, not noise under tau_n.
3. **A level is served** when its memory holds a clean answer at it or above, or it is within the catalog's
   value. **The limit is the highest served level under the lowest refused one.** Only probes go above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from chaos_mode.zai.assumptions import NOISE
from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

MEMORY: Final = 12  # observations a level remembers (rule 1)
SERVED_WEIGHT: Final = 0.05  # a clean answer this faded no longer shows a level as served
PRIOR: Final = 1.0  # a clean answer assumed at every level (rule 1)
# As likely as one refusal in two tries at the noise rate (one refusal and the prior): one refusal alone
# never refuses a level.
SIGNIFICANCE: Final = 1.0 - (1.0 - NOISE) ** 2
# The rate a level never served (no clean answer at it or above) is held to: two refusals there (the first
# faded by the second, with the prior) are less likely than `SIGNIFICANCE` under it, so a hard limit is found
# at its second refusal even where a refusal costs little (levels 1-3 at 3 slot-times).
UNSERVED: Final = 1.0 / 6.0
# z.ai's quickest refusal: a z.ai that still served a level would have answered there again within that.
CONTRADICTED_HALF_LIFE: Final = EARLIEST_REFUSAL_SECONDS
# The levels a test reads (rule 2), n included: a limit that fell is refused over the levels a full pool
# sends at, a refusal or two at each.
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


def tolerated(level: int, cost: float) -> float:
    """tau_n: the highest refusal rate at which `level` answers as much as the level under it at `NOISE`,
    n * goodput(tau_n) = (n - 1) * goodput(NOISE) (level 1 held to level 2's rate). In odds x = p / (1 - p):
    x_n = (n * (1 + cost * x_noise) - (n - 1)) / (cost * (n - 1))."""
    under = max(level - 1, 1)
    noise = NOISE / (1.0 - NOISE)
    odds = ((under + 1) * (1.0 + cost * noise) - under) / (cost * under)
    return odds / (1.0 + odds)


def chance_of_as_many(refused: float, total: float, rate: float) -> float:
    """How likely `refused` or more refusals in `total` tries are at the refusal rate `rate` (1 for none):
    the binomial tail, I_rate(refused, total - refused + 1), which takes faded counts as they are."""
    if refused <= 0.0 or rate >= 1.0:
        return 1.0
    if rate <= 0.0:
        return 0.0
    return _regularized_beta(rate, refused, max(total - refused, 0.0) + 1.0)


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 < x < 1, a, b > 0: its continued fraction (modified Lentz), on its fast side."""
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    log_beta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(log_beta + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    fraction = d = 1.0 / (d if abs(d) > tiny else tiny)
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
        self.forget()

    def forget(self) -> None:
        """Back to no evidence at all."""
        self._levels = [Level() for _ in range(self.ceiling + 2)]  # index = level; 0 unused
        self._top = 0  # the highest level observed: nothing above it to look at

    def observe(self, level: int, *, refused: bool, now: float, weight: float = 1.0) -> None:
        """One verdict at `level` (clamped to 1 .. ceiling + 1), `weight` of it (a shared refusal's part)."""
        level = min(max(level, 1), self.ceiling + 1)
        self._top = max(self._top, level)
        entry = self._levels[level]
        if now > entry.at:  # faded with time, as `_weights` fades every level
            if entry.clean or entry.refused:
                factor = 0.5 ** ((now - entry.at) / self.fade_seconds)
                entry.clean, entry.refused = entry.clean * factor, entry.refused * factor
            entry.at = now
        keep = 1.0 - weight / MEMORY
        entry.clean, entry.refused = entry.clean * keep, entry.refused * keep
        if refused:
            entry.refused, entry.refused_at = entry.refused + weight, now
        else:
            entry.clean, entry.clean_at = entry.clean + weight, now

    def _weights(self, now: float) -> Weights:
        """Each level's (clean, refused) weights as they count now (index = level, up to the highest one
        observed): faded with time (half-life `fade_seconds`), and discounted where a newer word contradicts
        them (rule 1): half per `CONTRADICTED_HALF_LIFE` between the two."""
        levels, top, fade = self._levels, self._top, self.fade_seconds
        newest_refusal = [-math.inf] * (top + 1)  # the latest refusal at or under each level
        newest = -math.inf
        for level in range(1, top + 1):
            entry = levels[level]
            if now > entry.at:
                if entry.clean or entry.refused:
                    factor = 0.5 ** ((now - entry.at) / fade)
                    entry.clean, entry.refused = entry.clean * factor, entry.refused * factor
                entry.at = now
            if entry.refused_at > newest:
                newest = entry.refused_at
            newest_refusal[level] = newest
        weights = [(0.0, 0.0)] * (top + 1)
        newest = -math.inf  # the latest clean answer at or above the level
        for level in range(top, 0, -1):
            entry = levels[level]
            if entry.clean_at > newest:
                newest = entry.clean_at
            clean, refused = entry.clean, entry.refused
            if (seconds := newest_refusal[level] - entry.clean_at) > 0.0:
                clean *= 0.5 ** (seconds / CONTRADICTED_HALF_LIFE)
            if refused and (seconds := newest - entry.refused_at) > 0.0:
                refused *= 0.5 ** (seconds / CONTRADICTED_HALF_LIFE)
            weights[level] = (clean, refused)
        return weights

    def refusal_estimate(self, level: int, now: float) -> float:
        """How likely a request sent at `level` is refused (a Beta posterior's mean, to share a refusal
        between the limits it may be): the level's refusals against the clean answers at it and above (z.ai
        serving more serves this many), with its prior and one refusal of prior."""
        level = min(max(level, 1), self.ceiling + 1)
        weights = self._weights(now)
        refused = weights[level][1] if level <= self._top else 0.0
        clean = sum(weight[0] for weight in weights[level:])
        return (refused + 1.0) / (refused + clean + PRIOR + 1.0)

    def refused_level(self, cost: float, weights: Weights) -> int | None:
        """The lowest level refused (rule 2) by `weights` (`_weights(now)`), else None."""
        top = len(weights) - 1  # the highest level observed: the windows above it read up to it
        refusals = [refused for _, refused in weights]
        if sum(refusals) < 1.0 - 1e-9:  # under one refusal in all (the sums' rounding aside): the common case
            return None  # no window holds more than one
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
                over = above > 0.0 and above * above > total * pays * (1.0 - pays)
                if over and chance_of_as_many(refused, total, pays) < SIGNIFICANCE:
                    return level
        return None

    def limit(self, now: float, cost: float) -> int | None:
        """The highest served level under the lowest refused one (rule 3); None when nothing bounds it (an
        account with no configured limit, before any refusal)."""
        weights = self._weights(now)  # once for both rules
        refused = self.refused_level(cost, weights)
        start = self.start or 0
        served = next((n for n in range(self._top, start, -1) if weights[n][0] >= SERVED_WEIGHT), start)
        served = min(served, self.ceiling)
        if refused is None:
            return None if self.start is None else served
        return min(served, refused - 1)

    def answered_at(self, value: int, now: float) -> bool:
        """Whether z.ai answered cleanly at `value` or above lately (not the catalog's word; 0 ran full)."""
        return value < 1 or any(clean >= SERVED_WEIGHT for clean, _ in self._weights(now)[value:])

    def answered_since(self, value: int, since: float) -> bool:
        """Whether z.ai answered cleanly at `value` or above at `since` (monotonic) or later."""
        return any(entry.clean_at >= since for entry in self._levels[max(value, 1) : self._top + 1])
