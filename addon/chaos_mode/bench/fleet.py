"""Several proxies on one account (issue 11): one swarm split over 1, 2, 3 proxies that share their slots
through one Redis, in front of one simulator; efficiency against the lower bound, upstream 429s, peaks.

    python -m chaos_mode.bench.fleet [--proxies 1,2,3] [--agents 40] [--requests 4] [--json out.json]

Also the latency of one lease (confirm + release) through a loopback Redis: `lease_latency`.
Needs redis-server (Debian's package) and the `redis` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from chaos_mode.child import ProxyProcess, RedisProcess
from chaos_mode.sim import SimProcess, SimSettings

from .figures import sim_rejected
from .run import get_json, ideal_for, reset_sim
from .scenarios import SCENARIOS
from .swarm import RequestRecord, SwarmOptions, run_swarm
from .workload import Workload, WorkloadSpec, make_workload

SCENARIO = SCENARIOS["least-loaded"]
LEASE_MS = 3000


@dataclass(frozen=True)
class FleetSpec:
    agents: int = 40
    requests: int = 4
    latency_ms: float = 250.0
    output_tokens: int = 8
    token_interval_ms: float = 30.0
    lease_ms: int = LEASE_MS

    def workload(self) -> Workload:
        spec = WorkloadSpec(
            agents=self.agents,
            requests=self.requests,
            latency_ms=self.latency_ms,
            output_tokens=self.output_tokens,
            token_interval_ms=self.token_interval_ms,
        )
        return make_workload(spec)


def proxy_config() -> dict[str, Any]:
    """The scenario's catalog with fixed limits: a 429 from the simulator can only be over-admission."""
    return {**SCENARIO.config(), "learning": {"enabled": False}}


def fleet_proxies(sim_url: str, redis_url: str | None, count: int, lease_ms: int) -> list[ProxyProcess]:
    """`count` proxies in front of the simulator; with `redis_url`, sharing their slots through it."""
    extra = [] if redis_url is None else ["--set", f"chaos_state={redis_url}"]
    extra += ["--set", f"chaos_state_lease_ms={lease_ms}"] if redis_url else []
    return [ProxyProcess(upstream=sim_url, config=proxy_config(), extra_args=extra) for _ in range(count)]


def split(workload: Workload, parts: int) -> list[Workload]:
    """Agent i goes through proxy i mod `parts`."""
    return [replace(workload, agents=workload.agents[i::parts]) for i in range(parts)]


async def run_split(proxies: Sequence[ProxyProcess], workload: Workload) -> tuple[list[RequestRecord], float]:
    """Every part of the swarm at once, each through its proxy; the makespan of the whole."""
    options = SwarmOptions(models=SCENARIO.models, seed=workload.spec.seed)
    start = time.perf_counter()
    runs = await asyncio.gather(
        *(
            run_swarm(p.url, part, options)
            for p, part in zip(proxies, split(workload, len(proxies)), strict=True)
        )
    )
    makespan = time.perf_counter() - start
    return [record for records, _ in runs for record in records], makespan


def fleet_figures(
    records: Sequence[RequestRecord], makespan: float, sim_stats: dict[str, Any], bound: float
) -> dict[str, Any]:
    models = sim_stats["models"]
    over = {
        name: (m["peakInFlight"], m["limit"])
        for name, m in models.items()
        if m["limit"] is not None and m["peakInFlight"] > m["limit"]
    }
    account = sim_stats["account"]
    return {
        "makespanSeconds": round(makespan, 3),
        "vsLowerBound": round(makespan / bound, 3) if bound > 0 else None,
        "requests": len(records),
        "failed": sum(1 for r in records if not r.ok),
        "client429": sum(r.client_429 for r in records),
        "upstream429": sim_rejected(sim_stats),
        "peaks": {name: m["peakInFlight"] for name, m in models.items()},
        "accountPeak": account["peakInFlight"],
        "overCaps": over,
    }


