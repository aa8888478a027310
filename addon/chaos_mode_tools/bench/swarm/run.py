"""Run the whole benchmark: one simulator, a fresh mitmdump per scenario, the same swarm, then overhead
and the pure-core figure. Returns one JSON-ready document (see `report.py` for its table)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import platform
import signal
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos_mode.config.schema import parse_config
from chaos_mode_tools.bench.cost.overhead import OverheadOptions, measure_overhead
from chaos_mode_tools.bench.swarm.agents import (
    FilteredAgent,
    RequestRecord,
    SwarmOptions,
    SwarmProgress,
    run_swarm,
)
from chaos_mode_tools.bench.swarm.figures import add_speedups, summarize
from chaos_mode_tools.bench.swarm.ideal import (
    FORMULA,
    LowerBound,
    clairvoyant_makespan,
    fair_queue_makespan,
    headline_terms,
    makespan_lower_bound,
    slots_by_tier,
)
from chaos_mode_tools.bench.swarm.scenarios import SCENARIOS, Scenario, pinned_models
from chaos_mode_tools.bench.swarm.workload import ZAI_DEFAULT_MODELS, Workload, WorkloadSpec, make_workload
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings, default_limits

Log = Callable[[str], None]


async def stop_on_sigterm[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro`; SIGTERM cancels it like Ctrl-C does, so the child processes are stopped on the way out."""
    task = asyncio.ensure_future(coro)
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await task
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGTERM)


@dataclass(frozen=True)
class BenchOptions:
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    scenarios: Sequence[Scenario] = field(default_factory=lambda: list(SCENARIOS.values()))
    reject_delay_ms: float = 3000.0  # z.ai takes 3-6 s to answer with a 429
    retry_after: float | None = None  # Retry-After on the simulator's 429s (z.ai often sends none)
    max_attempts: int = 60
    overhead: OverheadOptions | None = field(default_factory=OverheadOptions)
    pool_bench: tuple[int, int] | None = (5, 10_000)  # (repeats, number) for run_pool_bench
    command: str = ""


def sim_settings(options: BenchOptions) -> SimSettings:
    spec = options.workload
    return SimSettings(
        latency_ms=spec.latency_ms,
        token_interval_ms=spec.token_interval_ms,
        output_tokens=spec.output_tokens,
        reject_delay_ms=options.reject_delay_ms,
        retry_after=options.retry_after,
        limits=default_limits(),
    )


@dataclass(frozen=True, slots=True)
class Ideal:
    """The references a scenario is measured against, for chaos mode's slots and the baseline mapping's."""

    bound: LowerBound  # LB over the slots the catalog's floors allow
    fair_queue: float  # an idealized zero-overhead fair queue on those slots
    clairvoyant: float  # the same, serving the agent with the most work left first (knows the future)
    baseline_bound: LowerBound  # LB when every tier is pinned to z.ai's default model
    baseline_fair_queue: float

    def doc(self) -> dict[str, Any]:
        return {
            "formula": FORMULA,
            **bound_doc(self.bound),
            "fairQueueSeconds": round(self.fair_queue, 3),
            "clairvoyantSeconds": round(self.clairvoyant, 3),
            "baselineMapping": {
                **bound_doc(self.baseline_bound),
                "fairQueueSeconds": round(self.baseline_fair_queue, 3),
            },
        }


def ideal_for(workload: Workload) -> Ideal:
    """LB and the fair-queue reference for chaos mode (the built-in catalog) and for the baseline mapping."""
    eligible, capacity, account = slots_by_tier(
        parse_config({"modelRouting": SCENARIOS["least-loaded"].config()})
    )
    pinned = {tier: [model] for tier, model in ZAI_DEFAULT_MODELS.items()}
    work, agents = workload.work_by_tier(), workload.work_by_agent()
    jobs = workload.jobs()
    return Ideal(
        bound=makespan_lower_bound(work, eligible, capacity, agents, account),
        fair_queue=fair_queue_makespan(jobs, eligible, capacity, account),
        clairvoyant=clairvoyant_makespan(jobs, eligible, capacity, account),
        baseline_bound=makespan_lower_bound(work, pinned, capacity, agents, account),
        baseline_fair_queue=fair_queue_makespan(jobs, pinned, capacity, account),
    )


async def get_json(url: str) -> Any:
    async with httpx.AsyncClient(timeout=10.0) as client:
        response = await client.get(url)
        response.raise_for_status()
        return response.json()


async def reset_sim(sim_url: str) -> None:
    async with httpx.AsyncClient(timeout=10.0) as client:
        (await client.post(sim_url + "/sim/reset")).raise_for_status()


def start_proxy(sim_url: str, scenario: Scenario) -> ProxyProcess:
    return ProxyProcess(upstream=sim_url, config=scenario.config())


@dataclass(frozen=True, slots=True)
class SwarmRun:
    """What one swarm through a proxy left: the client's records, the proxy's and the simulator's view."""

    records: list[RequestRecord]
    makespan: float
    status: Any  # the proxy's /api/status at the end (None for plain mitmdump)
    sim_stats: Any
    reset_lead: float  # seconds from the simulator's reset (its clock's 0) to the swarm's start


async def run_through(
    scenario: Scenario,
    workload: Workload,
    sim_url: str,
    proxy: ProxyProcess,
    *,
    max_attempts: int = 60,
    progress: SwarmProgress | None = None,
    filtered: FilteredAgent | None = None,
) -> SwarmRun:
    """One swarm through an already started proxy; the simulator is reset first."""
    await reset_sim(sim_url)
    reset_at = time.perf_counter()
    progress = progress if progress is not None else SwarmProgress()
    swarm = SwarmOptions(
        models=scenario.models,
        agent_models=agent_models(scenario, len(workload.agents)),
        openai_every=scenario.openai_every,
        max_attempts=max_attempts,
        seed=workload.spec.seed,
        filtered=filtered,
    )
    records, makespan = await run_swarm(proxy.url, workload, swarm, progress)
    status = await get_json(proxy.status_url) if proxy.addon else None
    sim_stats = await get_json(sim_url + "/sim/stats")
    return SwarmRun(records, makespan, status, sim_stats, progress.started - reset_at)


