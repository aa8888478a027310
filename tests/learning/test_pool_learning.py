"""The pool with learned limits: probes only for a request that would wait, no cooldown for a 1302,
capped reset times, trials when nothing is in flight; and a property test against a simulated truth."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from chaos_mode.routing import pool_status
from chaos_mode.routing.arrivals import AT_ONCE_SECONDS
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.routing.slots import Seen
from support.fakes import FakeClock
from support.pool_rig import WALL, Rig, error, routing


def test_a_1302_lowers_the_limit_and_starts_no_cooldown() -> None:
    rig = Rig()
    first, second = rig.take(), rig.take()
    assert (first.in_flight, second.in_flight, second.total) == (1, 2, 2)
    rig.pool.ledger.success(first)  # z.ai served one of "h"...
    assert rig.pool.error("h", error("1302"), 30.0, second) == 0.0  # ...never two: refused twice
    assert rig.pool.cooldowns.blocked() == frozenset()
    assert rig.pool.release(second)
    again = rig.take()
    assert rig.pool.error("h", error("1302"), 30.0, again) == 0.0
    second = again
    assert rig.pool.cooldowns.blocked() == frozenset()
    status = served(pool_status.status(rig.pool))["models"]["h"]
    assert (status["capacity"], status["learnedLimit"], status["catalogLimit"]) == (1, 1, 2)
    assert status["limitReason"] == "1302 at 2 in flight" and status["cooldownReason"] is None
    assert rig.pool.release(first)
    assert rig.pool.release(second)


def test_with_learning_off_a_1302_cools_the_model_down_as_before() -> None:
    rig = Rig(routing(learning={"enabled": False}))
    selection = rig.take()
    assert rig.pool.error("h", error("1302"), None, selection) == 5.0
    assert rig.pool.cooldowns.blocked() == {"h"}
    assert rig.pool.release(selection)


def test_a_request_that_would_wait_probes_one_above_the_limit() -> None:
    rig = Rig()
    first, second = rig.take(), rig.take()
    assert (
        rig.pool.try_acquire(Ticket("heavy")) is None
    )  # the catalog's 2 never ran full: nothing to go on yet
    light = rig.take("light")
    rig.pool.ledger.success(light)  # another model's answer says nothing about "h"
    assert rig.pool.try_acquire(Ticket("heavy")) is None
    rig.pool.ledger.success(second)  # 2 in flight, but only one answered: z.ai may serve just that one
    assert rig.pool.try_acquire(Ticket("heavy")) is None
    assert rig.pool.release(light)
    assert rig.pool.release(second)
    rig.pool.ledger.success(first)
    third = rig.take()
    rig.pool.ledger.success(third)  # 2 of 2, answered cleanly
    probe = rig.take()
    assert (probe.model, probe.probe, probe.in_flight) == ("h", "model", 3)
    assert probe.reason == "probing h's limit (2+1)"
    assert served(pool_status.status(rig.pool))["models"]["h"]["probing"] is True
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # one probe at a time: the next one waits
    rig.pool.ledger.success(probe)
    assert served(pool_status.status(rig.pool))["models"]["h"]["learnedLimit"] == 3
    for selection in (first, third, probe):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_no_probe_while_an_eligible_model_has_room() -> None:
    rig = Rig()
    heavy = rig.fill()
    light = [rig.take("light") for _ in range(3)]
    assert [s.probe for s in light] == [None] * 3  # "l" had room: no reason to go above "h"
    probe = rig.take("light")
    assert probe.probe == "model"
    for selection in (*heavy, *light, probe):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_a_failed_probe_is_not_repeated_within_its_wait() -> None:
    rig = Rig()
    held = rig.fill()
    probe = rig.take()
    rig.pool.error("h", error("1302"), None, probe)
    assert rig.pool.release(probe)
    assert served(pool_status.status(rig.pool))["models"]["h"]["learnedLimit"] == 2
    assert rig.pool.try_acquire(Ticket("heavy")) is None
    rig.clock.advance(9.8)
    assert rig.pool.try_acquire(Ticket("heavy")) is None
    rig.clock.advance(0.2)  # the base wait (5 s by default) doubled by the failed round
    second = rig.take()
    assert second.probe == "model"
    rig.pool.error("h", error("1302"), None, second)
    assert rig.pool.release(second)
    rig.clock.advance(10.0)
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # refused twice: the next waits twice as long
    rig.clock.advance(10.0)
    third = rig.take()
    assert third.probe == "model"
    for selection in (*held, third):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_a_probes_clean_answer_heard_again_from_another_proxy_undoes_no_wait_set_since() -> None:
    """A fleet's proxy hears of another's clean probe twice: at once, with the right freed (its next probe
    may go), and a slot's length later, with the slot given back. The second is evidence only: a probe
    refused here meanwhile still waits its interval."""
    rig = Rig()
    held = rig.fill()
    rig.pool.ledger.probe_answered_elsewhere("h")  # another proxy's probe above 2 answered cleanly: at once
    probe = rig.take()
    assert probe.probe == "model"
    rig.pool.error("h", error("1302"), None, probe)  # ours is refused: 10 s before the next
    assert rig.pool.release(probe)
    # the other's slot back, with its verdict
    rig.pool.ledger.seen_elsewhere("h", [Seen("clean", 3, 3, "model")])
    assert rig.pool.limits.probe_wait("model", "h") == (pytest.approx(10.0, rel=0.01), 1)
    for selection in held:
        assert rig.pool.release(selection)


def test_a_stall_another_proxy_heard_counts_here_from_when_its_request_was_sent() -> None:
    """A limit halved: z.ai served 3 of "l" a second ago, and now holds requests at 2. Stalls heard here, of
    requests sent 0.25 s ago, are the model's in full (z.ai has served it at 2 since none of them); heard
    from another proxy, they must count the same. Without their age they counted as sent a refusal's time
    ago (3 s), before the clean answers at 3, and were shared with the account: the limit stayed."""

    def learned(hear: Callable[[Rig], None]) -> int:
        rig = Rig()
        for level in (1, 2, 3):
            rig.pool.limits.succeeded("l", level, level, None)
        rig.clock.advance(1.0)
        for _ in range(3):
            hear(rig)
            rig.clock.advance(0.1)
        return rig.pool.limits.limit("l")

    def here(rig: Rig) -> None:
        rig.pool.limits.refused("l", 2, 2, None, rig.clock() - 0.25, "stall")

    def elsewhere(rig: Rig) -> None:
        rig.pool.ledger.seen_elsewhere("l", [Seen("stall", 2, 2, None, 0.25)])

    def elsewhere_unaged(rig: Rig) -> None:  # a verdict that does not say when (a previous version's notice)
        rig.pool.ledger.seen_elsewhere("l", [Seen("stall", 2, 2)])

    assert learned(here) == learned(elsewhere) == 1
    assert learned(elsewhere_unaged) == 3


def test_an_account_limit_learned_from_1302s_is_probed_too() -> None:
    three = {name: {"tier": "LIGHT", "maxConcurrency": 3} for name in ("a", "b", "c")}
    rig = Rig(routing(three, chaosMode={"qualityFloor": {"heavy": "LIGHT", "medium": "LIGHT"}}))
    for model in three:  # each model served at 1 and 2 lately, the account at most 4 at once
        for level in (1, 2):
            for _ in range(12):
                rig.pool.limits.succeeded(model, level, 4, None)
    held = [rig.take("light") for _ in range(4)]
    for selection in held:
        rig.pool.ledger.success(selection)
    # Two models at levels they serve refuse at 5: the account is full at 4.
    for _ in range(2):
        refused = rig.take("light")
        assert refused.total == 5 and refused.in_flight < 3
        rig.pool.error(refused.model, error("1302"), None, refused)
        rig.pool.release(refused)
    status = served(pool_status.status(rig.pool))
    assert status["accountLimit"] == 4
    assert [status["models"][m]["learnedLimit"] for m in three] == [3, 3, 3]
    assert rig.pool.try_acquire(Ticket("light")) is None  # within the probe interval of those answers
    rig.clock.advance(10.0)
    probe = rig.take("light")
    assert (probe.probe, probe.reason) == ("account", "probing the account limit (4+1)")
    rig.pool.ledger.success(probe)
    # A clean answer at 5 ten seconds after the refusals there: z.ai has moved since, they count little.
    assert served(pool_status.status(rig.pool))["accountLimit"] is None
    for selection in [*held, probe]:
        rig.pool.release(selection)


def test_a_probe_respects_the_cost_guard() -> None:
    models = {"cheap": {"tier": "HEAVY", "maxConcurrency": 1}, "dear": {"tier": "HEAVY", "maxConcurrency": 1}}
    models["dear"] |= {"inputPrice": 100.0, "outputPrice": 100.0}
    rig = Rig(routing(models, chaosMode={"maxCostPerRequest": 0.01}))
    from chaos_mode.routing.pool import RequestInfo

    info = RequestInfo(1000, 100)
    taken = [rig.pool.try_acquire(Ticket("light", request=info)) for _ in range(2)]
    assert taken[0] is not None
    rig.pool.ledger.success(taken[0])  # "cheap" ran full
    taken.append(rig.pool.try_acquire(Ticket("light", request=info)))
    # Within the limits the guard's fallback (the cheapest eligible) may reach "dear"; a probe never does.
    assert [(s.model, s.probe) for s in taken if s] == [("cheap", None), ("dear", None), ("cheap", "model")]
    for selection in taken:
        assert selection is not None and rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_reset_times_from_a_message_are_capped() -> None:
    rig = Rig()
    far = error(
        "1308", "[1308][Usage limit reached for 5 hour. Your limit will reset at 2099-01-01 00:00:00]"
    )
    assert rig.pool.error("h", far) == 8 * 86_400.0  # cooldown.maxPauseSeconds: a week and a day
    pause = served(pool_status.status(rig.pool))["accountPause"]
    assert pause["remaining"] == 8 * 86_400.0


def test_when_nothing_is_in_flight_a_cooling_model_takes_a_trial() -> None:
    rig = Rig(routing({"h": {"tier": "HEAVY", "maxConcurrency": 2}}))
    rig.pool.error("h", error("1305"))
    trial = rig.take()
    assert trial.reason == "trial: nothing in flight, cooldown cut short"
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # something is in flight now: the cooldown holds
    assert rig.pool.release(trial)


def test_no_trial_for_a_model_out_of_rotation() -> None:
    rig = Rig(routing({"h": {"tier": "HEAVY", "maxConcurrency": 2}}))
    rig.pool.error("h", error("1113"))
    assert rig.pool.try_acquire(Ticket("heavy")) is None


def test_a_probe_that_becomes_due_wakes_a_waiter() -> None:
    async def scenario() -> None:
        pool = ChaosPool(routing(learning={"probeIntervalSeconds": 0.05}), clock=time.monotonic)
        first, second = pool.try_acquire(Ticket("heavy")), pool.try_acquire(Ticket("heavy"))
        assert first is not None and second is not None
        pool.ledger.success(first)
        pool.ledger.success(second)
        probe = pool.try_acquire(Ticket("heavy"))
        assert first and second and probe and probe.probe == "model"
        pool.error("h", error("1302"), None, probe)
        assert pool.release(probe)
        # The pool stays full (2 of 2) and no slot is released: only the probe timer can serve this.
        waiter = await asyncio.wait_for(pool.admit(Ticket("heavy"), timeout=2.0), 2.0)
        assert waiter is not None and waiter.probe == "model"
        for selection in (first, second, waiter):
            assert pool.release(selection)
        assert pool.in_flight() == 0

    asyncio.run(scenario())


def test_a_ticket_that_may_not_probe_gets_only_a_slot_within_the_limits() -> None:
    rig = Rig()
    held = rig.fill()
    assert rig.pool.try_acquire(Ticket("heavy", may_probe=False)) is None  # a probe is due, but not for it
    assert rig.pool.release(held[0])
    regular = rig.pool.try_acquire(Ticket("heavy", may_probe=False))
    assert regular is not None and regular.probe is None
    for selection in (held[1], regular):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_a_probe_given_up_paces_the_next_as_a_refused_one() -> None:
    """An abandoned probe was most likely refused: no 1302 ever comes for it, but the next probe on that
    limit waits as after a refused one (twice the base wait), then twice that after a second one."""
    rig = Rig()
    held = rig.fill()
    probe = rig.take()
    assert probe.probe == "model"
    rig.pool.ledger.no_verdict(probe, probe_given_up=True)
    rig.pool.ledger.no_verdict(probe, probe_given_up=True)  # idempotent
    assert rig.pool.release(probe)
    assert served(pool_status.status(rig.pool))["models"]["h"]["learnedLimit"] == 2  # the limit stays
    assert rig.pool.try_acquire(Ticket("heavy")) is None
    rig.clock.advance(10.0)
    second = rig.take()
    assert second.probe == "model"
    rig.pool.ledger.no_verdict(second, probe_given_up=True)
    assert rig.pool.release(second)
    rig.clock.advance(10.0)
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # given up twice: the next waits twice as long
    rig.clock.advance(10.0)
    third = rig.take()
    assert third.probe == "model"
    for selection in (*held, third):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


# -- a property test against a simulated truth -----------------------------------------------------------

CATALOG = {
    "h1": {"tier": "HEAVY", "maxConcurrency": 3},
    "h2": {"tier": "HEAVY", "maxConcurrency": 2},
    "m": {"tier": "MEDIUM", "maxConcurrency": 4},
    "l": {"tier": "LIGHT", "maxConcurrency": 1},
}
TIERS = ("heavy", "medium", "light")


class LearningMachine(RuleBasedStateMachine):
    """Requests arrive, z.ai (the truth: each model's true limit, and the account's) says 1302 above it, at
    once or later (meanwhile the attempt may be overdue and ride above the limits), requests end, time
    passes. The learned limits must stay in [0, ceiling], a 1302 never cools anything down, a probe goes
    out only when nothing within the limits could take the request, what z.ai served never exceeded the
    truth, per model or in all, and only an attempt awaiting its verdict rides overdue."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.truth: dict[str, int] = {}
        self.account = 0
        self.held: list[Slot] = []
        self.pending: list[tuple[Slot, bool]] = []  # sent, z.ai's verdict not told yet: (slot, refused)
        self.upstream: dict[str, int] = dict.fromkeys(CATALOG, 0)

    @initialize(
        truth=st.fixed_dictionaries({m: st.integers(0, 8) for m in CATALOG}),
        account=st.integers(1, 20),
        seed=st.integers(0, 9),
    )
    def start(self, truth: dict[str, int], account: int, seed: int) -> None:
        self.truth = truth
        self.account = account
        config = routing(CATALOG, learning={"ceilingFactor": 3})
        self.pool = ChaosPool(config, clock=self.clock, wall_clock=lambda: WALL, rng=random.Random(seed))

    @rule(tier=st.sampled_from(TIERS), give_up=st.booleans(), later=st.booleans())
    def arrive(self, tier: str, give_up: bool, later: bool) -> None:
        room = self._room(tier)
        selection = self.pool.try_acquire(Ticket(tier))  # type: ignore[arg-type]
        if selection is None:
            return
        if selection.probe is not None:
            assert not room, "a probe while a model had room within its limit"
        model = selection.model
        refused = self.upstream[model] >= self.truth[model] or sum(self.upstream.values()) >= self.account
        if later and selection.probe is None:  # z.ai decides now, and tells later
            if not refused:
                self.upstream[model] += 1  # z.ai serves it from now on
            self.pending.append((selection, refused))
            return
        if refused:
            if give_up and selection.probe is not None:  # abandoned before z.ai's 1302 came
                self.pool.ledger.no_verdict(selection, probe_given_up=True)
            else:
                self.pool.error(model, error("1302"), None, selection)
            assert self.pool.release(selection)
            return
        self.upstream[model] += 1
        self.pool.ledger.success(selection)
        self.held.append(selection)

    def _room(self, tier: str) -> bool:
        status = served(pool_status.status(self.pool))["models"]
        eligible = self.pool.config.eligible_models(tier)  # type: ignore[arg-type]
        account = served(pool_status.status(self.pool))["accountLimit"]
        if account is not None and self.pool.in_flight() >= account:
            return False
        return any(status[m]["inFlight"] < status[m]["capacity"] for m in eligible)

    @rule(index=st.integers(0, 100))
    def overdue(self, index: int) -> None:
        if self.pending:
            self.pool.ledger.overdue(self.pending[index % len(self.pending)][0])

    @rule(index=st.integers(0, 100))
    def deliver(self, index: int) -> None:
        if self.pending:
            self._deliver(self.pending.pop(index % len(self.pending)))

    def _deliver(self, pending: tuple[Slot, bool]) -> None:
        selection, refused = pending
        if refused:
            self.pool.error(selection.model, error("1302"), None, selection)
            assert self.pool.release(selection)
        else:
            self.pool.ledger.success(selection)
            self.held.append(selection)

    @rule(index=st.integers(0, 100))
    def finish(self, index: int) -> None:
        if self.held:
            selection = self.held.pop(index % len(self.held))
            self.upstream[selection.model] -= 1
            assert self.pool.release(selection)

    @rule(seconds=st.sampled_from([0.5, 5.0, 700.0]))
    def wait(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def limits_stay_in_bounds(self) -> None:
        if not self.truth:
            return
        status = served(pool_status.status(self.pool))
        account = status["account"]
        assert account["limit"] is None or 0 <= account["limit"] <= account["ceiling"]
        assert account["ceiling"] == 3 * sum(spec["maxConcurrency"] for spec in CATALOG.values())
        for name, model in status["models"].items():
            assert 0 <= model["learnedLimit"] <= model["limitCeiling"] == 3 * CATALOG[name]["maxConcurrency"]
            assert model["cooldownReason"] is None  # only 1302s here: never a cooldown
            assert self.upstream[name] <= self.truth[name]
        assert sum(self.upstream.values()) <= self.account
        assert sum(model["overdue"] for model in status["models"].values()) <= len(self.pending)
        assert self.pool.in_flight() == len(self.held) + len(self.pending)

    def teardown(self) -> None:
        while self.pending:
            self._deliver(self.pending.pop())
        for selection in self.held:
            assert self.pool.release(selection)
        if self.truth:
            assert self.pool.in_flight() == 0 and self.pool.ledger.unanswered() == 0


TestLearningMachine = LearningMachine.TestCase
TestLearningMachine.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_a_probe_rides_above_the_limit_and_takes_none_of_its_slots() -> None:
    """z.ai takes seconds to refuse a probe: meanwhile the model's slots within its limit stay usable."""
    rig = Rig()
    held = rig.fill()
    probe = rig.take()
    assert probe.probe == "model"
    rig.pool.release(held[0])  # a request within the limit ends while the probe waits for its answer
    regular = rig.pool.try_acquire(Ticket("heavy"))
    assert regular is not None and regular.probe is None  # its slot is free again at once
    rig.pool.error("h", error("1302"), None, probe)  # the probe refused: its slot counts no more
    assert rig.pool.release(probe)
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # back at the limit, which stays 2
    for selection in (held[1], regular):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_an_abandoned_probe_gives_its_place_back_exactly_once() -> None:
    rig = Rig()
    rig.fill()
    probe = rig.take()
    rig.pool.ledger.no_verdict(probe)
    rig.pool.ledger.no_verdict(probe)  # idempotent: the owner may end it from several places
    assert rig.pool.release(probe)
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # at the limit: no probe bonus left behind


def test_a_probe_answered_before_an_earlier_request_raises_nothing_until_that_one_is_answered() -> None:
    rig = Rig()
    held = rig.fill()
    assert rig.pool.release(held[0])
    late = rig.take()  # 2 of 2 again; this one is still on its way to z.ai
    probe = rig.take()
    assert probe.probe == "model"
    # The probe overtook `late`: z.ai may serve only 2 of "h" and refuse `late` seconds from now.
    rig.pool.ledger.success(probe)
    assert served(pool_status.status(rig.pool))["models"]["h"]["learnedLimit"] == 2
    rig.pool.ledger.success(late)  # all 3 answered and running: z.ai serves 3 at once
    status = served(pool_status.status(rig.pool))["models"]["h"]
    assert (status["learnedLimit"], status["limitReason"]) == (3, "3 answered at once")
    for selection in (held[1], late, probe):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_a_limit_found_full_wakes_a_waiter_to_probe_without_a_release() -> None:
    async def scenario() -> None:
        pool = ChaosPool(routing(), clock=time.monotonic)
        taken = [pool.try_acquire(Ticket("heavy")) for _ in range(2)]
        waiter = asyncio.ensure_future(pool.admit(Ticket("heavy"), timeout=2.0))
        await asyncio.sleep(0)
        assert not waiter.done()  # 2 of 2 sent, none answered: nothing to go above yet
        for selection in taken:
            assert selection is not None
            pool.ledger.success(selection)  # 2 of 2 answered and running: the limit ran full cleanly
        probe = await asyncio.wait_for(waiter, 1.0)  # no slot was released: the answer woke it
        assert probe is not None and probe.probe == "model"
        for selection in (*taken, probe):
            assert selection is not None and pool.release(selection)
        assert pool.in_flight() == 0

    asyncio.run(scenario())


def test_a_refusal_counts_at_what_z_ai_served_when_it_came_not_at_what_the_pool_held() -> None:
    """A limit fell from 6: three requests z.ai is refusing hold the pool's slots for seconds, never z.ai's.
    The next request, sent beside two streams z.ai serves and those three, is refused at 3, not at 6."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    held = [rig.take() for _ in range(6)]
    for selection in held[:3]:
        rig.pool.ledger.success(selection)
    rig.pool.ledger.ended(held[0])
    assert rig.pool.release(held[0])  # one stream ended: its slot goes back
    after = rig.take()
    assert (after.in_flight, after.total) == (6, 6)
    rig.pool.error("m", error("1302"), None, after)
    evidence = rig.pool.limits.view("m").evidence
    now = rig.clock()
    assert evidence.refusal_estimate(3, now) > 1 / 3  # one clean answer at 3 of prior, and this refusal
    assert evidence.refusal_estimate(6, now) == 0.5  # nothing seen at 6: the prior alone
    assert (
        served(pool_status.status(rig.pool))["models"]["m"]["learnedLimit"] == 6
    )  # once, beside a clean 3: chance
    for selection in [*held[1:], after]:
        assert rig.pool.release(selection)


def test_once_z_ai_is_seen_to_hold_refused_requests_a_refusal_counts_at_what_the_pool_held() -> None:
    """Lending turned off: z.ai holds the slot of a request it refuses until its 1302. Six requests taken,
    none answered yet: z.ai is refusing them all, holding their slots. Counted at what z.ai served (none of
    them), each 1302 would say "refused at 1" and take the limit to 0; the pool's in flight says more."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    held = [rig.take() for _ in range(6)]
    rig.pool.ledger.lending_off("off: lent places refused")
    for selection in reversed(held[2:]):
        rig.pool.error("m", error("1302"), None, selection)
    limit = served(pool_status.status(rig.pool))["models"]["m"]["learnedLimit"]
    assert 3 <= limit < 6
    for selection in held:
        assert rig.pool.release(selection)


def test_at_lending_turned_off_the_verdicts_heard_with_it_on_count_anew_at_what_the_pool_held() -> None:
    """The same refusals heard while lending was on, counted at what z.ai served (none of them): the limit
    falls to the bottom. The check then finds z.ai holding refused requests: they count anew at the pool's in
    flight as each was taken, as if heard with lending off; neither the catalog's 6 nor what they said."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    held = [rig.take() for _ in range(6)]
    for selection in reversed(held[2:]):
        rig.pool.error("m", error("1302"), None, selection)
    assert served(pool_status.status(rig.pool))["models"]["m"]["learnedLimit"] < 3
    rig.pool.ledger.lending_off("off: lent places refused")
    limit = served(pool_status.status(rig.pool))["models"]["m"]["learnedLimit"]
    assert 3 <= limit < 6
    for selection in held:
        assert rig.pool.release(selection)


def test_what_a_reset_of_the_limits_forgot_is_not_counted_anew_when_lending_turns_off() -> None:
    """`chaos.limits.reset` between the refusals and the turn-off: they stay forgotten, the catalog's 6."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    held = [rig.take() for _ in range(6)]
    for selection in reversed(held[2:]):
        rig.pool.error("m", error("1302"), None, selection)
    rig.pool.learned.reset()
    rig.pool.ledger.lending_off("off: lent places refused")
    assert served(pool_status.status(rig.pool))["models"]["m"]["learnedLimit"] == 6
    for selection in held:
        assert rig.pool.release(selection)


def test_a_refusal_is_judged_by_what_z_ai_served_while_it_decided_that_request() -> None:
    """The pool tells the limits when the refused request's slot was taken: z.ai served "h" at 2 just before
    (well within a refusal's time), not since, so the stall is "h"'s in full and nothing of it the
    account's."""
    rig = Rig()
    first, second = rig.fill()
    account = rig.pool.limits.view().evidence
    before = account.refusal_estimate(2, rig.clock())
    rig.pool.ledger.ended(first)
    assert rig.pool.release(first)
    rig.clock.advance(0.5)
    after = rig.take()
    assert (after.in_flight, after.total) == (2, 2)
    rig.clock.advance(0.3)
    assert rig.pool.ledger.stall(after)
    now = rig.clock()
    assert account.refusal_estimate(2, now) == pytest.approx(before, abs=1e-3)  # faded a little, no more
    assert rig.pool.limits.view("h").evidence.refusal_estimate(2, now) > 1 / 3
    for selection in (second, after):
        assert rig.pool.release(selection)


def refused_first(writes: list[int], gap: float) -> list[float]:
    """Three requests for "m" taken in order and written in the order `writes` (indexes), `gap` seconds
    apart; the last two written answered cleanly, the first taken refused: how much each level's refusal
    estimate (1, 2, 3) rose."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 3}}))
    taken = [rig.take(), rig.take(), rig.take()]
    for index in writes:
        rig.pool.ledger.sent(taken[index])
        rig.clock.advance(gap)
    for index in writes:
        if index:
            rig.pool.ledger.success(taken[index])
    evidence = rig.pool.limits.view("m").evidence
    now = rig.clock()
    before = [evidence.refusal_estimate(level, now) for level in (1, 2, 3)]
    rig.pool.error("m", error("1302"), None, taken[0])
    rises = [evidence.refusal_estimate(level, now) - before[level - 1] for level in (1, 2, 3)]
    for selection in taken:
        assert rig.pool.release(selection)
    return rises


def test_a_refusal_counts_what_was_written_to_z_ai_before_it_not_what_was_taken_before_it() -> None:
    """Three requests taken at once are written in another order, a while apart (each after its own
    connection): the first taken, written second, was refused beside the one written before it (at 2), not
    beside nothing (at 1, under a level z.ai served: noise) nor beside the one written after it (at 3)."""
    rises = refused_first([1, 0, 2], gap=0.1)
    assert rises[0] < 0.01  # counted at 1 it would rise by 0.09 (0.003 here: level 2 took a word)
    assert rises[1] > 0.05
    assert rises[2] == pytest.approx(0.0)


def test_requests_written_at_once_reach_z_ai_in_any_order() -> None:
    """Written within a moment of each other (5 ms apart, a burst's spread on a busy machine), z.ai may have
    read the one written after it first: a refusal beside a burst z.ai accepted is at the level the burst
    filled (3), whatever the order."""
    assert AT_ONCE_SECONDS > 2 * 0.005
    for writes in ([0, 1, 2], [1, 0, 2], [1, 2, 0]):
        rises = refused_first(writes, gap=0.005)
        assert rises[0] < 0.01 and rises[1] < 0.01, writes
        assert rises[2] > 0.05, writes


def test_a_clean_answer_counts_only_what_was_written_before_it() -> None:
    """A clean answer's level is taken on the side where it says least: the requests written just after it
    may have reached z.ai after it, and counted beside it they would say z.ai served more than it ever did
    (glm-4.5 held at 13 on a true 12, with heads sent with the first token)."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 3}}))
    taken = [rig.take(), rig.take(), rig.take()]
    for selection in taken:
        rig.pool.ledger.sent(selection)
        rig.clock.advance(0.005)
    for selection in taken[1:]:
        rig.pool.ledger.success(selection)
        assert rig.pool.release(selection)  # answered and ended before the first one's head came
    rig.pool.ledger.success(taken[0])
    assert not rig.pool.limits.view("m").evidence.answered_at(3, rig.clock())  # 2 at most, never 3
    assert rig.pool.release(taken[0])


def test_a_pool_never_told_of_writing_counts_from_the_takings() -> None:
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 3}}))
    first, second = rig.take(), rig.take()
    rig.pool.ledger.success(first)
    evidence = rig.pool.limits.view("m").evidence
    now = rig.clock()
    before = evidence.refusal_estimate(2, now)
    rig.pool.error("m", error("1302"), None, second)
    assert evidence.refusal_estimate(2, now) > before  # beside the first, taken (and answered) before it
    for selection in (first, second):
        assert rig.pool.release(selection)


