"""LearnedLimits: what a 1302 lowers, what a probe raises, drift, reset, and the state file's data."""

from __future__ import annotations

import math
from typing import Any

import pytest

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.learning.limits import STATE_FORMAT, LearnedLimits
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

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.wall.advance(seconds)


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_the_catalog_is_where_limits_start(rig: Rig) -> None:
    assert (rig.limits.limit("a"), rig.limits.limit("b"), rig.limits.limit("unknown")) == (3, 10, 0)
    assert rig.limits.account() is None  # no account cap configured: none known yet
    view = rig.limits.view("a")
    assert (view.start, view.ceiling, view.value, view.reason, view.changed_at) == (3, 12, 3, "catalog", None)


def test_a_1302_lowers_the_model_to_what_was_in_flight_less_one(rig: Rig) -> None:
    assert rig.limits.refused("a", 3, 3, None) == "model"
    assert rig.limits.limit("a") == 2
    assert rig.limits.view("a").reason == "1302 at 3 in flight"
    assert rig.limits.view("a").changed_at == WALL
    rig.limits.refused("a", 3, 3, None)  # a second answer from the same burst: no further drop
    assert rig.limits.limit("a") == 2
    # Far below the limit: one step each, not straight to 0 (noise, or another client taking a slot)...
    rig.limits.refused("a", 1, 1, None)
    assert rig.limits.limit("a") == 1
    rig.limits.refused("a", 1, 1, None)
    assert rig.limits.limit("a") == 0  # ...until z.ai has said it often enough: only probes find out more


def test_a_1302_at_a_limit_that_ran_full_cuts_it_by_a_quarter(rig: Rig) -> None:
    rig.limits.succeeded("b", 10, 10, None)  # "b" ran full at 10 cleanly: z.ai took 10
    rig.limits.refused("b", 10, 10, None)  # ...and now refuses at 10: its limits went down
    assert rig.limits.limit("b") == 7
    assert rig.limits.view("b").reason == "1302 at 10 in flight, cut"
    for _ in range(3):
        rig.limits.refused("b", 10, 10, None)  # answers to requests sent before the cut: nothing new
    assert rig.limits.limit("b") == 7
    rig.limits.succeeded("b", 7, 7, None)
    rig.limits.refused("b", 7, 7, None)  # full at 7 and refused again: another cut
    assert rig.limits.limit("b") == 5
    rig.limits.refused("b", 2, 2, None)  # far below: one step
    assert rig.limits.limit("b") == 4


def down_to_zero(rig: Rig, model: str = "a") -> None:
    """1302s with one request in flight until the limit is 0: another client holds every slot."""
    for _ in range(rig.limits.limit(model)):
        rig.limits.refused(model, 1, 1, None)
    assert rig.limits.limit(model) == 0


def full(rig: Rig, model: str = "a") -> None:
    """A clean answer with `model` at its limit: what makes a probe above it worth trying."""
    value = rig.limits.limit(model)
    rig.limits.succeeded(model, value, value, None)


def test_no_probe_before_the_limit_ran_full_with_a_clean_answer(rig: Rig) -> None:
    assert not rig.limits.can_probe("a")  # the catalog's 3 is a guess nobody has tried yet
    rig.limits.succeeded("a", 2, 2, None)
    assert not rig.limits.can_probe("a")  # 2 of 3 says nothing about a fourth
    full(rig)
    assert rig.limits.can_probe("a")
    rig.limits.refused("a", 3, 3, None)  # lowered to 2: untried at 2 since
    rig.advance(5.0)
    assert not rig.limits.can_probe("a")
    full(rig)
    assert rig.limits.can_probe("a")


def test_a_probe_answered_cleanly_raises_the_limit_by_one(rig: Rig) -> None:
    full(rig)
    assert rig.limits.can_probe("a")
    rig.limits.probe_sent("model", "a")
    assert not rig.limits.can_probe("a")  # one probe at a time
    assert rig.limits.view("a").probing
    rig.limits.succeeded("a", 4, 4, "model")
    assert rig.limits.limit("a") == 4
    assert rig.limits.can_probe("a")  # a clean probe: the next may go at once (slow start)
    rig.limits.succeeded("a", 4, 4, None)  # not a probe: confirms, never raises
    assert rig.limits.limit("a") == 4


def test_after_a_failed_probe_the_next_waits_the_probe_interval(rig: Rig) -> None:
    full(rig)
    rig.limits.probe_sent("model", "a")
    assert rig.limits.refused("a", 4, 4, "model") == "model"
    assert rig.limits.limit("a") == 3
    assert not rig.limits.can_probe("a")
    assert rig.limits.next_probe() == pytest.approx(5.0)
    rig.advance(4.9)
    assert not rig.limits.can_probe("a")
    rig.advance(0.1)
    assert rig.limits.can_probe("a")
    assert rig.limits.next_probe() is None


