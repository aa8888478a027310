"""The field's shapes in the simulator's pure parts: soft bands, random refusals within the limits, requests
queued inside z.ai, the content filter, heavy-tailed answer lengths and their settings. Seeded RNGs and an
injected clock: nothing waits."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest

from chaos_mode_tools.sim import LimitChange, SimSettings, SimState
from chaos_mode_tools.sim.__main__ import settings_from_args
from chaos_mode_tools.sim.bands import refusal_probability
from chaos_mode_tools.sim.content_filter import ContentFilter
from chaos_mode_tools.sim.lengths import Lengths, parse_lengths
from chaos_mode_tools.sim.stalls import nearest_rank


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


# -- soft bands -----------------------------------------------------------------------------------------


def test_refusal_probability_by_hand() -> None:
    # limit 3, a band of 3: clean to 3, refused by chance at 4, 5 and 6, always from 7.
    assert [refusal_probability(c, 3, 3) for c in range(1, 9)] == [0, 0, 0, 0.25, 0.5, 0.75, 1, 1]
    assert [refusal_probability(c, 3, 0) for c in (3, 4)] == [0, 1]  # no band: a hard limit
    logistic = [refusal_probability(c, 3, 3, "logistic") for c in range(3, 8)]
    assert logistic[0] == 0 and logistic[-1] == 1
    assert logistic == sorted(logistic) and logistic[1] < 0.1 < 0.9 < logistic[3]  # low, then steep


def refusal_rate(state: SimState, model: str, trials: int = 4000) -> float:
    """The share of `trials` requests refused at the concurrency the state is at now (each served one is
    released at once, so the concurrency stays)."""
    refused = 0
    for _ in range(trials):
        admission = state.admit(model)
        if admission.outcome == "served":
            state.release(model)
        else:
            refused += 1
    return refused / trials


def test_a_soft_band_refuses_by_chance_more_often_the_higher_and_is_seeded() -> None:
    state = SimState({"a": 2}, 100, bands={"a": 3}, fault_seed=7)
    assert state.admit("a").outcome == state.admit("a").outcome == "served"  # clean to the limit
    rates = []
    for _ in range(3):  # at 3, 4 and 5 in flight: 1/4, 2/4, 3/4 refused
        rates.append(refusal_rate(state, "a"))
        assert state.try_acquire("a") == "ok"  # one more in flight, taken past the band's draw
    assert rates == pytest.approx([0.25, 0.5, 0.75], abs=0.03)
    refused = state.admit("a")  # 6 in flight would be over the band's top
    assert (refused.outcome, refused.code, refused.reason) == ("refused", "1302", "model")
    assert state.snapshot()["refusalReasons"]["band"] == round(4000 * sum(rates))
    again = SimState({"a": 2}, 100, bands={"a": 3}, fault_seed=7)
    again.admit("a"), again.admit("a")
    assert refusal_rate(again, "a") == rates[0]  # the same seed, the same draws


def test_the_account_has_a_band_too() -> None:
    state = SimState({"a": 5, "b": 5}, 2, account_band=1, fault_seed=1)
    assert state.try_acquire("a") == state.try_acquire("b") == "ok"  # the account's 2 clean slots
    assert refusal_rate(state, "a") == pytest.approx(0.5, abs=0.03)
    assert state.reasons.keys() == {"accountBand"}
    assert state.try_acquire("a") == "ok"
    assert state.admit("b").reason == "account"  # 4 would be over the account's top (2 + 1)


def test_a_limit_change_moves_the_band_with_the_limit() -> None:
    state = SimState({"a": 4}, None, bands={"a": 2})
    state.apply(LimitChange(limits={"a": 2}), at=1.0)  # halved: clean to 2, by chance at 3 and 4
    assert state.over("a") is None
    for _ in range(4):
        state.try_acquire("a")
    assert state.over("a") == "model"  # 4 in flight: the halved limit's top


# -- random refusals --------------------------------------------------------------------------------------


def test_random_refusals_hit_only_requests_within_every_limit() -> None:
    state = SimState({"a": 1}, None, fault_rates={"1302": 1.0})
    assert state.admit("a").reason == "random"  # within the limits, refused anyway
    assert state.try_acquire("a") == "ok"
    assert state.admit("a").reason == "model"  # over the limit: refused for that, not at random
    assert state.reasons == {"random": 1, "model": 1}
    assert state.snapshot()["models"]["a"]["rejected"] == {"1302": 2}


def test_requests_over_a_limit_draw_no_random_fault() -> None:
    """The draws of the requests within the limits are the same whether or not others were over."""
    calm = SimState({"a": 1, "b": 1}, None, fault_rates={"1302": 0.5}, fault_seed=3)
    busy = SimState({"a": 1, "b": 1}, None, fault_rates={"1302": 0.5}, fault_seed=3)
    busy.try_acquire("b")
    seen_calm, seen_busy = [], []
    for _ in range(200):
        seen_calm.append(calm.admit("a").outcome)
        if seen_calm[-1] == "served":
            calm.release("a")
        assert busy.admit("b").reason == "model"
        seen_busy.append(busy.admit("a").outcome)
        if seen_busy[-1] == "served":
            busy.release("a")
    assert seen_calm == seen_busy and 60 < seen_calm.count("refused") < 140


# -- requests queued inside z.ai ------------------------------------------------------------------------


class Woken:
    def __init__(self) -> None:
        self.order: list[str] = []

    def wake(self, name: str) -> Any:
        return lambda: self.order.append(name)


def test_over_the_limit_a_request_waits_inside_zai_until_a_slot_frees() -> None:
    clock, woken = Clock(), Woken()
    state = SimState({"a": 1, "b": 1}, 2, over_limit="queue", clock=clock)
    assert state.admit("a").outcome == "served"
    first = state.admit("a", wake=woken.wake("first")).waiter
    second = state.admit("a", wake=woken.wake("second")).waiter
    assert first is not None and second is not None
    assert state.admit("a").outcome == "refused"  # a caller that cannot wait is refused
    clock.now += 0.4
    state.release("a")  # the slot goes to the first in line, at once
    assert woken.order == ["first"] and first.admitted and not second.admitted
    assert state.models["a"].in_flight == 1 and state.models["a"].served == 2
    clock.now += 1.5
    state.release("a")
    assert woken.order == ["first", "second"]
    waits = state.snapshot()["zaiWaits"]
    assert waits == {
        "waitingNow": 0,
        "waited": 2,
        "maxMs": 1900.0,
        "p99Ms": 1900.0,
        "over1s": 1,
        "timedOut": 0,
        "left": 0,
        "log": [
            ["a", 50.0, 0.4],
            ["a", 50.0, 1.9],
        ],  # each wait: its model, its start (no reset yet), seconds
    }


def test_a_model_that_queues_among_models_that_refuse() -> None:
    """The field's GLM-5.2 held heads 45 s while other models answered 1302: a model of `queue_models`
    queues over its own limit, the others refuse over theirs, and a full account refuses."""
    woken = Woken()
    state = SimState({"a": 1, "b": 1, "c": 1}, 2, queue_models=("a",))
    assert state.admit("a").outcome == state.admit("b").outcome == "served"
    held = state.admit("a", wake=woken.wake("a"))
    assert held.outcome == "queued" and held.waiter is not None
    assert state.admit("b", wake=woken.wake("b")).outcome == "refused"  # over its limit: it refuses
    assert state.admit("c", wake=woken.wake("c")).reason == "account"  # the account refuses, full
    state.release("a")
    assert woken.order == ["a"] and held.waiter.admitted


def test_a_waiter_for_a_full_model_does_not_hold_back_one_that_fits() -> None:
    woken = Woken()
    state = SimState({"a": 1, "b": 2}, 2, over_limit="queue")
    state.try_acquire("a"), state.try_acquire("b")  # the account is full
    state.admit("a", wake=woken.wake("a"))
    state.admit("b", wake=woken.wake("b"))
    state.release("b")  # the account has room, model a still has none
    assert woken.order == ["b"]
    state.apply(LimitChange(limits={"a": 2}, account_limit=3, sets_account_limit=True), at=1.0)
    assert woken.order == ["b", "a"]  # a raised limit serves the waiting too


def test_a_waiter_times_out_or_leaves_without_a_slot() -> None:
    clock = Clock()
    state = SimState({"a": 1}, None, over_limit="queue", clock=clock)
    state.try_acquire("a")
    late, gone = state.admit("a", wake=lambda: None).waiter, state.admit("a", wake=lambda: None).waiter
    assert late is not None and gone is not None
    clock.now += 2.0
    refused = state.time_out(late)
    assert (refused.outcome, refused.code, refused.reason) == ("refused", "1302", "timeout")
    state.leave(gone)
    state.release("a")
    assert state.models["a"].in_flight == 0  # nobody waits any more: the slot stays free
    waits = state.snapshot()["zaiWaits"]
    assert (waits["timedOut"], waits["left"], waits["over1s"], waits["waitingNow"]) == (1, 1, 2, 0)
    state.reset()
    assert state.snapshot()["zaiWaits"]["waited"] == 0
    clock.now += 1.0
    state.try_acquire("a")
    waiter = state.admit("a", wake=lambda: None).waiter
    clock.now += 0.5
    state.release("a")
    assert waiter is not None and waiter.admitted
    assert state.snapshot()["zaiWaits"]["log"] == [["a", 1.0, 0.5]]  # from the reset on


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (nearest_rank(values, 99), nearest_rank(values, 50), nearest_rank([3.0], 99)) == (99, 50, 3)


# -- the content filter ---------------------------------------------------------------------------------


PHRASE = "You run on Hermes Agent"


@pytest.mark.parametrize(
    ("payload", "scope", "trips"),
    [
        ({"system": f"{PHRASE} (by Nous Research)."}, "system", True),
        ({"system": [{"type": "text", "text": f"Hi. {PHRASE}."}]}, "system", True),
        ({"messages": [{"role": "system", "content": PHRASE}]}, "system", True),
        (
            {"messages": [{"role": "developer", "content": [{"type": "text", "text": PHRASE}]}]},
            "system",
            True,
        ),
        ({"system": PHRASE.lower()}, "system", False),  # exact, case-sensitive
        ({"messages": [{"role": "user", "content": PHRASE}]}, "system", False),  # only the system role
        ({"messages": [{"role": "user", "content": PHRASE}]}, "all", True),
        ({"messages": "not a list", "system": 3}, "all", False),
    ],
)
def test_the_content_filter_looks_at_the_system_prompt(
    payload: dict[str, Any], scope: str, trips: bool
) -> None:
    assert ContentFilter((PHRASE,), scope).trips(payload) is trips
    assert ContentFilter((), scope).trips(payload) is False


# -- answer lengths -------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [Lengths("lognormal", sigma=1.0), Lengths("pareto", alpha=1.8)])
def test_heavy_tailed_lengths_keep_their_mean_and_have_a_tail(lengths: Lengths) -> None:
    rng = random.Random(11)
    draws = [lengths.draw(40, rng) for _ in range(20000)]
    assert statistics.mean(draws) == pytest.approx(40, rel=0.08)  # the cap takes a little off
    assert max(draws) <= 800 and min(draws) >= 1  # the cap: 20 x the mean
    ordered = sorted(draws)
    assert nearest_rank([float(d) for d in ordered], 99) > 3.5 * statistics.median(ordered)  # heavy tail
    assert [lengths.draw(40, random.Random(11)) for _ in range(3)] == [draws[0]] * 3  # seeded


def test_fixed_lengths_draw_nothing() -> None:
    rng = random.Random(1)
    assert [Lengths().draw(26, rng), Lengths("lognormal").draw(0, rng)] == [26, 0]
    assert rng.random() == random.Random(1).random()
    capped = Lengths("pareto", alpha=1.1, cap=30)
    assert max(capped.draw(26, rng) for _ in range(2000)) == 30


def test_lengths_from_text_and_json() -> None:
    assert parse_lengths("lognormal:0.8:300") == Lengths("lognormal", sigma=0.8, cap=300)
    assert parse_lengths("pareto:2") == Lengths("pareto", alpha=2.0)
    assert parse_lengths("fixed") == Lengths()
    assert Lengths.from_json({"shape": "pareto", "alpha": 3}) == Lengths("pareto", alpha=3.0)
    assert Lengths.from_json(Lengths("lognormal").to_json()) == Lengths("lognormal")
    for bad, message in [
        ("gamma", "output_lengths.shape"),
        ("pareto:1", "output_lengths.alpha"),
        ("lognormal:0", "output_lengths.sigma"),
        ("lognormal:1:0", "output_lengths.cap"),
        ("lognormal:x", "expected numbers"),
        ("lognormal:1:2:3", "SHAPE"),
        ({"shape": "lognormal", "mu": 1}, "unknown keys mu"),
        ({"sigma": "wide"}, "expected numbers"),
        ({"cap": 2.5}, "output_lengths.cap"),
        (7, "expected an object"),
    ]:
        with pytest.raises(ValueError, match=message):
            Lengths.from_json(bad)


# -- settings --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bands": {"glm-9": 1}}, "bands: unknown model 'glm-9'"),
        ({"bands": {"glm-4.7": -1}}, "bands.glm-4.7: must be >= 0"),
        ({"accountBand": -2}, "account_band: must be >= 0"),
        ({"accountBand": 2}, "account_band: only with an account_limit"),
        ({"accountBand": 1.5}, "account_band: expected an integer"),
        ({"bandShape": "cubic"}, "band_shape: one of linear, logistic"),
        ({"overLimit": "wait"}, "over_limit: one of refuse, queue"),
        ({"queueTimeoutMs": 500}, "queue_timeout_ms: only with over_limit queue or queue_models"),
        ({"queueModels": ["glm-9"]}, "queue_models: unknown model 'glm-9'"),
        ({"overLimit": "queue", "queueTimeoutMs": -1}, "queue_timeout_ms: must be >= 0"),
        ({"filterPhrases": [""]}, "filter_phrases: expected non-empty strings"),
        ({"filterPhrases": "Hermes Agent"}, "filter_phrases: expected a list"),
        ({"filterScope": "user"}, "filter_scope: one of system, all"),
        ({"headWithFirstToken": "yes"}, "head_with_first_token: expected a boolean"),
        ({"outputLengths": {"shape": "zipf"}}, "output_lengths.shape"),
    ],
)
def test_settings_of_the_shapes_are_validated(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimSettings.from_mapping(settings)


def test_settings_of_the_shapes_round_trip_and_come_from_the_cli() -> None:
    given = {
        "bands": {"glm-4.7": 3},
        "accountBand": 4,
        "accountLimit": 30,
        "bandShape": "logistic",
        "overLimit": "queue",
        "queueTimeoutMs": 45000,
        "queueModels": ["glm-4.7"],
        "filterPhrases": [PHRASE],
        "filterScope": "all",
        "headWithFirstToken": True,
        "outputLengths": "lognormal:1.2:400",
    }
    settings = SimSettings.from_mapping(given)
    assert settings.output_lengths == Lengths("lognormal", sigma=1.2, cap=400)
    assert SimSettings.from_mapping(settings.to_mapping()) == settings
    cli = settings_from_args(
        [
            "--band", "glm-4.7=3", "--band", "glm-4.5=5", "--account-band", "4", "--account-limit", "30",
            "--band-shape", "logistic", "--over-limit", "queue", "--queue-timeout-ms", "45000",
            "--queue-model", "glm-4.7", "--filter-phrase", PHRASE,
            "--filter-scope", "all", "--head-with-first-token", "--output-lengths", "lognormal:1.2:400",
        ]
    )  # fmt: skip
    assert cli == SimSettings.from_mapping({**given, "bands": {"glm-4.7": 3, "glm-4.5": 5}})
    for bad in (["--band", "glm-4.7=-1"], ["--output-lengths", "gamma"], ["--queue-timeout-ms", "5"]):
        with pytest.raises(SystemExit):
            settings_from_args(bad)


def test_halving_then_restoring_the_limits_is_a_schedule() -> None:
    halved = {"glm-4.5": 5, "glm-4.7": 1}
    settings = SimSettings.from_mapping(
        {
            "schedule": [
                {"atSeconds": 10, "limits": {"glm-4.5": 10, "glm-4.7": 3}},
                {"atSeconds": 5, "limits": halved},
            ]
        }
    )
    assert [(c.at_seconds, c.change.limits) for c in settings.schedule] == [
        (5.0, halved),
        (10.0, {"glm-4.5": 10, "glm-4.7": 3}),
    ]
    state = SimState(settings.limits, settings.account_limit, over_limit="queue")
    for scheduled in settings.schedule[:1]:
        state.apply(scheduled.change, scheduled.at_seconds)
    state.try_acquire("glm-4.7")
    woken = Woken()
    state.admit("glm-4.7", wake=woken.wake("queued"))
    state.apply(settings.schedule[1].change, settings.schedule[1].at_seconds)  # restored: room again
    assert woken.order == ["queued"]
    assert [c["limits"]["glm-4.7"] for c in state.limit_changes] == [3, 1, 3]