def test_a_head_z_ai_held_then_served_counts_among_what_it_served_when_the_next_request_came() -> None:
    """A z.ai that queues serves the requests it held once it has room: those count as its own."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    first, held, waiting = rig.take(), rig.take(), rig.take()
    rig.pool.ledger.success(first)
    assert rig.pool.ledger.stall(held)  # z.ai queues it...
    rig.pool.ledger.success(held)  # ...and serves it later
    after = rig.take()
    assert after.in_flight == 4
    rig.pool.error("m", error("1302"), None, after)
    evidence = rig.pool.limits.view("m").evidence
    assert evidence.refusal_estimate(3, rig.clock()) > 0.5  # at 3: first and held beside it, not waiting
    assert evidence.refusal_estimate(4, rig.clock()) == 0.5
    for selection in (first, held, waiting, after):
        assert rig.pool.release(selection)


def test_a_probe_z_ai_held_then_served_found_no_room_above_its_limit() -> None:
    """Its stall judged it (refused, for pacing too); served once a slot freed, it does not let the next
    probe follow at once."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 1}}))
    held = rig.take()
    rig.pool.ledger.success(held)
    probe = rig.take()
    assert probe.probe == "model"
    assert rig.pool.ledger.stall(probe)
    rig.pool.ledger.ended(held)
    assert rig.pool.release(held)  # a slot freed: z.ai serves the probe
    rig.pool.ledger.success(probe)
    assert rig.pool.limits.limit("m") == 1
    assert not rig.pool.limits.can_probe("m")
    assert rig.pool.release(probe)


