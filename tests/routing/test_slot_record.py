"""The held slots' records: under any sequence of steps, a record rides above a limit only while it awaits
its verdict, above the limits its place says; and the ledger's counts are those over its records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from chaos_mode.learning.limits import Probe
from chaos_mode.routing import pool_status
from chaos_mode.routing.arrivals import Beside
from chaos_mode.routing.ledger import Ledger
from chaos_mode.routing.slot_record import Phase, Place, Slot, SlotRecord
from chaos_mode.routing.slots import MemorySlots
from chaos_mode.zai.catalog import ACCOUNT
from support.pool_rig import Rig, error, routing

MODELS = ["a", "b", "c"]
PROBES: list[Probe | None] = [None, "model", "account"]
PLACES = st.sampled_from(list(Place))


def put(ledger: Ledger, slot_id: int, model: str, probe: Probe | None, *, awaits: bool = True) -> SlotRecord:
    """A record as `Ledger.take` makes it, without the pool around it."""
    place = Place.WITHIN if probe is None else Place.PROBE
    beside = Beside(model, frozenset(), {}, 0, 0, None)
    record = SlotRecord(slot_id, model, 0.0, beside, probe, Phase.AWAITING if awaits else Phase.DONE, place)
    ledger.records[slot_id] = record
    return record


class RecordsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger = Rig(routing({m: {"tier": "HEAVY", "maxConcurrency": 2} for m in MODELS})).pool.ledger
        self.next_id = 1
        self.released: list[SlotRecord] = []

    def pick(self, index: int) -> SlotRecord | None:
        held = list(self.ledger.records.values())
        return held[index % len(held)] if held else None

    @rule(model=st.sampled_from(MODELS), probe=st.sampled_from(PROBES), awaits=st.booleans())
    def take(self, model: str, probe: Probe | None, awaits: bool) -> None:
        record = put(self.ledger, self.next_id, model, probe if awaits else None, awaits=awaits)
        assert record.awaiting is awaits and record.probing is (awaits and probe is not None)
        self.next_id += 1

    @rule(index=st.integers(0), served=st.booleans())
    def settle(self, index: int, served: bool) -> None:
        record = self.pick(index)
        if record is not None:
            was, rode = record.phase, record.rides
            assert record.settle(Phase.SERVED if served else Phase.DONE) is rode
            assert record.phase is (
                Phase.SERVED if served else was if was is not Phase.AWAITING else Phase.DONE
            )
            assert not record.riding()

    @rule(index=st.integers(0), start=PLACES, place=PLACES)
    def move(self, index: int, start: Place, place: Place) -> None:
        record = self.pick(index)
        if record is not None:
            before = record.place
            moved = record.move(start, place)
            assert moved is (record.awaiting and before is start)
            assert record.place is (place if moved else before)

    @rule(index=st.integers(0))
    def stall(self, index: int) -> None:
        record = self.pick(index)
        if record is not None:
            first = record.awaiting and not record.stalled
            slot = Slot(record.model, "stalled", slot_id=record.slot_id)
            assert self.ledger.stall(slot) is first
            assert self.ledger.stall(slot) is False  # once

    @rule(index=st.integers(0))
    def end(self, index: int) -> None:
        record = self.pick(index)
        if record is not None:
            record.ended = True

    @rule(index=st.integers(0))
    def release(self, index: int) -> None:
        record = self.pick(index)
        if record is not None:
            record.settle()
            del self.ledger.records[record.slot_id]
            self.released.append(record)

    @rule(index=st.integers(0), place=PLACES)
    def released_stay_put(self, index: int, place: Place) -> None:
        """A record given back rides nowhere, whatever is said of it late."""
        if self.released:
            record = self.released[index % len(self.released)]
            assert not record.move(record.place, place) and not record.riding()

    @invariant()
    def riding_is_the_records(self) -> None:
        held = self.ledger.records.values()
        assert all(record.awaiting for record in held if record.riding())
        for record in held:
            if record.rides:
                assert record.riding() == (record.model, ACCOUNT)
            elif record.probing:
                assert record.riding() == (ACCOUNT if record.probe == "account" else record.model,)
        probes, overdue = self.ledger.probes(), self.ledger.overdue_here()
        assert self.ledger.riding_on == probes + overdue + Counter({ACCOUNT: overdue.total()})

    @invariant()
    def serving_is_held_less_awaiting_less_ended(self) -> None:
        held = list(self.ledger.records.values())
        for model in [None, *MODELS]:
            mine = [r for r in held if model is None or r.model == model]
            awaiting = sum(r.awaiting for r in mine)
            assert self.ledger.unanswered(model) == awaiting
            serving = sum(not r.awaiting and not r.ended for r in mine)  # answered, the answer not ended
            if model is not None:
                assert self.ledger.serving_here().get(model, 0) == serving


RecordsMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestRecordsMachine = RecordsMachine.TestCase


def test_a_queued_probe_seats_on_its_own_model_first_then_the_accounts_oldest_first() -> None:
    rig = Rig(routing({m: {"tier": "HEAVY", "maxConcurrency": 2} for m in MODELS}))
    ledger = rig.pool.ledger
    account, other, own = (
        put(ledger, 1, "a", "account"),
        put(ledger, 2, "b", "model"),
        put(ledger, 3, "a", "model"),
    )

    def serve_and_give_back(slot_id: int, model: str) -> None:
        put(ledger, slot_id, model, None).settle(Phase.SERVED)
        assert ledger.release(Slot(model, "served", slot_id=slot_id)) is not None

    serve_and_give_back(10, "a")
    assert not any(r.held for r in (account, other, own))  # none queued yet
    for record in (account, other, own):
        assert record.move(Place.PROBE, Place.QUEUED)
    serve_and_give_back(11, "a")
    assert own.held and not own.probing and not account.held
    serve_and_give_back(12, "c")
    assert account.held and not other.held
    assert ledger.riding_on == {"b": 1}


class FleetSlots(MemorySlots):
    """A fleet's store as the pool sees it: another proxy has one attempt of "a" riding above the limits."""

    confirms = True

    def riding_elsewhere(self) -> Mapping[str, int]:
        return {"a": 1, ACCOUNT: 1}


