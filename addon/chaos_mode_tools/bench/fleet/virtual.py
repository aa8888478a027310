"""Several proxies on one account in virtual time: the fleet's policy without the machine's noise.

    python -m chaos_mode_tools.bench.fleet.virtual [--proxies 1,2,3] [--agents 60] [--requests 6] [--seeds 8]
                                                   [--rtt-ms 1] [--notice-ms 1]

The pools and mirrors (`ChaosPool`, `SharedSlots`) run as the addon runs them, on an event loop whose clock
jumps to the next timer, so nothing costs CPU time. The Redis scripts are a dict (`Store`: leases within
the caps a proxy asks with, the right to probe a limit and its answer, `+ - = !` notices with z.ai's
verdicts, tallies at renewal, and with a pool the cooldowns' blocks; not the leases' TTLs, outages or the
learned limits' hash): a call reaches it after half a round trip, in the order this proxy sent it, and a
notice reaches each other proxy `notice` seconds after its change, in the order published (as Redis's
pub/sub); every delay is drawn from [1, 2) × its mean. Here the limits are fixed (no probe, no z.ai);
`field.virtual --proxies` runs the store with learning against a simulated z.ai. Each agent's request
holds its slot for its service time plus 2 ms each way. `fleet.run` measures the real thing on a machine
whose other jobs move its figures by tens of percent; this one compares policies: one proxy alone (no
store) against 1, 2, 3 sharing one, same workloads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chaos_mode.config.schema import ModelRouting
from chaos_mode.fleet.cooldowns import BlockNotice, SharedCooldowns, heard_block
from chaos_mode.fleet.slots import Notice, SharedSlots, Tally, Verdict, pool_slots
from chaos_mode.routing.cooldowns import Cooldowns
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.routing.slots import ProbeClaim, Seen
from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.bench.swarm.run import ideal_for
from chaos_mode_tools.bench.swarm.workload import Workload, WorkloadSpec, make_workload
from chaos_mode_tools.bench.virtual_loop import VirtualLoop
from chaos_mode_tools.sim.stalls import resolve

HOP = 0.002  # seconds from the proxy to the upstream, and from the answer's end to the agent's next request
RENEW = 1.0  # seconds between tallies (a third of fleet.run's 3 s leases)


def _held(seconds: float) -> float:
    """A right held `seconds`, as the scripts keep it: whole ms, at least 1 (0 stays 0: freed)."""
    return max(math.ceil(seconds * 1000), 1) / 1000 if seconds > 0 else 0.0


@dataclass(frozen=True)
class Delays:
    rtt: float = 0.001  # seconds, proxy -> store -> proxy
    notice: float = 0.001  # seconds, from a change in the store to each other proxy


class Store:
    """What the Lua scripts keep (leases per model, a change number, the right to probe each limit) and
    Redis's channels, with delays. `over` counts leases admitted above the configured caps: must stay 0."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, delays: Delays, config: ModelRouting, rng: random.Random
    ):
        self.loop, self.delays, self.config, self.rng = loop, delays, config, rng
        self.leases: dict[str, dict[str, str]] = {}  # model -> lease -> the proxy holding it
        self.rights: dict[str, tuple[str, float, int]] = {}  # limit -> its prober's lease, free at, refused
        self.seq = 0
        self.subscribers: list[StoreFleet] = []
        self._last: dict[int, float] = {}  # per link, when its last message arrives (links keep order)
        self.over = 0

    def later(self, link: int, mean: float, callback: Callable[..., None], *args: Any) -> None:
        """`callback(*args)` after about `mean` seconds, after everything sent before on `link`."""
        at = max(self.loop.time() + mean * (1 + self.rng.random()), self._last.get(link, 0.0) + 1e-6)
        self._last[link] = at
        self.loop.call_at(at, callback, *args)

    def total(self) -> int:
        return sum(map(len, self.leases.values()))

    def publish(self, sender: SharedSlots, notice: Notice) -> None:
        for member in self.subscribers:
            if member.slots is not sender:
                self.later(id(member.slots), self.delays.notice, member.slots.heard, notice)

    def take(
        self,
        sender: SharedSlots,
        model: str,
        lease: str,
        cap: int,
        account_cap: int,
        probe: ProbeClaim | None,
    ) -> Verdict:
        """CONFIRM: the lease within the caps; for a probe's slot, only with the right to probe its limit."""
        now, held, total = self.loop.time(), self.leases.setdefault(model, {}), self.total()
        refused = 0
        if probe is not None:
            holder, free_at, before = self.rights.get(probe.limit, ("", 0.0, 0))
            refused = max(before, probe.refused)
            if free_at > now and not holder.startswith(sender.proxy_id + "#"):
                return Verdict(
                    False, len(held), total, self.seq, math.ceil((free_at - now) * 1000) / 1000, refused
                )
        if len(held) >= cap or total >= account_cap:
            return Verdict(False, len(held), total, self.seq, 0.0, refused)
        if probe is not None:
            self.rights[probe.limit] = (lease, now + _held(probe.seconds), refused)
        held[lease] = sender.proxy_id
        self.seq += 1
        caps = self.config.models
        if len(held) > caps[model].max_concurrency or total + 1 > self.config.total_capacity:
            self.over += 1
        self.publish(sender, replace(sender.notice("+", model), seq=self.seq))
        return Verdict(True, len(held), total + 1, self.seq, 0.0, refused)

    def probe_answered(self, sender: SharedSlots, claim: ProbeClaim, lease: str) -> None:
        """PROBE_ANSWERED: the right freed and told (`!`), or held for the prober's wait."""
        holder, _, _ = self.rights.get(claim.limit, ("", 0.0, 0))
        if holder != lease:
            return
        if _held(claim.seconds) <= 0:
            del self.rights[claim.limit]
            self.publish(sender, sender.notice("!", claim.limit))
        else:
            self.rights[claim.limit] = (lease, self.loop.time() + _held(claim.seconds), claim.refused)

    def tally(self) -> Tally:
        counts = {model: len(leases) for model, leases in self.leases.items()}
        held = Counter(proxy for leases in self.leases.values() for proxy in leases.values())
        proxies = {member.slots.proxy_id: held[member.slots.proxy_id] for member in self.subscribers}
        return Tally(counts, self.total(), proxies, self.seq)