def test_a_probe_z_ai_queues_takes_the_first_slot_of_its_limit_that_a_served_request_gives_back() -> None:
    """z.ai holds the probe until the model's stream ends, then serves it there: that slot is the probe's,
    not the next request's, which z.ai would hold in turn until the probe ends."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 1}}))
    held = rig.take()
    rig.pool.ledger.success(held)
    probe = rig.take()
    assert probe.probe == "model"
    rig.pool.ledger.queued(probe)
    rig.pool.ledger.ended(held)
    assert rig.pool.release(held)
    assert rig.pool.try_acquire(Ticket("heavy")) is None  # the slot that came back is the probe's
    rig.pool.ledger.success(probe)  # served at 1, in the slot that freed: it raises nothing...
    assert rig.pool.limits.limit("m") == 1
    assert not rig.pool.limits.can_probe("m")  # ...and found no room above: the next probe waits
    assert rig.pool.release(probe)
    assert rig.pool.in_flight() == 0
    regular = rig.take()
    assert regular.probe is None and rig.pool.release(regular)


def test_a_probe_rides_on_unless_z_ai_queues_it_and_the_slot_back_is_one_z_ai_served() -> None:
    """Not known to be queued, or the slot back is a request's that z.ai never served (closed unanswered:
    it held no slot of z.ai's): the probe stays above the limit and the slot goes to the next request."""
    for queued in (False, True):
        rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 2}}))
        first, second = rig.fill()
        rig.pool.ledger.ended(second)
        assert rig.pool.release(second)
        unanswered = rig.take()  # 2 of 2 again, this one not answered yet
        probe = rig.take()
        assert probe.probe == "model"
        if queued:
            rig.pool.ledger.queued(probe)
            rig.pool.ledger.no_verdict(unanswered)
            back = unanswered
        else:
            rig.pool.ledger.success(unanswered)
            rig.pool.ledger.ended(first)
            back = first
        assert rig.pool.release(back)
        regular = rig.take()
        assert regular.probe is None
        for selection in (first, unanswered, probe, regular):
            assert rig.pool.release(selection) is (selection is not back)
        assert rig.pool.in_flight() == 0


