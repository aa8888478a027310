"""Several proxies on one account (issue 11): one swarm split over 1, 2, 3 proxies that share their slots
through one Redis, in front of one simulator; efficiency against the lower bound, upstream 429s, peaks.

    python -m chaos_mode_tools.bench.fleet.run [--proxies 1,2,3] [--agents 40] [--requests 4] [--repeat 3]
                                               [--field noisy] [--kill] [--restart-redis] [--json out.json]

Each round measures one proxy alone (no Redis) and then each fleet size, one after the other, so the
ratios compare runs made under the same load of the machine. Also the latency of one lease (confirm +
release) through a loopback Redis (`lease_latency`); with `--kill`, one proxy of the fleet killed with
SIGKILL mid-run (`kill_one`); with `--restart-redis`, Redis stopped and started again mid-run
(`restart_redis`). With `--field PRESET`, the field benchmark's preset instead (its true limits and shapes,
its workload, 1302s after 3 s) and proxies that learn limits, as deployed: the upstream 429s of each run
say whether N proxies probe more than one. Needs redis-server (Debian's package) and the `redis` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import redis.asyncio as aioredis

from chaos_mode_tools.bench.field.presets import (
    PRESETS,
    FieldPreset,
    field_bound,
    planned_changes,
    true_timeline,
)
from chaos_mode_tools.bench.swarm.agents import RequestRecord, SwarmOptions, run_swarm
from chaos_mode_tools.bench.swarm.figures import sim_rejected
from chaos_mode_tools.bench.swarm.run import get_json, ideal_for, reset_sim
from chaos_mode_tools.bench.swarm.scenarios import SCENARIOS
from chaos_mode_tools.bench.swarm.workload import Workload, WorkloadSpec, make_workload
from chaos_mode_tools.devtools.processes import ProxyProcess, RedisProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings

SCENARIO = SCENARIOS["least-loaded"]
LEASE_MS = 3000
FIELD_REJECT_DELAY_MS = 3000.0  # as the field benchmark: z.ai takes 3-6 s to answer with a 429


@dataclass(frozen=True)
class FleetSpec:
    agents: int = 40
    requests: int = 4
    latency_ms: float = 250.0
    output_tokens: int = 8
    token_interval_ms: float = 30.0
    lease_ms: int = LEASE_MS
    field: str | None = None  # a field preset: its simulator and workload (agents and requests from here)

    def preset(self) -> FieldPreset | None:
        """The field preset; ValueError for an unknown one or one the fleet cannot run."""
        if self.field is None:
            return None
        if self.field not in PRESETS:
            raise ValueError(f"unknown field preset {self.field!r}; known: {', '.join(PRESETS)}")
        preset = PRESETS[self.field]
        if preset.filtered_agent is not None:
            raise ValueError(f"field preset {self.field}: a filtered agent is not run by the fleet benchmark")
        return preset

    def sim_settings(self, workload: Workload) -> SimSettings:
        preset = self.preset()
        if preset is not None:
            return preset.sim_settings(workload, reject_delay_ms=FIELD_REJECT_DELAY_MS)
        return SimSettings(
            latency_ms=self.latency_ms,
            token_interval_ms=self.token_interval_ms,
            output_tokens=self.output_tokens,
        )

    def bound(self, workload: Workload) -> float:
        """The lower bound of the makespan: the catalog's slots, or the field preset's true ones."""
        if self.field is None:
            return ideal_for(workload).bound.seconds
        settings, catalog = self.sim_settings(workload), self.preset_catalog()
        return field_bound(
            workload, true_timeline(planned_changes(settings), settings.refuse), catalog
        ).seconds

    def preset_catalog(self) -> str:
        preset = self.preset()
        return "early-2026" if preset is None else preset.catalog

    def proxy_config(self) -> dict[str, Any]:
        """Fixed limits on the catalog's field; learned ones (the default) on a field preset's."""
        if self.field is None:
            return proxy_config()
        return dataclasses.replace(SCENARIO, catalog=self.preset_catalog()).config()

    def workload(self) -> Workload:
        preset = self.preset()
        if preset is not None:
            return make_workload(preset.spec(agents=self.agents, requests=self.requests))
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


def fleet_proxies(
    sim_url: str, redis_url: str | None, count: int, lease_ms: int, config: dict[str, Any] | None = None
) -> list[ProxyProcess]:
    """`count` proxies in front of the simulator (on `config`, default `proxy_config()`); with `redis_url`,
    sharing their slots through it."""
    extra = [] if redis_url is None else ["--set", f"chaos_state={redis_url}"]
    extra += ["--set", f"chaos_state_lease_ms={lease_ms}"] if redis_url else []
    config = proxy_config() if config is None else config
    return [ProxyProcess(upstream=sim_url, config=config, extra_args=extra) for _ in range(count)]


def split(workload: Workload, parts: int) -> list[Workload]:
    """Agent i goes through proxy i mod `parts`."""
    return [replace(workload, agents=workload.agents[i::parts]) for i in range(parts)]


async def run_split(
    proxies: Sequence[ProxyProcess], workload: Workload
) -> tuple[list[RequestRecord], float, list[float]]:
    """Every part of the swarm at once, each through its proxy; the makespan of the whole and of each
    part (a part that ends much later than another was served less: the proxies shared unevenly)."""
    options = SwarmOptions(models=SCENARIO.models, seed=workload.spec.seed)
    start = time.perf_counter()
    runs = await asyncio.gather(
        *(
            run_swarm(p.url, part, options)
            for p, part in zip(proxies, split(workload, len(proxies)), strict=True)
        )
    )
    makespan = time.perf_counter() - start
    return [record for records, _ in runs for record in records], makespan, [m for _, m in runs]


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
        "refusalReasons": sim_stats.get("refusalReasons", {}),
        "peaks": {name: m["peakInFlight"] for name, m in models.items()},
        "accountPeak": account["peakInFlight"],
        "overCaps": over,
    }


async def start_fleet(
    sim: SimProcess, redis_url: str | None, count: int, lease_ms: int, config: dict[str, Any] | None = None
) -> list[ProxyProcess]:
    if redis_url is not None:
        await forget_fleet(redis_url)
    proxies = fleet_proxies(sim.base_url, redis_url, count, lease_ms, config)
    try:
        await asyncio.gather(*(asyncio.to_thread(p.start) for p in proxies))
    except BaseException:
        await stop_fleet(proxies)
        raise
    if redis_url is not None and await _poll(lambda: _all_connected(proxies), 10.0) is None:
        await stop_fleet(proxies)  # as agents would find them: proxies started before the swarm
        raise RuntimeError("the proxies did not reach Redis within 10 s")
    await reset_sim(sim.base_url)
    return proxies


async def forget_fleet(redis_url: str) -> None:
    """A new account for each run: what an earlier run's proxies left in Redis (learned limits, the rights
    to probe and their refused probes) would start this one where that one ended, unlike one proxy alone."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


