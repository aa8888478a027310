"""The field benchmark's shapes (issue 21): the presets' settings and bounds, heavy-tailed workloads, the
figures of a run (convergence after a change, learned ranges, the filtered agent), the filtered agent in
the swarm, and a short real run through mitmdump."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from chaos_mode_tools.bench.field import figures as field_figures
from chaos_mode_tools.bench.field.presets import (
    FILTER_PHRASE,
    PRESETS,
    field_bound,
    field_queue_makespan,
    planned_changes,
    true_timeline,
)
from chaos_mode_tools.bench.field.report import render_field
from chaos_mode_tools.bench.field.run import compare_with_twin, without_agent
from chaos_mode_tools.bench.swarm.agents import (
    Answer,
    FilteredAgent,
    RequestRecord,
    SwarmOptions,
    prompt_text,
    run_swarm,
)
from chaos_mode_tools.bench.swarm.workload import ZAI_DEFAULT_MODELS, WorkloadSpec, make_workload
from chaos_mode_tools.sim import Lengths, SimServer, SimSettings, default_limits
from support.run import run_module


def bound_of(name: str) -> tuple[Any, Any, Any]:
    preset = PRESETS[name]
    workload = make_workload(preset.spec())
    settings = preset.sim_settings(workload)
    served = without_agent(workload, preset.filtered_agent)
    return workload, settings, field_bound(served, true_timeline(planned_changes(settings), settings.refuse))


@pytest.mark.parametrize(
    "name", ["noisy", "soft", "queuing", "filtered", "halved", "realistic", "prompts", "mixed"]
)
def test_every_shape_preset_is_a_field_run_of_at_least_40_agents_and_6_requests(name: str) -> None:
    workload, settings, bound = bound_of(name)
    assert workload.spec.agents >= 40 and workload.spec.requests >= 6
    assert SimSettings.from_mapping(settings.to_mapping()) == settings  # what the child reads back
    assert bound.seconds > 0


def test_an_ideal_queue_on_the_true_limits_is_what_a_proxy_can_approach_where_lb_is_out_of_reach() -> None:
    """LB spreads the work perfectly; an ideal proxy (the pool's queue order, the true limits known, no
    overhead) ends with the long answers the agents happen to send last: on realistic's heavy tails and the
    benchmark's seed, LB is 0.91 of it. Never under LB; None when the limits change during the run."""
    for name in ("realistic", "lower", "soft", "queuing"):
        preset = PRESETS[name]
        for seed in (1, 2, 3):
            workload = make_workload(preset.spec(seed=seed))
            settings = preset.sim_settings(workload)
            timeline = true_timeline(planned_changes(settings), settings.refuse)
            queue = field_queue_makespan(workload, timeline)
            assert queue is not None and queue >= field_bound(workload, timeline).seconds
    workload, settings, bound = bound_of("realistic")  # the benchmark's seed
    queue = field_queue_makespan(workload, true_timeline(planned_changes(settings), settings.refuse))
    assert queue is not None and 0.88 < bound.seconds / queue < 0.93
    workload, settings, _ = bound_of("halved")
    assert field_queue_makespan(workload, true_timeline(planned_changes(settings), settings.refuse)) is None


def test_the_soft_preset_is_bound_by_its_clean_levels_not_its_bands() -> None:
    _, settings, bound = bound_of("soft")
    clean = {**default_limits(), "glm-4.7": 5, "glm-4.5-air": 7, "glm-4.5": 8}
    assert settings.bands == clean and settings.limits == clean and settings.account_limit == 40
    assert bound.slots["heavy+medium+light"] == sum(clean.values()) == 30  # the account's 40 does not bind
    assert bound.slots["heavy"] == 10


def test_the_queuing_preset_queues_over_limits_under_the_catalog() -> None:
    _, settings, bound = bound_of("queuing")
    assert settings.over_limit == "queue" and settings.queue_timeout_ms is None
    assert (bound.slots["heavy"], bound.slots["heavy+medium"], bound.slots["heavy+medium+light"]) == (
        6,
        15,
        20,
    )


def test_the_mixed_preset_has_queuing_s_limits_and_only_the_heavy_models_queue() -> None:
    _, settings, bound = bound_of("mixed")
    _, queuing, queuing_bound = bound_of("queuing")
    assert settings.over_limit == "refuse" and settings.queue_models == ["glm-4.7", "glm-4.6"]
    assert settings.limits == queuing.limits and bound.slots == queuing_bound.slots
    state = settings.new_state(lambda: 0.0)
    for model in ("glm-4.7", "glm-4.5-air"):
        for _ in range(state.models[model].limit):
            assert state.admit(model).outcome == "served"
    assert state.admit("glm-4.7", wake=lambda: None).outcome == "queued"
    assert state.admit("glm-4.5-air", wake=lambda: None).outcome == "refused"


