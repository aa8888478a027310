"""The swarm benchmark's harness: the ideal bound, the retry policy, the figures, a short real run."""

from __future__ import annotations

import argparse
import json
import random
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chaos_mode.config.schema import default_config, parse_config
from chaos_mode.learning import evidence
from chaos_mode_tools.bench.__main__ import main as bench_main
from chaos_mode_tools.bench.__main__ import parse_seeds
from chaos_mode_tools.bench.cost import learner as learner_bench
from chaos_mode_tools.bench.field.learning_args import parse_learning
from chaos_mode_tools.bench.field.presets import (
    PRESETS,
    field_bound,
    parse_presets,
    planned_changes,
    true_timeline,
)
from chaos_mode_tools.bench.field.report import render_field, seed_lines
from chaos_mode_tools.bench.plot import render_field_svg, render_svg
from chaos_mode_tools.bench.swarm.agents import RequestRecord, retry_delay
from chaos_mode_tools.bench.swarm.figures import percentile, summarize
from chaos_mode_tools.bench.swarm.ideal import (
    Capacity,
    clairvoyant_makespan,
    cover_time,
    fair_queue_makespan,
    least_served_makespan,
    makespan_lower_bound,
    slots_by_tier,
    timed_lower_bound,
)
from chaos_mode_tools.bench.swarm.report import render
from chaos_mode_tools.bench.swarm.run import agent_models, ideal_for
from chaos_mode_tools.bench.swarm.sampler import read_sample, rebase, stall_figures
from chaos_mode_tools.bench.swarm.scenarios import PINNED, SCENARIOS, parse_scenarios, pinned_models
from chaos_mode_tools.bench.swarm.workload import Mix, Request, WorkloadSpec, make_workload, parse_mix
from support.design_catalog import CAPS, DESIGN_MODELS, HEAVY, MEDIUM
from support.run import run_module

ROOT = Path(__file__).resolve().parents[3]

ELIGIBLE = {"heavy": HEAVY, "medium": MEDIUM, "light": list(CAPS)}
DESIGN = parse_config({"modelRouting": {"models": DESIGN_MODELS}})  # the design's (early-2026) catalog


# -- the ideal bound ----------------------------------------------------------------------------------


def test_slots_come_from_the_configs_eligible_models() -> None:
    eligible, capacity, account = slots_by_tier(DESIGN)
    assert {tier: sum(capacity[m] for m in models) for tier, models in eligible.items()} == {
        "heavy": 8,
        "medium": 23,
        "light": 28,
    }
    assert account == 28
    eligible, capacity, account = slots_by_tier(default_config())  # the built-in catalog: December 2026
    assert {tier: sum(capacity[m] for m in models) for tier, models in eligible.items()} == {
        "heavy": 5,
        "medium": 10,
        "light": 12,
    }
    assert account == 12


def test_lower_bound_by_hand_heavy_slots_bind() -> None:
    # W_heavy = 24 s on 8 slots = 3.0; (24 + 22) / 23 = 2.0; (24 + 22 + 10) / 28 = 2.0; agents at most 2.5.
    bound = makespan_lower_bound(
        {"heavy": 24.0, "medium": 22.0, "light": 10.0}, ELIGIBLE, CAPS, [2.5, 1.0, 2.0], 28
    )
    assert bound.seconds == pytest.approx(3.0)
    assert bound.binding == "heavy"
    assert bound.terms["heavy+medium"] == pytest.approx(2.0)
    assert bound.terms["heavy+medium+light"] == pytest.approx(2.0)
    assert bound.slots["heavy"] == 8 and bound.slots["heavy+medium"] == 23
    assert bound.slots["heavy+medium+light"] == 28


def test_lower_bound_by_hand_all_slots_and_agents_bind() -> None:
    # W_all = 2 + 21 + 61 = 84 s on 28 slots = 3.0 > 23/23 = 1.0 > 2/8 = 0.25.
    work = {"heavy": 2.0, "medium": 21.0, "light": 61.0}
    bound = makespan_lower_bound(work, ELIGIBLE, CAPS, [2.9], 28)
    assert (bound.seconds, bound.binding) == (pytest.approx(3.0), "heavy+medium+light")
    # One agent's sequential requests add up to more than that: the agent term binds.
    bound = makespan_lower_bound(work, ELIGIBLE, CAPS, [1.0, 4.5, 2.0], 28)
    assert (bound.seconds, bound.binding) == (pytest.approx(4.5), "agent 1")
    # An account limit below the catalog's sum shrinks S_all.
    bound = makespan_lower_bound(work, ELIGIBLE, CAPS, [], 21)
    assert bound.seconds == pytest.approx(84.0 / 21)


def test_lower_bound_of_the_baseline_mapping() -> None:
    # opus and sonnet pinned to glm-4.7 (3 slots), haiku to glm-4.5-air (5 slots).
    pinned = {"heavy": ["glm-4.7"], "medium": ["glm-4.7"], "light": ["glm-4.5-air"]}
    bound = makespan_lower_bound({"heavy": 3.0, "medium": 6.0, "light": 10.0}, pinned, CAPS)
    assert bound.terms["heavy+medium"] == pytest.approx(9.0 / 3)
    assert bound.terms["light"] == pytest.approx(10.0 / 5)
    assert bound.terms["heavy+medium+light"] == pytest.approx(19.0 / 8)
    assert (bound.seconds, bound.binding) == (pytest.approx(3.0), "heavy+medium")


