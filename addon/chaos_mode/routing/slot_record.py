"""One record per held slot: where its request stands with z.ai, and the steps between (the rules that take
them: `routing.ledger`). Made when the slot is taken, dropped when it is given back.

- `phase`: AWAITING z.ai's verdict, then SERVED (a clean answer) or DONE (a refusal, no verdict will come,
  or none was awaited: a slot taken by name). A clean answer may follow DONE (a verdict heard late).
- `place`: WITHIN the limits; PROBE, one above the limit it tests; QUEUED, a probe z.ai holds in its queue,
  still above; SEATED, a queued probe within its limit from then on; OVERDUE, above its model's and the
  account's limits. The steps, while AWAITING: WITHIN -> OVERDUE (and back, once lending is off), PROBE ->
  QUEUED -> SEATED. A place rides above a limit only while AWAITING, and stays as the attempt's history
  once its verdict came (its flow shows it).
- `stalled`: a stall said while awaiting (once); `ended`: z.ai sent its answer to the end. Stalled or seated,
  z.ai held it (`held`): its verdict is a regular request's from then on (no probe's, a clean answer at what
  z.ai serves), however it was sent. `beside`: what was beside its request as it came (`routing.arrivals`).
- `lent`: taken above a limit while an overdue attempt rode there, at `level` (what z.ai served of its model,
  the attempts riding above it left out): what `routing.lending` checks, once (`Ledger._checked`). None: the
  check reads it no more (read already, lent before lending turned off) or never (above a limit only by
  another proxy's overdue attempts: `Ledger._lent`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from chaos_mode.learning.limits import Probe
from chaos_mode.routing.arrivals import Beside
from chaos_mode.zai.catalog import ACCOUNT

Phase = Enum("Phase", "AWAITING SERVED DONE")
Place = Enum("Place", "WITHIN PROBE QUEUED SEATED OVERDUE")


@dataclass(slots=True, eq=False)
class SlotRecord:
    slot_id: int
    model: str
    taken_at: float  # the pool's clock: what refusals and answers took
    beside: Beside
    probe: Probe | None = None  # the limit it probes, from PROBE on
    phase: Phase = Phase.AWAITING
    place: Place = Place.WITHIN
    lent: bool | None = False  # None: not for the check of lending (any more)
    level: int = 0
    stalled: bool = False
    ended: bool = False
    whole: bool = False  # its answer comes in one piece: no head before its end

    @property
    def limit(self) -> str:
        return ACCOUNT if self.probe == "account" else self.model

    @property
    def awaiting(self) -> bool:
        return self.phase is Phase.AWAITING

    @property
    def overdue(self) -> bool:
        return self.place is Place.OVERDUE

    @property
    def rides(self) -> bool:
        return self.awaiting and self.overdue

    @property
    def probing(self) -> bool:
        return self.awaiting and self.place in (Place.PROBE, Place.QUEUED)

    @property
    def held(self) -> bool:
        return self.awaiting and (self.stalled or self.place is Place.SEATED)

    def riding(self) -> tuple[str, ...]:
        """The limits it rides above now (a model's name, or ACCOUNT)."""
        return (self.model, ACCOUNT) if self.rides else (self.limit,) if self.probing else ()

    def settle(self, phase: Phase = Phase.DONE) -> bool:
        """Its verdict came (SERVED, however late), or none will: True when it rode overdue until now."""
        rode = self.rides
        if phase is Phase.SERVED or self.awaiting:
            self.phase = phase
        return rode

    def move(self, start: Place, place: Place) -> bool:
        """A step from `start` to `place` while awaiting; False (nothing changes) from any other place."""
        moved = self.awaiting and self.place is start
        self.place = place if moved else self.place
        return moved


@dataclass(frozen=True, slots=True)
class Slot:
    """The model chosen for a request, and why; once a slot is taken, what was in flight with it (this
    request included) and whether it went above a learned limit (a probe)."""

    model: str
    reason: str
    in_flight: int = field(default=0, compare=False)
    total: int = field(default=0, compare=False)
    probe: Probe | None = field(default=None, compare=False)
    slot_id: int = field(default=0, compare=False)  # the slot's own number while z.ai's verdict is out
    record: SlotRecord | None = field(default=None, compare=False, repr=False)  # its state

    @property
    def rides(self) -> bool:
        return self.record is not None and self.record.rides