def test_each_refused_probe_doubles_the_wait_up_to_the_maximum(rig: Rig) -> None:
    full(rig)
    waits = []
    for _ in range(5):
        rig.limits.probe_sent("model", "a")
        rig.limits.refused("a", 4, 4, "model")
        wait = rig.limits.next_probe()
        assert wait is not None
        waits.append(wait)
        rig.advance(wait)
        assert rig.limits.can_probe("a")
    assert waits == pytest.approx([5.0, 10.0, 20.0, 30.0, 30.0])  # doubling, at most 30 s


def test_a_probe_answered_anywhere_resets_every_wait(rig: Rig) -> None:
    full(rig)
    full(rig, "b")
    for model, count, then in (("a", 4, 5.0), ("a", 4, 10.0), ("a", 4, 0.0), ("b", 11, 0.0)):
        rig.limits.probe_sent("model", model)
        rig.limits.refused(model, count, count, "model")
        rig.advance(then)
    # t=15: "a" refused three times (next at 15 + 20 s), "b" once (next at 15 + 5 s)
    assert rig.limits.next_probe() == pytest.approx(5.0)
    rig.limits.probe_sent("model", "b")
    rig.limits.succeeded("b", 11, 11, "model")  # sent anyway: z.ai has raised its limits
    assert rig.limits.limit("b") == 11
    assert rig.limits.next_probe() == pytest.approx(5.0)  # "a" back to the base interval, not 20 s
    rig.advance(5.0)
    assert rig.limits.can_probe("a")


def test_a_limit_of_zero_needs_no_confirmation_to_probe(rig: Rig) -> None:
    down_to_zero(rig)
    assert not rig.limits.can_probe("a")
    rig.advance(5.0)
    assert rig.limits.can_probe("a")  # nothing can run at 0: only a probe finds out more


def test_a_probe_never_answered_frees_its_turn_after_the_interval(rig: Rig) -> None:
    full(rig)
    rig.limits.probe_sent("model", "a")
    rig.advance(5.0)
    assert rig.limits.can_probe("a")


def test_a_probe_given_up_keeps_its_turn_until_its_refusal_would_have_come(rig: Rig) -> None:
    """Limits found right take turns, one probe out among them: a probe given up after 0.5 s would have
    been refused at 3 s at the earliest, so the next limit's probe waits until then, not less."""
    full(rig)
    full(rig, "b")
    for model, count in (("a", 4), ("b", 11)):  # both refused once: their probes take turns
        rig.limits.probe_sent("model", model)
        rig.limits.refused(model, count, count, "model")
    rig.advance(5.0)
    assert rig.limits.can_probe("a") and rig.limits.can_probe("b")
    rig.limits.probe_sent("model", "a")
    rig.advance(0.5)
    rig.limits.probe_given_up("model", "a")
    assert rig.limits.limit("a") == 3 and not rig.limits.view("a").probing
    assert not rig.limits.can_probe("a")  # its own next probe waits as after a 1302 (doubled: 10 s)
    assert not rig.limits.can_probe("b")
    rig.advance(2.4)
    assert not rig.limits.can_probe("b")
    rig.advance(0.1)  # 3 s after "a"'s probe was sent
    assert rig.limits.can_probe("b")


def test_limits_stay_within_zero_and_the_ceiling() -> None:
    rig = Rig(routing({"a": {"tier": "HEAVY", "maxConcurrency": 2, "ceiling": 3}}))
    full(rig)
    for k in (3, 4):
        rig.limits.probe_sent("model", "a")
        rig.limits.succeeded("a", k, k, "model")
    assert rig.limits.limit("a") == 3
    assert not rig.limits.can_probe("a")  # at the ceiling: nothing left to probe
    for _ in range(5):
        rig.limits.refused("a", 0, 0, None)
    assert rig.limits.limit("a") == 0


