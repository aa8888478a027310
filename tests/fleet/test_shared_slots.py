"""SharedSlots, pure: the mirror of the fleet, leases, lost races, serving alone on a share."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from chaos_mode.config.schema import parse_config
from chaos_mode.fleet.slots import FALLBACK_SHARE, HOLD_BACK, Notice, SharedSlots, Tally, Verdict
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.routing.slots import ProbeClaim, Seen
from chaos_mode.zai.catalog import ACCOUNT
from support.design_catalog import DESIGN_MODELS


class FakeFleet:
    """A shared store in a dict: caps enforced like the Lua script, or no answer when `down`."""

    def __init__(self) -> None:
        self.leases: dict[str, set[str]] = {}
        self.down = False
        self.released: list[str] = []
        self.owed: list[str] = []  # per release, the proxy its notice names ("" for none)
        self.seq = 0
        self.announced = 0
        self.claims: list[tuple[ProbeClaim, str]] = []  # the rights to probe claimed, with their lease
        self.answers: list[tuple[ProbeClaim, str]] = []  # the probes' verdicts told
        self.told: list[tuple[str, tuple[Seen, ...]]] = []  # verdicts told as they came, with their model

    async def confirm(
        self, model: str, lease: str, cap: int, account_cap: int, probe: ProbeClaim | None = None
    ) -> Verdict | None:
        if self.down:
            return None
        if probe is not None:
            self.claims.append((probe, lease))
        held = self.leases.setdefault(model, set())
        total = sum(map(len, self.leases.values()))
        if len(held) >= cap or total >= account_cap:
            return Verdict(False, len(held), total, self.seq)
        held.add(lease)
        self.seq += 1
        return Verdict(True, len(held), total + 1, self.seq)

    def probe_answered(self, claim: ProbeClaim, lease: str) -> None:
        self.answers.append((claim, lease))

    def release(self, model: str, lease: str, to: str = "") -> None:
        self.leases.get(model, set()).discard(lease)
        self.released.append(lease)
        self.owed.append(to)
        self.seq += 1

    def announce(self) -> None:
        self.announced += 1

    def tell_verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        self.told.append((model, tuple(seen)))

    def tally(self) -> Tally:
        counts = {m: len(v) for m, v in self.leases.items()}
        return Tally(counts, sum(counts.values()), seq=self.seq)


def connected(fleet: FakeFleet, name: str = "a", **options: Any) -> SharedSlots:
    slots = SharedSlots(name, **options)
    slots.connected(fleet)
    slots.apply(fleet.tally())
    return slots


async def test_a_slot_confirmed_is_a_lease_and_the_release_gives_it_back() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    assert slots.try_acquire("m", 2, 10)
    assert (await slots.confirm("m")).taken
    assert slots.leases() == [("m", "a#1")] and fleet.leases["m"] == {"a#1"}
    assert slots.release("m")
    assert fleet.released == ["a#1"] and slots.total() == 0 and not slots.release("m")


async def test_the_mirror_counts_the_other_proxies_and_a_lost_race_learns_from_the_store() -> None:
    fleet = FakeFleet()
    a, b = connected(fleet, "a"), connected(fleet, "b")
    assert a.try_acquire("m", 1, 10) and (await a.confirm("m")).taken
    # b has not heard of it yet: it takes the slot on its mirror, the store refuses
    assert b.try_acquire("m", 1, 10)
    assert not (await b.confirm("m")).taken
    assert b.release("m") and fleet.released == []  # no lease was given for it: none goes back
    assert b.in_flight("m") == 1 and b.total() == 1  # a's, as the store said
    assert not b.try_acquire("m", 1, 10)
    a.release("m")
    b.heard(Notice(fleet.seq, "-", "a", "m"))  # a's message
    assert b.in_flight("m") == 0 and b.try_acquire("m", 1, 10) and (await b.confirm("m")).taken


async def test_notices_keep_the_mirror_current_and_one_a_tally_already_counted_is_not_counted_again() -> None:
    fleet = FakeFleet()
    a, b = connected(fleet, "a"), connected(fleet, "b")
    assert a.try_acquire("m", 2, 10) and (await a.confirm("m")).taken
    b.heard(Notice(fleet.seq, "+", "a", "m"))  # a's lease, announced
    assert (b.in_flight("m"), b.total()) == (1, 1)
    b.apply(fleet.tally())  # the tally read after the notice counts it once
    b.heard(Notice(fleet.seq, "+", "a", "m"))  # the same notice, late: already counted
    assert (b.in_flight("m"), b.total()) == (1, 1)
    assert a.try_acquire("m", 2, 10) and (await a.confirm("m")).taken
    b.heard(Notice(fleet.seq, "+", "a", "m"))
    stale = fleet.tally()
    a.release("m")
    b.heard(Notice(fleet.seq, "-", "a", "m"))  # newer than the tally that arrives after it
    b.apply(stale)
    assert (b.in_flight("m"), b.total()) == (1, 1)
    b.heard(Notice(99, "+", "b", "m"))  # its own notices change nothing
    assert b.in_flight("m") == 1


async def test_a_lease_given_back_but_not_yet_removed_is_not_counted_as_another_proxys() -> None:
    fleet = FakeFleet()
    a = connected(fleet, "a")
    assert a.try_acquire("m", 2, 2) and (await a.confirm("m")).taken
    stale = Tally({"m": 1}, 1, seq=fleet.seq)  # read before the release reached the store
    a.release("m")
    a.apply(stale)
    assert (a.in_flight("m"), a.total()) == (0, 0)  # the lease is ours, on its way back
    a.given_back("m")
    a.apply(stale)
    assert (a.in_flight("m"), a.total()) == (1, 1)  # given back unanswered: the tally's is another's


async def test_a_tally_read_before_a_release_arrived_is_older_than_the_releases_answer() -> None:
    fleet = FakeFleet()
    a = connected(fleet, "a")
    assert a.try_acquire("m", 2, 2) and (await a.confirm("m")).taken
    stale = Tally({"m": 1}, 1, seq=fleet.seq)  # read before the release reached the store...
    a.release("m")
    a.given_back("m", Verdict(True, 0, 0, fleet.seq))  # ...answered before that tally came back
    a.apply(stale)
    assert (a.in_flight("m"), a.total()) == (0, 0)  # not another proxy's until the next renewal
    assert a.try_acquire("m", 2, 2) and a.try_acquire("m", 2, 2)


class LateFleet(FakeFleet):
    """The store takes each lease as its call arrives; the answer comes back when the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.answers_out: list[asyncio.Future[None]] = []

    async def confirm(
        self, model: str, lease: str, cap: int, account_cap: int, probe: ProbeClaim | None = None
    ) -> Verdict | None:
        verdict = await super().confirm(model, lease, cap, account_cap, probe)
        self.answers_out.append(asyncio.get_running_loop().create_future())
        await self.answers_out[-1]
        return verdict