def test_the_halved_preset_halves_every_limit_for_the_middle_third_and_restores_them() -> None:
    _, settings, bound = bound_of("halved")
    halve, restore = settings.schedule
    assert halve.change.limits == {
        "glm-4.7": 1, "glm-4.6": 1, "glm-4.5-x": 1, "glm-4.5": 5, "glm-4.5-air": 2, "glm-4.7-flashx": 1,
        "glm-4.7-flash": 1, "glm-4.5-flash": 1,
    }  # fmt: skip
    assert restore.change.limits == default_limits()
    assert restore.at_seconds == pytest.approx(2 * halve.at_seconds)
    assert bound.seconds == pytest.approx(3 * halve.at_seconds, abs=2e-3)  # the bound is the period
    assert halve.at_seconds > 6  # long enough to see whether the limits follow within 5 s


def test_the_realistic_preset_has_heads_with_the_first_token_and_heavy_tailed_answers() -> None:
    workload, settings, bound = bound_of("realistic")
    assert settings.head_with_first_token and workload.spec.latency_ms == 800
    tokens = [r.output_tokens for r in workload.requests]
    assert max(tokens) > 4 * statistics.median(tokens) and max(tokens) <= 130
    longest = max(v for k, v in bound.terms.items() if k.startswith("agent "))
    assert bound.binding == "heavy+medium+light" and longest > 0.6 * bound.seconds  # long chains, not binding


def test_the_prompts_preset_is_realistic_with_prompts_whose_prefill_grows_with_their_size() -> None:
    workload, settings, _ = bound_of("prompts")
    realistic, _, _ = bound_of("realistic")
    assert settings.head_with_first_token
    sizes = [r.prompt_tokens for r in workload.requests]
    assert statistics.mean(sizes) == pytest.approx(10_000, rel=0.15)
    assert max(sizes) > 4 * statistics.median(sizes)
    for prompted, plain in zip(workload.requests, realistic.requests, strict=True):
        # the same draws as realistic's, then the prompt: its prefill comes on top of the time to first token
        assert prompted.output_tokens == plain.output_tokens and prompted.tier == plain.tier
        assert prompted.latency_ms == pytest.approx(plain.latency_ms + prompted.prompt_tokens / 10, abs=0.1)
    assert {r.prompt_tokens for r in realistic.requests} == {0}  # no prompt asked for, none drawn


def test_a_request_s_prompt_grows_four_bytes_a_token() -> None:
    spec = WorkloadSpec(agents=1, requests=1, prompt_tokens=1000, prompt_lengths=Lengths("fixed"))
    (request,) = make_workload(spec).agents[0]
    assert request.prompt_tokens == 1000
    plain = dataclasses.replace(request, prompt_tokens=0)
    assert len(prompt_text(request)) - len(prompt_text(plain)) == 1 + 4 * 1000


def test_the_noisy_and_filtered_presets_have_twins_without_their_shape() -> None:
    noisy = PRESETS["noisy"]
    assert noisy.fault_rates == {"1302": 0.03}
    twin = noisy.twin_preset()
    assert twin is not None and twin.name == "noisy-twin" and twin.fault_rates == {} and twin.twin is None
    filtered = PRESETS["filtered"]
    workload = make_workload(filtered.spec())
    assert filtered.sim_settings(workload).filter_phrases == [FILTER_PHRASE]
    plain = filtered.twin_preset()
    assert plain is not None and plain.sim_settings(workload).filter_phrases == []
    _, _, bound = bound_of("filtered")
    assert bound.terms["heavy+medium+light"] == pytest.approx(
        sum(r.service_seconds for r in workload.requests if r.agent != 0) / 28
    )  # the filtered agent's work is never served: left out of the bound
    assert PRESETS["halved"].twin_preset() is None


def test_heavy_tailed_workloads_are_seeded_and_keep_their_mean() -> None:
    spec = WorkloadSpec(
        agents=40, requests=50, output_tokens=26, lengths=Lengths("pareto", alpha=2.0, cap=500)
    )
    workload = make_workload(spec)
    assert workload == make_workload(spec)
    tokens = [r.output_tokens for r in workload.requests]
    assert statistics.mean(tokens) == pytest.approx(26, rel=0.1) and max(tokens) > 6 * statistics.median(
        tokens
    )
    plain = make_workload(WorkloadSpec(agents=40, requests=50, output_tokens=26))
    assert max(r.output_tokens for r in plain.requests) <= 39  # the even spread: 26 +-50%