async def _all_connected(proxies: Sequence[ProxyProcess]) -> float | None:
    fleets = [(await get_json(p.status_url))["fleet"] for p in proxies]
    return time.perf_counter() if all(f["connected"] for f in fleets) else None


async def stop_fleet(proxies: Sequence[ProxyProcess]) -> None:
    await asyncio.gather(*(asyncio.to_thread(p.stop) for p in proxies))


async def measure(
    sim: SimProcess, redis_url: str | None, count: int, workload: Workload, spec: FleetSpec, bound: float
) -> dict[str, Any]:
    """One swarm through `count` proxies (sharing through `redis_url`, or alone when None)."""
    proxies = await start_fleet(sim, redis_url, count, spec.lease_ms, spec.proxy_config())
    try:
        records, makespan, parts = await run_split(proxies, workload)
        sim_stats = await get_json(sim.base_url + "/sim/stats")
        statuses = [await get_json(p.status_url) for p in proxies]
    finally:
        await stop_fleet(proxies)
    figures = fleet_figures(records, makespan, sim_stats, bound)
    fleets = [s.get("fleet") for s in statuses]
    figures["proxies"] = count
    figures["partMakespans"] = [round(m, 3) for m in parts]
    figures["shared"] = redis_url is not None
    figures["lostRaces"] = sum(f["lostRaces"] for f in fleets if f)
    figures["heldBack"] = sum(f["heldBack"] for f in fleets if f)
    # probes not sent: another proxy held the right to probe their limit (learned limits only)
    figures["probesElsewhere"] = sum(f.get("probesElsewhere", 0) for f in fleets if f)
    # Redis calls slower than their timeout (a starved machine): the proxy served alone on its share for
    # a while, when the others' slots are counted as last seen and an upstream 429 can happen.
    figures["outages"] = sum(f["outages"] for f in fleets if f)
    # proxies whose check of lending turned it off (or heard it): their learned limits started over then
    off = [s["learning"] for s in statuses if not s.get("learning", {}).get("lendOverdue", True)]
    figures["lendingOff"] = len(off)
    figures["lendingWhy"] = [learning.get("lending") for learning in off]  # what each check saw
    # how near each proxy's check came to turning lending off (its CUSUM's highest value, in nats)
    figures["lendingNats"] = [s.get("learning", {}).get("lendingNats") for s in statuses]
    # how often each proxy detected a change of z.ai's limits (down, up)
    figures["limitsMoved"] = [s.get("learning", {}).get("limitsMoved") for s in statuses]
    return figures