async def test_a_lease_confirmed_late_is_not_left_counted_as_another_proxys() -> None:
    fleet = LateFleet()
    a = connected(fleet, "a")
    assert a.try_acquire("m", 3, 3) and a.try_acquire("m", 3, 3)
    first = asyncio.ensure_future(a.confirm("m"))
    second = asyncio.ensure_future(a.confirm("m"))
    await asyncio.sleep(0)  # both taken in the store, neither answered
    fleet.answers_out[1].set_result(None)  # the second's answer comes back first
    assert (await second).taken
    a.apply(fleet.tally())  # and a renewal's tally is read meanwhile
    assert (a.in_flight("m"), a.total()) == (3, 3)  # the first's lease read as another proxy's, for now
    fleet.answers_out[0].set_result(None)
    assert (await first).taken
    assert (a.in_flight("m"), a.total()) == (2, 2)  # none other holds one
    assert a.try_acquire("m", 3, 3)


def test_a_freed_slot_goes_first_to_another_proxy_whose_first_waiter_was_served_less() -> None:
    line = (3, 2, 1.0)  # three wait here, the first of them admitted twice lately, waiting for 1 s
    slots = SharedSlots("a", waiting=lambda: line)
    slots.connected(FakeFleet())
    assert slots.hold_back() == 0.0  # nobody else heard of
    slots.heard(Notice(1, "=", "b", "", waiting=4, level=1))
    assert slots.hold_back() == HOLD_BACK
    slots.heard(Notice(2, "-", "b", "m", waiting=4, level=2))
    assert slots.hold_back() == 0.0  # even, and this one waited longer: this proxy's waiters take it
    slots.heard(Notice(3, "+", "b", "m", waiting=0, level=0))
    assert slots.hold_back() == 0.0  # nobody waits there
    slots.heard(Notice(4, "=", "c", "", waiting=1, level=0))
    assert slots.hold_back() == HOLD_BACK
    slots.heard(Notice(5, "*", "c"))
    assert slots.hold_back() == 0.0 and slots.held_back == 2
    line = (0, 0, 0.0)
    slots.heard(Notice(6, "=", "b", "", waiting=4, level=0))
    assert slots.hold_back() == 0.0  # nobody waits here: nothing to hold back from


