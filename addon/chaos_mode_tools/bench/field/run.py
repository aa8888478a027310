"""`python -m chaos_mode_tools.bench --field ...`: per preset, a simulator with the field's true limits and
shapes, a fresh mitmdump with chaos mode on the built-in catalog, the swarm, the proxy's status sampled all
along; the makespan against the lower bound of the true (clean) limits; then the preset's twin, when it has
one (the same run without the shape under test), and the comparison of the two."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from chaos_mode_tools.bench.field import figures as field_figures
from chaos_mode_tools.bench.field.presets import (
    FILTER_PHRASE,
    PRESETS,
    PROXY,
    FieldPreset,
    field_bound,
    field_queue_makespan,
    planned_changes,
    true_timeline,
)
from chaos_mode_tools.bench.swarm.agents import FilteredAgent, SwarmProgress
from chaos_mode_tools.bench.swarm.figures import summarize
from chaos_mode_tools.bench.swarm.run import (
    Log,
    bound_doc,
    document_head,
    run_through,
    start_proxy,
    workload_doc,
)
from chaos_mode_tools.bench.swarm.sampler import rebase, sampling, stall_figures
from chaos_mode_tools.bench.swarm.workload import Workload, make_workload
from chaos_mode_tools.devtools.distance import DistantPort
from chaos_mode_tools.devtools.sim_process import SimProcess

# The simulator's settings a field document keeps as the truth of its run.
TRUTH_SETTINGS: Final = (
    "limits", "account_limit", "hold", "refuse", "fault_rates", "schedule", "bands", "account_band",
    "over_limit", "queue_models", "queue_timeout_ms", "filter_phrases", "head_with_first_token",
)  # fmt: skip


@dataclass(frozen=True)
class FieldOptions:
    presets: Sequence[FieldPreset] = field(default_factory=lambda: list(PRESETS.values()))
    overrides: dict[str, Any] = field(default_factory=dict)  # WorkloadSpec fields given on the command line
    reject_delay_ms: float = 3000.0  # z.ai takes 3-6 s to answer with a 429
    retry_after: float | None = None
    max_attempts: int = 60
    deadline: float = 150.0  # seconds one preset's swarm may take before it is stopped
    twins: bool = True  # run each preset's twin after it
    rtt: float = 0.0  # seconds: z.ai this far from the proxy (devtools.distance); 0: loopback
    seeds: Sequence[int] = ()  # run each preset (and its twin) once per workload seed; none: one run
    learning: Mapping[str, Any] = field(default_factory=dict)  # the proxy's learning block, over the defaults
    command: str = ""


def without_agent(workload: Workload, agent: int | None) -> Workload:
    """The workload with `agent`'s requests taken out (the work a filtered agent never gets served)."""
    if agent is None:
        return workload
    agents = tuple(() if index == agent else requests for index, requests in enumerate(workload.agents))
    return dataclasses.replace(workload, agents=agents)


@contextlib.asynccontextmanager
async def _at_distance(sim: SimProcess, rtt: float) -> AsyncIterator[str]:
    """The URL the proxy reaches the simulator by: itself, or a relay `rtt` seconds away from it."""
    if rtt <= 0:
        yield sim.base_url
        return
    async with DistantPort(sim.port, rtt) as far:
        yield f"http://127.0.0.1:{far.port}"