def test_lower_bound_refuses_work_without_slots() -> None:
    with pytest.raises(ValueError, match="no slot"):
        makespan_lower_bound({"heavy": 1.0}, {"heavy": []}, CAPS)


def test_fair_queue_by_hand() -> None:
    one = {"m": 1}
    # Two agents, one slot: their 1 s requests run one after the other.
    assert fair_queue_makespan([[("light", 1.0)], [("light", 1.0)]], {"light": ["m"]}, one) == 2.0
    # Two slots: side by side; an agent's own requests stay sequential.
    two = {"m": 2}
    assert (
        fair_queue_makespan([[("light", 1.0), ("light", 0.5)], [("light", 1.0)]], {"light": ["m"]}, two)
        == 1.5
    )
    # A heavy request may not use the light model; a light one waiting behind it still starts at once.
    eligible = {"heavy": ["h"], "light": ["h", "l"]}
    jobs = [[("heavy", 1.0)], [("heavy", 1.0)], [("light", 1.0)]]
    assert fair_queue_makespan(jobs, eligible, {"h": 1, "l": 1}) == 2.0


def test_clairvoyant_by_hand() -> None:
    # Two slots; agents 0 and 1 have one 1 s request, agent 2 two. First come, first served starts
    # agents 0 and 1 and leaves agent 2's chain for later (3 s); serving the most work left first
    # starts agent 2 at once (2 s, which is LB = max(4 s of work / 2 slots, 2 s of agent 2)).
    jobs = [[("light", 1.0)], [("light", 1.0)], [("light", 1.0), ("light", 1.0)]]
    args = ({"light": ["m"]}, {"m": 2})
    assert fair_queue_makespan(jobs, *args) == 3.0
    assert clairvoyant_makespan(jobs, *args) == 2.0


def test_least_served_by_hand() -> None:
    # Two slots. Agent 0: three 1 s requests; agent 1: 1 s then 2 s; agent 2: two 2 s requests. Both orders
    # agree until 3 s, when agent 2's second request (agent 2 served once) and agent 0's third (served
    # twice, but waiting since 2 s) compete for the slot agent 2 just freed. First come, first served
    # takes agent 0's, and agent 2's 2 s request ends at 6 s; fewest served first takes agent 2's: 5 s.
    jobs = [[("light", 1.0)] * 3, [("light", 1.0), ("light", 2.0)], [("light", 2.0)] * 2]
    args = ({"light": ["m"]}, {"m": 2})
    assert fair_queue_makespan(jobs, *args) == 6.0
    assert least_served_makespan(jobs, *args) == 5.0


def test_fair_queue_is_never_below_the_bound() -> None:
    workload = make_workload(WorkloadSpec(agents=40, requests=3, seed=7))
    eligible, capacity, account = slots_by_tier(DESIGN)
    jobs = [[(r.tier, r.service_seconds) for r in agent] for agent in workload.agents]
    bound = makespan_lower_bound(
        workload.work_by_tier(), eligible, capacity, workload.work_by_agent(), account
    )
    fair = fair_queue_makespan(jobs, eligible, capacity, account)
    clairvoyant = clairvoyant_makespan(jobs, eligible, capacity, account)
    served = least_served_makespan(jobs, eligible, capacity, account)
    assert min(fair, clairvoyant, served) >= bound.seconds - 1e-9


# -- the workload and the client ----------------------------------------------------------------------


def test_service_time_is_what_the_simulator_holds_a_slot_for() -> None:
    # First token after the latency, then one every interval: 100 + 4 x 10 ms.
    assert Request(0, 0, "light", 100.0, 5, 10.0).service_seconds == pytest.approx(0.14)
    assert Request(0, 0, "light", 100.0, 0, 10.0).service_seconds == pytest.approx(0.1)


def test_workload_is_seeded_and_follows_the_mix() -> None:
    spec = WorkloadSpec(agents=50, requests=20, mix=Mix(1, 2, 7), seed=3)
    assert make_workload(spec) == make_workload(spec)
    assert make_workload(spec) != make_workload(WorkloadSpec(agents=50, requests=20, seed=4))
    counts = make_workload(spec).tier_counts()
    assert sum(counts.values()) == 1000
    assert 0.05 < counts["heavy"] / 1000 < 0.15 and 0.6 < counts["light"] / 1000 < 0.8
    only_heavy = make_workload(WorkloadSpec(agents=3, requests=3, mix=Mix(1, 0, 0)))
    assert only_heavy.tier_counts() == {"heavy": 9, "medium": 0, "light": 0}


@pytest.mark.parametrize("text", ["1:2", "a:b:c", "0:0:0", "-1:2:3"])
def test_parse_mix_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_mix(text)


def test_parse_scenarios() -> None:
    assert [s.name for s in parse_scenarios("sticky, baseline")] == ["sticky", "baseline"]
    assert [s.name for s in parse_scenarios("all")] == list(SCENARIOS)
    assert "pinned" not in SCENARIOS and [s.name for s in parse_scenarios("pinned")] == ["pinned"]
    with pytest.raises(ValueError, match="unknown scenario"):
        parse_scenarios("fastest")