async def measure_scenario(
    scenario: Scenario,
    workload: Workload,
    sim_url: str,
    proxy: ProxyProcess,
    ideal: Ideal,
    *,
    max_attempts: int = 60,
    progress: SwarmProgress | None = None,
) -> dict[str, Any]:
    """One swarm through an already started proxy, summarized against the ideal."""
    run = await run_through(scenario, workload, sim_url, proxy, max_attempts=max_attempts, progress=progress)
    summary = summarize(
        scenario.name, scenario.description, run.records, run.makespan, run.sim_stats, run.status, ideal.bound
    )
    summary["vsFairQueue"] = round(run.makespan / ideal.fair_queue, 3) if ideal.fair_queue > 0 else None
    return summary


def agent_models(scenario: Scenario, agents: int) -> list[str]:
    """Each agent's own model in the pinned scenario (ValueError with more agents than slots), else []."""
    if not scenario.pinned:
        return []
    _, capacity, _ = slots_by_tier(parse_config({"modelRouting": scenario.config()}))
    return pinned_models(capacity, agents)


async def run_scenario(
    scenario: Scenario, workload: Workload, sim_url: str, ideal: Ideal, *, max_attempts: int = 60
) -> dict[str, Any]:
    async with start_proxy(sim_url, scenario) as proxy:
        return await measure_scenario(scenario, workload, sim_url, proxy, ideal, max_attempts=max_attempts)


def pool_bench_section(repeats: int, number: int) -> dict[str, Any]:
    """The pure core's select+acquire+release cost, from `pool_bench` when it is there."""
    try:
        from chaos_mode_tools.bench.cost.pool import run_pool_bench
    except ImportError as exc:
        return {"skipped": f"chaos_mode_tools.bench.cost.pool is not available ({exc})"}
    rows = run_pool_bench(repeats, number)
    return {"repeats": repeats, "number": number, "rows": rows}


class UpstreamTimings(Protocol):
    """What a workload's document says of the simulator's 429s (BenchOptions, FieldOptions)."""

    @property
    def reject_delay_ms(self) -> float: ...

    @property
    def retry_after(self) -> float | None: ...


def workload_doc(workload: Workload, options: UpstreamTimings) -> dict[str, Any]:
    spec = workload.spec
    return {
        "agents": spec.agents,
        "requestsPerAgent": spec.requests,
        "requests": workload.size,
        "mix": str(spec.mix),
        "latencyMs": spec.latency_ms,
        "outputTokens": spec.output_tokens,
        "tokenIntervalMs": spec.token_interval_ms,
        "outputLengths": spec.lengths.to_json(),
        "jitter": spec.jitter,
        "seed": spec.seed,
        "rejectDelayMs": options.reject_delay_ms,
        "retryAfter": options.retry_after,
        "tierCounts": workload.tier_counts(),
        "workSeconds": {t: round(w, 3) for t, w in workload.work_by_tier().items()},
        "meanServiceSeconds": round(sum(workload.work_by_tier().values()) / workload.size, 3),
    }


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def document_head(benchmark: str, command: str) -> dict[str, Any]:
    """The first keys of a benchmark's document: what ran, when, where."""
    return {
        "benchmark": benchmark,
        "version": 1,
        "startedAt": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(),
    }


def bound_doc(bound: LowerBound) -> dict[str, Any]:
    return {
        "seconds": round(bound.seconds, 3),
        "binding": bound.binding,
        "terms": {k: round(v, 3) for k, v in headline_terms(bound).items()},
        "slots": bound.slots,
    }


async def run_benchmark(options: BenchOptions, log: Log = lambda _: None) -> dict[str, Any]:
    """Everything, in one run; `log` gets a line per step."""
    workload = make_workload(options.workload)
    ideal = ideal_for(workload)
    doc = document_head("chaos-mode swarm", options.command)
    doc |= {"workload": workload_doc(workload, options), "ideal": ideal.doc()}
    log(
        f"workload: {workload.size} requests ({options.workload.agents} agents x "
        f"{options.workload.requests}), mix {options.workload.mix}, "
        f"ideal makespan >= {doc['ideal']['seconds']:.2f} s ({ideal.bound.binding}), "
        f"fair-queue reference {doc['ideal']['fairQueueSeconds']:.2f} s"
    )
    scenarios: list[dict[str, Any]] = []
    async with SimProcess(sim_settings(options)) as sim:
        for scenario in options.scenarios:
            log(f"scenario {scenario.name}: {scenario.description}")
            result = await run_scenario(
                scenario, workload, sim.base_url, ideal, max_attempts=options.max_attempts
            )
            log(
                f"  makespan {result['makespanSeconds']:.2f} s, {result['requestsPerSecond']} req/s, "
                f"{result['client429']} client 429s, {result['upstream429']} upstream 429s"
            )
            scenarios.append(result)
        add_speedups(scenarios)
        doc["scenarios"] = scenarios
        if options.overhead is not None:
            log("overhead: addon vs plain mitmdump")
            doc["overhead"] = await measure_overhead(sim.base_url, options.overhead, log)
        else:
            doc["overhead"] = None
    if options.pool_bench is not None:
        log("pure core: pool_bench")
        doc["poolBench"] = await asyncio.to_thread(pool_bench_section, *options.pool_bench)
    else:
        doc["poolBench"] = None
    doc["finishedAt"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return doc
