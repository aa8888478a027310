"""Whether an overdue attempt lends its place: the pool's own check of zai.assumptions.REFUSED_HOLDS_NO_SLOT.

Lending (`Ledger.overdue`) rests on z.ai holding no slot for a request it is refusing. If z.ai holds it until
its 1302, a request sent into the lent place finds z.ai full and is refused too, and holds in turn. So the
pool watches the requests sent into lent places (taken above a limit while an overdue attempt rides there:
`SlotRecord.lent`) against the regular ones (neither lent nor a probe), at their level (what z.ai serves of
their model, the attempts riding above it left out):

1. **What a lent place may cost.** It pays while it is refused at a rate under `pays_under(cost)`, where its
   answer (a slot-time) is worth its refusals' price (`cost` slot-times each: `LearnedLimits.cost`). A limit
   that fell or a band refuses lent and regular requests alike: a lent request is expected to be refused at
   the higher of that rate and the rate of the last `LEVEL_MEMORY` regular requests of its model at its level
   and at each above it (z.ai refuses a level no more often than any above it:
   zai.assumptions.REFUSALS_RISE_WITH_LOAD), sent in the `EARLIEST_REFUSAL_SECONDS` before it (with half a
   clean answer of prior). With none, it says nothing while lending is on: every limit at 0 sends nothing
   regular, and read against the price alone, a z.ai refusing everything for a while turned lending off.
2. **A CUSUM in the order they were sent** (a 1302 comes seconds after a clean answer: in the order they
   came, the 1302s of a burst would line up as a run) of each lent request's verdict, the log-likelihood
   ratio of a rate halfway to refusing it always against the rate expected, over the last `LENT_MEMORY`.
   Reaching `ALARM_NATS`, lending turns off for the proxy's life (or until the config allows it again).
3. **Then the places of requests let go.** With lending off, z.ai holds what it refuses: an attempt left
   behind (its request gone on elsewhere) and held past its stall is closed, and z.ai drops it, its slot with
   it (`Forwarder._unless_held`, zai.assumptions.DROPS_ON_CLOSE). The place it frees is lent to the next
   request of its model taken within `EARLIEST_REFUSAL_SECONDS` (`Ledger._let_go_place`), and the CUSUM,
   started over, reads those: at its alarm z.ai keeps even a closed request's slot, and nothing is let go
   from then on (`kept_why`; this proxy's own).

**Each request is read once, at z.ai's first word on it** (`Ledger._checked`): its head (clean), its patience
passed with no head (as a refusal: what makes an attempt lend its place, `Ledger.overdue`, unless another
attempt of its request rides), else its verdict. Read at its 1302, 3 s on, a lent place refused told of the
cascade only once it had run for 3 s. With `bench.field.virtual --seeds 16`, read at its patience, noisy-held
and soft-held serve 71.5 % and 86.0 % of the bound (lending off by the config: 66.2 % and 69.9 %). Over 8
seeds the CUSUM reached at most 6.3 nats on soft, noisy, halved, changing, higher, today, queuing-late-heads,
fallen, other-client and mixed (a halving refuses a burst of lent requests too; read at its level alone, 8.6).
Through real mitmdumps, where the machine's timing adds to the model's, a check reached 0.8-7.3 nats on
`halved` (`bench.fleet.run --field halved --proxies 1,2,3`): hence the alarm at 9.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Final

from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

ALARM_NATS: Final = 9.0  # ten lent requests refused in a row where one in four was expected (ln 2.5 each)
LENT_MEMORY: Final = 32  # lent requests the CUSUM reads, the latest sent
# Regular requests a level's rate is read from, the latest heard, with half a clean answer of prior: a
# limit that fell refuses the regular requests sent with a lent one, and older clean answers would hide it
# (with four and a whole clean answer, a halving turned lending off on 13 of 16 seeds of `halved` when z.ai
# refuses in 1.5 s; with two and a whole one, a level refused 60 % of the time false-alarmed).
LEVEL_MEMORY: Final = 2
LEVEL_PRIOR: Final = 0.5


def pays_under(cost: float) -> float:
    """The refusal rate at which a lent place answers as much as its refusals cost: 1 / (1 + cost)."""
    return 1.0 / (1.0 + cost)


class Lending:
    """Whether an overdue attempt lends its place now (`on`), and why (`why`)."""

    def __init__(self) -> None:
        self.allowed = True  # `learning.lendOverdue`
        self.off_why: str | None = None  # the check turned it off: what it saw
        self.kept_why: str | None = None  # then found z.ai keeping a closed request's slot too: what it saw
        self._lent: list[tuple[float, bool, float]] = []  # (sent, refused, rate expected), by sending
        self._regular: dict[str, dict[int, deque[tuple[float, bool]]]] = {}  # (sent, refused) by model, level
        self._counts = [0, 0, 0, 0]  # lent refused, lent, regular refused, regular: what `why` says
        self.nats = 0.0  # the CUSUM's highest value so far: how near the check came to turning lending off

    @property
    def on(self) -> bool:
        return self.allowed and self.off_why is None

    @property
    def refusals_hold(self) -> bool:
        """The check found z.ai holding the slot of a request it refuses (not the config's word: unknown),
        and not keeping it once the request is closed: a left attempt held past its stall is let go."""
        return self.off_why is not None and self.kept_why is None

    @property
    def why(self) -> str:
        if not self.allowed:
            return "off: learning.lendOverdue is false"
        if self.off_why is not None:
            return self.off_why if self.kept_why is None else f"{self.off_why}; {self.kept_why}"
        lent_refused, lent, refused, regular = self._counts
        return (
            f"on: {lent_refused} of {lent} lent places refused, {refused} of {regular} regular ones "
            "(a lent place refused as the regular ones at its level: zai.assumptions.REFUSED_HOLDS_NO_SLOT)"
        )

    def allow(self, allowed: bool) -> None:
        """The config allows lending (`learning.lendOverdue`), or not; allowed anew, it is checked anew."""
        if allowed and not self.allowed:
            self.off_why, self.kept_why, self.nats = None, None, 0.0
            self._lent.clear()
        self.allowed = allowed

    def turn_off(self, why: str) -> bool:
        """Lending off for good (the config may allow it anew), `why`; False: it was off already. From then on
        the check reads the places of requests let go (`refusals_hold`): its next alarm ends that."""
        if not self.on:
            return False
        self.off_why = why
        self._lent.clear()
        return True

    def verdict(
        self, model: str, level: int, sent: float, *, lent: bool, refused: bool, cost: float
    ) -> str | None:
        """z.ai's first word on a request sent at `sent` at `level` of `model` (`lent`: into a lent place);
        why lending should be off now, else None (the alarm on the places let go sets `kept_why`)."""
        counts = self._counts
        if not lent:
            counts[2:] = [counts[2] + refused, counts[3] + 1]
            levels = self._regular.setdefault(model, {})
            levels.setdefault(level, deque(maxlen=LEVEL_MEMORY)).append((sent, refused))
            return None
        counts[:2] = [counts[0] + refused, counts[1] + 1]
        if not self.on and not self.refusals_hold:
            return None
        near = [
            r
            for n, seen in self._regular.get(model, {}).items()
            if n >= level
            for s, r in seen
            if sent - EARLIEST_REFUSAL_SECONDS <= s <= sent
        ]
        if not near and self.on:  # nothing regular to read it against (see the module)
            return None
        expected = max(pays_under(cost), sum(near) / (len(near) + LEVEL_PRIOR))
        bisect.insort(self._lent, (sent, refused, expected))
        del self._lent[:-LENT_MEMORY]
        high = _cusum(self._lent)
        self.nats = max(self.nats, high)
        if high < ALARM_NATS:
            return None
        if not self.on:  # this proxy's own: nothing to tell the fleet, nothing learned to forget
            self.kept_why = (
                f"no request let go: the places freed refused far more than they pay ({counts[0]} of "
                f"{counts[1]} lent in all): z.ai seems to keep the slot of a request it refuses even once "
                "it is closed (zai.assumptions.DROPS_ON_CLOSE)"
            )
            return None
        return (
            f"off: lent places refused far more than they pay ({counts[0]} of {counts[1]}; regular ones "
            f"{counts[2]} of {counts[3]}): z.ai seems to hold the slot of a request it refuses "
            "(zai.assumptions.REFUSED_HOLDS_NO_SLOT)"
        )


def _cusum(lent: list[tuple[float, bool, float]]) -> float:
    """The CUSUM's highest value over `lent` in order: each verdict's log-likelihood ratio of a rate halfway
    from the expected one to refusing always, against the expected one."""
    total = high = 0.0
    for _, refused, expected in lent:
        rate = min(expected, 0.99)
        risen = (1.0 + rate) / 2.0
        total = max(
            total + (math.log(risen / rate) if refused else math.log((1.0 - risen) / (1.0 - rate))), 0.0
        )
        high = max(high, total)
    return high