def test_pinned_agents_get_a_slot_each_in_catalog_order() -> None:
    capacity = {"a": 2, "b": 1}
    assert pinned_models(capacity, 3) == ["a", "a", "b"]
    assert pinned_models(capacity, 1) == ["a"]
    with pytest.raises(ValueError, match="at most 3 agents"):
        pinned_models(capacity, 4)
    assert agent_models(SCENARIOS["least-loaded"], 99) == []
    assert len(set(agent_models(PINNED, 28))) == 8  # the built-in catalog: every model, every slot


def test_the_pinned_scenario_with_more_agents_than_slots_is_refused_before_anything_starts() -> None:
    result = run_module("chaos_mode_tools.bench", "--scenarios", "pinned", "--agents", "29", timeout=60)
    assert result.returncode == 2
    assert "needs at most 28 agents" in result.stderr and "Traceback" not in result.stderr


def test_baseline_sends_zai_defaults_and_chaos_sends_claude_names() -> None:
    assert SCENARIOS["baseline"].models == {"heavy": "glm-4.7", "medium": "glm-4.7", "light": "glm-4.5-air"}
    assert SCENARIOS["baseline"].config()["chaosMode"] == {
        "enabled": False,
        "strategy": "least-loaded",
        "stickyConversations": False,
    }
    assert SCENARIOS["sticky"].models["heavy"] == "claude-opus-4-5"


def test_retry_delay_honours_retry_after_capped_else_backs_off() -> None:
    rng = random.Random(1)
    assert retry_delay(1, "2", rng) == 2.0
    assert retry_delay(1, "600", rng) == 60.0
    assert retry_delay(1, "Wed, 21 Oct 2015 07:28:10 GMT", rng, now=1445412490.0) == 0.0
    for failures, high in ((1, 0.5), (2, 1.0), (3, 2.0), (10, 8.0)):
        delays = [retry_delay(failures, None, rng) for _ in range(50)]
        assert all(0.75 * high <= d <= high for d in delays)
    assert 0.375 <= retry_delay(1, "soon", rng) <= 0.5  # unreadable: back off


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(range(101), 99) == 99


# -- figures ------------------------------------------------------------------------------------------


def _record(agent: int, model: str, *, attempts: int = 1, c429: int = 0) -> RequestRecord:
    return RequestRecord(
        agent, 0, "light", "claude-3-5-haiku-latest", sent=0.0, attempts=attempts, client_429=c429,
        served_model=model, last_sent=0.5, headers=1.0, first_token=1.2, done=2.0, ok=True,
    )  # fmt: skip


def test_summary_counts_and_checks() -> None:
    records = [_record(0, "glm-4.5"), _record(1, "glm-4.5", attempts=3, c429=2), _record(2, "glm-4.7")]
    sim = {
        "requests": 5,
        "models": {
            "glm-4.5": {"served": 2, "rejected": {"1302": 2}, "peakInFlight": 2},
            "glm-4.7": {"served": 1, "rejected": {}, "peakInFlight": 1},
        },
    }
    bound = makespan_lower_bound({"light": 1.5}, {"light": ["glm-4.5", "glm-4.7"]}, CAPS)
    summary = summarize("x", "", records, 3.0, sim, None, bound)
    assert (summary["requests"], summary["completed"], summary["attempts"]) == (3, 3, 5)
    assert (summary["client429"], summary["upstream429"]) == (2, 2)
    assert summary["share"] == {
        "glm-4.5": pytest.approx(2 / 3, abs=1e-4),
        "glm-4.7": pytest.approx(1 / 3, abs=1e-4),
    }
    assert summary["requestsPerSecond"] == 1.0
    assert summary["ttftMs"]["p50"] == 1200.0 and summary["queueWaitMs"]["p50"] == 1000.0
    assert summary["lastAttemptWaitMs"]["p50"] == 500.0
    assert summary["idealSeconds"] == pytest.approx(1.5 / 13, abs=1e-3)
    assert all(summary["checks"].values()), summary["checks"]
    # A request the simulator never saw breaks the attempts check; a missing answer the completion one.
    sim["requests"] = 4
    failed = [*records[:2], RequestRecord(2, 0, "light", "m", sent=0.0, attempts=1)]
    checks = summarize("x", "", failed, 3.0, sim, None, bound)["checks"]
    assert not checks["allCompleted"] and not checks["simServedEqualsCompleted"]


def test_the_checks_count_what_the_proxy_sent_and_name_a_request_served_twice() -> None:
    """The simulator saw each client attempt but the one the proxy refused itself, one more per failover
    and per probe given up (no failover); it served each completed request, and once more an attempt left
    for another slot that it served after all (an answer closed unread): the checks hold, `servedOnce`
    fails and `servedTwice` names the model. The former formulas (sim requests = attempts + failovers, sim
    served = completed) failed here."""
    records = [_record(0, "glm-4.5"), _record(1, "glm-4.5", attempts=2, c429=1), _record(2, "glm-4.7")]
    sim = {
        "requests": 7,  # 4 attempts - 1 refused by the proxy + 2 failovers + 2 probes given up
        "models": {
            "glm-4.5": {"served": 2, "rejected": {"1302": 3}, "peakInFlight": 2},
            "glm-4.7": {"served": 2, "rejected": {}, "peakInFlight": 2},
        },
    }
    status: dict[str, Any] = {
        "requests": {"ok": 3, "error": 0, "rejected": 1, "aborted": 0, "passthrough": 0},
        "failovers": 2,
        "probesGivenUp": 2,
        "modelDistribution": {"glm-4.5": {"unreadAnswers": 0}, "glm-4.7": {"unreadAnswers": 1}},
    }
    bound = makespan_lower_bound({"light": 1.5}, {"light": ["glm-4.5", "glm-4.7"]}, CAPS)
    summary = summarize("x", "", records, 3.0, sim, status, bound)
    checks = summary["checks"]
    assert summary["servedTwice"] == {"glm-4.7": 1} and not checks["servedOnce"]
    assert all(ok for name, ok in checks.items() if name != "servedOnce"), checks
    assert sim["requests"] != summary["attempts"] + status["failovers"]  # the former formula
    status["probesGivenUp"] = 1  # a request to z.ai the proxy does not account for
    assert not summarize("x", "", records, 3.0, sim, status, bound)["checks"][
        "simRequestsEqualsAttemptsPlusFailovers"
    ]