def test_a_bad_law_of_prompt_sizes_is_named_as_such() -> None:
    with pytest.raises(ValueError, match=r"^prompt_lengths\.sigma: must be in"):
        make_workload(WorkloadSpec(prompt_tokens=1000, prompt_lengths=Lengths("lognormal", sigma=9.0)))
    with pytest.raises(ValueError, match=r"^output_lengths\.sigma: must be in"):
        make_workload(WorkloadSpec(lengths=Lengths("lognormal", sigma=9.0)))


# -- the figures of a run -------------------------------------------------------------------------------


def sample(t: float, **learned: int | None) -> dict[str, Any]:
    return {"t": t, "models": {m: {"learnedLimit": v, "cooldown": 0.0} for m, v in learned.items()}}


def test_convergence_is_the_first_sample_within_one_step_after_each_change() -> None:
    slots = [
        {"at": 0.0, "models": {"a": 10, "b": 4}},
        {"at": 3.0, "models": {"a": 5, "b": 2}},
        {"at": 9.0, "models": {"a": 10, "b": 4}},
    ]
    samples = [
        sample(2.5, a=10, b=4),
        sample(3.5, a=10, b=3),  # b within one step at once, a not yet
        sample(5.0, a=7, b=3),
        sample(6.25, a=6, b=2),  # both within one step: 3.25 s after the change
        sample(9.5, a=6, b=2),
        sample(20.0, a=8, b=4),  # a never within one step of 10 before the end
    ]
    first, second = field_figures.convergence(samples, slots)
    assert first == {"at": 3.0, "seconds": 3.25, "byModel": {"a": 3.25, "b": 0.5}}
    assert second == {"at": 9.0, "seconds": None, "byModel": {"a": None, "b": 11.0}}
    assert field_figures.convergence(samples, slots[:1]) == []
    assert field_figures.convergence([sample(4.0, a=None, b=None)], slots[:2])[0]["seconds"] is None


def test_waits_once_known_count_the_requests_that_came_after_their_models_level_was_known() -> None:
    """Known: the learned limit is the true one, and z.ai has shown the proxy that level (the first of the
    model's requests it held has had its head)."""
    slots = [{"at": 0.0, "models": {"a": 2, "b": 6}}]
    samples = [sample(0.0, a=3, b=6), sample(1.0, a=2, b=6), sample(2.0, a=2, b=6), sample(3.0, a=3, b=6)]
    log = [  # [model, began since the simulator's reset, seconds]: the swarm started 0.5 s after the reset
        ["a", 0.6, 0.8],  # before a's limit was learned (at 1.0 s)
        ["a", 1.6, 0.3],
        ["b", 0.7, 1.2],  # b's limit is the catalog's, true from the start: this wait shows it (ends 1.4 s)
        ["b", 1.3, 0.9],  # came before b's level was shown
        ["b", 2.6, 0.2],
        ["c", 9.0, 5.0],  # a model with no known truth: not counted
    ]
    figures = field_figures.waits_once_known(log, samples, slots, lead=0.5)
    assert figures["knownAt"] == {"a": 1.0, "b": 2.0}
    assert (figures["waited"], figures["maxSeconds"], figures["over1s"]) == (2, 0.3, 0)
    assert figures["longest"] == [["b", 2.1, 0.2], ["a", 1.1, 0.3]]
    never = field_figures.waits_once_known(log, [sample(0.0, a=3, b=10)], slots, lead=0.0)
    assert (never["knownAt"], never["waited"], never["maxSeconds"]) == ({"a": None, "b": None}, 0, 0.0)


def test_learned_ranges_cooldowns_and_refusals_per_50() -> None:
    samples = [sample(0.0, a=3, b=None), sample(1.0, a=1, b=None), sample(2.0, a=2, b=None)]
    samples[1]["models"]["a"]["cooldown"] = 2.5
    assert field_figures.learned_ranges(samples) == {
        "a": {"min": 1.0, "max": 3.0, "last": 2.0},
        "b": {"min": None, "max": None, "last": None},
    }
    assert field_figures.cooled_models(samples) == {"a": 2.5}
    assert (field_figures.per_50(6, 240), field_figures.per_50(1, 0)) == (1.25, None)