async def run_preset(
    preset: FieldPreset, options: FieldOptions, log: Log, others_of: int | None = None
) -> dict[str, Any]:
    """One preset, start to end; the figures as one JSON-ready dict. `others_of`: an agent whose requests
    the makespan and the bound leave out (the filtered agent, in its run and its twin's)."""
    others_of = preset.filtered_agent if others_of is None else others_of
    proxy_scenario = dataclasses.replace(
        PROXY, learning=tuple(options.learning.items()), catalog=preset.catalog
    )
    workload = make_workload(preset.spec(**options.overrides))
    served = without_agent(workload, others_of)
    settings = preset.sim_settings(
        workload, reject_delay_ms=options.reject_delay_ms, retry_after=options.retry_after
    )
    planned = field_bound(served, true_timeline(planned_changes(settings), settings.refuse), preset.catalog)
    log(
        f"field {preset.name}: {preset.description}; {workload.size} requests "
        f"({workload.spec.agents} agents x {workload.spec.requests}), LB {planned.seconds:.2f} s "
        f"({planned.binding})" + (f"; z.ai {options.rtt * 1000:g} ms away" if options.rtt > 0 else "")
    )
    filtered = None if preset.filtered_agent is None else FilteredAgent(preset.filtered_agent, FILTER_PHRASE)
    progress = SwarmProgress()
    async with (
        SimProcess(settings) as sim,
        _at_distance(sim, options.rtt) as zai,
        start_proxy(zai, proxy_scenario) as proxy,
        sampling(proxy.status_url, preset.sample_seconds) as samples,
        asyncio.timeout(options.deadline),
    ):
        run = await run_through(
            proxy_scenario,
            workload,
            sim.base_url,
            proxy,
            max_attempts=options.max_attempts,
            progress=progress,
            filtered=filtered,
        )
    timeline = true_timeline(run.sim_stats["limitChanges"], settings.refuse, lead=run.reset_lead)
    bound = field_bound(served, timeline, preset.catalog)
    queue = field_queue_makespan(served, timeline, preset.catalog)
    others = None if others_of is None else field_figures.makespan_of_others(run.records, others_of)
    makespan = run.makespan if others is None else others
    summary = summarize(
        preset.name, preset.description, run.records, makespan, run.sim_stats, run.status, bound
    )
    # The filtered agent's request is refused on purpose: the checks are of the others.
    others_records = [r for r in run.records if r.agent != others_of]
    summary["checks"]["noClient429"] = sum(r.client_429 for r in others_records) == 0
    summary["checks"]["allCompleted"] = all(r.ok for r in others_records)
    by_code: dict[str, int] = {}
    for counters in run.sim_stats["models"].values():
        for code, n in counters["rejected"].items():
            by_code[code] = by_code.get(code, 0) + n
    series = rebase(samples, progress.started)
    waits: dict[str, Any] = run.sim_stats.get("zaiWaits") or {}
    slots = [{"at": round(c.start, 3), "models": dict(c.models), "account": c.account} for c in timeline]
    summary.update(
        workload={**workload_doc(workload, options), "rttMs": round(options.rtt * 1000, 1)},
        ideal={
            **bound_doc(bound),
            "plannedSeconds": round(planned.seconds, 3),
            "queueSeconds": None if queue is None else round(queue, 3),
        },
        upstreamByCode=dict(sorted(by_code.items())),
        upstreamPer50=field_figures.per_50(summary["upstream429"], workload.size),
        refusalReasons=run.sim_stats.get("refusalReasons", {}),
        upstreamFiltered=run.sim_stats.get("filtered", {}).get("requests", 0),
        zaiWaits={k: v for k, v in waits.items() if k != "log"} if waits else waits,
        zaiWaitsOnceKnown=field_figures.waits_once_known(waits.get("log", []), series, slots, run.reset_lead)
        if len(slots) == 1
        else None,
        learned=field_figures.learned_ranges(series),
        limitReasons=_limit_reasons(run.status),
        lending=(run.status or {}).get("learning", {}),
        cooled=field_figures.cooled_models(series),
        convergence=field_figures.convergence(series, slots),
        truth={
            "settings": {k: v for k, v in settings.to_mapping().items() if k in TRUTH_SETTINGS},
            "limitChanges": run.sim_stats["limitChanges"],
            "leadSeconds": round(run.reset_lead, 4),
            "slots": slots,
        },
        stalls=stall_figures(series),
        samples=series,
    )
    if others_of is not None:
        summary["othersOf"] = others_of
        summary["swarmMakespanSeconds"] = round(run.makespan, 3)
    if preset.filtered_agent is not None:
        summary["filtered"] = field_figures.filtered_agent(run.records, preset.filtered_agent)
    log(
        f"  makespan {makespan:.2f} s = {summary['vsIdeal']:.2f}x LB, "
        f"{summary['client429']} client 429s, upstream {summary['upstreamByCode']}, "
        f"{summary['unstreamed']} answers in one piece, "
        f"longest stall {summary['stalls']['longestStallSeconds']:.2f} s"
        + ("" if summary["lending"].get("lendOverdue", True) else f"; {summary['lending']['lending']}")
    )
    return summary


def _seeded(result: dict[str, Any], preset: FieldPreset, seed: int | None) -> dict[str, Any]:
    """The run's result, saying which preset it ran; named after its seed too when one was chosen (a run
    per seed: `realistic seed 2`)."""
    result["preset"] = preset.name
    if seed is not None:
        result["name"] = f"{preset.name} seed {seed}"
    return result


def _limit_reasons(status: Any) -> dict[str, str]:
    """Each model's `limitReason` at the end (why its learned limit is what it is), when the proxy says."""
    models = (status or {}).get("modelDistribution", {})
    return {name: m["limitReason"] for name, m in models.items() if m.get("limitReason")}


def compare_with_twin(preset: dict[str, Any], twin: dict[str, Any]) -> dict[str, Any]:
    """The preset against its twin: efficiencies, and how many points the shape cost."""
    ours, theirs = preset["utilization"], twin["utilization"]
    return {
        "name": twin["name"],
        "makespanSeconds": twin["makespanSeconds"],
        "efficiency": theirs,
        "pointsBelowTwin": round(100 * (theirs - ours), 1) if ours is not None and theirs else None,
        "makespanRatio": round(preset["makespanSeconds"] / twin["makespanSeconds"], 3)
        if twin["makespanSeconds"]
        else None,
    }


async def run_field(options: FieldOptions, log: Log = lambda _: None) -> dict[str, Any]:
    """Every preset of `options`, one after another (once per seed, when `seeds` names any), each run
    followed by its twin (when it has one)."""
    doc = document_head("chaos-mode field", options.command) | {"presets": []}
    for preset in options.presets:
        for seed in options.seeds or (None,):
            run = (
                options
                if seed is None
                else dataclasses.replace(options, overrides={**options.overrides, "seed": seed})
            )
            result = _seeded(await run_preset(preset, run, log), preset, seed)
            doc["presets"].append(result)
            twin = preset.twin_preset() if options.twins else None
            if twin is not None:
                twin_run = await run_preset(twin, run, log, others_of=preset.filtered_agent)
                twin_result = _seeded(twin_run, twin, seed)
                result["twin"] = compare_with_twin(result, twin_result)
                doc["presets"].append(twin_result)
    doc["finishedAt"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return doc