def test_a_seated_probe_given_up_or_refused_gives_its_slot_back_exactly_once() -> None:
    for verdict in ("given up", "1302", "stall"):
        rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 1}}))
        held = rig.take()
        rig.pool.ledger.success(held)
        probe = rig.take()
        rig.pool.ledger.queued(probe)
        rig.pool.ledger.queued(probe)  # idempotent
        assert rig.pool.release(held)
        if verdict == "given up":
            rig.pool.ledger.no_verdict(probe, probe_given_up=True)
        elif verdict == "1302":
            rig.pool.error("m", error("1302"), None, probe)
        else:
            assert rig.pool.ledger.stall(probe)
        assert rig.pool.release(probe)
        assert not rig.pool.release(probe)
        assert rig.pool.in_flight() == 0 and rig.pool.ledger.unanswered() == 0
        regular = rig.take()  # the limit's one slot, free again, and no probe riding above it
        assert regular.probe is None and rig.pool.try_acquire(Ticket("heavy")) is None
        assert rig.pool.release(regular)


def _probes_counted(limits: object) -> list[object]:
    """The probe each verdict the learned limits get is counted for, in order."""
    probes: list[object] = []
    for name in ("succeeded", "refused"):
        count = getattr(limits, name)

        def spy(*args: Any, count: Callable[..., None] = count, **kwargs: Any) -> None:
            probes.append(args[3])
            count(*args, **kwargs)

        setattr(limits, name, spy)
    return probes


