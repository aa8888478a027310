"""SharedSlots, pure: the mirror of the fleet, leases, lost races, serving alone on a share."""

from __future__ import annotations

from chaos_mode.shared_slots import FALLBACK_SHARE, SharedSlots, Tally, Verdict


class FakeFleet:
    """A shared store in a dict: caps enforced like the Lua script, or no answer when `down`."""

    def __init__(self) -> None:
        self.leases: dict[str, set[str]] = {}
        self.down = False
        self.released: list[str] = []

    async def confirm(self, model: str, lease: str, cap: int, account_cap: int) -> Verdict | None:
        if self.down:
            return None
        held = self.leases.setdefault(model, set())
        total = sum(map(len, self.leases.values()))
        if len(held) >= cap or total >= account_cap:
            return Verdict(False, len(held), total)
        held.add(lease)
        return Verdict(True, len(held), total + 1)

    def release(self, model: str, lease: str) -> None:
        self.leases.get(model, set()).discard(lease)
        self.released.append(lease)

    def tally(self) -> Tally:
        return Tally({m: len(v) for m, v in self.leases.items()}, sum(map(len, self.leases.values())))


def connected(fleet: FakeFleet, name: str = "a") -> SharedSlots:
    slots = SharedSlots(name)
    slots.connected(fleet)
    slots.apply(fleet.tally())
    return slots


async def test_a_slot_confirmed_is_a_lease_and_the_release_gives_it_back() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    assert slots.try_acquire("m", 2, 10)
    assert await slots.confirm("m")
    assert slots.leases() == [("m", "a#1")] and fleet.leases["m"] == {"a#1"}
    assert slots.release("m")
    assert fleet.released == ["a#1"] and slots.total() == 0 and not slots.release("m")


async def test_the_mirror_counts_the_other_proxies_and_a_lost_race_learns_from_the_store() -> None:
    fleet = FakeFleet()
    a, b = connected(fleet, "a"), connected(fleet, "b")
    assert a.try_acquire("m", 1, 10) and await a.confirm("m")
    # b has not heard of it yet: it takes the slot on its mirror, the store refuses
    assert b.try_acquire("m", 1, 10)
    assert not await b.confirm("m")
    assert b.release("m") and fleet.released == []  # no lease was given for it: none goes back
    assert b.in_flight("m") == 1 and b.total() == 1  # a's, as the store said
    assert not b.try_acquire("m", 1, 10)
    a.release("m")
    b.freed_elsewhere("m")  # a's message
    assert b.in_flight("m") == 0 and b.try_acquire("m", 1, 10) and await b.confirm("m")


async def test_a_tally_rebuilds_the_mirror_and_wakes_waiters_when_others_freed_slots() -> None:
    woken: list[int] = []
    slots = SharedSlots("a", on_freed=lambda: woken.append(1))
    slots.connected(FakeFleet())
    slots.apply(Tally({"m": 3, "n": 1}, 4, {"a": 0, "b": 4}))
    assert (slots.in_flight("m"), slots.total(), woken) == (3, 4, [])
    slots.apply(Tally({"m": 1, "n": 1}, 2, {"a": 0, "b": 2}))
    assert (slots.in_flight("m"), slots.total(), woken) == (1, 2, [1])
    assert slots.proxies == {"a": 0, "b": 2}


async def test_alone_a_proxy_uses_its_share_and_its_leases_are_written_again_when_the_store_is_back() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    slots.apply(Tally({}, 0, {"a": 0, "b": 0}))
    assert slots.disconnected() == 0.5  # two proxies were alive
    fleet.down = True
    assert slots.try_acquire("m", 4, 100) and await slots.confirm("m")
    assert slots.try_acquire("m", 4, 100) and await slots.confirm("m")
    assert not slots.try_acquire("m", 4, 100)  # half of 4
    assert len(slots.leases()) == 2  # kept for the store's return
    fleet.down = False
    slots.connected(fleet)
    assert slots.share is None and slots.try_acquire("m", 4, 100)


def test_the_share_before_anything_was_seen_and_a_configured_one() -> None:
    assert SharedSlots("a").share is None  # the first requests wait for the first connection
    assert SharedSlots("a", share=0.25).disconnected() == 0.25
    assert SharedSlots("a").disconnected() == FALLBACK_SHARE


async def test_a_store_that_stops_answering_during_confirm_still_serves_the_request() -> None:
    fleet = FakeFleet()
    slots = connected(fleet)
    fleet.down = True
    assert slots.try_acquire("m", 1, 1) and await slots.confirm("m")
    assert slots.leases() == [("m", "a#1")]