def test_the_first_to_wait_here_is_announced_while_the_fleet_answers() -> None:
    fleet = FakeFleet()
    line = (0, 0, 0.0)
    slots = SharedSlots("a", waiting=lambda: line)
    slots.connected(fleet)
    slots.queued()
    assert fleet.announced == 1
    line = (1, 0, 0.5)
    slots.queued()  # behind a first: the others' view of the line is the same
    assert fleet.announced == 1
    line = (0, 0, 0.0)
    slots.disconnected()
    slots.queued()
    assert fleet.announced == 1


async def test_a_tally_rebuilds_the_mirror_and_wakes_waiters_when_others_freed_slots() -> None:
    woken: list[float] = []
    slots = SharedSlots("a", on_freed=woken.append)
    slots.connected(FakeFleet())
    slots.apply(Tally({"m": 3, "n": 1}, 4, {"a": 0, "b": 4}))
    assert (slots.in_flight("m"), slots.total(), woken) == (3, 4, [])
    slots.apply(Tally({"m": 1, "n": 1}, 2, {"a": 0, "b": 2}))
    assert (slots.in_flight("m"), slots.total(), woken) == (1, 2, [0.0])
    assert slots.proxies == {"a": 0, "b": 2}


async def test_alone_a_proxy_uses_its_share_and_its_leases_are_written_again_when_the_store_is_back() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.apply(Tally({}, 0, {"a": 0, "b": 0}))
    assert slots.disconnected() == 0.5  # two proxies were alive
    fleet.down = True
    assert slots.try_acquire("m", 4, 100) and (await slots.confirm("m")).taken
    assert slots.try_acquire("m", 4, 100) and (await slots.confirm("m")).taken
    assert not slots.try_acquire("m", 4, 100)  # half of 4
    assert len(slots.leases()) == 2  # kept for the store's return
    fleet.down = False
    slots.connected(fleet)
    assert slots.share is None and slots.try_acquire("m", 4, 100)


async def test_alone_the_others_slots_as_last_seen_still_count_for_one_lease() -> None:
    now = [0.0]
    fleet = FakeFleet()
    slots = SharedSlots("a", clock=lambda: now[0], forget_after=2.0)
    slots.connected(fleet)
    slots.apply(Tally({"m": 3}, 3, {"a": 0, "b": 3}))  # b holds all of m's 3 slots
    assert slots.disconnected() == 0.5
    assert not slots.try_acquire("m", 3, 28)  # b's slots are still running
    now[0] = 2.0
    assert slots.try_acquire("m", 3, 28)  # a lease later: only this proxy's share (1 of 3) counts
    assert not slots.try_acquire("m", 3, 28)