def test_the_account_is_blamed_above_any_total_just_served(rig: Rig) -> None:
    for total in range(1, 9):
        rig.limits.succeeded("b", total, total, None)  # the account served 8 at once
    # "a" was below its learned limit (1 of 3) and the account above what it served: perhaps the account,
    # perhaps another client on "a". "a" is blamed for now...
    assert rig.limits.refused("a", 1, 9, None) == "model"
    assert (rig.limits.account(), rig.limits.limit("a")) == (None, 2)
    # ...until a second model says the same within the probe interval: the account, and "a" is restored.
    rig.advance(1.0)
    assert rig.limits.refused("b", 2, 9, None) == "account"
    assert (rig.limits.account(), rig.limits.limit("a"), rig.limits.limit("b")) == (8, 3, 10)
    assert rig.limits.view().reason == "1302 at 9 in flight"
    assert rig.limits.view("a").reason == "1302 was the account's"
    # At or below a total just served, the model is blamed: the account limit never falls below it.
    assert rig.limits.refused("b", 5, 8, None) == "model"
    assert (rig.limits.account(), rig.limits.limit("b")) == (8, 9)  # one step below its 10


def test_one_model_refusing_twice_is_that_model(rig: Rig) -> None:
    rig.limits.succeeded("b", 8, 8, None)
    rig.limits.refused("a", 2, 9, None)
    assert rig.limits.refused("a", 1, 9, None) == "model"
    assert (rig.limits.account(), rig.limits.limit("a")) == (None, 1)


def test_a_second_opinion_after_the_interval_is_a_new_suspicion(rig: Rig) -> None:
    rig.limits.succeeded("b", 8, 8, None)
    rig.limits.refused("a", 1, 9, None)
    rig.advance(4.0)
    rig.limits.succeeded("b", 8, 8, None)  # fresh evidence of 8
    rig.advance(1.0)
    assert rig.limits.refused("b", 2, 9, None) == "model"
    assert rig.limits.account() is None


def test_with_no_evidence_the_model_is_blamed_never_the_whole_account(rig: Rig) -> None:
    assert rig.limits.refused("a", 1, 1, None) == "model"
    assert rig.limits.account() is None


def test_evidence_of_the_account_ages_out(rig: Rig) -> None:
    rig.limits.succeeded("b", 8, 8, None)
    rig.advance(10.0)  # two probe intervals: old news
    assert rig.limits.refused("a", 1, 9, None) == "model"


def test_an_account_probe_raises_the_account_limit() -> None:
    rig = Rig(routing(accountConcurrency=5))
    assert rig.limits.account() == 5
    assert not rig.limits.can_probe_account()
    rig.limits.succeeded("b", 5, 5, None)
    assert rig.limits.can_probe_account()
    rig.limits.probe_sent("account", "b")
    rig.limits.succeeded("b", 6, 6, "account")
    assert rig.limits.account() == 6
    rig.limits.probe_sent("account", "b")
    assert rig.limits.refused("b", 7, 7, "account") == "account"
    assert rig.limits.account() == 6 and rig.limits.limit("b") == 10
    assert not rig.limits.can_probe_account()


def test_an_unconfirmed_limit_drifts_back_toward_the_catalog(rig: Rig) -> None:
    rig.limits.refused("a", 2, 2, None)  # 2
    rig.limits.refused("a", 2, 2, None)  # 1
    rig.limits.probe_sent("model", "b")
    rig.limits.succeeded("b", 11, 11, "model")  # 11
    rig.advance(599.0)
    rig.limits.tick()
    assert (rig.limits.limit("a"), rig.limits.limit("b")) == (1, 11)
    rig.advance(1.0)
    rig.limits.tick()
    assert (rig.limits.limit("a"), rig.limits.limit("b")) == (2, 10)
    assert rig.limits.view("a").reason == "drift toward the catalog"
    for _ in range(3):
        rig.advance(600.0)
        rig.limits.tick()
    assert (rig.limits.limit("a"), rig.limits.limit("b")) == (3, 10)  # and there it stays


def test_a_limit_confirmed_at_full_use_does_not_drift(rig: Rig) -> None:
    rig.limits.refused("a", 3, 3, None)  # 2
    for _ in range(5):
        rig.advance(300.0)
        rig.limits.succeeded("a", 2, 2, None)  # running at its limit, cleanly
        rig.limits.tick()
    assert rig.limits.limit("a") == 2


def test_a_learned_account_limit_drifts_up_and_is_forgotten_at_the_ceiling(rig: Rig) -> None:
    rig.limits.succeeded("b", 12, 12, None)
    rig.limits.refused("a", 1, 13, None)
    rig.limits.refused("b", 2, 13, None)
    assert rig.limits.account() == 12
    rig.advance(600.0)
    rig.limits.tick()
    assert rig.limits.account() == 13
    for _ in range(60):
        rig.advance(600.0)
        rig.limits.tick()
    assert rig.limits.account() is None