def _swarms(proxies: Sequence[ProxyProcess], workload: Workload) -> list[asyncio.Task[Any]]:
    options = SwarmOptions(models=SCENARIO.models, seed=workload.spec.seed)
    parts = split(workload, len(proxies))
    return [
        asyncio.ensure_future(run_swarm(p.url, part, options)) for p, part in zip(proxies, parts, strict=True)
    ]


async def _leases_of(client: aioredis.Redis, proxy: str) -> int:
    members = await client.zrange("chaos:account", 0, -1)
    return sum(1 for m in members if _owner(m) == proxy)


def _owner(lease: object) -> str:
    text = lease.decode() if isinstance(lease, bytes) else str(lease)
    return text.rpartition("#")[0]


async def _poll(
    condition: Callable[[], Awaitable[float | None]],
    timeout: float,
    every: float = 0.02,
    start: float | None = None,
) -> float | None:
    """Seconds from `start` (`time.perf_counter()`, default now) until the async `condition()` held: it
    returns when it read the fact that makes it hold, else None; None if it did not hold within `timeout`."""
    start = time.perf_counter() if start is None else start
    while time.perf_counter() - start < timeout:
        when = await condition()
        if when is not None:
            return round(max(when - start, 0.0), 3)
        await asyncio.sleep(every)
    return None


async def kill_one(
    sim: SimProcess, redis_url: str, count: int, workload: Workload, spec: FleetSpec, after: float
) -> dict[str, Any]:
    """`count` proxies share the swarm; `after` seconds in (once it holds a lease), the first is killed with
    SIGKILL. Its leases must leave Redis within the lease TTL (plus a renewal, when a survivor reaps them),
    and the survivors' agents must all be served. The killed proxy's own agents are abandoned."""
    proxies = await start_fleet(sim, redis_url, count, spec.lease_ms, spec.proxy_config())
    client = aioredis.Redis.from_url(redis_url)
    try:
        victim = (await get_json(proxies[0].status_url))["fleet"]["proxy"]
        swarms = _swarms(proxies, workload)
        await asyncio.sleep(after)
        await _poll(lambda: _holds_leases(client, victim), 5.0)  # a busy machine starts the swarm late
        proxies[0].kill()
        held = await _leases_of(client, victim)
        back = await _poll(lambda: _reaped(client, victim), 3 * spec.lease_ms / 1000 + 5)
        survivors = await asyncio.gather(*swarms[1:])
        swarms[0].cancel()
        await asyncio.gather(swarms[0], return_exceptions=True)
        sim_stats = await get_json(sim.base_url + "/sim/stats")
    finally:
        await client.aclose()
        await stop_fleet(proxies)
    figures = _swarm_figures(survivors, sim_stats)
    return {
        "proxies": count,
        "killedAfterSeconds": after,
        "leaseSeconds": spec.lease_ms / 1000,
        "leasesHeldWhenKilled": held,
        "slotsBackSeconds": back,  # None: still held after three TTLs
        "survivorRequests": figures["requests"],
        "survivorFailed": figures["failed"],
        "upstream429": figures["upstream429"],
        "overCaps": figures["overCaps"],
    }


def _swarm_figures(
    runs: Sequence[tuple[list[RequestRecord], float]], sim_stats: dict[str, Any]
) -> dict[str, Any]:
    """`fleet_figures` of swarm parts run together (no lower bound: the run was disturbed on purpose)."""
    records = [r for records, _ in runs for r in records]
    return fleet_figures(records, max(m for _, m in runs), sim_stats, bound=0.0)