# -- a short real run: simulator, mitmdump per scenario, swarm, overhead, JSON and SVG --------------------


def _consistent(scenario: dict[str, Any], size: int) -> None:
    name = scenario["name"]
    assert scenario["requests"] == scenario["completed"] == size, name
    assert sum(scenario["simServed"].values()) == size, name
    failovers = scenario.get("proxy", {}).get("failovers", 0)
    assert scenario["simRequests"] == scenario["attempts"] + failovers, name
    assert scenario["attempts"] == size + scenario["client429"] + scenario["clientOtherErrors"], name
    assert sum(scenario["share"].values()) == pytest.approx(1.0, abs=1e-3), name
    assert all(scenario["checks"].values()), (name, scenario["checks"])
    assert scenario["makespanSeconds"] >= scenario["idealSeconds"] * 0.95, name


@pytest.mark.e2e
def test_short_benchmark_run(tmp_path: Path) -> None:
    json_path, svg_path = tmp_path / "bench.json", tmp_path / "bench.svg"
    args = [
        "--agents", "4", "--requests", "3", "--latency-ms", "20", "--tokens", "3", "--token-interval-ms", "5",
        "--reject-delay-ms", "100", "--scenarios", "baseline,least-loaded,pinned", "--quick",
        "--overhead-rounds", "1", "--overhead-requests", "20",
        "--json", str(json_path), "--svg", str(svg_path),
    ]  # fmt: skip
    result = run_module("chaos_mode_tools.bench", *args, timeout=150)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    assert [s["name"] for s in doc["scenarios"]] == ["baseline", "least-loaded", "pinned"]
    for scenario in doc["scenarios"]:
        _consistent(scenario, 12)
    baseline, chaos, pinned = doc["scenarios"]
    assert pinned["client429"] == 0 and set(pinned["share"]) == {"glm-4.7", "glm-4.6"}  # the first 4 slots
    assert baseline["client429"] == baseline["upstream429"]  # chaos off: every 429 came from upstream
    assert set(baseline["share"]) <= {"glm-4.7", "glm-4.5-air"}
    assert chaos["proxy"]["requests"]["ok"] == 12
    assert set(chaos["servedByTier"].get("heavy", {})) <= set(HEAVY)  # the quality floor held
    assert doc["ideal"]["slots"]["heavy+medium+light"] == 28
    assert doc["ideal"]["fairQueueSeconds"] >= doc["ideal"]["seconds"] - 1e-6
    assert doc["ideal"]["clairvoyantSeconds"] >= doc["ideal"]["seconds"] - 1e-6
    overhead = doc["overhead"]
    assert overhead["throughput"]["addonMedian"] > 0 and overhead["throughput"]["plainMedian"] > 0
    assert overhead["errors"] == {"addon": 0, "plain": 0}
    assert doc["poolBench"] is not None
    assert "least-loaded" in result.stdout and "ideal (LB)" in result.stdout
    svg = ET.parse(svg_path).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(svg.findall(".//{http://www.w3.org/2000/svg}rect")) > 4
    # The report and plot render from the JSON alone (what a tracking job would do).
    assert render(doc).startswith("workload:")
    ET.fromstring(render_svg(doc))