def test_reset_forgets_everything(rig: Rig) -> None:
    rig.limits.succeeded("b", 8, 8, None)
    rig.limits.refused("a", 1, 9, None)
    rig.limits.refused("b", 3, 3, None)
    version = rig.limits.version
    rig.limits.reset()
    assert (rig.limits.limit("a"), rig.limits.limit("b"), rig.limits.account()) == (3, 10, None)
    assert rig.limits.version > version and not rig.limits.can_probe("a")  # untried again
    full(rig)
    assert rig.limits.can_probe("a")


def test_learning_off_learns_nothing() -> None:
    rig = Rig(routing(learning={"enabled": False}))
    rig.limits.refused("a", 3, 3, None)
    rig.limits.succeeded("a", 4, 4, "model")
    assert rig.limits.limit("a") == 3 and not rig.limits.can_probe("a")


def test_reconfigure_keeps_what_was_learned_unless_the_catalog_changed(rig: Rig) -> None:
    rig.limits.refused("a", 3, 3, None)
    rig.limits.refused("b", 3, 3, None)
    changed = {**TWO, "b": {"tier": "LIGHT", "maxConcurrency": 7}}
    rig.limits.reconfigure(routing(changed, queue={"timeoutSeconds": 5}))
    assert (rig.limits.limit("a"), rig.limits.limit("b")) == (2, 7)


# -- the state file's data -----------------------------------------------------------------------------


def test_dump_and_restore_round_trip(rig: Rig) -> None:
    rig.limits.succeeded("b", 8, 8, None)
    rig.limits.refused("a", 1, 9, None)
    rig.limits.refused("b", 2, 9, None)  # account 8 ("a" given back its 3)
    rig.limits.refused("a", 2, 2, None)  # a: 2
    rig.limits.refused("a", 2, 2, None)  # a: 1
    data = rig.limits.dump()
    assert data["format"] == STATE_FORMAT and set(data["models"]) == {"a"}  # only what was learned
    fresh = Rig()
    fresh.wall.now = rig.wall.now + 60.0
    assert fresh.limits.restore(data) == 2
    assert (fresh.limits.limit("a"), fresh.limits.limit("b"), fresh.limits.account()) == (1, 10, 8)
    assert fresh.limits.view("a").reason == "1302 at 2 in flight"


def test_a_limit_saved_long_ago_has_drifted_meanwhile(rig: Rig) -> None:
    down_to_zero(rig)
    fresh = Rig()
    fresh.wall.now = rig.wall.now + 2 * 600.0 + 1.0  # two drift steps later
    fresh.limits.restore(rig.limits.dump())
    assert fresh.limits.limit("a") == 2
    assert fresh.limits.view("a").reason == "restored"


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


def test_a_1302_sent_above_the_limit_says_nothing_below_it(rig: Rig) -> None:
    rig.limits.succeeded("a", 3, 3, None)  # ran full at 3: a cut would take it to 2
    assert rig.limits.refused("a", 4, 4, None) == "model"  # let through beside a probe riding at 4
    assert rig.limits.limit("a") == 3


def test_a_model_that_ran_full_after_the_request_went_out_lost_a_race(rig: Rig) -> None:
    sent = rig.clock()
    rig.advance(0.5)
    rig.limits.succeeded("a", 3, 3, None)  # z.ai served 3 of "a" at once after the request was sent
    # Refused at 3 of 3 all the same: another request overtook it on the way. Nothing moves.
    assert rig.limits.refused("a", 3, 3, None, sent) == "race"
    assert (rig.limits.limit("a"), rig.limits.account()) == (3, None)
    # Refused before "a" ran full: "a" is blamed (cut by a quarter, it had run full at 3).
    assert rig.limits.refused("a", 3, 3, None, rig.clock() + 1.0) == "model"
    assert rig.limits.limit("a") == 2


def test_a_model_that_ran_full_since_is_cleared_and_the_account_blamed_above_any_total_served(
    rig: Rig,
) -> None:
    rig.limits.succeeded("b", 10, 12, None)  # the account served 12 at once
    rig.limits.succeeded("a", 3, 12, None)
    sent = rig.clock()
    assert rig.limits.refused("a", 3, 14, None, sent) == "account"  # "a" ran full since: not "a"
    assert (rig.limits.limit("a"), rig.limits.account()) == (3, 13)
    rig.advance(1.0)
    # At its limit with no later evidence for the model: the model, even above any total served (a
    # wrong model limit costs one model's slots, a wrong account limit all).
    assert rig.limits.refused("b", 10, 12, None, rig.clock() + 1.0) == "model"
    assert (rig.limits.limit("b"), rig.limits.account()) == (7, 13)  # cut by a quarter: it ran full