async def _holds_leases(client: aioredis.Redis, proxy: str) -> float | None:
    return time.perf_counter() if await _leases_of(client, proxy) > 0 else None


async def _reaped(client: aioredis.Redis, proxy: str) -> float | None:
    """When the dead proxy's leases were seen gone (expired: every script reaps them before counting)."""
    await client.eval(_REAP, 1, "chaos:account")
    when = time.perf_counter()
    return when if await _leases_of(client, proxy) == 0 else None


_REAP = (  # what every script does before counting: expired leases no longer count
    "local t = redis.call('TIME') "
    "return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t[1] * 1000 + math.floor(t[2] / 1000))"
)


async def restart_redis(
    sim: SimProcess,
    redis: RedisProcess,
    count: int,
    workload: Workload,
    spec: FleetSpec,
    after: float,
    down: float,
) -> tuple[dict[str, Any], RedisProcess]:
    """`count` proxies share the swarm; `after` seconds in Redis is stopped, `down` seconds later a new
    (empty) one starts on the same port. No request may fail; once Redis is back the leases in it must
    match the slots the proxies hold within one lease TTL. Returns the figures and the new Redis."""
    proxies = await start_fleet(sim, redis.url, count, spec.lease_ms, spec.proxy_config())
    again = redis
    try:
        swarms = _swarms(proxies, workload)
        await asyncio.sleep(after)
        await asyncio.to_thread(redis.stop)
        await asyncio.sleep(down)
        # A proxy may rejoin before the new Redis is seen to be ready: a join counts from its starting on.
        back = time.time()
        again = await asyncio.to_thread(RedisProcess(port=redis.port).start)
        start = time.perf_counter()
        client = aioredis.Redis.from_url(again.url, decode_responses=True)
        try:
            joined = await _poll(lambda: _all_joined(proxies, back), 3 * spec.lease_ms / 1000 + 5)
            right = await _poll(
                lambda: _counts_match(client, proxies), 3 * spec.lease_ms / 1000 + 5, start=start
            )
        finally:
            await client.aclose()
        runs = await asyncio.gather(*swarms)
        sim_stats = await get_json(sim.base_url + "/sim/stats")
        statuses = [await get_json(p.status_url) for p in proxies]
    finally:
        await stop_fleet(proxies)
    figures = _swarm_figures(runs, sim_stats)
    return {
        "proxies": count,
        "stoppedAfterSeconds": after,
        "downSeconds": down,
        "leaseSeconds": spec.lease_ms / 1000,
        # After the new Redis started: every proxy had written its leases again and counted on it (from the
        # proxies' own clocks), and the leases in Redis were the ones the proxies hold (`_counts_match`,
        # checked once `joinedSeconds` is known).
        "joinedSeconds": joined,
        "countsRightSeconds": right,
        "requests": figures["requests"],
        "failed": figures["failed"],
        "upstream429": figures["upstream429"],
        "overCaps": figures["overCaps"],
        "outages": [s["fleet"]["outages"] for s in statuses],
    }, again


async def _all_joined(proxies: Sequence[ProxyProcess], since: float) -> float | None:
    """When (`time.perf_counter()`) the last proxy began to count on Redis again after `since` (wall
    clock), read from their statuses; None while one has not."""
    fleets = [(await get_json(p.status_url))["fleet"] for p in proxies]
    joined: list[float | None] = [f["joinedAt"] for f in fleets]
    times = [at for at in joined if at is not None and at >= since]
    if not all(f["connected"] for f in fleets) or len(times) < len(joined):
        return None
    return time.perf_counter() - (time.time() - max(times))


async def _counts_match(client: aioredis.Redis, proxies: Sequence[ProxyProcess]) -> float | None:
    """When the leases in Redis were read to be the ones the proxies hold, every proxy connected; None
    when not. The proxies' leases are read just before and just after Redis's: a lease held at both reads
    must be in Redis, and every lease in Redis must be held at one of them (one taken or given back in
    between is on its way, either is right). Holds under a running swarm; a lease Redis lost, or one it
    keeps that no proxy holds, fails it until written again or expired."""
    statuses = [p.status_url for p in proxies]
    before = [s["fleet"] for s in await asyncio.gather(*(get_json(url) for url in statuses))]
    await client.eval(_REAP, 1, "chaos:account")
    in_redis = set(await client.zrange("chaos:account", 0, -1))
    when = time.perf_counter()
    after = [s["fleet"] for s in await asyncio.gather(*(get_json(url) for url in statuses))]
    held_then = {lease for fleet in before for lease in fleet["leases"]}
    held_now = {lease for fleet in after for lease in fleet["leases"]}
    connected = all(fleet["connected"] for fleet in before + after)
    return when if connected and held_then & held_now <= in_redis <= held_then | held_now else None


