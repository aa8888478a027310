"""The bounds of one window: readings and the proxy's own count narrow (total, headroom) to the truth and
never cut it off, whether z.ai's percentage is rounded down, to the nearest or up."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos_mode.quota.bounds import Bounds
from chaos_mode.quota.ledger import Ledger

ROUNDINGS: dict[str, Callable[[Fraction], int]] = {
    "down": math.floor,
    "nearest": lambda x: math.floor(x + Fraction(1, 2)),
    "up": math.ceil,
}


def percent(used: float, total: float, rounding: str = "down") -> int:
    """z.ai's percentage: whole, at most 100 (as the simulator and public monitors show it), of the exact
    share (in floats, 11 / 20 * 100 is 55.00000000000001, which rounds up to 56)."""
    return max(0, min(ROUNDINGS[rounding](Fraction(used) * 100 / Fraction(total)), 100))


def test_a_reading_before_any_traffic_knows_nothing_of_the_total() -> None:
    bounds = Bounds(whole=True)
    bounds.read(0, lo=0, hi=0)
    assert not bounds.known


def test_readings_at_several_percents_know_the_total_and_the_headroom() -> None:
    """A total of 200, nothing used by others: each reading with nothing in flight (lo == hi)."""
    bounds = Bounds(whole=True)
    for used in (0, 37, 81, 120, 151, 177, 193):
        bounds.read(percent(used, 200), lo=used, hi=used)
    least, greatest = bounds.total()
    assert least <= 200 <= greatest and greatest - least < 10
    assert bounds.known
    assert 197 <= bounds.headroom()[0] <= 200  # what is left: at least 4 of the 7


def test_the_last_prompt_is_pinned_with_whole_units() -> None:
    """199 of 200 used, shown 99%: u < 100%, so one more whole prompt fits."""
    bounds = Bounds(whole=True)
    for used in (0, 50, 100, 150, 199):
        bounds.read(percent(used, 200), lo=used, hi=used)
    assert bounds.headroom()[0] - 199 == 1
    bounds.read(percent(200, 200), lo=200, hi=200)
    assert bounds.headroom()[0] - 200 == 0  # all of it: not one more


def test_other_use_of_the_window_is_the_headroom_less_than_the_total() -> None:
    """Others used 60 of 200 before the count began: the headroom is 140."""
    bounds = Bounds(whole=True)
    for ours in (0, 30, 60, 90, 120, 139):
        bounds.read(percent(60 + ours, 200), lo=ours, hi=ours)
    assert bounds.headroom()[0] <= 140
    assert bounds.headroom()[0] >= 139  # one more fits: 199 of 200


def test_requests_in_flight_widen_the_bounds_until_they_are_answered() -> None:
    bounds = Bounds(whole=True)
    bounds.read(0, lo=0, hi=0)
    bounds.read(percent(58, 200), lo=50, hi=58)  # 8 in flight, charged already
    wide = bounds.headroom()[0]
    bounds.read(percent(58, 200), lo=58, hi=58)  # answered: the count is exact
    assert wide <= bounds.headroom()[0] <= 200


def test_a_reading_at_its_tightest_still_allows_the_truth() -> None:
    """101 units, 1 used: 100 u is (p + 1) T - 1, the closest a percentage of 0 can be to 1%."""
    bounds = Bounds(whole=True)
    bounds.read(percent(1, 101), lo=1, hi=1)
    assert bounds.allows(101, 101)
    bounds.read(percent(100, 101), lo=100, hi=100)  # 99%: u < 100% by a hundredth of a unit
    assert bounds.allows(101, 101) and bounds.headroom()[0] - 100 >= 1


def test_a_1308_says_the_headroom_is_spent() -> None:
    bounds = Bounds(whole=True)
    for used in (0, 60, 120):
        bounds.read(percent(used, 200), lo=used, hi=used)
    bounds.spent(hi=200)
    assert bounds.headroom()[0] <= 200
    assert bounds.total()[1] <= 200 * 1.05


def test_readings_that_contradict_start_again_from_the_latest() -> None:
    bounds = Bounds(whole=True)
    for used in (0, 60, 120):
        bounds.read(percent(used, 200), lo=used, hi=used)
    bounds.read(10, lo=120, hi=120)  # a new window, say: 120 counted is not 10% of a total near 200
    assert bounds.restarts == 1 and not bounds.known


# -- the property: the truth is never cut off ---------------------------------------------------------


@dataclass
class Request:
    weight: int
    charged: bool = False
    open: bool = True


@dataclass
class Account:
    """A window of `total` units, `others` used apart from the count; z.ai charges a request between its
    arrival and its answer, never one it refuses; one that ends with no verdict, perhaps."""

    total: int
    others: int
    ledger: Ledger = field(default_factory=Ledger)
    requests: list[Request] = field(default_factory=list)

    @property
    def used(self) -> int:
        return self.others + sum(r.weight for r in self.requests if r.charged)

    @property
    def headroom(self) -> int:
        return self.total - self.others

    def step(self, draw: st.DrawFn) -> None:
        """One moment of traffic: some requests sent, each open one charged, answered, refused, ended."""
        for _ in range(draw(st.integers(0, 4))):
            self.requests.append(Request(draw(st.sampled_from((1, 1, 1, 3)))))
            self.ledger.sent(len(self.requests) - 1, self.requests[-1].weight)
        for key, request in enumerate(self.requests):
            if not request.open:
                continue
            what = draw(st.sampled_from(("wait", "charge", "answer", "answer", "refuse", "end")))
            if what == "charge" or (what == "answer" and not request.charged):
                request.charged = True
            if what == "answer":
                request.open = False
                self.ledger.answered(key)
            elif what == "refuse" and not request.charged:
                request.open = False
                self.ledger.refused(key)
            elif what == "end":
                request.open = False
                request.charged = request.charged or draw(st.booleans())
                self.ledger.ended(key)


@settings(max_examples=150, deadline=None)
@given(st.integers(20, 3000), st.floats(0, 0.9), st.sampled_from(sorted(ROUNDINGS)), st.data())
def test_the_bounds_never_cut_the_truth_off(
    total: int, share: float, rounding: str, data: st.DataObject
) -> None:
    account = Account(total, int(total * share))
    bounds = Bounds(whole=True)
    for _ in range(data.draw(st.integers(1, 25))):
        lo = account.ledger.lo  # asked for
        account.step(data.draw)  # z.ai reads its figure somewhere in here
        shown = percent(account.used, total, rounding)
        account.step(data.draw)
        assert lo <= account.used - account.others <= account.ledger.hi
        bounds.read(shown, lo=lo, hi=account.ledger.hi)  # answered
        if account.used >= total and data.draw(st.booleans()):
            bounds.spent(account.ledger.hi)  # a 1308
        assert bounds.restarts == 0
        assert bounds.allows(total, account.headroom)
        assert (
            bounds.headroom()[0] <= account.headroom
        )  # so what the hard stop lets go never passes the total
