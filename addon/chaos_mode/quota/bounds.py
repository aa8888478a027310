"""What z.ai's readings of one window say of its total and of what is left, given the proxy's own count.

Two unknowns: the window's **total** T (in `quotaWeight` units) and the **headroom** H = T - o, where o
is what the account had used of the window apart from the proxy's own count (`quota.ledger`: other
clients, and the proxy's requests before its count began). The window's used share is then
u = T - H + C, C being what z.ai charged of the proxy's requests, known only between the ledger's `lo`
(answered cleanly) and `hi` (not refused). A reading of `percentage` p, whether z.ai rounds it down, to
the nearest or up, says (p - 1)% < u / T < (p + 1)%; with C between the ledger's `lo` when the reading
was asked for and its `hi` when it came, each reading is two half-planes in (T, H):

    H > lo + T (99 - p) / 100        (u below p + 1 percent; not for 100, which z.ai shows of any excess)
    H < hi + T (101 - p) / 100       (u above p - 1 percent)

and a 1308 (u reached T) one more: H <= hi. The window's readings together bound a convex polygon that
holds the truth; readings at several phases of z.ai's whole-percent ticks narrow it. What is left to
send is then at least the least `headroom()` less `hi`: the hard stop of `quota.pacer`, once the total
is `known`.
With **whole** units (integer weights, a whole total) each strict inequality is a hundredth tighter and
the headroom rounds up to a whole unit: the polygon then pins the last prompt. The arithmetic is exact
(fractions): no rounding cuts the truth off. Readings that contradict each other (another client spent
meanwhile, a weight is wrong) leave no polygon: it starts again from the latest reading (`restarts`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Final

KNOWN_WITHIN: Final = 2.0  # the total is known once its greatest value is at most this times its least
BIG: Final = Fraction(10**12)  # the box the polygon starts as: a total or headroom beyond it is unknown
Point = tuple[Fraction, Fraction]  # (total, headroom)


def _clip(polygon: list[Point], a: Fraction, b: Fraction, c: Fraction) -> list[Point]:
    """The part of convex `polygon` where a * total + b * headroom <= c."""
    kept: list[Point] = []
    for i, here in enumerate(polygon):
        there = polygon[(i + 1) % len(polygon)]
        d_here = a * here[0] + b * here[1] - c
        d_there = a * there[0] + b * there[1] - c
        if d_here <= 0:
            kept.append(here)
        if (d_here < 0 < d_there) or (d_there < 0 < d_here):
            share = d_here / (d_here - d_there)
            kept.append((here[0] + share * (there[0] - here[0]), here[1] + share * (there[1] - here[1])))
    return kept


def _box(whole: bool) -> list[Point]:
    least = Fraction(1) if whole else Fraction(0)
    return [(least, -BIG), (BIG, -BIG), (BIG, BIG), (least, BIG)]


class Bounds:
    """The (total, headroom) polygon of one window (see the module docstring)."""

    def __init__(self, *, whole: bool) -> None:
        self.whole = whole
        self.readings = 0
        self.restarts = 0
        self._polygon = _box(whole)

    def read(self, percent: float, lo: float, hi: float) -> None:
        """z.ai said `percent` used while the proxy's count was at least `lo` (when it was asked) and at
        most `hi` (when it answered)."""
        p = Fraction(percent)
        step = Fraction(1, 100) if self.whole and p.denominator == 1 else Fraction(0)
        # each a half-plane a T + b H <= c: first H <= hi + T (101 - p) / 100 (- step)
        halves = [(-(101 - p) / 100, Fraction(1), Fraction(hi) - step)]
        if p < 100:  # 100 is all z.ai shows of a window spent or overspent: no upper bound on u
            halves.append(
                ((99 - p) / 100, Fraction(-1), -(Fraction(lo) + step))
            )  # H >= lo + T (99 - p) / 100
        self._add(halves)
        self.readings += 1

    def carried(self) -> Bounds:
        """The next window's bounds: its total is this one's (a plan's cap does not change at a reset;
        a reading that says otherwise contradicts it, and the latest word alone stands)."""
        totals = [t for t, _ in self._polygon]
        bounds = Bounds(whole=self.whole)
        bounds._add([(Fraction(-1), Fraction(0), -min(totals)), (Fraction(1), Fraction(0), max(totals))])
        return bounds

    def spent(self, hi: float) -> None:
        """z.ai answered 1308 to a request sent while the proxy's count was at most `hi`: u reached T."""
        self._add([(Fraction(0), Fraction(1), Fraction(hi))])

    def _add(self, halves: list[tuple[Fraction, Fraction, Fraction]]) -> None:
        polygon = self._polygon
        for a, b, c in halves:
            polygon = _clip(polygon, a, b, c)
        if not polygon:  # contradicted: the latest word alone
            self.restarts += 1
            polygon = _box(self.whole)
            for a, b, c in halves:
                polygon = _clip(polygon, a, b, c)
        self._polygon = polygon

    @property
    def known(self) -> bool:
        """Whether the readings know the total within a factor of `KNOWN_WITHIN` (until then, the least
        headroom is that of a total far below the truth, as likely as the greatest: too little to go on)."""
        least, greatest = self.total()
        return least > 0 and greatest <= KNOWN_WITHIN * least

    def allows(self, total: float, headroom: float) -> bool:
        """Whether the readings allow this total and headroom (the polygon, counter-clockwise, holds it)."""
        t, h = Fraction(total), Fraction(headroom)
        polygon = self._polygon
        for i, (t0, h0) in enumerate(polygon):
            t1, h1 = polygon[(i + 1) % len(polygon)]
            if (t1 - t0) * (h - h0) - (h1 - h0) * (t - t0) < 0:
                return False
        return True

    def total(self) -> tuple[float, float]:
        """The total's least and greatest values the readings allow."""
        totals = [t for t, _ in self._polygon]
        return float(min(totals)), float(max(totals))

    def headroom(self) -> tuple[float, float]:
        """The headroom's least and greatest values the readings allow (whole units: rounded inwards)."""
        headrooms = [h for _, h in self._polygon]
        least, greatest = min(headrooms), max(headrooms)
        if self.whole:
            return float(math.ceil(least)), float(math.floor(greatest))
        return float(least), float(greatest)
