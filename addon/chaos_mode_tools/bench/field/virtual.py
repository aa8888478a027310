"""A virtual-time model of a field preset on the pool's pure core: no proxy, no network, no CPU noise.

The real `ChaosPool` (its queue, probes and learned limits) serves the preset's swarm in virtual time; the
simulator's own bookkeeping (`sim.SimState`: the true limits, held slots, soft bands, random 1302s and the
schedule of a limit change, with the simulator's draws) admits each attempt when it arrives, up to `transit`
seconds after the pool let it go (drawn at random: attempts overtake each other on the way, as they do through
a busy proxy), and is reported written then (`Ledger.sent`), as the forwarder reports it. An accepted stream
sends its head `head` seconds later (the clean answer the pool hears), a refused one its 1302 `reject` seconds
after it arrived, and an attempt with no head at its stall (`head_baseline`: several times its model's
quickest heads, at least 0.25 s) is reported as one, as the forwarder does. Hedging (`request.hedging`) is
modelled, not run: after `patience` seconds the request waits for a slot within the limits too, and the first
of the two wins (a probe left is given up; a regular attempt left keeps its slot until its 1302, which the
pool still hears); from then on a regular attempt is overdue and lends its place, unless another attempt of
its request rides (`RoutedRequest.overdue`). A z.ai that queues (the attempt waits among the simulator's
waiters until a slot frees), sends heads with the first token (the head comes the request's latency after z.ai
served it), or both, is read through the forwarder's own `HeadPatience`, fed every clean head: its patience
and stalls, no regular attempt left while z.ai queues (a probe given up at its stall), an attempt left before
that let go once held past its stall or answered unread; a refusal that holds its slot (`refused_holds`) gives
it back at its 1302, when its probe is given up, or when its attempt, left, is let go past its stall once the
check of lending found z.ai holding refused requests (`Forwarder._unless_held`). The other presets keep a
fixed patience (`FixedHeads`). Presets with refused models, the content filter, other random faults than 1302,
a queue's time-out or prompts of their own sizes are not modelled.
Against the benchmark (the same presets through mitmdump, 16 seeds here, 2-4 runs there, 2026-12-03): soft
0.98 of the bound here against 0.86-0.96 there, with 8.3 refusals per 50 against 8.1-11.7; noisy 0.89 against
0.86-0.87; halved 0.91 against 0.85-0.90; higher 0.90 against 0.88. Its figures rank changes to the pool; the
benchmark measures them. Each run also says how soon the learned limits followed each change of the true ones
(within a step, sampled every 0.1 s, as the benchmark reports it), and which limits z.ai refused more than
their budget (`bench.field.budget`: 2 per level moved down and per probe); `--watch` prints the learned
limits as they go.
`--proxies N`: a fleet of N proxies (agent i on proxy i mod N), each its own pool, learning and heads'
patience, sharing the account through the virtual store of `bench.fleet.virtual` (leases within each
proxy's caps, the right to probe a limit, notices with z.ai's verdicts, renewals) in front of the one z.ai;
the store's outages and leases' TTLs are not modelled. Run it with `--proxies 1` for one proxy alone. Each
proxy's refusal budget counts its own attempts' refusals against its own limits' steps. `--store-ms`: each
round trip to the store and each notice from it takes that long (1 ms; a busy proxy reads its notices later).

    python -m chaos_mode_tools.bench.field.virtual [--preset soft] [--seeds 12]
        [--learning probeIntervalSeconds=3] [--watch 1] [--requests 30] [--proxies 2] [--store-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import random
import statistics
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from chaos_mode.config.schema import parse_config
from chaos_mode.forwarding.forwarder import HELD_RECHECK_SECONDS
from chaos_mode.forwarding.head_baseline import STALL_FACTOR, STALL_FLOOR_SECONDS
from chaos_mode.forwarding.head_patience import FLOOR_SECONDS, HeadPatience
from chaos_mode.request.hedging import UNKNOWN_PATIENCE_RECHECK_SECONDS
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode.zai.errors import classify_error
from chaos_mode_tools.bench.field.budget import PER_STEP, RefusalBudget
from chaos_mode_tools.bench.field.figures import convergence
from chaos_mode_tools.bench.field.learning_args import HELP, parse_learning
from chaos_mode_tools.bench.field.presets import (
    PRESETS,
    FieldPreset,
    field_bound,
    planned_changes,
    true_timeline,
)
from chaos_mode_tools.bench.fleet.virtual import Delays, Store, StoreFleet, join
from chaos_mode_tools.bench.swarm.scenarios import SCENARIOS
from chaos_mode_tools.bench.swarm.workload import Request, make_workload
from chaos_mode_tools.bench.virtual_loop import VirtualLoop
from chaos_mode_tools.sim.stalls import Waiter, resolve
from chaos_mode_tools.sim.state import SimState

REFUSAL = json.dumps(
    {"type": "error", "error": {"type": "rate_limit_error", "code": "1302", "message": "busy"}}
)
FOREVER = 1e9
SAMPLE_SECONDS = 0.1  # how often the learned limits are looked at, as the field benchmark samples them
# The simulator's shapes modelled (the rest: refused models, the filter, other faults, a queue's timeout not).
MODELLED_SHAPES = frozenset(
    {
        "bands",
        "account_band",
        "band_shape",
        "over_limit",
        "queue_models",
        "head_with_first_token",
        "refused_holds",
        "refused_holds_closed",
    }
)
STUCK_FACTOR = 50.0  # a run not ended by this many times its bound is a model stuck (an error, not a figure)
STEADY = 800  # the requests a long run's steady state is read over (its last ones)
CONVERGED_SECONDS = 5.0  # issue 21's target: each learned limit within a step of the truth 5 s after a change


@dataclasses.dataclass
class Outcome:
    makespan: float
    bound: float = 0.0  # the lower bound from the true limits, as the field benchmark computes it
    requests: int = 0
    refused: int = 0  # attempts z.ai refused (1302), heard or given up: the benchmark's upstream refusals
    given_up: int = 0  # attempts left unanswered for a slot within the limits (probes given up)
    # each request's (when it came, its attempts refused): the steady state is the last `STEADY` of them
    per_request: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    # per change of the true limits, seconds until every model's learned limit was within a step of it
    # (None: not before the next change or the end), as the field benchmark reports it
    converged: list[float | None] = dataclasses.field(default_factory=list)
    lending_off: bool = False  # the pool's check turned lending off (`routing.lending`)
    lending_nats: float = 0.0  # how near it came: its CUSUM's highest value
    kept: bool = False  # then found z.ai keeping a closed request's slot: none let go (`Lending.kept_why`)
    moves: tuple[int, int] = (0, 0)  # changes detected: limits that fell, that rose (`explore.Detector`)
    # per proxy, the refusals of its attempts per step of its learning
    budgets: list[RefusalBudget] = dataclasses.field(default_factory=lambda: [RefusalBudget()])
    # several proxies: slots taken on a stale mirror and refused by the store, probes refused there (another
    # proxy held the right to probe that limit), and leases the store still held at the end (must be none)
    lost_races: int = 0
    probes_elsewhere: int = 0
    leases_left: int = 0

    @property
    def budget(self) -> RefusalBudget:
        """The first proxy's (the only one's, alone)."""
        return self.budgets[0]


class FixedHeads:
    """The heads of a z.ai that sends them at once and never queues, as the model has them: a patience of
    `FLOOR_SECONDS`, a stall at `STALL_FACTOR` times the head (at least its floor), nothing learned."""

    def __init__(self, head: float) -> None:
        self._stall = max(STALL_FACTOR * head, STALL_FLOOR_SECONDS)

    def head(
        self, seconds: float, size: int | None = None, *, model: str | None = None, level: int = 1
    ) -> None:
        pass

    def seconds(self) -> float | None:
        return FLOOR_SECONDS

    def stall_after(self, size: int | None = None, model: str | None = None) -> float:
        return self._stall

    def queues(self) -> bool:
        return False

    def leaves_none(self) -> bool:
        return False


async def swarm(
    preset: FieldPreset,
    seed: int,
    *,
    hedge: bool,
    head: float,
    reject: float,
    transit: float,
    learning: Mapping[str, Any] | None = None,
    watch: float = 0.0,
    proxies: int = 1,
    store_delay: float = Delays.rtt,
) -> Outcome:
    loop = asyncio.get_running_loop()
    unmodelled = set(preset.shapes) - MODELLED_SHAPES
    if preset.refuse or preset.filtered_agent is not None or set(preset.fault_rates) - {"1302"} or unmodelled:
        raise ValueError(f"preset {preset.name} is not modelled (refused models, filter, faults or shapes)")
    workload = make_workload(preset.spec(seed=seed))
    if workload.spec.prompt_tokens:
        raise ValueError(f"preset {preset.name} is not modelled (prompts of their own sizes)")
    proxy = dataclasses.replace(
        SCENARIOS["least-loaded"], learning=tuple((learning or {}).items()), catalog=preset.catalog
    )
    config = parse_config({"modelRouting": proxy.config()})
    on_the_way = random.Random(-seed)  # one for the fleet
    busy = classify_error(429, REFUSAL, now=0.0)
    assert busy is not None
    settings = preset.sim_settings(workload)
    zai = settings.new_state(loop.time)
    for scheduled in settings.schedule:
        loop.call_at(loop.time() + scheduled.at_seconds, zai.apply, scheduled.change, scheduled.at_seconds)
    timeline = true_timeline(planned_changes(settings), ())
    outcome = Outcome(0.0, field_bound(workload, timeline, preset.catalog).seconds)
    outcome.budgets = [RefusalBudget() for _ in range(proxies)]
    # several proxies share the account through the fleet's store (none: one proxy alone)
    delays = Delays(store_delay, store_delay)
    store = Store(loop, delays, config, random.Random(f"store/{seed}")) if proxies > 1 else None
    outcome.requests = sum(len(requests) for requests in workload.agents)
    # A z.ai that queues or sends heads with the first token is read as the forwarder reads it (its
    # `HeadPatience`, fed each clean head); else as before, a fixed patience.
    late = settings.head_with_first_token
    watched_heads = late or settings.over_limit == "queue" or bool(settings.queue_models)

    def head_after(request: Request) -> float:
        """From z.ai serving the request to its head: its first token's latency when heads come with it."""
        return request.latency_ms / 1000.0 if late else head

    def member(index: int) -> tuple[ChaosPool, Callable[[int, Request], Awaitable[None]]]:
        """Proxy `index`: its pool (its own learning; on the fleet's slots with `store`), its heads' patience
        and its attempts' bookkeeping, and how it serves one request of an agent."""
        pool = ChaosPool(
            config,
            clock=loop.time,
            wall_clock=loop.time,
            rng=random.Random(seed if index == 0 else f"{seed}/{index}"),
        )
        if store is not None:
            fleets.append(join(store, pool, f"p{index}", cooldowns=True))
        heads: HeadPatience | FixedHeads = (
            HeadPatience(clock=loop.time) if watched_heads else FixedHeads(head)
        )

        budget = outcome.budgets[index]
        waiters: dict[int, Waiter] = {}  # attempts z.ai holds, by slot id
        served_unread: dict[int, Request] = {}  # their requests
        held_refusals: dict[int, asyncio.TimerHandle] = {}  # refused attempts holding a slot until their 1302

        async def outwaited(written: float, model: str, probe_held: bool) -> None:
            """Once the attempt written at `written` waited its patience (its stall: a probe while z.ai
            queues), as known at each moment (`request.hedging`)."""
            while True:
                seconds = heads.stall_after(None, model) if probe_held else heads.seconds()
                waited = loop.time() - written
                if seconds is not None and waited >= seconds - 1e-9:  # in float time, a sleep may fall short
                    return
                await asyncio.sleep(UNKNOWN_PATIENCE_RECHECK_SECONDS if seconds is None else seconds - waited)

        async def slot_within_limits(
            selection: Slot, ticket: Ticket, since: float, written: float, attempts: list[Slot]
        ) -> Slot | None:
            await outwaited(written, selection.model, False)
            # it lends its place until its verdict, unless another attempt of its request rides
            pool.ledger.overdue(selection, lends=not any(attempt.rides for attempt in attempts))
            riding = {attempt.model for attempt in (*attempts, selection) if attempt.rides}
            spare = dataclasses.replace(ticket, attempted=ticket.attempted | riding, may_probe=False)
            return await pool.admit(spare, since=since, timeout=FOREVER)

        def dropped(selection: Slot) -> None:
            """Its attempt closed, z.ai drops it (zai.assumptions.DROPS_ON_CLOSE): out of its queue, or its
            refusal's slot back (kept until its 1302 all the same with `refused_holds_closed`)."""
            if (waiter := waiters.pop(selection.slot_id, None)) is not None:
                zai.leave(waiter)
                del served_unread[selection.slot_id]
            if (slot_back := held_refusals.pop(selection.slot_id, None)) is None:
                return
            if settings.refused_holds_closed:
                detached.append(
                    asyncio.ensure_future(asyncio.sleep(max(slot_back.when() - loop.time(), 0.0)))
                )
            else:
                slot_back.cancel()
                zai.release(selection.model)

        def give_up(selection: Slot) -> None:
            """A probe left (closed: it tested nothing)."""
            dropped(selection)
            pool.ledger.no_verdict(selection, probe_given_up=True)
            pool.release(selection)

        async def spare_slot(ticket: Ticket, since: float) -> Slot | None:
            return await pool.admit(
                dataclasses.replace(ticket, may_probe=False), since=since, timeout=FOREVER
            )

        async def hedged(
            selection: Slot,
            ticket: Ticket,
            since: float,
            written: float,
            answer: asyncio.Future[None],
            attempts: list[Slot],
        ) -> Slot | None:
            """`request.hedging` on an attempt whose `answer` (a 1302, or z.ai serving it) comes when it does:
            None once it came, else the slot that replaced the attempt. A probe left is given up; a regular
            attempt left keeps its slot until its verdict (`left`). While z.ai queues, no regular attempt is
            left, and a probe is given up at its stall (its request then waits for a slot within the
            limits)."""
            if not hedge or (heads.leaves_none() and selection.probe is None):
                await answer
                return None
            if heads.leaves_none():  # a probe
                pool.ledger.queued(selection)
                stall = asyncio.ensure_future(outwaited(written, selection.model, True))
                await asyncio.wait({answer, stall}, return_when=asyncio.FIRST_COMPLETED)
                if answer.done():
                    stall.cancel()
                    await asyncio.gather(stall, return_exceptions=True)
                    return None
                answer.cancel()
                give_up(selection)
                return await spare_slot(ticket, since)
            waiting = asyncio.ensure_future(slot_within_limits(selection, ticket, since, written, attempts))
            either: set[asyncio.Future[Any]] = {answer, waiting}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if waiting.done() and not answer.done():
                if selection.probe is None:
                    attempts.append(selection)
                    detached.append(asyncio.ensure_future(left(selection, written, answer)))
                else:
                    answer.cancel()
                    give_up(selection)
                return waiting.result()
            if waiting.done():
                if (late_slot := waiting.result()) is not None:
                    pool.release(late_slot)
            else:
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
            return None

        async def left(selection: Slot, written: float, answer: asyncio.Future[None]) -> None:
            """A regular attempt left for another slot: its 1302 comes when it would have, then its slot
            goes, or it is served unread. Once z.ai holds what it has not answered (it is seen to queue, or
            the check of lending found it holding refused requests) and the attempt is held past its stall,
            it is let go (`Forwarder._unless_held`): out of z.ai's queue, or its refusal's slot back."""
            waiter = waiters.get(selection.slot_id)
            while not answer.done():
                if (heads.leaves_none() or pool.ledger.lending.refusals_hold) and loop.time() - written >= (
                    heads.stall_after(None, selection.model)
                ):
                    dropped(selection)
                    answer.cancel()
                    pool.release(selection)  # its stall counted (`one`); its place checked if refusals hold
                    return
                await asyncio.wait({answer}, timeout=HELD_RECHECK_SECONDS)
            held_refusals.pop(selection.slot_id, None)  # its slot went back with its 1302
            if waiter is None:
                pool.error(selection.model, busy, None, selection)
                pool.release(selection)
                return
            del waiters[selection.slot_id]
            await asyncio.sleep(head_after(served_unread.pop(selection.slot_id)))
            pool.ledger.success(selection, at_once=False)  # answered unread, closed at its head
            await asyncio.sleep(settings.abort_detect_ms / 1000.0)
            zai.release(selection.model)
            pool.release(selection)

        async def one(agent: int, request: Request) -> None:
            since = loop.time()
            ticket = Ticket(request.tier, session=f"agent-{agent}")
            selection = await pool.admit(ticket, timeout=FOREVER)
            retry = dataclasses.replace(ticket, counts=False)
            first = held_at = loop.time()  # when its first attempt's slot, and the current one's, were held
            refusals = 0  # this request's attempts refused
            attempts: list[Slot] = []  # its attempts left, awaiting their verdicts (riding, while overdue)
            while selection is not None:
                # the forwarder's stall: no head this long after sending is evidence at once (a no-op once
                # the verdict came)
                loop.call_later(heads.stall_after(None, selection.model), pool.ledger.stall, selection)
                await asyncio.sleep(on_the_way.uniform(0.0, transit))
                pool.ledger.sent(selection)  # written as it reaches z.ai: the network adds no more
                written, slot_id = loop.time(), selection.slot_id
                admitted = loop.create_future()
                admission = zai.admit(selection.model, wake=functools.partial(resolve, admitted))
                learned = {m: pool.limits.limit(m) for m in zai.models}
                # no account limit learned: the models' together are the account's
                budget.sample({**learned, ACCOUNT: pool.limits.view().value or sum(learned.values())})
                if selection.probe is not None:
                    budget.probe(selection.model, account=selection.probe == "account")
                if admission.outcome == "refused":
                    budget.refusal(selection.model, admission.reason)
                    outcome.refused += 1
                    refusals += 1
                    if admission.holds:
                        held_refusals[slot_id] = loop.call_later(reject, zai.release, selection.model)
                    instead = await hedged(selection, retry, since, written, _after(reject), attempts)
                    if instead is None:  # else left: its slot goes at its 1302, or when it is let go (`left`)
                        held_refusals.pop(slot_id, None)
                        pool.error(selection.model, busy, None, selection)
                        pool.release(selection)
                        instead = await pool.admit(retry, since=since, timeout=FOREVER)
                    else:
                        outcome.given_up += 1
                    selection, held_at = instead, loop.time()
                    continue
                if admission.waiter is not None:
                    waiters[slot_id], served_unread[slot_id] = admission.waiter, request
                    instead = await hedged(selection, retry, since, written, admitted, attempts)
                    if instead is not None:
                        outcome.given_up += 1
                        selection, held_at = instead, loop.time()
                        continue
                    del waiters[slot_id], served_unread[slot_id]
                await asyncio.sleep(head_after(request))
                heads.head(loop.time() - written, model=selection.model, level=selection.in_flight)
                pool.ledger.success(selection, at_once=not heads.queues())
                if held_at > first:  # served only after losing an attempt, as `RoutedRequest.answered`
                    pool.shares.fell_behind(ticket.session, held_at - first)
                await asyncio.sleep(max(request.service_seconds - head_after(request), 0.0))
                zai.release(selection.model)
                pool.release(selection)
                outcome.per_request.append((since, refusals))
                return

        return pool, one

    detached: list[asyncio.Future[None]] = []
    fleets: list[StoreFleet] = []
    served = [member(index) for index in range(proxies)]
    for fleet in fleets:
        fleet.slots.apply(fleet.store.tally())

    async def agent(index: int, requests: tuple[Request, ...]) -> float:
        _, one = served[index % proxies]
        for request in requests:
            await one(index, request)
        return loop.time()

    samples: list[list[dict[str, Any]]] = [[] for _ in served]

    async def sampling() -> None:
        while True:
            now = loop.time()
            for (pool, _), sampled in zip(served, samples, strict=True):
                sampled.append(
                    {"t": now, "models": {m: {"learnedLimit": pool.limits.limit(m)} for m in zai.models}}
                )
            if watch > 0.0 and len(samples[0]) % max(round(watch / SAMPLE_SECONDS), 1) == 0:
                for index, (pool, _) in enumerate(served):
                    print(f"  {f'p{index} ' if proxies > 1 else ''}{watched(pool, zai, now)}")
            await asyncio.sleep(SAMPLE_SECONDS)

    sampler = asyncio.ensure_future(sampling())
    renewals = [asyncio.ensure_future(fleet.renew()) for fleet in fleets]
    agents = asyncio.gather(*(agent(i, requests) for i, requests in enumerate(workload.agents)))
    ends = await asyncio.wait_for(agents, timeout=STUCK_FACTOR * outcome.bound)  # a model stuck: an error
    await asyncio.gather(*detached)
    sampler.cancel()
    for task in renewals:
        task.cancel()
    await asyncio.gather(*renewals, return_exceptions=True)
    assert zai.in_flight == 0 and not zai.stalls.waiting, "a slot of z.ai's left taken"
    outcome.makespan = max(ends)
    pools = [pool for pool, _ in served]
    outcome.lending_off = any(pool.ledger.lending.off_why is not None for pool in pools)
    outcome.lending_nats = max(pool.ledger.lending.nats for pool in pools)
    outcome.kept = any(pool.ledger.lending.kept_why is not None for pool in pools)
    outcome.moves = (sum(pool.limits.moves[0] for pool in pools), sum(pool.limits.moves[1] for pool in pools))
    slots = [{"at": c.start, "models": dict(c.models)} for c in timeline]
    # a change followed once every proxy's limits followed it
    followed = zip(*([change["seconds"] for change in convergence(s, slots)] for s in samples), strict=True)
    outcome.converged = [None if None in each else max(s for s in each if s is not None) for each in followed]
    if store is not None:
        await asyncio.sleep(1.0)  # the last leases given back reach the store
        outcome.leases_left = store.total()
        outcome.lost_races = sum(pool.lost_races for pool in pools)
        outcome.probes_elsewhere = sum(fleet.slots.probes_elsewhere for fleet in fleets)
    return outcome


