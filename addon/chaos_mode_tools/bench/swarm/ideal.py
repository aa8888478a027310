"""The ideal: a lower bound on the makespan of a workload, from its work and the slots its tiers may use.

    W_t   = sum of the service times of the requests of tier t (service = what the upstream holds a
            slot for: latency + (tokens - 1) × token interval, see `workload.Request.service_seconds`)
    S(T)  = slots of the models eligible for at least one tier of T (capped by the account limit)
    LB    = max( max over non-empty tier sets T of  sum_{t in T} W_t / S(T),
                 max over agents a of  sum of a's service times )

Requests of the tiers in T can only run on the models eligible for T, so they cannot finish faster than
their work spread perfectly over those slots; an agent's requests are sequential, so its own work is a
bound too. With the catalog's nested quality floors (S_heavy = 8 ⊂ S_heavy∪medium = 23 ⊂ S_all = 28) the
tier terms reduce to max(W_heavy/8, (W_heavy + W_medium)/23, W_all/28).

When the slots change over time (`timed_lower_bound`), the term of T is the smallest t at which the slots
S_T integrated over [0, t] cover W_T; with constant slots that is W_T / S_T again.

In the field benchmark the slots are the true ones (`field.true_timeline`): a soft limit counts with its
clean level only (the band above it is served by chance, at the price of refusals), a limit z.ai queues
over counts as the limit, and the work of an agent whose prompt z.ai's filter refuses is left out.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from chaos_mode.config.schema import ModelRouting
from chaos_mode.zai.catalog import REQUEST_TIERS, RequestTier

FORMULA = (
    "LB = max( max over tier sets T: sum_{t in T} W_t / S(T) , max over agents: sum of the agent's service "
    "times ); W_t = sum of (latency + (tokens-1) x interval) over tier t's requests; S(T) = slots of the "
    "models eligible for T (heavy 8, heavy+medium 23, all 28 on the built-in catalog)"
)


@dataclass(frozen=True, slots=True)
class Capacity:
    """Slots from `start` seconds on, until the next Capacity of a timeline: per model, and the account's
    (None: no account limit of its own)."""

    start: float
    models: Mapping[str, int]
    account: int | None = None


@dataclass(frozen=True, slots=True)
class LowerBound:
    seconds: float
    binding: str  # the term that gives the bound: "heavy+medium", "agent 3", ...
    terms: dict[str, float]  # every term, by name
    slots: dict[str, int]  # S(T) of every tier set T with work


def slots_by_tier(config: ModelRouting) -> tuple[dict[RequestTier, list[str]], dict[str, int], int]:
    """(eligible models by tier, capacity by model, account limit) from a chaos-mode config."""
    eligible = {tier: config.eligible_models(tier) for tier in REQUEST_TIERS}
    capacity = {name: spec.max_concurrency for name, spec in config.models.items()}
    return eligible, capacity, config.total_capacity


def makespan_lower_bound[T: str](
    work_by_tier: Mapping[T, float],
    eligible: Mapping[T, Collection[str]],
    capacity: Mapping[str, int],
    agent_work: Iterable[float] = (),
    account_limit: int | None = None,
) -> LowerBound:
    """LB (see the module docstring). ValueError when some tier has work but no slot at all."""
    return timed_lower_bound(work_by_tier, eligible, [Capacity(0.0, capacity, account_limit)], agent_work)


def timed_lower_bound[T: str](
    work_by_tier: Mapping[T, float],
    eligible: Mapping[T, Collection[str]],
    timeline: Sequence[Capacity],
    agent_work: Iterable[float] = (),
) -> LowerBound:
    """LB on slots that change at the times of `timeline` (in order, the first at 0); `slots` are the
    first ones. ValueError when some tier set has work left once the slots are gone for good."""
    tiers = [tier for tier, work in work_by_tier.items() if work > 0]
    terms: dict[str, float] = {}
    slots: dict[str, int] = {}
    for size in range(1, len(tiers) + 1):
        for group in itertools.combinations(tiers, size):
            models = set().union(*(set(eligible.get(tier, ())) for tier in group))
            steps = [(step.start, _slots(step, models)) for step in timeline]
            name = "+".join(group)
            slots[name] = steps[0][1] if steps else 0
            terms[name] = cover_time(sum(work_by_tier[tier] for tier in group), steps, name)
    for agent, work in enumerate(agent_work):
        terms[f"agent {agent}"] = work
    if not terms:
        return LowerBound(0.0, "none", {}, {})
    binding = max(terms, key=lambda name: terms[name])
    return LowerBound(terms[binding], binding, terms, slots)


def _slots(step: Capacity, models: Collection[str]) -> int:
    count = sum(step.models.get(model, 0) for model in models)
    return count if step.account is None else min(count, step.account)


def cover_time(work: float, steps: Sequence[tuple[float, int]], name: str = "work") -> float:
    """The smallest t at which `steps` (start, slots), each lasting until the next, add up to `work`
    slot-seconds."""
    done = 0.0
    for index, (start, count) in enumerate(steps):
        end = steps[index + 1][0] if index + 1 < len(steps) else math.inf
        if count > 0 and done + count * (end - start) >= work:
            return start + (work - done) / count
        done += count * (end - start) if count > 0 else 0.0
    raise ValueError(f"tier set {name} has work but no slot")


def headline_terms(bound: LowerBound) -> dict[str, float]:
    """The tier terms and only the largest agent term (the JSON would otherwise list every agent)."""
    out = {name: value for name, value in bound.terms.items() if not name.startswith("agent ")}
    agents = {name: value for name, value in bound.terms.items() if name.startswith("agent ")}
    if agents:
        worst = max(agents, key=lambda name: agents[name])
        out["max agent"] = agents[worst]
    return out


def fair_queue_makespan[T: str](
    agents: Sequence[Sequence[tuple[T, float]]],
    eligible: Mapping[T, Collection[str]],
    capacity: Mapping[str, int],
    account_limit: int | None = None,
) -> float:
    """The makespan of an idealized fair queue: a reference that a real router can approach, unlike LB.

    Every agent sends its (tier, service seconds) requests one after another with no think time and no
    overhead. Waiting requests are served first come, first served, except that one which cannot be placed
    does not block later ones that can; each is placed on the eligible model with the largest free share
    of its slots (least-loaded, ties in catalog order). With more agents than slots it is above LB: the
    bound assumes an agent with more work could be served first, which no router can know.
    """
    return _simulate(agents, eligible, capacity, account_limit, order="arrival")


def least_served_makespan[T: str](
    agents: Sequence[Sequence[tuple[T, float]]],
    eligible: Mapping[T, Collection[str]],
    capacity: Mapping[str, int],
    account_limit: int | None = None,
) -> float:
    """As `fair_queue_makespan`, but waiting requests go by how many requests their agent was served so
    far, fewest first, then first come first served: the order of the proxy's queue (`shares`), which
    needs no knowledge of the future."""
    return _simulate(agents, eligible, capacity, account_limit, order="least-served")


def clairvoyant_makespan[T: str](
    agents: Sequence[Sequence[tuple[T, float]]],
    eligible: Mapping[T, Collection[str]],
    capacity: Mapping[str, int],
    account_limit: int | None = None,
) -> float:
    """As `fair_queue_makespan`, but the waiting request of the agent with the most work left goes first.

    A scheduler that knows the future (every agent's remaining service time), which a proxy cannot: how
    close LB is to reachable at all, and so how much of a router's gap to LB is the price of not knowing.
    """
    return _simulate(agents, eligible, capacity, account_limit, order="clairvoyant")


def _simulate[T: str](
    agents: Sequence[Sequence[tuple[T, float]]],
    eligible: Mapping[T, Collection[str]],
    capacity: Mapping[str, int],
    account_limit: int | None,
    *,
    order: Literal["arrival", "least-served", "clairvoyant"],
) -> float:
    free = {model: capacity.get(model, 0) for model in capacity}
    account_free = account_limit if account_limit is not None else sum(free.values())
    left = [sum(service for _, service in agent) for agent in agents]  # each agent's work not yet started
    served = [0] * len(agents)
    waiting: list[tuple[float, int, int]] = [(0.0, agent, 0) for agent in range(len(agents)) if agents[agent]]
    running: list[tuple[float, int, int, str]] = []  # (end, agent, index, model)
    now = end = 0.0
    while waiting or running:
        if order == "clairvoyant":
            waiting.sort(key=lambda w: (-left[w[1]], w))
        elif order == "least-served":
            waiting.sort(key=lambda w: (served[w[1]], w))
        else:
            waiting.sort()
        still: list[tuple[float, int, int]] = []
        for arrival, agent, index in waiting:
            tier, service = agents[agent][index]
            options = [m for m in eligible.get(tier, ()) if free.get(m, 0) > 0]
            if not options or account_free <= 0:
                still.append((arrival, agent, index))
                continue
            model = max(options, key=lambda m: free[m] / capacity[m])
            free[model] -= 1
            account_free -= 1
            left[agent] -= service
            served[agent] += 1
            heapq.heappush(running, (now + service, agent, index, model))
        waiting = still
        if not running:
            raise ValueError("a request has no eligible model with a slot")
        now, agent, index, model = heapq.heappop(running)
        end = max(end, now)
        free[model] += 1
        account_free += 1
        if index + 1 < len(agents[agent]):
            waiting.append((now, agent, index + 1))
    return end