def test_a_level_leaves_out_what_rides_above_the_limit_on_another_proxy() -> None:
    """Another proxy's overdue attempt is in the fleet's count but z.ai serves none of it: each request's
    level (what the check of lending compares them at) leaves it out, as it leaves out this proxy's own. A
    request taken in its place is left out of the check (`lent` None): whether that attempt was refused or
    served late reaches this proxy a notice later, and its verdict would count against lending meanwhile;
    in one taken in this proxy's own lent place, it counts."""
    rig = Rig(routing({"a": {"tier": "HEAVY", "maxConcurrency": 2}}))
    slots, ledger = FleetSlots(), rig.pool.ledger
    rig.pool.use(slots=slots)
    assert slots.try_acquire("a", 9, 9)  # the other proxy's overdue attempt
    taken = [rig.take() for _ in range(2)]
    assert [(ledger.records[t.slot_id].lent, ledger.records[t.slot_id].level) for t in taken] == [
        (False, 1),
        (None, 2),
    ]
    ledger.refused("a", error("1302"), taken[1])
    assert ledger.lending.why.startswith("on: 0 of 0 lent places refused, 0 of 0 regular")
    rig.pool.release(taken[1])
    ledger.overdue(taken[0])  # this proxy's own attempt lends its place too: the first one above the
    # limit may be in either place, the second is in this proxy's
    placed = [ledger.records[rig.take().slot_id] for _ in range(2)]
    assert [(r.lent, r.level) for r in placed] == [(None, 1), (True, 2)]


def test_a_refusal_beside_a_whole_answer_still_to_come_counts_it_as_served() -> None:
    """Requests not streamed have no head before their end: z.ai's 1302 to the second of two, in a second or
    so, comes before the first's answer says z.ai serves it. Left out, the refusal was "at 1 in flight", a
    clean answer at 1 contradicted it, and a hard limit under the catalog's was never learned."""
    # Streamed, the first one's head would have come in ms: awaited after a second, it is no served one.
    for whole, learned in [(True, (1, "1302 at 2 in flight")), (False, (3, "catalog"))]:
        rig = Rig(routing({"a": {"tier": "HEAVY", "maxConcurrency": 3}}))
        ledger = rig.pool.ledger
        for _ in range(2):  # two rounds: one refusal alone moves nothing
            first, second = rig.take(), rig.take()
            for taken in (first, second):
                ledger.sent(taken, whole=whole)
            rig.clock.advance(1.0)
            ledger.refused("a", error("1302"), second)
            rig.pool.release(second)
            rig.clock.advance(0.5)
            ledger.success(first)
            rig.pool.release(first)
        row = pool_status.served(pool_status.status(rig.pool))["models"]["a"]
        assert (row["learnedLimit"], row["limitReason"]) == learned