def _after(seconds: float) -> asyncio.Future[None]:
    return asyncio.ensure_future(asyncio.sleep(seconds))


def watched(pool: ChaosPool, zai: SimState, now: float) -> str:
    """One line of what the pool holds against z.ai's truth: `t=` seconds, then each model's learned/true
    limit (the pool's slots held in brackets, where any), and the account's (`-`: none learned)."""
    limits = pool.limits
    models = " ".join(
        f"{model.removeprefix('glm-')}:{limits.limit(model)}/{counter.limit}"
        + (f"[{pool.in_flight(model)}]" if pool.in_flight(model) else "")
        for model, counter in zai.models.items()
    )
    account = limits.view().value
    learned = "-" if account is None else str(account)
    return f"t={now:5.1f} {models} account:{learned}/{zai.account_limit}[{pool.in_flight()}]"


def run(
    preset: str,
    seed: int,
    *,
    hedge: bool = True,
    head: float = 0.01,
    reject: float = 3.0,
    transit: float = 0.05,
    learning: Mapping[str, Any] | None = None,
    watch: float = 0.0,
    requests: int | None = None,
    shapes: Mapping[str, Any] | None = None,
    proxies: int = 1,
    store_delay: float = Delays.rtt,
) -> Outcome:
    """One run; `learning`: keys of the config's learning block over the benchmark's (ConfigError if bad);
    `requests`: each agent's requests instead of the preset's (a long run shows the steady state); `shapes`:
    simulator settings over the preset's; `proxies`: a fleet of that many sharing the account, through a
    store `store_delay` seconds away (each round trip, each notice)."""
    loop = VirtualLoop()
    chosen = PRESETS[preset]
    if requests is not None:
        chosen = dataclasses.replace(chosen, requests=requests)
    if shapes:
        chosen = dataclasses.replace(chosen, shapes={**chosen.shapes, **shapes})
    try:
        timings = {"head": head, "reject": reject, "transit": transit, "store_delay": store_delay}
        return loop.run_until_complete(
            swarm(chosen, seed, hedge=hedge, learning=learning, watch=watch, proxies=proxies, **timings)
        )
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.bench.field.virtual", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--preset", default="higher", choices=sorted(PRESETS))
    parser.add_argument("--seeds", type=int, default=12, help="workload seeds 1..N (the benchmark uses 1)")
    parser.add_argument(
        "--requests", type=int, default=None, help="requests per agent instead of the preset's (e.g. 30)"
    )
    parser.add_argument("--no-hedge", dest="hedge", action="store_false", help="never leave an attempt")
    parser.add_argument("--head", type=float, default=0.01, help="seconds from z.ai's verdict to the head")
    parser.add_argument(
        "--transit", type=float, default=0.05, help="at most this many seconds from the pool to z.ai"
    )
    parser.add_argument("--reject", type=float, default=3.0, help="seconds from an attempt to its 1302")
    parser.add_argument("--learning", action="append", default=[], metavar="KEY=VALUE", help=HELP)
    parser.add_argument(
        "--proxies",
        type=int,
        default=1,
        help="a fleet of N proxies sharing the account (agent i on proxy i mod N)",
    )
    parser.add_argument(
        "--store-ms",
        type=float,
        default=Delays.rtt * 1000,
        help="a fleet's store this many ms away: each round trip to it, each notice from it",
    )
    parser.add_argument(
        "--refused-holds-closed",
        action="store_true",
        help="a refused request z.ai holds keeps its slot until its 1302 even once closed (-held presets)",
    )
    parser.add_argument(
        "--watch",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="every SECONDS of virtual time, print each learned limit against z.ai's true one",
    )
    args = parser.parse_args(argv)
    if args.proxies < 1:
        parser.error("--proxies: at least 1")
    if args.store_ms < 0:
        parser.error("--store-ms: not negative")
    try:
        learning = parse_learning(args.learning)
    except ValueError as exc:
        parser.error(str(exc))
    spans, ratios, per_50, steady = [], [], [], []
    lending_off, kept, nats, moves, over, charged, left = 0, 0, [], [0, 0], 0, 0, 0
    within: list[float | None] = []
    for seed in range(1, args.seeds + 1):
        timings = {"head": args.head, "reject": args.reject, "transit": args.transit}
        outcome = run(
            args.preset,
            seed,
            hedge=args.hedge,
            learning=learning,
            watch=args.watch,
            requests=args.requests,
            shapes={"refused_holds_closed": True} if args.refused_holds_closed else None,
            proxies=args.proxies,
            store_delay=args.store_ms / 1000,
            **timings,
        )
        spans.append(outcome.makespan)
        ratios.append(outcome.bound / outcome.makespan)
        per_50.append(50.0 * outcome.refused / outcome.requests)
        refusals = f"refused {outcome.refused} ({per_50[-1]:.1f} per 50), given up {outcome.given_up}"
        if outcome.requests > STEADY:
            last = sorted(outcome.per_request)[-STEADY:]
            steady.append(50.0 * sum(n for _, n in last) / STEADY)
            refusals += f" ({steady[-1]:.1f} per 50 in the last {STEADY})"
        if outcome.converged:
            within.extend(outcome.converged)
            refusals += ", within a step after " + ", ".join(_seconds(s) for s in outcome.converged)
        nats.append(outcome.lending_nats)
        moves = [moves[0] + outcome.moves[0], moves[1] + outcome.moves[1]]
        refusals += ", changes detected: {} down, {} up".format(*outcome.moves)
        budgets = outcome.budgets
        spent = [f"p{i} {s}" if len(budgets) > 1 else s for i, b in enumerate(budgets) for s in b.over()]
        if spent:
            refusals += ", over the refusal budget: " + ", ".join(spent)
        over, charged = over + len(spent), charged + sum(budget.charged() for budget in budgets)
        if outcome.lending_off:
            lending_off, kept = lending_off + 1, kept + outcome.kept
            refusals += ", lending turned off" + (", then letting go ended" if outcome.kept else "")
        elif nats[-1]:
            refusals += f", the check of lending at {nats[-1]:.1f} nats"
        if args.proxies > 1:
            left += outcome.leases_left
            refusals += f", {outcome.lost_races} races lost, {outcome.probes_elsewhere} probes held elsewhere"
        print(f"seed {seed}: makespan {outcome.makespan:.2f} s, {ratios[-1]:.0%} of the bound, {refusals}")
    mean = (
        f"mean makespan {statistics.fmean(spans):.2f} s, {statistics.fmean(ratios):.1%} of the bound, "
        f"{statistics.fmean(per_50):.1f} refused per 50"
    )
    if steady:
        mean += f" ({statistics.fmean(steady):.1f} in the last {STEADY} requests)"
    if within:
        late = sum(s is None or s > CONVERGED_SECONDS for s in within)
        mean += f", {late} of {len(within)} changes not followed within {CONVERGED_SECONDS:g} s"
    mean += f", changes detected: {moves[0]} down, {moves[1]} up"
    mean += f", {over} of {charged} limits refused over {PER_STEP} per step of learning"
    if lending_off:
        mean += f", lending turned off on {lending_off}" + (f", letting go ended on {kept}" if kept else "")
    elif max(nats, default=0.0):
        mean += f", the check of lending at most {max(nats):.1f} nats"
    if args.proxies > 1:
        mean += f", {left} leases left in the store"
    fleet = f" on {args.proxies} proxies" if args.proxies > 1 else ""
    print(f"{args.preset}{fleet}: {mean} over {len(spans)} seeds")


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


if __name__ == "__main__":
    main()