@pytest.mark.e2e
def test_demo_runs_offline() -> None:
    args = [
        "--agents", "3", "--requests", "2", "--latency-ms", "20", "--tokens", "3", "--token-interval-ms", "5",
        "--reject-delay-ms", "100",
    ]  # fmt: skip
    result = run_module("chaos_mode_tools.bench.demo", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "dashboard:  http://127.0.0.1:" in out
    assert "6/6" in out  # the progress line reached the end
    for row in ("least-loaded", "baseline", "ideal (LB)", "share %"):
        assert row in out


# -- the field: true limits unlike the catalog's ------------------------------------------------------


def test_cover_time_by_hand() -> None:
    # 2 slots for 3 s (6 slot-seconds), 4 for 3 s (12 more), then 2 again.
    steps = [(0.0, 2), (3.0, 4), (6.0, 2)]
    assert cover_time(6.0, steps) == pytest.approx(3.0)
    assert cover_time(18.0, steps) == pytest.approx(6.0)
    assert cover_time(20.0, steps) == pytest.approx(7.0)
    assert cover_time(1.0, [(0.5, 1)]) == pytest.approx(1.5)  # nothing before the first step
    with pytest.raises(ValueError, match="no slot"):
        cover_time(5.0, [(0.0, 1), (2.0, 0)])  # 2 slot-seconds, then none for ever


def test_timed_lower_bound_by_hand() -> None:
    eligible = {"heavy": ["h"], "light": ["h", "l"]}
    # h: 1 slot, l: 2; from 4 s on h has 3; the account allows 3 at first, then 4.
    timeline = [Capacity(0.0, {"h": 1, "l": 2}, 3), Capacity(4.0, {"h": 3, "l": 2}, 4)]
    work = {"heavy": 6.0, "light": 14.0}
    bound = timed_lower_bound(work, eligible, timeline, [5.0])
    # heavy: 4 slot-seconds by 4 s, then 3/s: 4 + 2/3. All: 12 by 4 s, then 4/s: 4 + 8/4 = 6.
    assert bound.terms["heavy"] == pytest.approx(4 + 2 / 3)
    assert bound.terms["heavy+light"] == pytest.approx(6.0)
    assert (bound.seconds, bound.binding) == (pytest.approx(6.0), "heavy+light")
    assert bound.slots == {"heavy": 1, "light": 3, "heavy+light": 3}  # the first slots, account-capped
    # With one step it is the constant bound.
    constant = makespan_lower_bound(work, eligible, {"h": 1, "l": 2}, [5.0], 3)
    assert constant.terms == timed_lower_bound(work, eligible, timeline[:1], [5.0]).terms


def test_true_slots_are_limit_minus_held_zero_when_refused() -> None:
    changes = [
        {"at": 0.0, "limits": {"a": 3, "b": 2, "c": 4}, "accountLimit": 9, "hold": {"a": 1}},
        {"at": 0.01, "limits": {"a": 3, "b": 2, "c": 4}, "accountLimit": 9, "hold": {"a": 4}},
        {"at": 2.0, "limits": {"a": 6, "b": 2, "c": 4}, "accountLimit": 12, "hold": {}},
    ]
    # The swarm started 0.05 s after the simulator's 0: what had changed by then starts at 0.
    timeline = true_timeline(changes, refused=["b"], lead=0.05)
    assert timeline == [
        Capacity(0.0, {"a": 0, "b": 0, "c": 4}, 5),
        Capacity(pytest.approx(1.95), {"a": 6, "b": 0, "c": 4}, 12),  # type: ignore[arg-type]
    ]


def test_the_lower_preset_bound_uses_the_true_slots() -> None:
    preset = PRESETS["lower"]
    workload = make_workload(preset.spec())
    settings = preset.sim_settings(workload)
    bound = field_bound(workload, true_timeline(planned_changes(settings), settings.refuse))
    # heavy: glm-4.7 2 + glm-4.6 (3 - 1 held) + glm-4.5-x refused = 4; + glm-4.5 10 + air 5 = 19;
    # + glm-4.7-flashx refused + two flash models 1 each = 21 (the account, 27 - 1 held, does not bind).
    assert (bound.slots["heavy"], bound.slots["heavy+medium"], bound.slots["heavy+medium+light"]) == (
        4,
        19,
        21,
    )
    assert bound.terms["heavy+medium+light"] == pytest.approx(sum(workload.work_by_tier().values()) / 21)
    assert workload.size == 240 and settings.reject_delay_ms == 1000.0  # the simulator's default
    mean = sum(workload.work_by_tier().values()) / workload.size
    assert 0.9 < mean < 1.1  # 1-second requests


def test_the_changing_preset_doubles_the_limits_for_the_middle_third_of_its_bound() -> None:
    preset = PRESETS["changing"]
    workload = make_workload(preset.spec())
    settings = preset.sim_settings(workload)
    first, second = settings.schedule
    period = 3 * first.at_seconds
    assert second.at_seconds == pytest.approx(2 * period / 3)
    assert first.change.limits["glm-4.7"] == 6 and first.change.account_limit == 48
    assert second.change.limits["glm-4.7"] == 3 and second.change.account_limit == 24
    # The account binds: 24 slots, then 48, then 24 again, a third of T each, so T = W_all / 32.
    assert period == pytest.approx(sum(workload.work_by_tier().values()) / 32, abs=2e-3)  # at in ms
    bound = field_bound(workload, true_timeline(planned_changes(settings), settings.refuse))
    assert bound.seconds == pytest.approx(period, abs=2e-3)


def test_parse_presets() -> None:
    assert [p.name for p in parse_presets("soak,lower")] == ["soak", "lower"]
    assert [p.name for p in parse_presets("all")] == [
        "today",
        "lower",
        "higher",
        "changing",
        "soak",
        "noisy",
        "soft",
        "queuing",
        "filtered",
        "halved",
        "realistic",
        "prompts",
        "mixed",
        "queuing-late-heads",
        "fallen",
        "other-client",
        "noisy-held",
        "soft-held",
    ]
    with pytest.raises(ValueError, match="unknown field preset"):
        parse_presets("lower,fastest")


def test_parse_seeds() -> None:
    assert parse_seeds("3") == (3,)
    assert parse_seeds("1-3,2,7") == (1, 2, 3, 7)  # in order, each once
    for bad in ("x", "", "1,,2", "3-1", "1-500"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_seeds(bad)


@pytest.mark.parametrize("argv", [["--seeds", "1,2"], ["--field", "lower", "--seed", "2", "--seeds", "1,2"]])
def test_seeds_go_only_with_field_presets_and_instead_of_one_seed(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_main(argv)
    assert stopped.value.code == 2
    assert "--seeds: only with --field, and instead of --seed" in capsys.readouterr().err


def test_learning_settings_for_a_run_are_json_values_the_config_accepts() -> None:
    assert parse_learning(["ceilingFactor=1", "probeIntervalSeconds=2.5", "enabled=false"]) == {
        "ceilingFactor": 1,
        "probeIntervalSeconds": 2.5,
        "enabled": False,
    }
    assert parse_learning([]) == {}
    for bad, said in (
        ("ceilingFactor", "expected KEY=VALUE"),
        ("=1", "expected KEY=VALUE"),
        ("ceilingFactor=one", "not JSON"),
        ("ceilingFactor=0", "ceilingFactor"),
        ("probeEvery=3", "probeEvery"),
    ):
        with pytest.raises(ValueError, match=said):
            parse_learning([bad])
    proxy = SCENARIOS["least-loaded"]
    assert "learning" not in proxy.config()
    with_learning = replace(proxy, learning=(("ceilingFactor", 1),))
    assert with_learning.config()["learning"] == {"ceilingFactor": 1}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--learning", "ceilingFactor=1"], "--learning: only with --field"),
        (["--field", "lower", "--learning", "ceilingFactor=0"], "ceilingFactor"),
    ],
)
def test_learning_settings_go_only_with_field_presets_and_must_be_valid(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_main(argv)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_a_preset_run_on_several_seeds_is_summed_up_across_them() -> None:
    def run(name: str, seed: int, utilization: float, per_50: float) -> dict[str, Any]:
        return {
            "name": f"{name} seed {seed}",
            "preset": name,
            "utilization": utilization,
            "upstreamPer50": per_50,
            "workload": {"seed": seed},
        }

    runs = [run("realistic", 1, 0.86, 4.0), run("realistic", 2, 0.90, 3.0), run("realistic", 3, 0.80, 5.5)]
    alone = {"name": "lower", "utilization": 0.9, "upstreamPer50": 4.0, "workload": {"seed": 1}}
    noisy = [run("noisy", 1, 0.85, 5.0), run("noisy", 2, 0.87, 6.0)]
    noisy[0]["twin"], noisy[1]["twin"] = {"pointsBelowTwin": 1.5}, {"pointsBelowTwin": 0.0}
    assert seed_lines([*runs, alone, *noisy]) == [
        "across seeds (median, min-max):",
        "  realistic: 0.86 (0.80-0.90) of the bound over seeds 1, 2, 3; upstream refusals per 50 requests "
        "4.0 (3.0-5.5)",
        "  noisy: 0.86 (0.85-0.87) of the bound over seeds 1, 2; upstream refusals per 50 requests "
        "5.5 (5.0-6.0); points below its twin +0.8 (+0.0-+1.5)",
        "",
    ]
    assert seed_lines([alone]) == []  # one run: nothing to sum up


def test_status_samples_with_and_without_learned_limits() -> None:
    before = {
        "modelDistribution": {"glm-4.7": {"inFlight": 2, "capacity": 3}},
        "usedCapacity": 2,
        "totalCapacity": 28,
        "queue": {"waiting": 5},
    }
    sample = read_sample(before, 1.5)
    assert sample["models"] == {
        "glm-4.7": {"inFlight": 2, "learnedLimit": None, "catalogLimit": 3, "cooldown": 0.0}
    }
    assert (sample["waiting"], sample["used"], sample["accountLimit"]) == (5, 2, None)
    after = {
        **before,
        "modelDistribution": {
            "glm-4.7": {
                "inFlight": 2,
                "capacity": 2,
                "learnedLimit": 2,
                "catalogLimit": 3,
                "cooldownRemaining": 1.5,
            }
        },
        "accountLimit": 20,
    }
    sample = read_sample(after, 1.5)
    assert sample["models"]["glm-4.7"] == {
        "inFlight": 2,
        "learnedLimit": 2,
        "catalogLimit": 3,
        "cooldown": 1.5,
    }
    assert sample["accountLimit"] == 20


def test_stall_figures_by_hand() -> None:
    def s(t: float, waiting: int, used: int) -> dict[str, Any]:
        return {"t": t, "waiting": waiting, "used": used}

    samples = [
        s(0.0, 0, 0),
        s(0.1, 3, 0),
        s(0.2, 3, 0),
        s(0.3, 3, 2),
        s(0.4, 1, 0),
        s(0.5, 0, 1),
        s(0.6, 2, 0),
    ]
    figures = stall_figures(samples)
    assert figures["longestStallSeconds"] == pytest.approx(0.2)  # from 0.1 to the sample at 0.3
    assert (figures["samples"], figures["stalledSamples"], figures["waitingSamples"]) == (7, 4, 5)
    assert figures["stalledShare"] == pytest.approx(4 / 7, abs=1e-4)
    assert stall_figures([])["stalledShare"] is None
    assert rebase([s(1.0, 0, 0), s(2.5, 1, 1)], 2.0) == [s(0.5, 1, 1)]


@pytest.mark.e2e
def test_short_field_run(tmp_path: Path) -> None:
    json_path, svg_path = tmp_path / "field.json", tmp_path / "field.svg"
    args = [
        "--field", "lower,changing", "--agents", "4", "--requests", "3", "--latency-ms", "40",
        "--tokens", "4", "--token-interval-ms", "10", "--reject-delay-ms", "100",
        "--json", str(json_path), "--svg", str(svg_path),
    ]  # fmt: skip
    result = run_module("chaos_mode_tools.bench", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    lower, changing = doc["presets"]
    assert (lower["name"], changing["name"]) == ("lower", "changing")
    for preset in (lower, changing):
        _consistent(preset, 12)
        assert preset["client429"] == 0 and preset["checks"]["noClient429"]
        assert preset["samples"] and {"t", "waiting", "used", "models"} <= set(preset["samples"][0])
        assert preset["stalls"]["samples"] == len(preset["samples"])
        assert preset["unstreamed"] <= preset["proxy"]["failovers"]
    # Refused models answer 1113 and are never served; whatever failed over came in one piece.
    assert set(lower["upstreamByCode"]) <= {"1113", "1302"}
    assert not {"glm-4.5-x", "glm-4.7-flashx"} & set(lower["share"])
    assert lower["unstreamed"] == 0  # every answer streamed, failed-over ones included
    assert lower["ideal"]["slots"]["heavy"] == 4 and lower["truth"]["slots"][0]["models"]["glm-4.6"] == 2
    # The changing preset's two changes happened during the run and bound it.
    changes = changing["truth"]["limitChanges"]
    assert [c["accountLimit"] for c in changes] == [24, 48, 24]
    assert len(changing["truth"]["slots"]) == 3
    assert "LB/makespan" in result.stdout and "lower" in result.stdout
    svg = ET.parse(svg_path).getroot()
    assert len(svg.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 2 * 9
    assert render_field(doc).startswith("field:")
    ET.fromstring(render_field_svg(doc))


# `lower` with 4 agents of 2 short requests each: a field run through mitmdump in seconds
SMALL_LOWER = [
    "--field", "lower", "--agents", "4", "--requests", "2", "--latency-ms", "40", "--tokens", "4",
    "--token-interval-ms", "10", "--reject-delay-ms", "100",
]  # fmt: skip


@pytest.mark.e2e
def test_a_field_preset_runs_once_per_seed_and_is_summed_up_across_them(tmp_path: Path) -> None:
    json_path = tmp_path / "field.json"
    args = [*SMALL_LOWER, "--seeds", "1-2", "--json", str(json_path)]
    result = run_module("chaos_mode_tools.bench", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = json.loads(json_path.read_text(encoding="utf-8"))["presets"]
    assert [(r["name"], r["preset"], r["workload"]["seed"]) for r in runs] == [
        ("lower seed 1", "lower", 1),
        ("lower seed 2", "lower", 2),
    ]
    for run in runs:
        _consistent(run, 8)
    assert "  lower: " in result.stdout and " of the bound over seeds 1, 2" in result.stdout


@pytest.mark.e2e
def test_a_field_preset_runs_on_the_learning_settings_given(tmp_path: Path) -> None:
    json_path = tmp_path / "field.json"
    learning = ["--learning", "probeIntervalSeconds=2.5", "--learning", "driftSeconds=90"]
    learning += ["--learning", "lendOverdue=false"]
    args = [*SMALL_LOWER, *learning, "--json", str(json_path)]
    result = run_module("chaos_mode_tools.bench", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = json.loads(json_path.read_text(encoding="utf-8"))["presets"]
    _consistent(run, 8)
    # as the proxy's status page said it (the defaults: 5 s, 600 s and lending on)
    given = {"probeIntervalSeconds": 2.5, "driftSeconds": 90.0, "lendOverdue": False}
    lending = {"lending": "off: learning.lendOverdue is false", "lendingNats": 0.0}
    said = dict(run["proxy"]["learning"])
    moved = said.pop("limitsMoved")  # the change detector's firings: whatever this short run showed
    assert said == {"enabled": True, **given, **lending}
    assert set(moved) == {"down", "up"} and all(isinstance(n, int) and n >= 0 for n in moved.values())


def test_short_failover_ttft_run(tmp_path: Path) -> None:
    json_path = tmp_path / "ttft.json"
    args = ("--requests", "7", "--no-ms", "80", "--json", str(json_path))
    result = run_module("chaos_mode_tools.bench.cost.failover_ttft", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    # Two addon processes (batches of 5 and 2): each failed-over request failed over once and streamed.
    assert doc["failovers"] == 7 and doc["onePiece"] == 0 and len(doc["failoverTtftMs"]) == 7
    # Each failed-over answer waited for z.ai's no, and not for a probe of a limit the 1302s lowered.
    assert all(80 <= ms < 2000 for ms in doc["failoverTtftMs"])
    assert doc["addedMs"] == pytest.approx(doc["hopMs"] + doc["refusalMs"], abs=0.02)
    assert "added beyond z.ai's no" in result.stdout


def test_the_fleet_summary_adds_up_races_lost_and_outages_over_the_rounds() -> None:
    from chaos_mode_tools.bench.fleet.run import summary

    def fleet(ratio: float, lost: int, outages: int) -> dict[str, Any]:
        figures = {"vsLowerBound": 1.2, "vsOneProxy": ratio, "lostRaces": lost, "outages": outages}
        return {**figures, "upstream429": 0, "overCaps": {}, "lendingOff": outages}

    rounds = [[{"vsLowerBound": 1.1}, fleet(1.05, 10, 0)], [{"vsLowerBound": 1.2}, fleet(1.1, 5, 2)]]
    table = summary([2], rounds)["2"]
    assert (table["lostRaces"], table["outages"], table["vsOneProxyRounds"]) == (15, 2, [1.05, 1.1])
    assert table["lendingOffRounds"] == [0, 2]


def test_the_virtual_time_fleet_serves_every_request_within_the_caps_and_repeats_itself() -> None:
    from chaos_mode_tools.bench.fleet.virtual import Delays, simulate

    workload = make_workload(WorkloadSpec(agents=40, requests=2, latency_ms=250.0, output_tokens=8))
    bound = ideal_for(workload).bound.seconds
    alone = simulate(1, False, workload, 1, Delays())
    fleet = simulate(3, True, workload, 1, Delays())
    assert fleet == simulate(3, True, workload, 1, Delays())  # virtual time: the same run every time
    assert fleet.over == 0 and alone.over == 0
    assert len(fleet.parts) == 3 and fleet.makespan == max(fleet.parts)
    assert bound <= alone.makespan < 1.5 * bound and bound <= fleet.makespan < 1.5 * bound


def test_the_virtual_model_leaves_unanswered_attempts_and_ends_sooner() -> None:
    from chaos_mode_tools.bench.field import virtual

    waited = virtual.run("higher", 1, hedge=False)
    hedged = virtual.run("higher", 1, hedge=True)
    assert waited.refused > 0 and waited.given_up == 0
    assert hedged.given_up > 0 and hedged.makespan < waited.makespan
    assert waited.bound == hedged.bound and hedged.bound <= hedged.makespan
    with pytest.raises(ValueError, match="not modelled"):
        virtual.run("lower", 1)


def test_the_virtual_model_runs_the_field_shapes_on_the_simulators_own_draws() -> None:
    """Soft bands, random 1302s and a halved third, decided by the simulator's bookkeeping (`SimState`)."""
    from chaos_mode_tools.bench.field import virtual

    noisy = virtual.run("noisy", 1)
    assert noisy == virtual.run("noisy", 1)  # seeded draws in virtual time: the same run every time
    for outcome in (noisy, virtual.run("halved", 1)):
        assert outcome.refused > 0 and outcome.bound <= outcome.makespan
    assert virtual.run("soft", 1).refused > 0  # its bound is the clean levels': a band's luck may beat it
    with pytest.raises(ValueError, match="not modelled"):
        virtual.run("prompts", 1)  # prompts of their own sizes


def test_the_virtual_model_runs_a_preset_with_more_requests_per_agent() -> None:
    """`--requests`: a long run, for the steady state after the first seconds' learning."""
    from chaos_mode_tools.bench.field import virtual

    short, longer = virtual.run("soft", 1, requests=2), virtual.run("soft", 1, requests=4)
    assert (short.requests, longer.requests) == (80, 160)  # 40 agents
    assert short.makespan < longer.makespan and short.bound < longer.bound


def test_soft_steady_state_refuses_at_most_one_in_fifty() -> None:
    """Soft's steady state (30 requests per agent, the last 800), over eight seeds: at most 1 upstream
    refusal in 50 (issue 46's target; 0.8, from 0.2 to 1.4 a seed), each at least 0.95 of the bound."""
    from chaos_mode_tools.bench.field import virtual

    per_50 = []
    for seed in range(1, 9):
        outcome = virtual.run("soft", seed, requests=30)
        last = sorted(outcome.per_request)[-virtual.STEADY :]
        per_50.append(50.0 * sum(refused for _, refused in last) / virtual.STEADY)
        assert outcome.bound / outcome.makespan >= 0.95
    assert sum(per_50) / len(per_50) <= 1.0


def test_the_virtual_model_says_how_soon_the_learned_limits_followed_each_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Per change of the true limits, the seconds until every learned limit was within a step of it, as the
    field benchmark reports it; `--watch` prints the learned limits against the true ones as they go."""
    from chaos_mode_tools.bench.field import virtual

    assert virtual.run("higher", 1).converged == []  # no change: nothing to follow
    virtual.main(["--preset", "halved", "--seeds", "1", "--watch", "2"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip().startswith("t=")]
    assert len(lines) >= 10  # a run of about 30 s, every 2 s
    assert "glm" not in lines[0] and "4.7:3/3" in lines[0] and "account:-/28" in lines[0]
    assert any("4.7:" in line and "/1" in line for line in lines)  # halved: glm-4.7's true limit is 1
    assert "within a step after" in out and "changes not followed within 5 s" in out
    halved = virtual.run("halved", 1)
    assert len(halved.converged) == 2  # halved, then restored
    assert all(seconds is None or 0.0 <= seconds < halved.makespan for seconds in halved.converged)


def test_the_virtual_model_runs_a_learning_setting_and_refuses_a_bad_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chaos_mode_tools.bench.field import virtual

    fixed = virtual.run("noisy", 1, learning={"enabled": False})  # a 1302 cools the model down then
    assert fixed != virtual.run("noisy", 1)
    with pytest.raises(SystemExit):
        virtual.main(["--preset", "noisy", "--seeds", "1", "--learning", "probeEvery=3"])
    assert "probeEvery" in capsys.readouterr().err


def test_the_learner_bench_times_this_evidence_against_another_side_by_side(capsys: Any) -> None:
    """`--against` another evidence.py (here the same file): one line per shape, both timed, both limits."""
    assert learner_bench.main(["--number", "2", "--against", str(evidence.__file__)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(learner_bench.SHAPES)
    assert all(line.count("µs") == 2 and line.count("(limit ") == 2 for line in lines)