def test_a_seated_probes_verdict_is_a_regular_requests() -> None:
    """z.ai held the probe until a slot freed and seated it there: whatever its verdict, the limits count it
    as a regular request's (its round failed at its seat)."""
    for verdict in ("clean", "1302", "stall"):
        rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 1}}))
        probes = _probes_counted(rig.pool.limits)
        held = rig.take()
        rig.pool.ledger.success(held)
        probe = rig.take()
        assert probe.probe == "model"
        rig.pool.ledger.queued(probe)
        rig.pool.ledger.ended(held)
        assert rig.pool.release(held)  # the probe is seated
        probes.clear()
        if verdict == "clean":
            rig.pool.ledger.success(probe)
        elif verdict == "1302":
            rig.pool.error("m", error("1302"), None, probe)
        else:
            assert rig.pool.ledger.stall(probe)
        assert probes == [None], verdict
        assert rig.pool.release(probe)


def test_a_clean_answer_counts_at_least_what_z_ai_served_when_its_request_came() -> None:
    """Heads sent with the first token: the first answer ended before the second one's head came, but z.ai
    served both at once when the second came."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    first, second = rig.take(), rig.take()
    rig.pool.ledger.success(first)
    rig.pool.ledger.ended(first)
    assert rig.pool.release(first)
    evidence = rig.pool.limits.view("m").evidence
    assert not evidence.answered_at(2, rig.clock())
    rig.pool.ledger.success(second)  # z.ai serves only it now
    assert evidence.answered_at(2, rig.clock())
    assert rig.pool.release(second)


def test_a_head_z_ai_held_then_served_counts_at_what_z_ai_serves_not_at_its_arrival() -> None:
    """A queuing z.ai was full when the request came (its stall says so) and served it once a slot freed."""
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    first, second, held = rig.take(), rig.take(), rig.take()
    rig.pool.ledger.success(first)
    rig.pool.ledger.success(second)
    assert rig.pool.ledger.stall(held)  # z.ai full at 2
    rig.pool.ledger.ended(first)
    assert rig.pool.release(first)  # a slot freed: z.ai serves the held one
    rig.pool.ledger.success(held)
    assert not rig.pool.limits.view("m").evidence.answered_at(3, rig.clock())  # 2 at once, never 3
    for selection in (second, held):
        assert rig.pool.release(selection)


def test_a_clean_answer_from_a_z_ai_seen_to_queue_counts_only_what_it_serves_now() -> None:
    rig = Rig(routing({"m": {"tier": "HEAVY", "maxConcurrency": 6}}))
    first, second = rig.take(), rig.take()
    rig.pool.ledger.success(first)
    rig.pool.ledger.ended(first)
    assert rig.pool.release(first)
    rig.pool.ledger.success(second, at_once=False)  # it may have waited inside z.ai for first's slot
    assert not rig.pool.limits.view("m").evidence.answered_at(2, rig.clock())
    assert rig.pool.release(second)


# -- an attempt overdue: no head within its patience, most likely being refused ---------------------------


def test_an_overdue_attempt_leaves_its_place_to_the_next_request_until_its_verdict() -> None:
    """z.ai holds no slot for a request it is refusing: while it takes its seconds to say so, the attempt
    rides above its model's limit and the account's, and the next request takes its place."""
    rig = Rig(routing(accountConcurrency=2))
    first, late = rig.take(), rig.take()
    within = Ticket("heavy", may_probe=False)
    assert rig.pool.try_acquire(within) is None  # 2 of 2, and the account's 2 too
    assert rig.pool.try_acquire(Ticket("light", may_probe=False)) is None
    rig.pool.ledger.overdue(late)
    rig.pool.ledger.overdue(late)  # once: a second report changes nothing
    assert late.rides
    status = served(pool_status.status(rig.pool))["models"]["h"]
    assert (status["overdue"], status["probes"]) == (1, 0)
    taken = rig.pool.try_acquire(within)
    assert taken is not None and (taken.model, taken.probe, taken.total) == ("h", None, 3)  # account: 2+1
    assert served(pool_status.status(rig.pool))["models"]["h"]["aboveLimit"] == 1
    assert rig.pool.try_acquire(within) is None  # one place per overdue attempt, no more
    assert rig.pool.try_acquire(Ticket("light", may_probe=False)) is None
    rig.pool.error("h", error("1302"), None, late)  # its verdict: it rides no more
    assert not late.rides
    assert served(pool_status.status(rig.pool))["models"]["h"]["overdue"] == 0
    assert rig.pool.release(late)
    assert rig.pool.try_acquire(within) is None  # back at the limit: first and taken
    for selection in (first, taken):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0 and rig.pool.ledger.unanswered() == 0


def test_an_overdue_attempt_answered_after_all_counts_within_the_limits_again() -> None:
    rig = Rig()
    first, late = rig.take(), rig.take()
    rig.pool.ledger.overdue(late)
    taken = rig.pool.try_acquire(Ticket("heavy", may_probe=False))
    assert taken is not None
    rig.pool.ledger.success(late)  # z.ai served it after all: 3 held on a limit of 2
    assert not late.rides
    status = served(pool_status.status(rig.pool))["models"]["h"]
    assert (status["inFlight"], status["aboveLimit"], status["overdue"]) == (3, 1, 0)
    assert rig.pool.release(first)
    assert rig.pool.try_acquire(Ticket("heavy", may_probe=False)) is None  # 2 of 2 still
    for selection in (late, taken):
        assert rig.pool.release(selection)
    assert rig.pool.in_flight() == 0


def test_a_probe_a_verdict_or_fixed_limits_make_an_attempt_overdue_no_more() -> None:
    rig = Rig()
    held = rig.fill()
    probe = rig.take()
    assert probe.probe == "model"
    rig.pool.ledger.overdue(probe)  # a probe rides above its limit already
    assert not probe.rides
    rig.pool.ledger.overdue(held[0])  # answered: z.ai serves it
    assert not held[0].rides
    for selection in (*held, probe):
        assert rig.pool.release(selection)
    fixed = Rig(routing(learning={"enabled": False}))
    first, second = fixed.take(), fixed.take()
    fixed.pool.ledger.overdue(second)  # without learning a 1302 cools the model: nothing rides
    assert not second.rides
    assert fixed.pool.try_acquire(Ticket("heavy")) is None
    for selection in (first, second):
        assert fixed.pool.release(selection)


def test_with_lending_off_an_overdue_attempt_keeps_its_place() -> None:
    """`learning.lendOverdue: false` (z.ai holds the slot of a request it refuses): nothing rides, and a
    config turning lending back on lends the places of attempts overdue from then on."""
    config = routing(accountConcurrency=2, learning={"lendOverdue": False})
    rig = Rig(config)
    first, late = rig.take(), rig.take()
    rig.pool.ledger.overdue(late)
    assert not late.rides
    learning = served(pool_status.status(rig.pool))["learning"]
    assert learning["lendOverdue"] is False and learning["lending"] == "off: learning.lendOverdue is false"
    assert learning["lendingNats"] == 0.0 and learning["limitsMoved"] == {"down": 0, "up": 0}
    assert served(pool_status.status(rig.pool))["models"]["h"]["overdue"] == 0
    assert rig.pool.try_acquire(Ticket("heavy", may_probe=False)) is None  # its place is its own
    rig.pool.reconfigure(routing(accountConcurrency=2))
    learning = served(pool_status.status(rig.pool))["learning"]
    assert learning["lendOverdue"] is True and learning["lending"].startswith("on: 0 of 0 lent places")
    rig.pool.ledger.overdue(late)
    assert late.rides
    taken = rig.pool.try_acquire(Ticket("heavy", may_probe=False))
    assert taken is not None
    for selection in (first, late, taken):
        assert rig.pool.release(selection)


def test_the_check_of_lending_reads_each_request_once_at_its_first_word() -> None:
    """No head within its patience is read as a refusal at once (a 1302 would come seconds later, after the
    cascade of lent places it started), and its verdict is not read again; a head is read as clean."""
    rig = Rig(routing(accountConcurrency=2))
    first, late = rig.take(), rig.take()
    rig.pool.ledger.overdue(late)  # read: a regular request refused
    lent = rig.pool.try_acquire(Ticket("heavy", may_probe=False))
    assert lent is not None
    rig.pool.ledger.overdue(lent)  # read: a lent one refused
    lending = rig.pool.ledger.lending
    assert lending.why.startswith("on: 1 of 1 lent places refused, 1 of 1 regular ones")
    for selection in (late, lent):
        rig.pool.error("h", error("1302"), None, selection)
    assert lending.why.startswith("on: 1 of 1 lent places refused, 1 of 1 regular ones")
    rig.pool.ledger.success(first)
    assert lending.why.startswith("on: 1 of 1 lent places refused, 1 of 2 regular ones")
    for selection in (first, late, lent):
        assert rig.pool.release(selection)


def test_an_attempt_beside_its_requests_riding_one_is_read_at_its_patience_and_lends_nothing() -> None:
    """One attempt of a request rides at a time (`RoutedRequest.overdue`): another of the same request, with
    no head within its patience, is read by the check there all the same (each request at its first word),
    and keeps its place."""
    rig = Rig(routing(accountConcurrency=3))
    first, late = rig.take(), rig.take()
    rig.pool.ledger.overdue(late)
    lent = rig.pool.try_acquire(Ticket("heavy", may_probe=False))  # the same request's second attempt
    assert lent is not None and lent.record is not None and lent.record.lent
    rig.pool.ledger.overdue(lent, lends=False)
    assert not lent.rides and rig.pool.try_acquire(Ticket("heavy", may_probe=False)) is None
    assert rig.pool.ledger.lending.why.startswith("on: 1 of 1 lent places refused")
    for selection in (first, late, lent):
        assert rig.pool.release(selection)


def test_a_place_lent_before_lending_turned_off_says_nothing_of_the_places_let_go() -> None:
    """Once the check turned lending off, it reads the places of requests let go (`Lending.refusals_hold`):
    a request sent into a lent place before then, refused after, is not one of them."""
    rig = Rig(routing(accountConcurrency=2))
    first, late = rig.take(), rig.take()
    rig.pool.ledger.overdue(late)
    lent = rig.pool.try_acquire(Ticket("heavy", may_probe=False))
    assert lent is not None and lent.record is not None and lent.record.lent
    rig.pool.ledger.lending_off("off: lent places refused")
    assert lent.record.lent is None and rig.pool.ledger.lending.refusals_hold
    rig.pool.error("h", error("1302"), None, lent)
    assert rig.pool.ledger.lending.nats == 0.0  # read, it would have started the check over the let go
    for selection in (first, late, lent):
        assert rig.pool.release(selection)


def test_an_overdue_attempt_hands_its_place_to_a_waiter_at_once() -> None:
    async def scenario() -> None:
        pool = ChaosPool(routing(), clock=time.monotonic)
        taken = [pool.try_acquire(Ticket("heavy")) for _ in range(2)]
        assert taken[0] is not None and taken[1] is not None
        waiter = asyncio.ensure_future(pool.admit(Ticket("heavy", may_probe=False), timeout=2.0))
        await asyncio.sleep(0)
        assert not waiter.done()
        pool.ledger.overdue(taken[1])  # no slot was released: the ride woke it
        slot = await asyncio.wait_for(waiter, 1.0)
        assert slot is not None and slot.model == "h"
        for selection in (*taken, slot):
            assert selection is not None and pool.release(selection)
        assert pool.in_flight() == 0

    asyncio.run(scenario())