def test_alone_a_proxy_heard_from_since_the_last_tally_takes_its_share_too() -> None:
    """A proxy that joined less than a renewal ago is in no tally here yet; its notice (it announces
    itself on joining) is enough: Redis gone, each of the two takes half, not this one all."""
    slots = connected(FakeFleet())
    slots.apply(Tally({}, 0, {"a": 0}))  # the last tally: this proxy alone
    slots.heard(Notice(0, "=", "b"))  # b joined: it said so
    assert slots.disconnected() == 0.5


def test_the_share_before_anything_was_seen_and_a_configured_one() -> None:
    assert SharedSlots("a").share is None  # the first requests wait for the first connection
    assert SharedSlots("a", share=0.25).disconnected() == 0.25
    assert SharedSlots("a").disconnected() == FALLBACK_SHARE


async def test_a_store_that_stops_answering_during_confirm_still_serves_the_request() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    fleet.down = True
    assert slots.try_acquire("m", 1, 1) and (await slots.confirm("m")).taken
    assert slots.leases() == [("m", "a#1")]


async def test_a_slot_given_back_while_alone_is_not_counted_as_ours_once_the_store_is_back() -> None:
    """Alone, nothing is sent to the store (the lease ends with its TTL), so nothing waits for an answer:
    back with the fleet, the other proxies' slots are counted in full."""
    fleet = FakeFleet()
    slots = connected(fleet)
    assert slots.try_acquire("m", 4, 10) and (await slots.confirm("m")).taken
    fleet.down = True
    slots.disconnected()
    assert slots.release("m")
    assert fleet.released == []  # not sent: the store does not answer
    fleet.down = False
    fleet.leases["m"] = {"b#1", "b#2"}  # another proxy's, written again after the outage
    slots.connected(fleet)
    slots.apply(fleet.tally())
    assert slots.in_flight("m") == 2 and slots.total() == 2


async def test_rejoining_a_slot_is_taken_on_the_share_and_confirmed_by_the_store_too() -> None:
    """Back after an outage but not yet counting on the store: another proxy already back counts on it,
    so a slot taken here must be in it (and within the caps), not only within this proxy's share."""
    fleet = FakeFleet()
    slots = connected(fleet)
    fleet.down = True
    slots.disconnected()
    fleet.down = False
    fleet.leases["m"] = {"b#1", "b#2", "b#3"}  # the other proxy, back first, took the model's 4th slot
    fleet.leases["m"].add("b#4")
    slots.rejoining()
    assert slots.try_acquire("m", 4, 10)  # within this proxy's share (half of 4)
    assert not (await slots.confirm("m")).taken  # the store says the model is full: refused, not held
    assert slots.release("m") and slots.leases() == []
    fleet.leases["m"] = {"b#1"}  # the other proxy's requests end
    slots.apply(fleet.tally())
    assert slots.try_acquire("m", 4, 10) and (await slots.confirm("m")).taken
    assert fleet.leases["m"] == {"b#1", "a#2"}  # in the store, where the other proxy counts it
    assert slots.release("m") and fleet.released == ["a#2"]  # given back there too
    slots.rejoining(False)  # gone again: alone on the share, nothing sent
    assert slots.try_acquire("m", 4, 10) and (await slots.confirm("m")).taken
    assert "a#3" not in fleet.leases["m"]


async def test_a_slot_the_store_did_not_confirm_is_held_only_within_the_share() -> None:
    """Taken on the fleet's mirror, then the store was found gone (the fleet goes alone as it answers):
    beyond this proxy's share of the limit it is refused like a race lost, so proxies that all found the
    store gone at once cannot fill a model together."""
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.apply(Tally({}, 0, {"a": 0, "b": 0}))  # two proxies: half each when alone

    async def gone(
        model: str, lease: str, cap: int, account_cap: int, probe: ProbeClaim | None = None
    ) -> Verdict | None:
        slots.disconnected()  # as RedisFleet does when a call fails
        return None

    fleet.confirm = gone  # type: ignore[method-assign]
    assert slots.try_acquire("one", 1, 100) and not (await slots.confirm("one")).taken  # half of 1 is none
    assert slots.release("one") and slots.leases() == []
    assert not slots.fits("one", 1, 100) and slots.fits("m", 4, 100)  # alone now: the share applies
    assert slots.try_acquire("m", 4, 100) and (await slots.confirm("m")).taken
    assert slots.try_acquire("m", 4, 100) and (await slots.confirm("m")).taken
    assert not slots.fits("m", 4, 100) and not slots.try_acquire("m", 4, 100)  # half of 4