class StoreFleet:
    """`Fleet` of one proxy's `SharedSlots` over the `Store`, as `RedisFleet` is over Redis (and its
    cooldowns' notices, with `pool`)."""

    def __init__(self, store: Store, slots: SharedSlots, pool: ChaosPool | None = None) -> None:
        self.store, self.slots, self.pool = store, slots, pool
        self.link = id(self)
        self.cooldowns: SharedCooldowns | None = None
        if pool is not None and isinstance(pool.cooldowns, Cooldowns):
            self.cooldowns = SharedCooldowns(pool.cooldowns, self._tell_block)
            pool.use(cooldowns=self.cooldowns)
        slots.connected(self)
        store.subscribers.append(self)

    async def _reach(self) -> None:
        arrived = self.store.loop.create_future()  # cancelled with its caller (a renewal, at the end)
        self.store.later(self.link, self.store.delays.rtt / 2, resolve, arrived)
        await arrived

    async def _back(self) -> None:
        await asyncio.sleep(self.store.delays.rtt / 2 * (1 + self.store.rng.random()))

    async def confirm(
        self, model: str, lease: str, cap: int, account_cap: int, probe: ProbeClaim | None = None
    ) -> Verdict | None:
        await self._reach()
        verdict = self.store.take(self.slots, model, lease, cap, account_cap, probe)
        await self._back()
        return verdict

    def probe_answered(self, claim: ProbeClaim, lease: str) -> None:
        self.store.later(
            self.link, self.store.delays.rtt / 2, self.store.probe_answered, self.slots, claim, lease
        )

    def release(self, model: str, lease: str, to: str = "") -> None:
        store = self.store

        def arrive() -> None:
            held = store.leases.get(model, {})
            if held.pop(lease, None) is not None:
                store.seq += 1
                store.publish(self.slots, replace(self.slots.notice("-", model, to), seq=store.seq))
            counts = Verdict(True, len(held), store.total(), store.seq)
            store.loop.call_later(store.delays.rtt / 2, self.slots.given_back, model, counts)

        store.later(self.link, store.delays.rtt / 2, arrive)

    def announce(self) -> None:
        self.store.later(
            self.link,
            self.store.delays.rtt / 2,
            lambda: self.store.publish(self.slots, self.slots.notice("=")),
        )

    def tell_verdicts(self, model: str, seen: Sequence[Seen]) -> None:
        self.store.later(
            self.link,
            self.store.delays.rtt / 2,
            self.store.publish,
            self.slots,
            self.slots.notice("=", model, seen=seen),
        )

    def _tell_block(self, notice: BlockNotice) -> None:
        for member in self.store.subscribers:
            if member is not self:
                self.store.later(id(member.slots), self.store.delays.notice, member.heard_block, notice)

    def heard_block(self, notice: BlockNotice) -> None:
        if self.pool is not None and self.cooldowns is not None:
            heard_block(self.pool, self.cooldowns, notice)

    async def renew(self) -> None:
        while True:
            await asyncio.sleep(RENEW * (0.9 + 0.2 * self.store.rng.random()))
            await self._reach()
            tally = self.store.tally()
            await self._back()
            self.slots.apply(tally)


def join(store: Store, pool: ChaosPool, proxy_id: str, *, cooldowns: bool = False) -> StoreFleet:
    """`pool` on the fleet's slots over `store`, wired as the addon wires it (`cooldowns`: shared too)."""
    slots = pool_slots(proxy_id, pool, clock=store.loop.time)
    return StoreFleet(store, slots, pool if cooldowns else None)