async def measure(
    sim: SimProcess, redis_url: str | None, count: int, workload: Workload, spec: FleetSpec, bound: float
) -> dict[str, Any]:
    """One swarm through `count` proxies (sharing through `redis_url`, or alone when None)."""
    proxies = fleet_proxies(sim.base_url, redis_url, count, spec.lease_ms)
    try:
        await asyncio.gather(*(asyncio.to_thread(p.start) for p in proxies))
        await reset_sim(sim.base_url)
        records, makespan = await run_split(proxies, workload)
        sim_stats = await get_json(sim.base_url + "/sim/stats")
        statuses = [await get_json(p.status_url) for p in proxies]
    finally:
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in proxies))
    figures = fleet_figures(records, makespan, sim_stats, bound)
    fleets = [s.get("fleet") for s in statuses]
    figures["proxies"] = count
    figures["shared"] = redis_url is not None
    figures["lostRaces"] = sum(f["lostRaces"] for f in fleets if f)
    return figures


async def lease_latency(redis_url: str, samples: int = 2000) -> dict[str, float]:
    """Milliseconds for one slot taken on the mirror, confirmed by Redis and released (the release's
    script awaited too), through the pool as the addon uses it."""
    from chaos_mode.config import default_config
    from chaos_mode.pool import ChaosPool, Ticket
    from chaos_mode.redis_state import RedisFleet
    from chaos_mode.shared_slots import SharedSlots
    from chaos_mode.state_url import parse_state_url

    config = default_config()
    pool = ChaosPool(config)
    slots = SharedSlots("bench", on_freed=pool.wake)
    pool.use_slots(slots)
    url = parse_state_url(redis_url, {})
    assert url is not None
    fleet = RedisFleet(url, slots, models=lambda: list(config.models), lease_seconds=10)
    fleet.start()
    try:
        async with asyncio.timeout(5):
            while not fleet.up:
                await asyncio.sleep(0.01)
        times: list[float] = []
        ticket = Ticket("light")
        for i in range(samples + 200):
            started = time.perf_counter()
            selection = await pool.admit(ticket, timeout=1)
            assert selection is not None
            pool.release(selection.model)
            await asyncio.gather(*list(fleet._background))
            if i >= 200:  # warm-up
                times.append((time.perf_counter() - started) * 1000)
    finally:
        await fleet.close()
    times.sort()
    return {
        "samples": samples,
        "p50Ms": round(statistics.median(times), 3),
        "p99Ms": round(times[int(len(times) * 0.99) - 1], 3),
        "maxMs": round(times[-1], 3),
    }


async def run(counts: Sequence[int], spec: FleetSpec) -> dict[str, Any]:
    workload = spec.workload()
    bound = ideal_for(workload).bound.seconds
    settings = SimSettings(
        latency_ms=spec.latency_ms, token_interval_ms=spec.token_interval_ms, output_tokens=spec.output_tokens
    )
    results: dict[str, Any] = {"agents": spec.agents, "requests": spec.requests, "lowerBoundSeconds": bound}
    with SimProcess(settings) as sim, RedisProcess() as redis:
        results["oneProxyAlone"] = await measure(sim, None, 1, workload, spec, bound)
        base = results["oneProxyAlone"]["vsLowerBound"]
        runs = []
        for count in counts:
            figures = await measure(sim, redis.url, count, workload, spec, bound)
            figures["vsOneProxy"] = round(figures["vsLowerBound"] / base, 3)
            runs.append(figures)
        results["fleets"] = runs
        results["lease"] = await lease_latency(redis.url)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos_mode.bench.fleet", description=__doc__)
    parser.add_argument("--proxies", default="1,2,3", help="fleet sizes to measure (comma-separated)")
    parser.add_argument("--agents", type=int, default=FleetSpec.agents)
    parser.add_argument("--requests", type=int, default=FleetSpec.requests)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        counts = [int(n) for n in args.proxies.split(",") if n.strip()]
    except ValueError:
        parser.error("--proxies: comma-separated numbers, like 1,2,3")
    results = asyncio.run(run(counts, FleetSpec(agents=args.agents, requests=args.requests)))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