async def test_a_race_lost_does_not_count_as_service_so_the_loser_keeps_its_place_in_line() -> None:
    """A conversation whose slot another proxy took first was not served: waiting again, it goes before
    one that came after it (counted as served, it went behind every conversation served less)."""
    fleet = FakeFleet()
    pool = ChaosPool(parse_config({"modelRouting": {"models": DESIGN_MODELS}}))  # heavy: 3 + 3 + 2 slots
    slots = SharedSlots("b", on_freed=pool.wake, waiting=pool.first_in_line)
    slots.connected(fleet)
    pool.use(slots=slots)
    for i in range(7):  # all the heavy tier's slots but one, held here
        assert await pool.admit(Ticket("heavy", session=f"held{i}"), timeout=0) is not None
    caps = {"glm-4.7": 3, "glm-4.6": 3, "glm-4.5-x": 2}
    free = next(model for model, cap in caps.items() if slots.in_flight(model) < cap)
    fleet.leases[free].add("a#1")  # another proxy took the last one; not yet heard of here
    first = asyncio.ensure_future(pool.admit(Ticket("heavy", session="first"), timeout=5))
    while pool.first_in_line()[0] == 0:  # it lost the slot to the other proxy, then waits
        await asyncio.sleep(0)
    assert pool.lost_races == 1
    second = asyncio.ensure_future(pool.admit(Ticket("heavy", session="second"), timeout=5))
    while pool.first_in_line()[0] < 2:
        await asyncio.sleep(0)
    fleet.leases[free].discard("a#1")
    slots.heard(Notice(fleet.seq + 1, "-", "a", free))
    selection = await asyncio.wait_for(first, 1)
    assert selection is not None and selection.model == free and not second.done()
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)


def test_among_first_waiters_served_as_much_the_one_waiting_longest_is_owed_the_slot() -> None:
    now = [100.0]
    line = (2, 1, 0.5)  # the first here was admitted once lately and has waited 0.5 s
    slots = SharedSlots("a", waiting=lambda: line, clock=lambda: now[0])
    slots.connected(FakeFleet())
    slots.heard(Notice(1, "=", "b", "", waiting=1, level=1, waited=0.2))
    assert slots.next_in_fleet_line() is None and slots.hold_back() == 0.0  # this proxy's came first
    slots.heard(Notice(2, "=", "c", "", waiting=3, level=1, waited=0.9))
    now[0] += 0.1  # the figures heard age as they would have there
    line = (2, 1, 0.6)
    assert slots.next_in_fleet_line() == "c" and slots.hold_back() == HOLD_BACK
    slots.heard(Notice(3, "=", "b", "", waiting=1, level=0, waited=0.0))
    assert slots.next_in_fleet_line() == "b"  # served less: first, however long the others waited
    line = (0, 0, 0.0)
    assert slots.next_in_fleet_line() == "b" and slots.hold_back() == 0.0  # nobody here to hold back