def record(agent: int, index: int, done: float | None, ok: bool = True, **fields: Any) -> RequestRecord:
    return RequestRecord(agent, index, "light", "m", sent=0.0, done=done, ok=ok, **fields)


def test_the_others_makespan_and_the_filtered_agents_answer() -> None:
    refused = Answer(429, '{"type":"error"}')
    records = [
        record(0, 0, None, ok=False, attempts=3, client_429=3, first_refusal=refused),
        record(1, 0, 2.0),
        record(1, 1, 4.5),
        record(2, 0, 3.0),
    ]
    assert field_figures.makespan_of_others(records, 0) == 4.5
    assert field_figures.filtered_agent(records, 0) == {
        "agent": 0,
        "requests": 1,
        "attempts": 3,
        "served": 0,
        "client429": 3,
        "firstAnswer": {"status": 429, "body": '{"type":"error"}'},
        "gaveUpAfterSeconds": None,
        "stoppedWithOthers": True,
    }


def test_compare_with_twin() -> None:
    preset = {"utilization": 0.72, "makespanSeconds": 12.0}
    twin = {"name": "noisy-twin", "utilization": 0.87, "makespanSeconds": 10.0}
    assert compare_with_twin(preset, twin) == {
        "name": "noisy-twin",
        "makespanSeconds": 10.0,
        "efficiency": 0.87,
        "pointsBelowTwin": 15.0,
        "makespanRatio": 1.2,
    }


# -- the filtered agent in the swarm ------------------------------------------------------------------


GLM = ZAI_DEFAULT_MODELS  # straight to the simulator: z.ai's names


async def test_the_filtered_agent_gives_up_after_its_first_request_or_stops_with_the_others() -> None:
    settings = SimSettings(
        latency_ms=20, token_interval_ms=5, output_tokens=3, filter_phrases=[FILTER_PHRASE]
    )
    async with SimServer(settings) as sim:
        slow = make_workload(WorkloadSpec(agents=3, requests=2, latency_ms=700, output_tokens=2, jitter=0))
        options = SwarmOptions(models=GLM, filtered=FilteredAgent(0, FILTER_PHRASE, attempts=2))
        records, makespan = await run_swarm(sim.base_url, slow, options)
        own = [r for r in records if r.agent == 0]
        assert len(own) == 1 and not own[0].ok and own[0].attempts == 2 and own[0].done is not None
        assert own[0].first_refusal is not None and own[0].first_refusal.status == 529
        assert "overloaded_error" in own[0].first_refusal.body and '"1305"' in own[0].first_refusal.body
        assert all(r.ok for r in records if r.agent != 0) and len(records) == 5
        assert sim.stats()["filtered"]["requests"] == 2
        fast = make_workload(WorkloadSpec(agents=3, requests=1, latency_ms=20, output_tokens=2, jitter=0))
        options = SwarmOptions(models=GLM, filtered=FilteredAgent(0, FILTER_PHRASE, attempts=9))
        records, makespan = await run_swarm(sim.base_url, fast, options)
        assert makespan < 0.4  # not waiting out the filtered agent's back-off
        assert [r.done is None for r in records] == [True, False, False]


# -- a short real run ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_short_run_of_the_field_shapes(tmp_path: Path) -> None:
    json_path = tmp_path / "field.json"
    args = [
        "--field", "filtered,queuing,soft", "--agents", "5", "--requests", "3", "--latency-ms", "40",
        "--tokens", "4", "--token-interval-ms", "10", "--reject-delay-ms", "100", "--json", str(json_path),
        "--rtt-ms", "20",  # z.ai a little away: the proxy reaches it through devtools.distance
    ]  # fmt: skip
    result = run_module("chaos_mode_tools.bench", *args, timeout=150)
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    names = [p["name"] for p in doc["presets"]]
    assert names == ["filtered", "filtered-twin", "queuing", "soft"], result.stderr
    filtered, twin, queuing, soft = doc["presets"]
    assert filtered["upstreamFiltered"] >= 1 and twin["upstreamFiltered"] == 0
    assert filtered["filtered"]["firstAnswer"]["status"] in (429, 529)
    assert filtered["othersOf"] == twin["othersOf"] == 0
    assert filtered["checks"]["allCompleted"] and twin["checks"]["allCompleted"]
    assert filtered["twin"]["name"] == "filtered-twin"
    assert filtered["ideal"]["seconds"] == twin["ideal"]["seconds"]  # both without agent 0's work
    assert queuing["truth"]["settings"]["over_limit"] == "queue" and queuing["zaiWaits"]["timedOut"] == 0
    assert "1302" not in queuing["upstreamByCode"]  # z.ai queues: it never refuses for load
    assert soft["truth"]["settings"]["bands"]["glm-4.5"] == 8 and soft["ideal"]["slots"]["heavy"] == 10
    assert soft["ideal"]["queueSeconds"] >= soft["ideal"]["seconds"]  # an ideal proxy, never under LB
    for preset in doc["presets"]:
        assert preset["completed"] >= preset["requests"] - 1 and preset["samples"]
        assert preset["workload"]["rttMs"] == 20
        assert {"learned", "cooled", "convergence", "refusalReasons", "upstreamPer50"} <= set(preset)
    text = render_field(doc)
    assert "filtered: agent 0 (filtered) got HTTP" in text and "filtered-twin" in text
    assert "soft: LB" in text and "an ideal queue" in text


