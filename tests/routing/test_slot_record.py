"""The held slots' records: under any sequence of transitions, the counts kept beside them are the counts
over the records, and a record rides above a limit only while it awaits its verdict."""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from chaos_mode.learning.limits import Probe
from chaos_mode.routing.slot_record import Phase, Place, Records, SlotRecord
from chaos_mode.zai.catalog import ACCOUNT

MODELS = ["a", "b", "c"]
PROBES: list[Probe | None] = [None, "model", "account"]


class RecordsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.records = Records()
        self.next_id = 1
        self.released: list[SlotRecord] = []

    def pick(self, index: int) -> SlotRecord | None:
        held = list(self.records.by_id.values())
        return held[index % len(held)] if held else None

    @rule(model=st.sampled_from(MODELS), probe=st.sampled_from(PROBES), awaits=st.booleans())
    def take(self, model: str, probe: Probe | None, awaits: bool) -> None:
        record = self.records.take(self.next_id, model, 0.0, probe if awaits else None, awaits=awaits)
        assert record.awaiting is awaits and record.probing is (awaits and probe is not None)
        self.next_id += 1

    @rule(index=st.integers(0), served=st.booleans())
    def settle(self, index: int, served: bool) -> None:
        record = self.pick(index)
        if record is not None:
            was = record.phase
            self.records.settle(record, Phase.SERVED if served else Phase.DONE)
            assert record.phase is (
                Phase.SERVED if served else was if was is not Phase.AWAITING else Phase.DONE
            )
            assert not record.riding()

    @rule(index=st.integers(0), place=st.sampled_from([Place.OVERDUE, Place.QUEUED, Place.SEATED]))
    def move(self, index: int, place: Place) -> None:
        record = self.pick(index)
        if record is not None:
            before = record.place
            moved = self.records.move(record, place)
            assert (record.place is place) if moved else (record.place is before)
            assert not moved or record.awaiting

    @rule(index=st.integers(0))
    def stall(self, index: int) -> None:
        record = self.pick(index)
        if record is not None:
            first = record.awaiting and not record.stalled
            assert record.stall() is first
            assert record.stall() is False  # once

    @rule(index=st.integers(0))
    def end(self, index: int) -> None:
        record = self.pick(index)
        if record is not None:
            record.ended = True

    @rule(index=st.integers(0))
    def release(self, index: int) -> None:
        record = self.pick(index)
        if record is not None:
            assert self.records.release(record.slot_id) is record
            assert self.records.release(record.slot_id) is None  # once
            self.released.append(record)

    @rule(index=st.integers(0), place=st.sampled_from([Place.OVERDUE, Place.QUEUED, Place.SEATED]))
    def released_stay_put(self, index: int, place: Place) -> None:
        """A record given back rides nowhere, whatever is said of it late."""
        if self.released:
            record = self.released[index % len(self.released)]
            assert not self.records.move(record, place) and not record.riding()

    @invariant()
    def riding_counts_are_the_records(self) -> None:
        held = self.records.by_id.values()
        riding = Counter(key for record in held for key in record.riding())
        assert self.records.riding_on == dict(riding)  # no zero or negative entry either
        assert all(record.awaiting for record in held if record.riding())
        for record in held:
            if record.rides:
                assert record.riding() == (record.model, ACCOUNT)
            elif record.probing:
                assert record.riding() == (ACCOUNT if record.probe == "account" else record.model,)

    @invariant()
    def serving_is_held_less_awaiting_less_ended(self) -> None:
        held = list(self.records.by_id.values())
        for model in [None, *MODELS]:
            mine = [r for r in held if model is None or r.model == model]
            awaiting = sum(r.awaiting for r in mine)
            assert self.records.awaiting(model) == awaiting
            assert self.records.serving(model) == len(mine) - awaiting - sum(r.ended for r in mine)

    def teardown(self) -> None:
        for slot_id in list(self.records.by_id):
            self.records.release(slot_id)
        assert self.records.riding_on == {} and not self.records.by_id


RecordsMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestRecordsMachine = RecordsMachine.TestCase


def test_a_queued_probe_seats_on_its_own_model_first_then_the_accounts_oldest_first() -> None:
    records = Records()
    account = records.take(1, "a", 0.0, "account", awaits=True)
    other = records.take(2, "b", 0.0, "model", awaits=True)
    own = records.take(3, "a", 0.0, "model", awaits=True)
    assert records.queued_probe("a") is None  # none queued yet
    for record in (account, other, own):
        assert records.move(record, Place.QUEUED)
    assert records.queued_probe("a") is own
    assert records.move(own, Place.SEATED) and not own.probing and own.seated
    assert records.queued_probe("a") is account and records.queued_probe("c") is account
    assert records.riding_on == {ACCOUNT: 1, "b": 1}