async def test_a_slot_given_back_is_owed_to_one_proxy_whose_waiters_try_at_once_the_others_later() -> None:
    """One notice names the proxy the slot is owed to: only its waiters try at once; the others' wait
    `HOLD_BACK` (it may not fit that proxy's waiters) instead of all racing for it."""
    fleet = FakeFleet()
    line = (0, 0, 0.0)
    a = SharedSlots("a", waiting=lambda: line)
    woken: dict[str, list[float]] = {"b": [], "c": []}
    b = SharedSlots("b", on_freed=woken["b"].append)
    c = SharedSlots("c", on_freed=woken["c"].append)
    for slots in (a, b, c):
        slots.connected(fleet)
    assert a.try_acquire("m", 1, 10) and (await a.confirm("m")).taken
    a.heard(Notice(fleet.seq + 1, "=", "b", "", waiting=2, level=0, waited=0.3))
    a.heard(Notice(fleet.seq + 2, "=", "c", "", waiting=5, level=0, waited=0.1))
    assert a.release("m") and fleet.owed == ["b"]  # b's first has waited longest
    for slots in (b, c):
        slots.heard(Notice(fleet.seq, "-", "a", "m", to="b"))
    assert woken == {"b": [0.0], "c": [HOLD_BACK]}
    a.heard(Notice(fleet.seq + 3, "+", "b", "m", waiting=1))  # b took it...
    a.heard(Notice(fleet.seq + 4, "-", "b", "m", waiting=1))  # ...and gave it back
    line = (1, 0, 2.0)  # now this proxy's first came before both
    assert a.try_acquire("m", 1, 10) and (await a.confirm("m")).taken
    assert a.release("m") and fleet.owed == ["b", "a"]  # kept here: the others would lose the race
    b.heard(Notice(fleet.seq, "-", "a", "m", to="a"))
    assert woken["b"] == [0.0, HOLD_BACK]
    line = (0, 0, 0.0)
    a.heard(Notice(0, "=", "b"))
    a.heard(Notice(0, "=", "c"))  # nobody waits anywhere
    assert a.try_acquire("m", 1, 10) and (await a.confirm("m")).taken
    assert a.release("m") and fleet.owed == ["b", "a", ""]  # anyone may take it at once
    b.heard(Notice(fleet.seq, "-", "a", "m"))
    assert woken["b"] == [0.0, HOLD_BACK, 0.0]


async def test_a_slot_owed_to_another_proxy_is_left_to_it_until_it_takes_one_or_the_hold_back_ends() -> None:
    """Whatever wakes this proxy's waiters meanwhile (another slot freed here, a new request), the slot
    owed to another proxy is not theirs: they would win it on the mirror and the owed proxy lose its race."""
    fleet = FakeFleet()
    now = [0.0]
    a = SharedSlots("a", waiting=lambda: (1, 3, 0.1), clock=lambda: now[0])
    a.connected(fleet)
    assert a.try_acquire("m", 2, 10) and (await a.confirm("m")).taken
    assert a.try_acquire("m", 2, 10) and (await a.confirm("m")).taken
    a.heard(Notice(fleet.seq + 1, "=", "b", "", waiting=2, level=0, waited=0.3))  # b's first: served less
    assert a.release("m") and fleet.owed == ["b"]
    assert not a.fits("m", 2, 10) and not a.try_acquire("m", 2, 10)  # left to b
    assert a.fits("other", 2, 10)  # an account slot is left too, but the account has room
    a.heard(Notice(fleet.seq + 2, "+", "b", "m", waiting=2))  # b took a slot of "m": the one left to it
    assert a.in_flight("m") == 2 and not a.try_acquire("m", 2, 10)  # full: a's one and b's
    a.heard(Notice(fleet.seq + 3, "-", "b", "m", waiting=2))
    assert a.try_acquire("m", 2, 10)  # nothing left to anyone: free for a's waiters
    assert a.release("m") and fleet.owed[-1] == "b"
    now[0] += HOLD_BACK  # b did not take it in time (its waiters may not fit "m")
    assert a.fits("m", 2, 10) and a.try_acquire("m", 2, 10)


async def test_a_probes_slot_claims_the_right_to_probe_and_its_verdict_goes_to_the_store() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    assert slots.try_acquire("m", 3, 10)
    claim = ProbeClaim("m", 10.0, 0)
    assert (await slots.confirm("m", claim)).taken
    assert fleet.claims == [(claim, "a#1")]  # under the slot's own lease id
    slots.probe_answered(ProbeClaim("m", 20.0, 1))  # refused: held for the prober's wait
    slots.probe_answered(ProbeClaim("m", 0.0, 0))  # a stalled probe answered after all: freed
    slots.probe_answered(ProbeClaim("m", 0.0, 0))  # nothing more of it to tell
    assert fleet.answers == [(ProbeClaim("m", 20.0, 1), "a#1"), (ProbeClaim("m", 0.0, 0), "a#1")]
    assert slots.release("m")