@pytest.mark.e2e
def test_a_z_ai_that_queues_serves_no_request_twice(tmp_path: Path) -> None:
    """In the first burst, before z.ai is seen to queue, attempts it holds are left for slots within the
    limits; each one it serves later serves its request a second time. Once a held attempt served after
    its stall says z.ai queues, the others are closed: at most the few served before that (9 of 60 here
    before they were closed, 1 after)."""
    json_path = tmp_path / "queuing.json"
    args = ["--field", "queuing", "--no-twins", "--agents", "20", "--requests", "3", "--json", str(json_path)]
    result = run_module("chaos_mode_tools.bench", *args, timeout=150)
    [queuing] = json.loads(json_path.read_text(encoding="utf-8"))["presets"]
    assert queuing["completed"] == 60, result.stderr
    assert sum(queuing["simServed"].values()) - queuing["completed"] <= 3, queuing["simServed"]


# -- the fleet on a field shape -----------------------------------------------------------------------


def test_the_fleet_runs_a_field_preset_on_proxies_that_learn() -> None:
    from chaos_mode_tools.bench.fleet.run import FleetSpec, summary

    spec = FleetSpec(agents=40, requests=6, field="noisy")
    workload = spec.workload()
    assert workload == make_workload(PRESETS["noisy"].spec())
    settings = spec.sim_settings(workload)
    assert settings.fault_rates == {"1302": 0.03} and settings.reject_delay_ms == 3000
    assert spec.bound(workload) == pytest.approx(bound_of("noisy")[2].seconds)
    assert "learning" not in spec.proxy_config()  # the default: learned limits
    assert FleetSpec().proxy_config()["learning"] == {"enabled": False}
    for bad in ("filtered", "nowhere"):
        with pytest.raises(ValueError, match=bad):
            FleetSpec(field=bad).preset()
    runs = {"vsLowerBound": 1.2, "vsOneProxy": 1.0, "lostRaces": 0, "outages": 0, "overCaps": {}}
    rounds = [[{"vsLowerBound": 1.1, "upstream429": 8}, {**runs, "upstream429": 25}]]
    table = summary([2], rounds)
    assert table["1 alone"]["upstream429"] == 8 and table["2"]["upstream429Rounds"] == [25]
    # each round's fleet against the same round's proxy alone, and the median of those
    rounds += [[{"vsLowerBound": 1.1, "upstream429": 70}, {**runs, "upstream429": 66}]] * 2
    two = summary([2], rounds)["2"]
    assert two["upstream429OverAloneRounds"] == [17, -4, -4] and two["upstream429OverAlone"] == -4


def test_the_plot_draws_the_top_of_a_soft_band() -> None:
    from chaos_mode_tools.bench.plot import render_field_svg

    def doc(bands: dict[str, int]) -> dict[str, Any]:
        samples = [
            {
                "t": t,
                "used": 1,
                "totalCapacity": 4,
                "accountLimit": None,
                "waiting": 0,
                "models": {"glm-4.7": {"inFlight": 1, "learnedLimit": 3, "catalogLimit": 3, "cooldown": 0.0}},
            }
            for t in (0, 1)
        ]
        truth = {"slots": [{"at": 0.0, "models": {"glm-4.7": 3}, "account": 4}], "settings": {"bands": bands}}
        preset = {"name": "soft", "description": "d", "makespanSeconds": 1.0, "idealSeconds": 1.0}
        return {"presets": [{**preset, "samples": samples, "truth": truth}]}

    band_line = 'stroke="#000000" stroke-width="0.8" stroke-dasharray="1 2"'
    assert render_field_svg(doc({"glm-4.7": 3})).count(band_line) == 1
    assert render_field_svg(doc({})).count(band_line) == 0
