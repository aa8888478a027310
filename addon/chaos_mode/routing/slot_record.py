"""One record per held slot: where its request stands with z.ai, and the counts the pool reads of them.

A slot's record is made when the slot is taken and dropped when it is given back (`Records.take`,
`release`). In between it moves only by the transitions of `Records`, which keep the counts per model (held,
awaiting a verdict, ended) and per limit (riding above it) in step with the records:

- `phase`: AWAITING z.ai's verdict, then SERVED (a clean answer) or DONE (a refusal, no verdict will come,
  or none was awaited: a slot taken by name). A clean answer may follow DONE (a verdict heard late).
- `place`: WITHIN the limits; PROBE, one above the limit it tests (`limit`: the model, or ACCOUNT); QUEUED,
  a probe z.ai holds in its queue (`zai.assumptions.MAY_QUEUE`), still above; SEATED, a queued probe that
  took the first slot of its limit a served request gave back, within the limit from then on; OVERDUE, an
  attempt with no head within its patience, above its model's and the account's limits
  (`zai.assumptions.REFUSED_HOLDS_NO_SLOT`). A place rides above a limit only while its phase is AWAITING,
  and stays as the attempt's history once the verdict came (a flow shows it).
- `stalled`: z.ai held its head far longer than its heads take, said once while awaiting; `ended`: z.ai
  sent its answer to the end (it serves it no more, though the slot is held until the flow ends).
"""

from __future__ import annotations

from dataclasses import dataclass
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


RIDES = (Place.PROBE, Place.QUEUED, Place.OVERDUE)


@dataclass(slots=True, eq=False)
class SlotRecord:
    slot_id: int
    model: str
    taken_at: float  # the pool's clock: what refusals and answers took
    phase: Phase
    place: Place
    probe: Probe | None = None  # the limit it probes, while its place is PROBE, QUEUED or SEATED
    stalled: bool = False
    ended: bool = False

    @property
    def limit(self) -> str:
        """The limit it probes: its model's name, or ACCOUNT."""
        return ACCOUNT if self.probe == "account" else self.model

    @property
    def awaiting(self) -> bool:
        return self.phase is Phase.AWAITING

    @property
    def rides(self) -> bool:
        """An overdue attempt riding above the limits until its verdict."""
        return self.place is Place.OVERDUE and self.phase is Phase.AWAITING

    @property
    def overdue(self) -> bool:
        """It rode above the limits, overdue, until its verdict."""
        return self.place is Place.OVERDUE

    @property
    def stall_counted(self) -> bool:
        """Its stall was counted as its verdict, and no verdict came since."""
        return self.stalled and self.phase is Phase.AWAITING

    @property
    def seated(self) -> bool:
        """A probe z.ai held, seated within its limit while awaiting its verdict: no probe any more."""
        return self.place is Place.SEATED and self.phase is Phase.AWAITING

    @property
    def probing(self) -> bool:
        """A probe riding above the limit it tests, queued or not."""
        return self.place in (Place.PROBE, Place.QUEUED) and self.phase is Phase.AWAITING

    def _riding(self) -> tuple[str, ...]:
        if self.phase is not Phase.AWAITING or self.place not in RIDES:
            return ()
        return (self.model, ACCOUNT) if self.place is Place.OVERDUE else (self.limit,)


def _count(counts: dict[str, int], key: str, step: int) -> None:
    """Add `step` to `counts[key]`, the key gone at zero."""
    left = counts.get(key, 0) + step
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