async def test_alone_each_proxy_probes_on_its_own() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.disconnected()
    assert slots.try_acquire("m", 3, 10)
    confirmation = await slots.confirm("m", ProbeClaim("m", 10.0, 0))
    assert confirmation.taken and confirmation.probe_held == 0.0
    slots.probe_answered(ProbeClaim("m", 0.0, 0))
    assert fleet.claims == [] and fleet.answers == []  # nothing asked of the store, nothing told
    assert slots.release("m")


def test_the_others_overdue_attempts_count_within_their_slots_and_never_while_alone() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.heard(Notice(1, "+", "b", "m", overdue={}))
    slots.heard(Notice(2, "+", "b", "m", overdue={"m": 1}))
    slots.heard(Notice(3, "+", "c", "n", overdue={"m": 4}))  # says more than the others hold of "m"
    assert slots.riding_elsewhere() == {"m": 2, ACCOUNT: 3}
    slots.heard(Notice(4, "+", "d", "n"))  # a proxy of the previous version says nothing of it
    assert slots.riding_elsewhere() == {"m": 2, ACCOUNT: 4}  # within the others' 4 slots
    slots.heard(Notice(0, "*", "c"))  # c left
    assert slots.riding_elsewhere() == {"m": 1, ACCOUNT: 1}
    slots.heard(Notice(5, "+", "b", "m", overdue={}))  # b's rides no more: nothing to add up
    assert slots.riding_elsewhere() == {}
    slots.heard(Notice(6, "+", "b", "m", overdue={"m": 1}))
    slots.disconnected()  # alone: each proxy on its share, nobody's place lent
    assert slots.riding_elsewhere() == {}


def test_this_proxys_overdue_attempts_are_said_in_its_notices_and_at_once_when_they_change() -> None:
    fleet = FakeFleet()
    riding = {"m": 1}
    slots = connected(fleet, overdue=lambda: riding)
    assert slots.notice("=").overdue == {"m": 1}
    before = fleet.announced
    slots.overdue_changed()
    assert fleet.announced == before + 1
    slots.disconnected()
    slots.overdue_changed()  # alone: nobody to tell
    assert fleet.announced == before + 1


def test_what_the_others_say_z_ai_serves_of_their_slots_is_counted_within_their_slots() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.heard(Notice(1, "+", "b", "m", serving={"m": 1}))
    slots.heard(Notice(2, "+", "b", "m", serving={"m": 1}))  # its second slot of "m": not answered yet
    slots.heard(Notice(3, "+", "c", "n", serving={"n": 1, "m": 3}))  # says more than it holds of "m"
    assert slots.serving_elsewhere("m") == 2 and slots.serving_elsewhere("n") == 1  # at most 2 of "m"
    assert slots.serving_elsewhere(None) == 3
    slots.heard(Notice(4, "-", "b", "m", serving={}))  # b gave one back; the other not answered
    assert slots.serving_elsewhere("m") == 1 and slots.serving_elsewhere(None) == 2
    slots.heard(Notice(5, "+", "d", "m"))  # a proxy of the previous version says nothing of it
    assert slots.serving_elsewhere("m") == 2  # c's 3, within the others' 2 slots of "m"
    slots.heard(Notice(0, "*", "c"))  # c left
    assert slots.serving_elsewhere("m") == 0 and slots.serving_elsewhere(None) == 0


def test_a_tally_read_before_a_proxy_s_notice_does_not_forget_what_it_said() -> None:
    """A proxy that joined after the tally was read is in no tally yet: its notice, newer than the tally,
    stands until a tally as new still lacks it (it left unannounced)."""
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.apply(Tally({}, 0, {"a": 0}, seq=4))
    slots.heard(Notice(5, "+", "b", "m", serving={"m": 1}))
    slots.apply(Tally({}, 0, {"a": 0}, seq=4))  # read before b's lease
    assert slots.serving_elsewhere("m") == 1
    slots.apply(Tally({}, 0, {"a": 0}, seq=6))  # read after it, and b is not there: nothing of it counts
    assert slots.serving_elsewhere("m") == 0