PEER: Final = "bench-peer"  # the other proxy `lease_latency` tells of every lease


async def lease_latency(redis_url: str, samples: int = 2000) -> dict[str, float]:
    """Milliseconds for one slot taken on the mirror, confirmed by Redis and released (the release's
    script awaited too), through the pool as the addon uses it, with another proxy in the fleet (so each
    script tells it, as in a fleet of two); side by side (alternating, so both see the same machine), two
    bare PINGs on a redis-py client: the two round trips no lease can do without."""
    from chaos_mode.config.schema import parse_config
    from chaos_mode.fleet.redis_store import RedisFleet
    from chaos_mode.fleet.slots import SharedSlots
    from chaos_mode.fleet.state_url import parse_state_url
    from chaos_mode.routing.pool import ChaosPool, Ticket

    config = parse_config({"modelRouting": SCENARIO.config()})
    pool = ChaosPool(config)
    slots = SharedSlots(
        "bench", on_freed=pool.wake, waiting=pool.first_in_line, serving=pool.ledger.serving_here
    )
    pool.use(slots=slots)
    url = parse_state_url(redis_url, {})
    assert url is not None
    fleet = RedisFleet(url, slots, models=lambda: list(config.models), lease_seconds=10)
    fleet.start()
    try:
        async with asyncio.timeout(5):
            while not fleet.up:
                await asyncio.sleep(0.01)
        times: list[float] = []
        pings: list[float] = []
        ticket = Ticket("light")
        bare = aioredis.Redis(host=url.host, port=url.port, db=url.db, password=url.password)
        await bare.zadd("chaos:fleet", {PEER: 2**52})  # seen last in the far future: never reaped
        for i in range(samples + 200):
            started = time.perf_counter()
            selection = await pool.admit(ticket, timeout=1)
            assert selection is not None
            pool.release(selection)
            await asyncio.gather(*list(fleet._background))
            leased = time.perf_counter()
            await bare.ping()
            await bare.ping()
            if i >= 200:  # warm-up
                times.append((leased - started) * 1000)
                pings.append((time.perf_counter() - leased) * 1000)
        await bare.zrem("chaos:fleet", PEER)
        await bare.aclose()
    finally:
        await fleet.close()
    lease, ping = _quantiles(times), _quantiles(pings)
    return {"samples": samples, **lease, **{f"pingPair{k[0].upper()}{k[1:]}": v for k, v in ping.items()}}


def _quantiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50Ms": round(statistics.median(times), 3),
        "p99Ms": round(times[int(len(times) * 0.99) - 1], 3),
        "maxMs": round(times[-1], 3),
    }


@dataclass(frozen=True)
class Plan:
    """What `run` measures besides the fleets' efficiency."""

    repeat: int = 1
    kill: bool = False
    restart_redis: bool = False
    lease_latency: bool = True


async def run(counts: Sequence[int], spec: FleetSpec, plan: Plan = Plan()) -> dict[str, Any]:
    workload = spec.workload()
    bound = spec.bound(workload)
    results: dict[str, Any] = {
        "agents": len(workload.agents),
        "requests": workload.spec.requests,
        "field": spec.field,
        "lowerBoundSeconds": bound,
    }
    with SimProcess(spec.sim_settings(workload)) as sim, RedisProcess() as redis:
        rounds = []
        for _ in range(plan.repeat):
            alone = await measure(sim, None, 1, workload, spec, bound)
            runs = [alone]
            for count in counts:
                figures = await measure(sim, redis.url, count, workload, spec, bound)
                figures["vsOneProxy"] = round(figures["vsLowerBound"] / alone["vsLowerBound"], 3)
                runs.append(figures)
            rounds.append(runs)
        results["rounds"] = rounds
        results["summary"] = summary(counts, rounds)
        if plan.lease_latency:
            results["lease"] = await lease_latency(redis.url)
        expected = bound * 1.3  # about when the swarm ends
        if plan.kill:
            count = max([*counts, 2])
            results["kill"] = await kill_one(sim, redis.url, count, workload, spec, after=expected * 0.4)
        if plan.restart_redis:
            figures, again = await restart_redis(
                sim, redis, max([*counts, 2]), workload, spec, after=expected * 0.3, down=1.0
            )
            again.stop()
            results["redisRestart"] = figures
    return results


