"""LearnedLimits: whose limit a refusal or a stall is, what a probe raises and how probes are paced, fading,
reset, the cost of a refusal, and the state file's data."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.learning.explore import TRIAL
from chaos_mode.learning.limits import STATE_FORMAT, LearnedLimits
from chaos_mode.zai.assumptions import NOISE
from support.fakes import FakeClock

WALL = 1_757_000_000.0
TWO = {"a": {"tier": "HEAVY", "maxConcurrency": 3}, "b": {"tier": "LIGHT", "maxConcurrency": 10}}
PACING = {"probeIntervalSeconds": 5, "probeBackoffMaxSeconds": 30}  # the pacing these tests assert


def routing(models: dict[str, Any] | None = None, **block: Any) -> ModelRouting:
    block["learning"] = {**PACING, **block.get("learning", {})}
    return parse_config({"modelRouting": {"models": models or TWO, **block}})


class Rig:
    def __init__(self, config: ModelRouting | None = None) -> None:
        self.clock = FakeClock()
        self.wall = FakeClock(WALL)
        self.limits = LearnedLimits(config or routing(), clock=self.clock, wall_clock=self.wall)
        for _ in range(60):  # 1-s answers, 3-s refusals unlent: a refusal costs (3 + 3) slot-times
            self.limits.served_for(1.0)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.wall.advance(seconds)

    def serve(self, model: str, count: int, total: int | None = None, times: int = 1) -> None:
        """z.ai answered `count` requests of `model` at once cleanly (`total` on the account)."""
        for _ in range(times):
            self.limits.succeeded(model, count, count if total is None else total, None)


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_the_catalog_is_where_limits_start(rig: Rig) -> None:
    assert (rig.limits.limit("a"), rig.limits.limit("b"), rig.limits.limit("unknown")) == (3, 10, 0)
    assert rig.limits.view().value is None  # no account cap configured: none known yet
    view = rig.limits.view("a")
    assert (view.evidence.start, view.evidence.ceiling) == (3, 12)
    assert (view.value, view.reason, view.changed_at) == (3, "catalog", None)


def test_a_refusal_at_a_level_z_ai_never_served_is_the_models_and_lowers_it(rig: Rig) -> None:
    """glm-4.7 takes 2: served at 1 and 2, refused at its third, twice (once is not enough when a refusal
    costs little: here a slot's time is as long as z.ai's refusal)."""
    rig.serve("a", 1)
    rig.serve("a", 2)
    rig.limits.refused("a", 3, 3, None, None)
    assert rig.limits.limit("a") == 3
    rig.limits.refused("a", 3, 3, None, None)
    assert rig.limits.limit("a") == 2
    assert rig.limits.view().value is None  # the model's level was never served: nothing on the account
    assert rig.limits.view("a").reason == "1302 at 3 in flight"
    assert rig.limits.view("a").changed_at == WALL


def test_a_refusal_where_the_model_serves_all_the_time_is_the_accounts(rig: Rig) -> None:
    """Both models served well within their limits; the account refuses a total no clean answer reached,
    twice (once may be chance)."""
    rig.serve("b", 5, 12, times=12)
    rig.serve("a", 2, 12, times=12)
    rig.limits.refused("b", 5, 14, None, None)
    assert (rig.limits.limit("b"), rig.limits.view().value) == (10, None)
    rig.limits.refused("b", 5, 14, None, None)
    assert (rig.limits.limit("b"), rig.limits.view().value) == (10, 12)  # no more than z.ai served at once
    assert rig.limits.view().reason == "1302 at 14 in flight"


def test_a_refusal_at_a_level_z_ai_served_only_before_its_request_was_sent_is_the_models(rig: Rig) -> None:
    """A model's limit fell (halved): z.ai served its third request at once all along, then refuses there and
    serves nothing there while it decides. The refusals are the model's in full; the account, which z.ai
    just served as many on, takes none. A refusal whose request z.ai decided while it served the model at
    that level is shared, as before (noise, or the account's)."""
    rig.serve("a", 3, 13, times=12)
    rig.serve("b", 10, 13, times=12)
    account = rig.limits.view().evidence
    before = account.refusal_estimate(13, rig.clock())
    rig.advance(1.0)
    sent = rig.clock()
    rig.advance(0.25)
    rig.limits.refused("a", 3, 13, None, sent, "stall")
    rig.limits.refused("a", 3, 13, None, sent)
    assert account.refusal_estimate(13, rig.clock()) == pytest.approx(before, abs=1e-3)  # none on it
    assert rig.limits.view("a").evidence.refusal_estimate(3, rig.clock()) > 2 / 14  # both in full on "a"
    rig.serve("a", 3, 13)  # z.ai serves "a" at 3 again, while it decides the next request...
    rig.advance(0.25)
    rig.limits.refused("a", 3, 13, None, sent, "stall")  # ...sent before that: shared
    assert account.refusal_estimate(13, rig.clock()) > before


def test_an_isolated_refusal_at_a_level_served_cleanly_moves_nothing(rig: Rig) -> None:
    rig.serve("b", 10, times=12)
    rig.limits.refused("b", 10, 10, None, None)
    assert (rig.limits.limit("b"), rig.limits.view().value) == (10, None)


def test_a_stall_says_what_a_1302_says(rig: Rig) -> None:
    rig.serve("a", 1)
    rig.serve("a", 2)
    rig.limits.refused("a", 3, 3, None, None, "stall")
    rig.limits.refused("a", 3, 3, None, None, "stall")
    assert rig.limits.limit("a") == 2
    assert rig.limits.view("a").reason == "stall at 3 in flight"


def test_a_clean_answer_above_a_limit_raises_it_there(rig: Rig) -> None:
    rig.serve("a", 5)  # requests overtaking each other, or a limit raised by z.ai: 5 served at once
    assert rig.limits.limit("a") == 5
    assert rig.limits.view("a").reason == "5 answered at once"


def test_no_probe_before_the_limit_ran_full_with_a_clean_answer(rig: Rig) -> None:
    assert not rig.limits.can_probe("a")  # the catalog's 3 is a guess nobody has tried yet
    rig.serve("a", 2)
    assert not rig.limits.can_probe("a")  # 2 of 3 says nothing about a fourth
    rig.serve("a", 3)
    assert rig.limits.can_probe("a")


def test_a_probe_answered_cleanly_raises_the_limit_and_the_next_may_follow(rig: Rig) -> None:
    rig.serve("a", 3)
    rig.limits.probe_sent("model", "a")
    assert not rig.limits.can_probe("a")  # one probe at a time
    assert rig.limits.view("a").probing
    rig.limits.succeeded("a", 4, 4, "model")
    assert rig.limits.limit("a") == 4
    assert rig.limits.view("a").reason == "probe at 4 answered"
    assert rig.limits.can_probe("a")  # a clean probe: the next may go at once (slow start)


def test_a_probe_counted_within_its_limit_found_no_room_above_it(rig: Rig) -> None:
    """z.ai answers a probe cleanly, but with no more in flight than the limit: a request it was refusing
    (or one that had just ended) left the room. It says nothing of the level above, so the pause a refusal
    set stands. Taken as room found (`realistic`, glm-4.5 at its true 12), each such probe let the next go at
    once, took the place z.ai had left for the next request, and that request was refused 3 s later: one
    1302 every 1.5 s for 12 s."""
    rig.serve("a", 3)
    rig.limits.refused("a", 4, 4, None, None)  # refused above the limit: no probe for the interval
    assert not rig.limits.can_probe("a")
    rig.advance(5.0)
    rig.limits.probe_sent("model", "a")
    rig.advance(0.5)
    rig.limits.refused("a", 4, 4, None, None)  # a regular request refused while the probe is out...
    rig.limits.succeeded("a", 3, 3, "model")  # ...and the probe answered at the limit, not above it
    assert rig.limits.limit("a") == 3
    assert not rig.limits.can_probe("a")
    assert rig.limits.next_probe() == pytest.approx(5.0)
    rig.advance(5.0)
    assert rig.limits.can_probe("a")
    rig.limits.probe_sent("model", "a")
    rig.limits.succeeded("a", 4, 4, "model")  # counted above it: room found, the next goes at once
    assert rig.limits.limit("a") == 4 and rig.limits.can_probe("a")


def test_after_a_refused_probe_the_next_waits_twice_the_base_wait(rig: Rig) -> None:
    rig.serve("a", 3)
    rig.limits.probe_sent("model", "a")
    rig.limits.refused("a", 4, 4, "model", None)
    assert rig.limits.limit("a") == 3
    assert not rig.limits.can_probe("a")
    assert rig.limits.next_probe() == pytest.approx(10.0, rel=0.01)
    rig.advance(9.8)
    assert not rig.limits.can_probe("a")
    rig.advance(0.2)
    assert rig.limits.can_probe("a")
    assert rig.limits.next_probe() is None


def test_each_failed_round_doubles_the_wait_up_to_the_maximum(rig: Rig) -> None:
    rig.serve("a", 3)
    waits = []
    for _ in range(5):
        rig.limits.probe_sent("model", "a")
        rig.limits.refused("a", 4, 4, "model", None)
        wait = rig.limits.next_probe()
        assert wait is not None
        waits.append(wait)
        rig.advance(wait)
        assert rig.limits.can_probe("a")
    assert waits == pytest.approx([10.0, 20.0, 30.0, 30.0, 30.0], rel=0.02)  # doubling, at most 30 s


@settings(max_examples=60, deadline=None)
@given(
    served=st.lists(st.integers(1, 3), max_size=6),
    quiet=st.floats(0.0, 120.0),
    refusals=st.integers(2, 6),
    apart=st.floats(0.0, 2.0),
)
def test_a_limit_fallen_to_zero_is_probed_as_any_limit(
    served: list[int], quiet: float, refusals: int, apart: float
) -> None:
    """A limit of 0 ran full (nothing in flight, every request waits): it is probed after the base wait,
    its rounds fail and double the wait like any limit's, and a clean probe raises it. Asking z.ai for a clean
    answer at 1 first (the clean answers older than the refusals there count little) left it unprobed until
    the refusals faded (`driftSeconds`)."""
    rig = Rig(routing({"a": {"tier": "HEAVY", "maxConcurrency": 2}}))
    for level in served:
        rig.serve("a", level)
    rig.advance(quiet)
    for _ in range(refusals):
        rig.limits.refused("a", 1, 1, None, None)
        rig.advance(apart)
    assume(rig.limits.limit("a") == 0)
    rig.advance(5.0)  # the base wait after the latest refusal
    assert rig.limits.can_probe("a")
    rig.limits.probe_sent("model", "a")
    rig.limits.refused("a", 1, 1, "model", None)
    assert rig.limits.next_probe() == pytest.approx(10.0, rel=0.01)  # one failed round: twice the base
    rig.advance(10.0)
    assert rig.limits.can_probe("a")
    rig.limits.probe_sent("model", "a")
    rig.limits.succeeded("a", 1, 1, "model")
    assert rig.limits.limit("a") >= 1


def test_a_level_a_probe_opened_and_refused_on_trial_fails_its_round(rig: Rig) -> None:
    """A soft band: a probe answered by luck opens a level the next requests pay for; refused there more
    often than noise explains, the level closes at once and the next probe waits `most`."""
    rig.serve("a", 3, times=12)
    rig.limits.probe_sent("model", "a")
    rig.limits.succeeded("a", 4, 4, "model")
    assert rig.limits.limit("a") == 4 and rig.limits.can_probe("a")  # room found: the next goes at once
    for _ in range(round(NOISE * TRIAL)):  # noise explains these: the level stays
        rig.limits.refused("a", 4, 4, None, None)
        rig.serve("a", 4, times=4)
    assert rig.limits.limit("a") == 4
    rig.limits.refused("a", 4, 4, None, None)
    assert rig.limits.limit("a") == 3  # counted before the limit settled
    rig.advance(1.0)
    assert rig.limits.probe_wait("model", "a") == (pytest.approx(29.0, rel=0.01), 1)  # PACING.most


def test_a_detected_restore_starts_every_limits_wait_over(rig: Rig) -> None:
    """z.ai moves its limits plan-wide: a limit seen to come back (clean answers where z.ai refused every
    request) says the others may have too, and their waits start over; a climb (clean answers at levels
    never refused) says nothing."""
    rig.serve("a", 3, times=12)
    rig.serve("b", 10, times=12)
    for _ in range(16):  # "a" now refused at 3 (a fall, detected: z.ai moved)...
        rig.limits.refused("a", 3, 3, None, None)
    assert rig.limits.limit("a") == 2 and rig.limits.moves == (1, 0)
    rig.advance(31.0)  # ...long enough ago that the waits are their own again
    rig.limits.probe_sent("model", "b")
    rig.limits.refused("b", 11, 11, "model", None)  # "b" probed above anything it served: refused, it waits
    assert not rig.limits.can_probe("b")
    for _ in range(2):  # "a" answered cleanly at 3, twice: restored
        rig.limits.probe_sent("model", "a")
        rig.limits.succeeded("a", 3, 3, "model")
    assert rig.limits.limit("a") == 3 and rig.limits.moves == (1, 1)
    assert rig.limits.can_probe("b")  # its wait started over


def test_two_models_rising_together_say_the_plan_moved() -> None:
    """A halving: two models each refused twice at a level served all along, each detector short of firing
    alone; together they say z.ai moved, and a third limit forgets its failed rounds."""
    models = {**TWO, "c": {"tier": "LIGHT", "maxConcurrency": 4}}
    rig = Rig(routing(models))
    for model, level in (("a", 3), ("b", 6), ("c", 4)):
        rig.serve(model, level, times=40)
    for _ in range(2):
        rig.limits.probe_sent("model", "c")
        rig.limits.refused("c", 5, 5, "model", None)
        rig.advance(rig.limits.probe_wait("model", "c")[0])
    assert rig.limits.probe_wait("model", "c")[1] == 2
    rig.advance(4.0)  # the levels were served before these requests were sent: the refusals are the models'
    rig.limits.refused("a", 3, 3, None, None)
    rig.limits.refused("b", 6, 6, None, None)
    rig.limits.refused("a", 3, 3, None, None)
    assert rig.limits.probe_wait("model", "c")[1] == 2  # one model rising: not yet
    rig.limits.refused("b", 6, 6, None, None)
    assert rig.limits.probe_wait("model", "c")[1] == 0 and rig.limits.moves == (1, 0)


def test_a_climb_starts_no_other_limits_wait_over(rig: Rig) -> None:
    rig.serve("a", 3, times=12)
    rig.serve("b", 10, times=12)
    rig.limits.probe_sent("model", "a")
    rig.limits.refused("a", 4, 4, "model", None)
    for level in (11, 12):  # "b" climbs cleanly, twice
        rig.limits.probe_sent("model", "b")
        rig.limits.succeeded("b", level, level, "model")
    assert rig.limits.limit("b") == 12 and rig.limits.moves == (0, 0)
    assert not rig.limits.can_probe("a")  # its wait stands
    rig.advance(10.0)
    assert rig.limits.can_probe("a")


def test_a_refusal_at_any_level_holds_the_limits_probes_for_the_interval(rig: Rig) -> None:
    """p never falls as n grows: a refusal at or under the limit says z.ai refuses above it too. One
    refusal at the top of a band (a level served before) moves no limit, and no probe goes above it for
    the probe interval."""
    rig.serve("a", 3, times=12)
    assert rig.limits.can_probe("a")
    rig.limits.refused("a", 3, 3, None, None)
    assert rig.limits.limit("a") == 3  # one refusal alone moves no limit
    assert not rig.limits.can_probe("a")
    assert rig.limits.next_probe() == pytest.approx(5.0)
    rig.advance(5.0)
    assert rig.limits.can_probe("a")


def test_a_probe_never_answered_frees_its_turn_after_the_interval(rig: Rig) -> None:
    rig.serve("a", 3)
    rig.limits.probe_sent("model", "a")
    rig.advance(5.0)
    assert rig.limits.can_probe("a")


def test_a_probe_given_up_tells_the_limit_nothing_and_fails_its_round(rig: Rig) -> None:
    rig.serve("a", 3)
    rig.limits.probe_sent("model", "a")
    rig.advance(0.5)
    rig.limits.probe_given_up("model", "a")
    assert rig.limits.limit("a") == 3 and not rig.limits.view("a").probing
    assert rig.limits.probe_wait("model", "a") == (pytest.approx(10.0, rel=0.01), 1)


def test_the_wait_a_fleet_is_told_is_the_probers_own(rig: Rig) -> None:
    """What the right to probe is held for, fleet-wide: the base wait while the probe is out (as one proxy's
    next probe waits for an unanswered one), nothing once it is answered cleanly, the doubled wait after
    each failed round; and the failed rounds."""
    rig.serve("a", 3)
    assert rig.limits.probe_wait("model", "a") == (0.0, 0)
    rig.limits.probe_sent("model", "a")
    assert rig.limits.probe_wait("model", "a") == (5.0, 0)
    rig.limits.refused("a", 4, 4, "model", None)
    assert rig.limits.probe_wait("model", "a") == (pytest.approx(10.0, rel=0.01), 1)
    rig.advance(10.0)
    rig.limits.probe_sent("model", "a")
    rig.limits.refused("a", 4, 4, "model", None)
    assert rig.limits.probe_wait("model", "a") == (pytest.approx(20.0, rel=0.02), 2)
    rig.advance(20.0)
    rig.limits.probe_sent("model", "a")
    rig.limits.succeeded("a", 4, 4, "model")
    assert rig.limits.probe_wait("model", "a") == (0.0, 2)


def test_a_probe_whose_right_another_proxy_holds_is_no_probe_and_waits_for_the_right(rig: Rig) -> None:
    rig.serve("a", 3)
    before = rig.limits.view("a").evidence.refusal_estimate(4, rig.clock())
    rig.limits.probe_sent("model", "a")
    rig.limits.probe_claimed("model", "a", sent=False, held_elsewhere=3.0, refused=2)
    assert not rig.limits.view("a").probing  # not sent: it tells the limit nothing
    assert rig.limits.view("a").evidence.refusal_estimate(4, rig.clock()) == before
    assert not rig.limits.can_probe("a") and rig.limits.next_probe() == pytest.approx(3.0)
    rig.advance(3.0)
    assert rig.limits.can_probe("a")
    # the fleet counted two failed rounds: a refusal here waits as the fleet's third would
    rig.limits.probe_sent("model", "a")
    rig.limits.refused("a", 4, 4, "model", None)
    assert rig.limits.probe_wait("model", "a") == (30.0, 3)


def test_a_probe_whose_slot_another_proxy_took_first_is_no_probe_and_may_go_again(rig: Rig) -> None:
    rig.serve("a", 3)
    rig.limits.probe_sent("model", "a")
    rig.limits.probe_claimed("model", "a", sent=False)
    assert rig.limits.can_probe("a") and rig.limits.probe_wait("model", "a") == (0.0, 0)


def test_a_probe_answered_cleanly_on_another_proxy_frees_the_limits_next_probe_here(rig: Rig) -> None:
    rig.serve("a", 3)
    rig.limits.probe_sent("model", "a")
    rig.limits.refused("a", 4, 4, "model", None)  # refused here: this proxy waits...
    rig.advance(10.0)
    rig.limits.probe_sent("model", "a")
    rig.limits.probe_claimed("model", "a", sent=False, held_elsewhere=4.0)  # ...then another proxy probes
    assert not rig.limits.can_probe("a")
    rig.limits.probe_answered_elsewhere("model", "a")  # and its probe is answered cleanly
    assert rig.limits.can_probe("a") and rig.limits.probe_wait("model", "a") == (0.0, 1)


def test_an_account_probe_raises_the_account_limit(rig: Rig) -> None:
    rig.serve("b", 5, 12, times=12)
    rig.limits.refused("b", 5, 13, None, None)
    rig.limits.refused("b", 5, 13, None, None)
    assert rig.limits.view().value == 12
    assert not rig.limits.can_probe(None)  # within the probe interval of a refusal above it
    rig.advance(5.0)
    assert rig.limits.can_probe(None)
    rig.limits.probe_sent("account", "b")
    rig.limits.succeeded("b", 6, 13, "account")
    assert rig.limits.view().value is None  # served above its refusal: no account limit is known any more


def test_limits_stay_within_zero_and_the_ceiling() -> None:
    rig = Rig(routing({"a": {"tier": "HEAVY", "maxConcurrency": 2, "ceiling": 3}}))
    rig.serve("a", 50)
    assert rig.limits.limit("a") == 3
    for _ in range(20):
        rig.limits.refused("a", 1, 1, "model", None)
    assert 0 <= rig.limits.limit("a") <= 3


def test_what_was_learned_fades_back_to_the_catalog(rig: Rig) -> None:
    rig.serve("a", 1)
    rig.serve("a", 2)
    rig.limits.refused("a", 3, 3, None, None)
    rig.limits.refused("a", 3, 3, None, None)
    assert rig.limits.limit("a") == 2
    rig.advance(20 * 600.0)  # driftSeconds: the half-life of what was learned
    rig.limits.tick()
    assert rig.limits.limit("a") == 3
    assert rig.limits.view("a").reason == "faded toward the catalog"


def test_a_refusals_price_is_the_time_it_blocks_its_slot_and_the_declared_cost(rig: Rig) -> None:
    """The price in slot-times (`evidence`, rule 2): the refusal's delay when its attempt kept its place,
    the patience when it lent it, plus `refusalCostSeconds` (3 s), over a slot's time to serve."""
    for _ in range(80):
        rig.limits.refusal_took(3.0)
        rig.limits.served_for(30.0)  # long answers: a refusal costs a fifth of a slot's time
    assert rig.limits.cost == pytest.approx((3.0 + 3.0) / 30.0, rel=0.02)
    for _ in range(80):
        rig.limits.lent_after(0.25)
        rig.limits.refusal_took(3.0, lent=True)  # its place lent after 0.25 s: blocked that long
    assert rig.limits.cost == pytest.approx((0.25 + 3.0) / 30.0, rel=0.02)


def test_reset_forgets_everything(rig: Rig) -> None:
    rig.serve("a", 1)
    rig.limits.refused("a", 2, 2, None, None)
    version = rig.limits.version
    rig.limits.reset()
    assert (rig.limits.limit("a"), rig.limits.limit("b"), rig.limits.view().value) == (3, 10, None)
    assert rig.limits.version > version and not rig.limits.can_probe("a")  # untried again
    rig.serve("a", 3)
    assert rig.limits.can_probe("a")


def test_learning_off_learns_nothing() -> None:
    rig = Rig(routing(learning={"enabled": False}))
    rig.limits.refused("a", 3, 3, None, None)
    rig.limits.succeeded("a", 4, 4, "model")
    assert rig.limits.limit("a") == 3 and not rig.limits.can_probe("a")


def test_reconfigure_keeps_what_was_learned_unless_the_catalog_changed(rig: Rig) -> None:
    rig.serve("a", 1)
    rig.serve("a", 2)
    rig.limits.refused("a", 3, 3, None, None)
    rig.limits.refused("a", 3, 3, None, None)
    changed = {**TWO, "b": {"tier": "LIGHT", "maxConcurrency": 7}}
    rig.limits.reconfigure(routing(changed, queue={"timeoutSeconds": 5}))
    assert (rig.limits.limit("a"), rig.limits.limit("b")) == (2, 7)


# -- the state file's data -----------------------------------------------------------------------------


def lowered(rig: Rig) -> None:
    """The model "a" learned at 2 (refused at its third, twice), the account at 8 (at its ninth, twice)."""
    rig.serve("a", 1)
    rig.serve("a", 2)
    rig.limits.refused("a", 3, 3, None, None)
    rig.limits.refused("a", 3, 3, None, None)
    rig.serve("b", 5, 8, times=12)
    rig.limits.refused("b", 5, 9, None, None)
    rig.limits.refused("b", 5, 9, None, None)


def test_dump_and_restore_round_trip(rig: Rig) -> None:
    lowered(rig)
    assert (rig.limits.limit("a"), rig.limits.view().value) == (2, 8)
    data = rig.limits.dump()
    assert data["format"] == STATE_FORMAT and set(data["models"]) == {"a"}  # only what was learned
    fresh = Rig()
    fresh.wall.now = rig.wall.now + 60.0
    assert fresh.limits.restore(data) == 2
    assert (fresh.limits.limit("a"), fresh.limits.limit("b"), fresh.limits.view().value) == (2, 10, 8)
    assert fresh.limits.view("a").reason == "1302 at 3 in flight"  # as saved


def test_a_limit_saved_long_ago_has_faded_meanwhile(rig: Rig) -> None:
    lowered(rig)
    fresh = Rig()
    fresh.wall.now = rig.wall.now + 20 * 600.0
    fresh.limits.restore(rig.limits.dump())
    assert fresh.limits.limit("a") == 3
    assert fresh.limits.view("a").reason == "restored, faded since"


def test_another_proxys_limits_are_taken_where_they_changed_later(rig: Rig) -> None:
    other = Rig()
    other.advance(1.0)
    lowered(other)
    assert rig.limits.merge(other.limits.rows()) == 2
    assert (rig.limits.limit("a"), rig.limits.view().value) == (2, 8)
    assert rig.limits.merge(other.limits.rows()) == 0  # nothing newer


@pytest.mark.parametrize(
    "data",
    [None, [], {"format": "something else"}, {"format": STATE_FORMAT, "version": 99, "models": {}}],
    ids=["null", "list", "foreign", "newer"],
)
def test_data_that_is_not_ours_is_refused(rig: Rig, data: Any) -> None:
    with pytest.raises(ValueError):
        rig.limits.restore(data)


@pytest.mark.parametrize(
    "row",
    [
        {"start": 5, "limit": 1, "changedAt": WALL},  # the catalog changed since
        {"start": 3, "limit": "1", "changedAt": WALL},
        {"start": 3, "limit": True, "changedAt": WALL},
        {"start": 3, "limit": 1, "changedAt": math.inf},
        {"start": 3, "limit": 1},
        "garbage",
    ],
)
def test_bad_or_stale_rows_are_skipped(rig: Rig, row: Any) -> None:
    data = {"format": STATE_FORMAT, "version": 1, "models": {"a": row, "gone": row}, "account": None}
    assert rig.limits.restore(data) == 0
    assert rig.limits.limit("a") == 3


def test_restored_values_are_clamped_to_the_ceiling(rig: Rig) -> None:
    data = {
        "format": STATE_FORMAT,
        "version": 1,
        "models": {"a": {"start": 3, "limit": 10**9, "changedAt": WALL}},
    }
    assert rig.limits.restore(data) == 1
    assert rig.limits.limit("a") == 12
