"""`python -m chaos_mode.bench --field ...`: per preset, a simulator with the field's true limits, a fresh
mitmdump with chaos mode on the built-in catalog, the swarm, the proxy's status sampled all along; the
makespan against the lower bound of the true limits."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos_mode.bench.field import PRESETS, PROXY, FieldPreset, field_bound, planned_changes, true_timeline
from chaos_mode.bench.figures import summarize
from chaos_mode.bench.run import Log, bound_doc, document_head, run_through, start_proxy, workload_doc
from chaos_mode.bench.sampler import rebase, sampling, stall_figures
from chaos_mode.bench.swarm import SwarmProgress
from chaos_mode.bench.workload import make_workload
from chaos_mode.sim import SimProcess


@dataclass(frozen=True)
class FieldOptions:
    presets: Sequence[FieldPreset] = field(default_factory=lambda: list(PRESETS.values()))
    overrides: dict[str, Any] = field(default_factory=dict)  # WorkloadSpec fields given on the command line
    reject_delay_ms: float = 3000.0  # z.ai takes 3-6 s to answer with a 429
    retry_after: float | None = None
    max_attempts: int = 60
    deadline: float = 150.0  # seconds one preset's swarm may take before it is stopped
    command: str = ""


async def run_preset(preset: FieldPreset, options: FieldOptions, log: Log) -> dict[str, Any]:
    """One preset, start to end; the figures as one JSON-ready dict."""
    workload = make_workload(preset.spec(**options.overrides))
    settings = preset.sim_settings(
        workload, reject_delay_ms=options.reject_delay_ms, retry_after=options.retry_after
    )
    planned = field_bound(workload, true_timeline(planned_changes(settings), settings.refuse))
    log(
        f"field {preset.name}: {preset.description}; {workload.size} requests "
        f"({workload.spec.agents} agents x {workload.spec.requests}), LB {planned.seconds:.2f} s "
        f"({planned.binding})"
    )
    progress = SwarmProgress()
    async with (
        SimProcess(settings) as sim,
        start_proxy(sim.base_url, PROXY) as proxy,
        sampling(proxy.status_url, preset.sample_seconds) as samples,
        asyncio.timeout(options.deadline),
    ):
        run = await run_through(
            PROXY, workload, sim.base_url, proxy, max_attempts=options.max_attempts, progress=progress
        )
    timeline = true_timeline(run.sim_stats["limitChanges"], settings.refuse, lead=run.reset_lead)
    bound = field_bound(workload, timeline)
    summary = summarize(
        preset.name, preset.description, run.records, run.makespan, run.sim_stats, run.status, bound
    )
    summary["checks"]["noClient429"] = summary["client429"] == 0
    by_code: dict[str, int] = {}
    for counters in run.sim_stats["models"].values():
        for code, n in counters["rejected"].items():
            by_code[code] = by_code.get(code, 0) + n
    series = rebase(samples, progress.started)
    summary.update(
        workload=workload_doc(workload, options),
        ideal={**bound_doc(bound), "plannedSeconds": round(planned.seconds, 3)},
        upstreamByCode=dict(sorted(by_code.items())),
        truth={
            "settings": {
                k: v
                for k, v in settings.to_mapping().items()
                if k in ("limits", "account_limit", "hold", "refuse", "fault_rates", "schedule")
            },
            "limitChanges": run.sim_stats["limitChanges"],
            "leadSeconds": round(run.reset_lead, 4),
            "slots": [
                {"at": round(c.start, 3), "models": dict(c.models), "account": c.account} for c in timeline
            ],
        },
        stalls=stall_figures(series),
        samples=series,
    )
    log(
        f"  makespan {run.makespan:.2f} s = {summary['vsIdeal']:.2f}x LB, "
        f"{summary['client429']} client 429s, upstream {summary['upstreamByCode']}, "
        f"{summary['unstreamed']} answers in one piece, "
        f"longest stall {summary['stalls']['longestStallSeconds']:.2f} s"
    )
    return summary


async def run_field(options: FieldOptions, log: Log = lambda _: None) -> dict[str, Any]:
    """Every preset of `options`, one after another."""
    doc = document_head("chaos-mode field", options.command) | {"presets": []}
    for preset in options.presets:
        doc["presets"].append(await run_preset(preset, options, log))
    doc["finishedAt"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return doc
