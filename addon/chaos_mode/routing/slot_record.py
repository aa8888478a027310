"""One record per held slot: where its request stands with z.ai. Made when the slot is taken, dropped when
it is given back (`Records.take`, `release`); in between (the rules that move it: `routing.ledger`):

- `phase`: AWAITING z.ai's verdict, then SERVED (a clean answer) or DONE (a refusal, no verdict will come,
  or none was awaited: a slot taken by name). A clean answer may follow DONE (a verdict heard late).
- `place`: WITHIN the limits; PROBE, one above the limit it tests; QUEUED, a probe z.ai holds in its queue,
  still above; SEATED, a queued probe within its limit from then on; OVERDUE, above its model's and the
  account's limits. A place rides above a limit only while the phase is AWAITING, and stays as the
  attempt's history once its verdict came (its flow shows it).
- `stalled`: a stall said while awaiting (once); `ended`: z.ai sent its answer to the end.
- `lent`: taken above a limit while an overdue attempt rode there, at `level` (what z.ai served of its
  model, the attempts riding above it left out): what `routing.lending` checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from chaos_mode.learning.limits import Probe
from chaos_mode.zai.catalog import ACCOUNT


class Phase(Enum):
    AWAITING = "awaiting"
    SERVED = "served"
    DONE = "done"


class Place(Enum):
    WITHIN = "within"
    PROBE = "probe"
    QUEUED = "queued"
    SEATED = "seated"
    OVERDUE = "overdue"


@dataclass(slots=True, eq=False)
class SlotRecord:
    slot_id: int
    model: str
    taken_at: float  # the pool's clock: what refusals and answers took
    phase: Phase
    place: Place
    probe: Probe | None = None  # the limit it probes, from PROBE on
    stalled: bool = False
    ended: bool = False
    lent: bool = False
    level: int = 0

    @property
    def limit(self) -> str:
        return ACCOUNT if self.probe == "account" else self.model

    @property
    def awaiting(self) -> bool:
        return self.phase is Phase.AWAITING

    @property
    def overdue(self) -> bool:
        """It rode (or rides) above the limits, overdue, until its verdict."""
        return self.place is Place.OVERDUE

    @property
    def rides(self) -> bool:
        return self.awaiting and self.place is Place.OVERDUE

    @property
    def probing(self) -> bool:
        return self.awaiting and self.place in (Place.PROBE, Place.QUEUED)

    @property
    def seated(self) -> bool:
        """A queued probe seated within its limit, awaiting its verdict: it probes nothing any more."""
        return self.awaiting and self.place is Place.SEATED

    @property
    def stall_counted(self) -> bool:
        """Its stall was counted as its verdict, and no verdict came since."""
        return self.awaiting and self.stalled

    def riding(self) -> tuple[str, ...]:
        if self.rides:
            return (self.model, ACCOUNT)
        return (self.limit,) if self.probing else ()

    def stall(self) -> bool:
        """Its stall, once while awaiting; False: its verdict came first, or the stall was said."""
        if not self.awaiting or self.stalled:
            return False
        self.stalled = True
        return True


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
        """Its attempt is overdue, riding above the limits until its verdict (`Ledger.overdue`)."""
        return self.record is not None and self.record.rides


class Records:
    """The held slots' records by slot id, and `riding_on`: how many ride above each limit (a model's name,
    or ACCOUNT), the one count kept beside them (selection reads it for every request). Only the transitions
    below change where a record rides, and each changes the count with it; the other counts are read off the
    records."""

    __slots__ = ("by_id", "riding_on")

    def __init__(self) -> None:
        self.by_id: dict[int, SlotRecord] = {}
        self.riding_on: dict[str, int] = {}

    def get(self, slot_id: int) -> SlotRecord | None:
        return self.by_id.get(slot_id)

    def serving(self, model: str | None = None) -> int:
        """Slots answered (or judged) and not ended."""
        return sum(1 - r.awaiting - r.ended for r in self.by_id.values() if model in (None, r.model))

    def awaiting(self, model: str | None = None) -> int:
        return sum(r.awaiting for r in self.by_id.values() if model in (None, r.model))

    def take(self, slot_id: int, model: str, at: float, probe: Probe | None, *, awaits: bool) -> SlotRecord:
        """A slot just taken: a probe when `probe` says which limit it tests (it awaits its verdict)."""
        place = Place.WITHIN if probe is None else Place.PROBE
        record = SlotRecord(slot_id, model, at, Phase.AWAITING if awaits else Phase.DONE, place, probe)
        self.by_id[slot_id] = record
        self._ride(record, 1)
        return record

    def _ride(self, record: SlotRecord, step: int) -> None:
        riding = self.riding_on
        for key in record.riding():
            left = riding.get(key, 0) + step
            if left > 0:
                riding[key] = left
            else:
                del riding[key]

    def settle(self, record: SlotRecord, phase: Phase = Phase.DONE) -> bool:
        """Its verdict came (`phase` SERVED: a clean answer, counted while it is held), or none will: it
        awaits nothing any more and rides above no limit. True when it was overdue (the fleet is told)."""
        was_overdue = record.rides
        if record.awaiting:
            self._ride(record, -1)
            record.phase = Phase.DONE
        if phase is Phase.SERVED and record.slot_id in self.by_id:
            record.phase = Phase.SERVED
        return was_overdue

    def move(self, record: SlotRecord, place: Place) -> bool:
        """While it awaits its verdict: an attempt within the limits goes OVERDUE (and back WITHIN, once
        lending is off), a PROBE is QUEUED, a queued one SEATED. False (nothing changes) for any other
        step."""
        steps = {
            Place.OVERDUE: Place.WITHIN,
            Place.WITHIN: Place.OVERDUE,
            Place.QUEUED: Place.PROBE,
            Place.SEATED: Place.QUEUED,
        }
        if not record.awaiting or record.place is not steps[place]:
            return False
        self._ride(record, -1)
        record.place = place
        self._ride(record, 1)
        return True

    def release(self, slot_id: int) -> SlotRecord | None:
        """The slot goes back: its record leaves, settled (None: not held here)."""
        record = self.by_id.get(slot_id)
        if record is not None:
            self.settle(record)
            del self.by_id[slot_id]
        return record

    def queued_probe(self, model: str) -> SlotRecord | None:
        """The probe z.ai queues that a slot of `model` going back seats: its own first, then the account's,
        each oldest first."""
        queued = [r for r in self.by_id.values() if r.place is Place.QUEUED and r.awaiting]
        fits = [r for r in queued if r.limit in (model, ACCOUNT)]
        return min(fits, key=lambda r: (r.limit != model, r.slot_id), default=None)