@dataclass(frozen=True)
class SimRun:
    makespan: float
    lost_races: int
    parts: list[float]  # when the last agent of each proxy's part ended
    over: int


async def run_fleet(count: int, shared: bool, workload: Workload, seed: int, delays: Delays) -> SimRun:
    """The workload split over `count` pools (agent i on pool i mod count), sharing a `Store` when
    `shared`, else each on its own slots (one pool alone: the reference)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    # Fixed limits on the early-2026 catalog, as fleet.run.
    config = ModelRouting.model_validate(
        {"learning": {"enabled": False}, "models": models_block(EARLY_2026_CATALOG)}
    )
    store = Store(loop, delays, config, rng)
    pools, fleets = [], []
    for i in range(count):
        pool = ChaosPool(config, clock=loop.time, rng=random.Random(f"{seed}/{i}"))
        if shared:
            fleets.append(join(store, pool, f"p{i}"))
        pools.append(pool)
    for fleet in fleets:
        fleet.slots.apply(store.tally())
    ends: dict[int, float] = {}

    async def agent(index: int) -> None:
        pool = pools[index % count]
        for request in workload.agents[index]:
            selection = await pool.admit(Ticket(request.tier, session=f"agent-{index}"), timeout=3600)
            assert selection is not None
            await asyncio.sleep(HOP + request.service_seconds)
            pool.release(selection)
            await asyncio.sleep(HOP)
        ends[index] = loop.time()

    renewals = [asyncio.ensure_future(fleet.renew()) for fleet in fleets]
    start = loop.time()
    await asyncio.gather(*(agent(i) for i in range(len(workload.agents))))
    for task in renewals:
        task.cancel()
    await asyncio.gather(*renewals, return_exceptions=True)
    parts = [max(t for a, t in ends.items() if a % count == i) - start for i in range(count)]
    return SimRun(max(parts), sum(p.lost_races for p in pools), parts, store.over)


def simulate(count: int, shared: bool, workload: Workload, seed: int, delays: Delays) -> SimRun:
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(run_fleet(count, shared, workload, seed, delays))
    finally:
        loop.close()


def run(counts: Sequence[int], spec: WorkloadSpec, seeds: int, delays: Delays) -> dict[str, Any]:
    """Per fleet size, over `seeds` workloads (seeds 1, 2...): makespan / one pool alone's."""
    rows: dict[str, list[dict[str, Any]]] = {str(count): [] for count in counts}
    for seed in range(1, seeds + 1):
        workload = make_workload(replace(spec, seed=seed))
        bound = ideal_for(workload).bound.seconds
        alone = simulate(1, False, workload, seed, delays)
        for count in counts:
            fleet = simulate(count, True, workload, seed, delays)
            rows[str(count)].append(
                {
                    "vsOneProxy": round(fleet.makespan / alone.makespan, 4),
                    "vsLowerBound": round(fleet.makespan / bound, 4),
                    "aloneVsLowerBound": round(alone.makespan / bound, 4),
                    "lostRaces": fleet.lost_races,
                    "partSpreadSeconds": round(max(fleet.parts) - min(fleet.parts), 3),
                    "overCaps": fleet.over,
                }
            )
    summary = {
        count: {
            "vsOneProxyMean": round(statistics.mean(r["vsOneProxy"] for r in runs), 4),
            "vsOneProxyMax": max(r["vsOneProxy"] for r in runs),
            "lostRaces": sum(r["lostRaces"] for r in runs),
            "partSpreadMeanSeconds": round(statistics.mean(r["partSpreadSeconds"] for r in runs), 3),
            "overCaps": sum(r["overCaps"] for r in runs),
        }
        for count, runs in rows.items()
    }
    return {
        "agents": spec.agents,
        "requests": spec.requests,
        "seeds": seeds,
        "rttMs": delays.rtt * 1000,
        "noticeMs": delays.notice * 1000,
        "summary": summary,
        "runs": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.fleet.virtual", description=__doc__
    )
    parser.add_argument("--proxies", default="1,2,3", help="fleet sizes to simulate (comma-separated)")
    parser.add_argument("--agents", type=int, default=60)
    parser.add_argument("--requests", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=8, help="workloads (seeds 1..n), each run by every size")
    parser.add_argument("--rtt-ms", type=float, default=1.0, help="mean round trip to the store")
    parser.add_argument("--notice-ms", type=float, default=1.0, help="mean delay of a notice to each proxy")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        counts = [int(n) for n in args.proxies.split(",") if n.strip()]
    except ValueError:
        parser.error("--proxies: comma-separated numbers, like 1,2,3")
    spec = WorkloadSpec(agents=args.agents, requests=args.requests, latency_ms=250.0, output_tokens=8)
    results = run(counts, spec, args.seeds, Delays(args.rtt_ms / 1000, args.notice_ms / 1000))
    text = json.dumps(results, indent=2)
    print(json.dumps(results["summary"], indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