def summary(counts: Sequence[int], rounds: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """Per fleet size, over the rounds: the median of makespan / lower bound and of the ratio to one proxy
    alone in the same round, and every round's ratio; its upstream 429s, and how many more than one proxy
    alone's in the same round (`upstream429OverAlone`: a round's load moves both, and the rounds' own spread
    is wider than a fleet's excess)."""
    alone = [runs[0]["vsLowerBound"] for runs in rounds]
    table: dict[str, Any] = {
        "1 alone": {
            "vsLowerBound": round(statistics.median(alone), 3),
            "upstream429": sum(runs[0].get("upstream429", 0) for runs in rounds),
            "upstream429Rounds": [runs[0].get("upstream429", 0) for runs in rounds],
            "lendingOffRounds": [runs[0].get("lendingOff", 0) for runs in rounds],
        }
    }
    for i, count in enumerate(counts, start=1):
        ratios = [runs[i]["vsOneProxy"] for runs in rounds]
        over = [runs[i]["upstream429"] - runs[0].get("upstream429", 0) for runs in rounds]
        table[str(count)] = {
            "vsLowerBound": round(statistics.median(runs[i]["vsLowerBound"] for runs in rounds), 3),
            "vsOneProxy": round(statistics.median(ratios), 3),
            "vsOneProxyRounds": ratios,
            "lostRaces": sum(runs[i]["lostRaces"] for runs in rounds),
            "probesElsewhere": sum(runs[i].get("probesElsewhere", 0) for runs in rounds),
            "outages": sum(runs[i].get("outages", 0) for runs in rounds),
            "lendingOffRounds": [runs[i].get("lendingOff", 0) for runs in rounds],
            "upstream429": sum(runs[i]["upstream429"] for runs in rounds),
            "upstream429Rounds": [runs[i]["upstream429"] for runs in rounds],
            "upstream429OverAlone": statistics.median(over) if over else 0,
            "upstream429OverAloneRounds": over,
            "overCaps": [runs[i]["overCaps"] for runs in rounds if runs[i]["overCaps"]],
        }
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos_mode_tools.bench.fleet.run", description=__doc__)
    parser.add_argument("--proxies", default="1,2,3", help="fleet sizes to measure (comma-separated)")
    parser.add_argument("--agents", type=int, help=f"default {FleetSpec.agents}, or the field preset's")
    parser.add_argument("--requests", type=int, help=f"default {FleetSpec.requests}, or the field preset's")
    parser.add_argument(
        "--field",
        metavar="PRESET",
        help="a preset of the field benchmark (noisy, soft, ...): its true limits, shapes and workload, on "
        "proxies that learn limits",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds (each: one proxy alone, then every fleet)"
    )
    parser.add_argument("--lease-ms", type=int, default=LEASE_MS, help="the proxies' chaos_state_lease_ms")
    parser.add_argument("--kill", action="store_true", help="also: one proxy killed with SIGKILL mid-run")
    parser.add_argument(
        "--restart-redis", action="store_true", help="also: Redis stopped and restarted mid-run"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        counts = [int(n) for n in args.proxies.split(",") if n.strip()]
    except ValueError:
        parser.error("--proxies: comma-separated numbers, like 1,2,3")
    preset = PRESETS.get(args.field) if args.field else None
    agents = args.agents or (preset.agents if preset else FleetSpec.agents)
    requests = args.requests or (preset.requests if preset else FleetSpec.requests)
    spec = FleetSpec(agents=agents, requests=requests, lease_ms=args.lease_ms, field=args.field)
    try:
        spec.preset()
    except ValueError as exc:
        parser.error(str(exc))
    plan = Plan(repeat=args.repeat, kill=args.kill, restart_redis=args.restart_redis)
    results = asyncio.run(run(counts, spec, plan))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
