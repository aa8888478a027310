"""The benchmark's mixed-door swarm: every second agent speaks OpenAI chat completions on the same account."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos_mode_tools.bench.swarm.agents import (
    ANTHROPIC_AGENT,
    OPENAI_AGENT,
    SwarmOptions,
    agent_door,
    run_swarm,
)
from chaos_mode_tools.bench.swarm.figures import summarize
from chaos_mode_tools.bench.swarm.ideal import makespan_lower_bound
from chaos_mode_tools.bench.swarm.scenarios import KNOWN, MIXED_DOORS, SCENARIOS, parse_scenarios
from chaos_mode_tools.bench.swarm.workload import CLAUDE_MODELS, OPENAI_MODELS, WorkloadSpec, make_workload
from chaos_mode_tools.sim import SimServer, SimSettings
from support.design_catalog import CAPS
from support.run import run_module


def test_mixed_doors_is_in_all() -> None:
    assert SCENARIOS[MIXED_DOORS.name] is MIXED_DOORS and KNOWN[MIXED_DOORS.name] is MIXED_DOORS
    assert parse_scenarios("mixed-doors") == [MIXED_DOORS]
    assert MIXED_DOORS in parse_scenarios("all")
    assert MIXED_DOORS.chaos and MIXED_DOORS.openai_every == 2


def test_every_second_agent_speaks_openai() -> None:
    options = SwarmOptions(models=CLAUDE_MODELS, openai_every=2)
    assert [agent_door(agent, options).name for agent in range(4)] == ["anthropic", "openai"] * 2
    assert {agent_door(a, SwarmOptions(models=CLAUDE_MODELS)) for a in range(4)} == {ANTHROPIC_AGENT}
    assert agent_door(1, options) is OPENAI_AGENT
    assert OPENAI_MODELS == {"heavy": "glm-4.7", "medium": "glm-4.5", "light": "glm-4.5-flash"}


async def test_a_mixed_swarm_speaks_both_doors_to_the_simulator() -> None:
    spec = WorkloadSpec(agents=4, requests=3, latency_ms=10, output_tokens=3, token_interval_ms=2, seed=3)
    workload = make_workload(spec)
    settings = SimSettings(latency_ms=10, token_interval_ms=2, output_tokens=3, reject_delay_ms=20)
    async with SimServer(settings) as sim:
        options = SwarmOptions(models=OPENAI_MODELS, openai_every=2, seed=3, timeout=10)
        records, makespan = await run_swarm(sim.base_url, workload, options)
        stats = sim.stats()
    assert all(r.ok and r.first_token is not None and r.streamed for r in records)
    assert {r.door for r in records if r.agent % 2} == {"openai"}
    assert {r.door for r in records if not r.agent % 2} == {"anthropic"}
    assert all(r.served_model == OPENAI_MODELS[r.tier] for r in records)
    assert stats["requests"] == sum(r.attempts for r in records)
    bound = makespan_lower_bound({"light": 1.0}, {"light": list(CAPS)}, CAPS)
    doors = summarize("m", "", records, makespan, stats, None, bound)["doors"]
    assert doors == {
        "anthropic": {"requests": 6, "completed": 6, "client429": doors["anthropic"]["client429"]},
        "openai": {"requests": 6, "completed": 6, "client429": doors["openai"]["client429"]},
    }


@pytest.mark.e2e
def test_short_mixed_doors_run_through_mitmdump(tmp_path: Path) -> None:
    json_path = tmp_path / "bench.json"
    args = [
        "--agents", "4", "--requests", "2", "--latency-ms", "20", "--tokens", "3", "--token-interval-ms", "5",
        "--reject-delay-ms", "100", "--scenarios", "mixed-doors", "--quick", "--no-overhead",
        "--no-pool-bench", "--json", str(json_path),
    ]  # fmt: skip
    result = run_module("chaos_mode_tools.bench", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    (scenario,) = json.loads(json_path.read_text(encoding="utf-8"))["scenarios"]
    assert scenario["name"] == "mixed-doors" and scenario["completed"] == 8
    assert {door: figures["completed"] for door, figures in scenario["doors"].items()} == {
        "anthropic": 4,
        "openai": 4,
    }