def test_what_a_proxy_said_is_forgotten_once_it_misses_a_renewal_and_heard_again_when_it_speaks() -> None:
    """A proxy killed takes its requests with it: its leases count until they end, but what it said z.ai
    serves and what rides above the limits no longer lifts a clean answer here once it missed a renewal."""
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.heard(Notice(5, "+", "b", "m", serving={"m": 2}, overdue={"m": 1}))
    slots.apply(Tally({"m": 3}, 3, {"a": 0, "b": 3}, seq=5))  # b renews: it stands
    assert (slots.serving_elsewhere("m"), slots.riding_elsewhere()) == (2, {"m": 1, ACCOUNT: 1})
    slots.apply(Tally({"m": 3}, 3, {"a": 0, "b": 3}, seq=5, silent=frozenset({"b"})))
    assert (slots.serving_elsewhere("m"), slots.riding_elsewhere()) == (0, {})
    assert slots.in_flight("m") == 3  # its leases still hold their slots
    slots.heard(Notice(6, "=", "b", serving={"m": 1}))  # only late: it says it all again
    assert slots.serving_elsewhere("m") == 1


def test_the_slot_a_lease_is_taken_for_counts_as_served_only_from_its_clean_answer() -> None:
    """A slot z.ai has not answered may be refused: counted as served elsewhere, it lifted clean answers
    there a level above z.ai's while a limit was too high (the fleet's `halved`). Its clean answer is told
    at once, with what this proxy serves then."""
    serving = {"m": 2}
    slots = SharedSlots("a", serving=lambda: serving)
    assert slots.notice("+", "m").serving == {"m": 2}
    serving = {"m": 3}  # z.ai answered it
    assert slots.notice("=", "m", seen=(Seen("clean", 3, 3),)).serving == {"m": 3}


def test_the_verdicts_on_a_request_are_told_as_they_come_and_the_others_count_them() -> None:
    """A verdict goes to the other proxies when it comes, not with the slot given back a stream's length
    later (the proxy that had it would run on other limits meanwhile); alone, nobody hears it."""
    fleet = FakeFleet()
    heard: list[tuple[str, Sequence[Seen]]] = []
    slots = SharedSlots("a", on_seen=lambda model, seen: heard.append((model, seen)))
    slots.connected(fleet)
    verdicts = (Seen("clean", 2, 8),)
    slots.verdicts("m", verdicts)
    assert fleet.told == [("m", verdicts)]
    slots.heard(Notice(0, "=", "b", "m", seen=verdicts))  # another proxy's, told the same way
    assert heard == [("m", verdicts)]
    slots.disconnected()
    slots.verdicts("m", verdicts)
    assert fleet.told == [("m", verdicts)]


async def test_verdicts_that_come_with_a_lease_given_back_still_count() -> None:
    """A proxy of an earlier version sends z.ai's verdicts on a request with the slot it gives back: the
    others still count them (this one tells them as they come, and gives the slot back without them)."""
    fleet = FakeFleet()
    heard: list[tuple[str, Sequence[Seen]]] = []
    slots = SharedSlots("a", on_seen=lambda model, seen: heard.append((model, seen)))
    slots.connected(fleet)
    slots.apply(fleet.tally())
    assert slots.try_acquire("m", 2, 10) and (await slots.confirm("m")).taken
    assert slots.release("m")
    assert fleet.told == []  # nothing to tell with the slot
    verdicts = (Seen("stall", 3, 9), Seen("clean", 2, 8))
    slots.heard(Notice(fleet.seq, "-", "b", "m", seen=verdicts))
    slots.heard(Notice(fleet.seq + 1, "-", "b", "m"))  # nothing to learn from this one
    assert heard == [("m", verdicts)]
    slots.disconnected()
    slots.heard(Notice(fleet.seq + 2, "-", "b", "m", seen=verdicts))  # alone: each learns on its own
    assert len(heard) == 1