class Records:
    """The held slots' records by slot id, and their counts: `held_on`, `awaiting_on`, `ended_on` per
    model, `riding_on` per limit (a model's name, or ACCOUNT), `queued` probes. Read them, never write them:
    only the transitions below change a record, and each changes the counts with it."""

    __slots__ = ("awaiting_on", "by_id", "ended_on", "held_on", "queued", "riding_on")

    def __init__(self) -> None:
        self.by_id: dict[int, SlotRecord] = {}
        self.held_on: dict[str, int] = {}
        self.awaiting_on: dict[str, int] = {}
        self.ended_on: dict[str, int] = {}
        self.riding_on: dict[str, int] = {}
        self.queued = 0

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, slot_id: int) -> SlotRecord | None:
        return self.by_id.get(slot_id)

    def awaiting(self, model: str | None = None) -> int:
        return sum(self.awaiting_on.values()) if model is None else self.awaiting_on.get(model, 0)

    def ended(self, model: str | None = None) -> int:
        return sum(self.ended_on.values()) if model is None else self.ended_on.get(model, 0)

    def take(self, slot_id: int, model: str, at: float, probe: Probe | None, *, awaits: bool) -> SlotRecord:
        """A slot just taken: a probe when `probe` says which limit it tests (it awaits its verdict)."""
        place = Place.WITHIN if probe is None else Place.PROBE
        record = SlotRecord(slot_id, model, at, Phase.AWAITING if awaits else Phase.DONE, place, probe)
        self.by_id[slot_id] = record
        _count(self.held_on, model, 1)
        if awaits:
            _count(self.awaiting_on, model, 1)
        self._ride(record, 1)
        return record

    def _ride(self, record: SlotRecord, step: int) -> None:
        for key in record._riding():
            _count(self.riding_on, key, step)
        if record.place is Place.QUEUED and record.awaiting:
            self.queued += step

    def settle(self, record: SlotRecord, phase: Phase = Phase.DONE) -> bool:
        """Its verdict came (`phase` SERVED: a clean answer), or none will: it awaits nothing any more and
        rides above no limit. True when it was overdue (the fleet is told)."""
        was_overdue = record.rides
        if record.awaiting:
            self._ride(record, -1)
            _count(self.awaiting_on, record.model, -1)
            record.phase = Phase.DONE
        if phase is Phase.SERVED and record.slot_id in self.by_id:
            record.phase = Phase.SERVED
        return was_overdue

    def overdue(self, record: SlotRecord) -> bool:
        """No head within its patience: it rides above its model's and the account's limits until its
        verdict. Not for a probe (it rides already), a seated one, or one with its verdict."""
        if not record.awaiting or record.place is not Place.WITHIN:
            return False
        record.place = Place.OVERDUE
        self._ride(record, 1)
        return True

    def queue_probe(self, record: SlotRecord) -> None:
        """z.ai holds this probe in its queue (it still rides)."""
        if record.awaiting and record.place is Place.PROBE:
            record.place = Place.QUEUED
            self.queued += 1

    def seat(self, record: SlotRecord) -> None:
        """A queued probe takes a slot of its limit that went back: within the limit from now on."""
        self._ride(record, -1)
        record.place = Place.SEATED

    def stall(self, record: SlotRecord) -> bool:
        """Its stall, once while awaiting; False: its verdict came first, or the stall was said."""
        if not record.awaiting or record.stalled:
            return False
        record.stalled = True
        return True

    def end(self, record: SlotRecord) -> None:
        if not record.ended:
            record.ended = True
            _count(self.ended_on, record.model, 1)

    def release(self, slot_id: int) -> SlotRecord | None:
        """The slot goes back: its record leaves (None: not held here)."""
        record = self.by_id.pop(slot_id, None)
        if record is None:
            return None
        _count(self.held_on, record.model, -1)
        if record.ended:
            _count(self.ended_on, record.model, -1)
        return record

    def queued_probes(self, model: str) -> list[SlotRecord]:
        """The probes z.ai queues that a slot of `model` going back may seat: its own first, then the
        account's, each oldest first."""
        queued = [r for r in self.by_id.values() if r.place is Place.QUEUED and r.awaiting]
        return sorted(
            (r for r in queued if r.limit in (model, ACCOUNT)), key=lambda r: (r.limit != model, r.slot_id)
        )
