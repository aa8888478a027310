"""ChaosPool: which model serves a request — eligibility, strategy, slots, cooldowns, queue, stickiness.

How a model is chosen for a request, the rules in the order they apply (`_select`, `_beyond_limits`):

1. **Nothing while the account is paused** (1308, 1310, 1313-1321: z.ai refuses everything until its reset).
2. **Paced** (`quota.pace`, only while the quota runs out before its reset; `quota.pacing`): nothing
   once the paced concurrency is in flight (the request waits in the fair queue, counted in
   `pacer.waits`), and among the models free within the limits only the lightest by `quotaWeight`; and,
   whether the quota runs out or not, no request whose weight is over what is left of the window as the
   readings and the proxy's own count bound it (the hard stop, `_attempt`: it waits, for the reset if
   need be, or hears at once when the reset is beyond the queue's timeout).
3. **Eligible**: the models the request's tier may use (its quality floor), less those it was refused by
   and those cooling down or out of rotation.
4. **Within the limits**: a model with fewer in flight than its limit (learned, or the catalog's), the
   account below its own; a probe out rides above the limit it tests and takes none of its slots, and an
   attempt overdue (no head within its patience: most likely being refused) rides above its model's and
   the account's. In a fleet whose Redis is away, each model's share of its limit (the proxy serves
   alone).
5. **Warm** (`stickyConversations`, `routing.cache_rule`): a conversation goes to a model where its prompt
   is cached while one qualifies, waits for one while that costs less than reading its prompt cold, else
   moves (counted, with the credits the move costs).
6. **Cost guard** (`maxCostPerRequest`): only the models under it, else the cheapest eligible; the floor
   always wins.
7. **Strategy**: least-loaded, round-robin or weighted-random among what is left.
8. **Beyond the limits**, for a request that would otherwise wait: a probe one above a limit when one is
   due (the account's when the account is full, else the cheapest due model), within the cost guard; else,
   when nothing at all is in flight, a trial on the cooling model whose cooldown ends first
   (`trialWhenIdle`: the pool never idles behind cooldowns); else it waits in the fair queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from chaos_mode.config.schema import ModelRouting
from chaos_mode.learning.limits import LearnedLimits, LimitView, Probe
from chaos_mode.quota.pacer import Pacer
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.routing.aliases import NOT_LISTED, Aliases, fold, offered
from chaos_mode.routing.arrivals import Arrivals
from chaos_mode.routing.cache_rule import WAIT, CacheRule, reread_credits
from chaos_mode.routing.cooldowns import Cooldowns, CooldownState
from chaos_mode.routing.pool_status import (
    AccountPause,
    AccountStatus,
    LearningStatus,
    ModelLimit,
    ModelStatus,
    OutCapacity,
    PoolStatus,
    QueueStatus,
    StickyStatus,
    pause_span,
)
from chaos_mode.routing.rotation import Rotation
from chaos_mode.routing.served_lately import ServedLately
from chaos_mode.routing.slots import MemorySlots, ProbeClaim, Seen, SlotStore
from chaos_mode.routing.sticky import StickyMap
from chaos_mode.routing.strategies import ModelEntry, Strategy, make_strategy
from chaos_mode.routing.wait_queue import WaitQueue
from chaos_mode.zai.catalog import ACCOUNT, REQUEST_TIERS, RequestTier
from chaos_mode.zai.errors import FAIR_USE_CODE, FAIR_USE_SECONDS, Action, UpstreamError
from chaos_mode.zai.quota import SPENT_CODE

NO_ATTEMPTS: frozenset[str] = frozenset()
NO_ACCOUNT_CAP = sys.maxsize  # no account limit known: only the models' own limits count


@dataclass(frozen=True, slots=True)
class Slot:
    """The model chosen for a request, and why; once a slot is taken, what was in flight with it (this
    request included) and whether it went above a learned limit (a probe)."""

    model: str
    reason: str
    in_flight: int = field(default=0, compare=False)
    total: int = field(default=0, compare=False)
    probe: Probe | None = field(default=None, compare=False)
    slot_id: int = field(default=0, compare=False)  # the slot's own number while z.ai's verdict is out


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the cost guard knows of a request: estimated input tokens and the output budget."""

    input_tokens: int
    max_output_tokens: int

    @classmethod
    def estimate(cls, body_size: int, max_tokens: object) -> RequestInfo:
        """About four bytes of JSON per input token; `max_tokens` bounds the output."""
        budget = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 4096
        return cls(input_tokens=max(body_size, 0) // 4, max_output_tokens=budget)

    def cost(self, entry: ModelEntry) -> float:
        """Estimated $ for this request on `entry`."""
        return (self.input_tokens * entry.input_price + self.max_output_tokens * entry.output_price) / 1e6


@dataclass(frozen=True, slots=True)
class Ticket:
    """One request's claim on the pool: what it may use."""

    tier: RequestTier
    attempted: frozenset[str] = NO_ATTEMPTS
    request: RequestInfo | None = None
    sticky_key: str | None = None
    session: str | None = None  # the conversation: its place in the queue (`shares`), never the model
    counts: bool = True  # admitting it counts toward its conversation's share (a failover's does not)
    may_probe: bool = True  # False: only a slot within the limits (one to replace an unanswered probe)
    images: bool = False  # it carries an image: only models that read them, where the catalog has any


# (model, reason, probe): what `_select` found, before a slot is taken
Choice = tuple[str, str, Probe | None]


def _entries(config: ModelRouting, limits: LearnedLimits) -> dict[str, ModelEntry]:
    learned = limits.enabled
    return {
        name: ModelEntry(
            name=name,
            index=index,
            capacity=limits.limit(name) if learned else spec.max_concurrency,
            base_cost=spec.input_price + spec.output_price,
            input_price=spec.input_price,
            output_price=spec.output_price,
        )
        for index, (name, spec) in enumerate(config.models.items())
    }


class ChaosPool:
    """The whole GLM catalog as one pool of concurrency slots.

    State lives behind two small interfaces, `SlotStore` (in-flight counts) and `CooldownState`,
    so a backend shared by several proxies can replace the in-memory ones without touching the policy.

    Every request is a `Ticket` (its tier, the models it tried, its size, its conversation). A slot is
    taken by `try_acquire(ticket)` (select and take in one step, no await in between), `admit_now(ticket)`
    (the same, only when nobody waits), `await admit(ticket)` (which also queues fairly when nothing
    eligible is free), or `acquire(model)` (one model by name, caps alone). Each is a `Slot`, given back
    with `release(slot)` exactly once: the one way back (a second release of a slot changes nothing and is
    counted in `spurious_releases`). Between the two, z.ai's verdict on the request the slot was sent with
    is reported: `report_success`, `report_error`, or `report_unanswered` when none will come.
    """

    def __init__(
        self,
        config: ModelRouting,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        slots: SlotStore | None = None,
        cooldowns: CooldownState | None = None,
    ) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._rng = rng or random.Random()
        self._slots: SlotStore = slots or MemorySlots()
        self._cooldowns: CooldownState = cooldowns or Cooldowns(config.cooldown, clock)
        self._limits = LearnedLimits(config, clock=clock, wall_clock=wall_clock)
        self._sticky = StickyMap(config.sticky.ttl_seconds, config.sticky.max_entries, clock)
        self._cache_rule = CacheRule()
        self._shares = ServedLately(clock)
        self._queue: WaitQueue[Ticket, Slot] = WaitQueue(
            attempt=self._attempt,
            release=self.release,
            group=lambda t: (t.tier, t.attempted, t.may_probe, t.images, t.sticky_key),  # each its warm
            clock=clock,
        )
        self._timer: asyncio.TimerHandle | None = None
        self._freed: list[asyncio.Future[None]] = []  # `freed` callers, woken by the next `release`
        self._wake_timer: asyncio.TimerHandle | None = None
        self.dispatched: dict[str, int] = {}
        self.admitted = 0  # requests that got a slot through admit / admit_now
        self.rejected = 0  # requests admit answered None
        self.total_wait = 0.0  # seconds waited, over admitted requests
        self.spurious_releases = 0
        # Probes out and unanswered: probe id -> the model probed (ACCOUNT for the account). A probe rides
        # above the limit it tests: until z.ai answers it (in seconds, for a 1302), it takes none of the
        # slots within the limit.
        self._probes: dict[int, str] = {}
        # Slots riding above a limit, per limit: probes on the limit they test, overdue attempts on their
        # model's and on the account's.
        self._riding_on: dict[str, int] = {}
        # Attempts overdue (`report_overdue`): slot id -> model. z.ai holds no slot for a request it is
        # refusing (zai.assumptions.REFUSED_HOLDS_NO_SLOT), so until its verdict such an attempt rides above
        # its model's and the account's limits.
        self._overdue: dict[int, str] = {}
        # Probes z.ai queues (`report_queued`; zai.assumptions.MAY_QUEUE), still riding. z.ai serves such a
        # probe in the first slot of its limit that frees: that slot becomes the probe's (`seated`: out of
        # `_probes`, it counts within the limit from then on), not the next request's, which z.ai would hold
        # in turn behind it.
        self._queued_probes: dict[int, Slot] = {}
        self._seated: set[int] = set()
        # Slots whose request z.ai has not answered yet: slot id -> model. Requests overtake each other on
        # the way to z.ai, and a 1302 takes seconds to come back, so what the pool counts in flight is more
        # than z.ai serves until each request has its verdict: a clean answer is evidence of no more than
        # the slots answered cleanly and still running.
        self._unanswered: dict[int, str] = {}
        self._unanswered_on: dict[str, int] = {}
        self._held: dict[int, str] = {}  # every slot taken and not given back: slot id -> model
        self._held_on: dict[str, int] = {}  # those per model (a shared store counts the fleet's)
        self._stalled: set[int] = set()  # unanswered slots whose stall was reported (counted once)
        self._refusing: set[str] = set()  # models whose latest verdict (not a probe's) was no clean answer
        self._taken_at: dict[int, float] = {}  # when each held slot was taken: what refusals and answers took
        self._served: set[int] = set()  # held slots answered cleanly
        self._ended: dict[int, str] = {}  # held slots whose answer z.ai sent to its end: slot id -> model
        self._ended_on: dict[str, int] = {}
        self._arrivals = Arrivals()  # what z.ai served as each held slot's request came: its verdict's level
        self._next_slot_id = 1
        self.lost_races = 0  # slots taken on the local mirror that another proxy had taken first
        # The 5-hour quota: every clean answer counts its model's weight, a 1308 says the window is spent.
        self.quota = QuotaTracker(config.quota_weight, wall_clock)
        self.pacer = Pacer(self.quota, clock, wall_clock)  # `quota.pace`
        self.quota.changed = self._quota_changed  # a reading may lift pacing's hard stop
        self._rotation = Rotation(wall_clock)  # the models logged out of rotation
        self.aliases = Aliases(wall_clock)  # names z.ai serves as another model (`routing.aliases`)
        self._listed: list[str] | None = None  # what z.ai's models endpoint listed last (None: not read)
        self.reconfigure(config)

    # -- configuration ----------------------------------------------------------------------------

    @property
    def config(self) -> ModelRouting:
        return self._config

    @property
    def cooldowns(self) -> CooldownState:
        return self._cooldowns

    @property
    def limits(self) -> LearnedLimits:
        return self._limits

    @property
    def learns(self) -> bool:
        """Whether limits are learned (a 1302 is then evidence, not a cooldown)."""
        return self._limits.enabled

    @property
    def slots(self) -> SlotStore:
        return self._slots

    def use_slots(self, slots: SlotStore) -> None:
        """Count slots in `slots` from now on (a store shared with other proxies). Only at start-up, while
        nothing is held: a held slot must be released where it was taken."""
        self._slots = slots
        self.pacer.alone = not slots.confirms  # pacing's budget counts this proxy's requests only

    def use_cooldowns(self, cooldowns: CooldownState) -> None:
        """Keep cooldowns in `cooldowns` from now on (one shared with other proxies), at start-up."""
        self._cooldowns = cooldowns

    def blocks_changed(self) -> None:
        """Another proxy blocked or restored a model: a restored one may serve the waiters."""
        if len(self._queue):
            self._queue.dispatch()
            self._arm_timer()

    def adopt_limits(self, rows: Mapping[str, Any]) -> int:
        """Take the limits other proxies learned, where newer than ours (see `LearnedLimits.merge`)."""
        taken = self._limits.merge(rows)
        self._limits_changed()
        return taken

    def adopt_aliases(self, rows: Mapping[str, Any]) -> int:
        """Take the aliases other proxies (or an earlier run) learned, where newer than ours."""
        taken = self.aliases.merge(rows)
        if taken:
            self.reconfigure(self._given)
        return taken

    @property
    def learned_version(self) -> tuple[int, int]:
        """Grows whenever what was learned (limits, aliases) changes: when to write it again."""
        return self._limits.version, self.aliases.version

    def learned_rows(self, since: float = -math.inf) -> dict[str, dict[str, Any]]:
        """What was learned after `since` (wall clock): the limits' rows and the aliases' (a fleet's)."""
        return {**self._limits.rows(since), **self.aliases.rows(since)}

    def dump_learned(self) -> dict[str, Any]:
        """What was learned, as the state file keeps it (`restore_learned` takes it back)."""
        return {**self._limits.dump(), "aliases": self.aliases.rows()}

    def restore_learned(self, data: Any) -> int:
        """Take back what `dump_learned` wrote; how many limits and aliases were restored. `ValueError`
        for data that is not ours (see `LearnedLimits.restore`)."""
        rows = data.get("aliases") if isinstance(data, dict) else None
        taken = self.adopt_aliases(rows) if isinstance(rows, Mapping) else 0
        restored = self._limits.restore(data)
        if restored:
            self.reconfigure(self._given)  # re-derive what selection reads from the restored limits
        return taken + restored

    def wake(self, delay: float = 0.0) -> None:
        """Capacity may have been freed elsewhere (another proxy of the fleet): serve the waiters, now or
        after `delay` seconds (the slot was owed to another proxy first)."""
        if delay > 0:
            self._wake_later(delay)
        elif len(self._queue):
            self._queue.dispatch()

    def reconfigure(self, config: ModelRouting) -> None:
        """Apply a new config; in-flight counts, cooldowns and sticky entries are kept. The pool serves its
        catalog as z.ai does (`routing.aliases.fold`): `config` names the catalog as given."""
        self._given = config
        self.aliases.configure(config.aliases)
        self._offered = {} if self._listed is None else offered(self._listed, config, self.aliases)
        if self._offered:
            config = config.model_copy(update={"models": {**config.models, **self._offered}})
        config, self._folded = fold(config, self.aliases)
        self._config = config
        self._strategy: Strategy = make_strategy(config.chaos_mode.strategy, self._rng)
        self._limits.reconfigure(config)
        self._derive()
        self._max_cost = config.chaos_mode.max_cost_per_request
        self._sticky_on = config.chaos_mode.sticky_conversations
        self._cooldowns.reconfigure(config.cooldown)
        self._sticky.reconfigure(config.sticky.ttl_seconds, config.sticky.max_entries)
        quota = config.quota
        weights = {name: spec.quota_weight for name, spec in config.models.items()}
        self.quota.reconfigure(
            config.quota_weight,
            poll_seconds=quota.poll_seconds,
            window_seconds=quota.window_seconds,
            whole=all(float(w).is_integer() for w in weights.values()),
            unit=quota.unit,
        )
        self.pacer.reconfigure(quota.pace, weights)
        self._queue.dispatch()  # capacity may have grown

    def _derive(self) -> None:
        """What selection reads of the limits, rebuilt whenever a learned limit changes."""
        config, limits = self._config, self._limits
        self._entries = _entries(config, limits)
        self._eligible: dict[RequestTier, list[ModelEntry]] = {
            tier: [self._entries[name] for name in config.eligible_models(tier)] for tier in REQUEST_TIERS
        }
        vision = {name for name, spec in config.models.items() if spec.vision}
        # A request carrying an image: the models of its floor that read them, where its floor has any.
        self._seeing: dict[RequestTier, list[ModelEntry]] = {
            tier: [e for e in entries if e.name in vision] or entries
            for tier, entries in self._eligible.items()
        }
        if limits.enabled:
            account = limits.account()
            self._account_cap = NO_ACCOUNT_CAP if account is None else account
        else:
            self._account_cap = config.total_capacity
        self._limits_version = limits.version

    def _limits_changed(self) -> None:
        """Follow the learned limits; waiters may use what a raised limit gives."""
        if self._limits_version != self._limits.version:
            self._derive()
            if len(self._queue):
                self._queue.dispatch()

    # -- selection --------------------------------------------------------------------------------

    def _select(self, ticket: Ticket) -> tuple[Choice | None, bool]:
        """(choice, moved): moved when a sticky conversation had to leave its model."""
        self._follow_limits()
        slots = self._slots
        if self._cooldowns.account_pause() is not None:
            return None, False
        plan = self.pacer.plan(self._lighter_left)
        if plan.max_concurrency is not None and slots.total() >= plan.max_concurrency:
            return None, False  # paced: it waits in the fair queue
        blocked = self._cooldowns.blocked()
        if self._rotation.out:
            self._rotation.check(self._cooldowns)
        attempted = ticket.attempted
        held = self._counts().get
        eligible = (self._seeing if ticket.images else self._eligible)[ticket.tier]
        if attempted or blocked:
            eligible = [e for e in eligible if e.name not in attempted and e.name not in blocked]
        above = self._above()
        if slots.total() >= self._account_cap + above(ACCOUNT, 0):
            return self._beyond_limits(ticket, eligible, account_full=True), False
        if self._riding_on or slots.confirms:
            candidates = [e for e in eligible if held(e.name, 0) < e.capacity + above(e.name, 0)]
        else:
            candidates = [e for e in eligible if held(e.name, 0) < e.capacity]
        if not candidates:
            return self._beyond_limits(ticket, eligible, account_full=False), False
        if slots.confirms:  # a fleet's: while its store is gone, this proxy uses its share of each limit
            account_cap = self._account_cap + above(ACCOUNT, 0)
            fits = slots.fits
            candidates = [e for e in candidates if fits(e.name, e.capacity + above(e.name, 0), account_cap)]
            if not candidates:
                return None, False
        if plan.prefer_lower_weight:  # paced: the lightest models that are free, within the floor
            candidates = [candidates[i] for i in self.pacer.lightest([e.name for e in candidates])]
        left = self.pacer.left()
        if left is not None:  # pacing's hard stop: only what fits in what is left
            candidates = [e for e in candidates if self.pacer.weight(e.name) <= left]
            if not candidates:
                return None, False
        in_flight = [held(e.name, 0) for e in candidates]

        moved = False
        stuck: str | None = None
        if self._sticky_on and ticket.sticky_key is not None:
            warm = self._sticky.warm(ticket.sticky_key)
            if warm:
                size = 0 if ticket.request is None else ticket.request.input_tokens
                step = self._cache_rule.step(warm, candidates, eligible, held, size)
                if step == WAIT:
                    return None, False  # it waits in the fair queue for a warm model
                if step is not None:
                    return (step, "sticky", None), False
                moved, stuck = True, warm[0]

        request = ticket.request
        if request is None:
            costs = [entry.base_cost for entry in candidates]
        else:  # RequestInfo.cost, inlined: this runs for every candidate of every request
            tokens_in, tokens_out = request.input_tokens, request.max_output_tokens
            costs = [(tokens_in * e.input_price + tokens_out * e.output_price) / 1e6 for e in candidates]
        reason = self._strategy.name
        if self._max_cost is not None and request is not None:
            keep = [i for i, cost in enumerate(costs) if cost <= self._max_cost]
            if not keep:
                # Nothing fits: the cheapest eligible, the strategy choosing among equally cheap ones.
                cheapest = min(costs)
                keep = [i for i, cost in enumerate(costs) if cost == cheapest]
                reason = f"cost guard: none under ${self._max_cost:g}, cheapest eligible"
            elif len(keep) < len(candidates):
                reason += " (cost guard)"
            if len(keep) < len(candidates):
                candidates = [candidates[i] for i in keep]
                in_flight = [in_flight[i] for i in keep]
                costs = [costs[i] for i in keep]
        chosen = candidates[self._strategy.pick(candidates, in_flight, costs)]
        if moved:
            reason += f" (sticky moved from {stuck})"
        return (chosen.name, reason, None), moved

    def _counts(self) -> Mapping[str, int]:
        """Slots held per model, counted by the model that serves them: those taken under a name since found
        to be served as another count on that one (`routing.aliases`)."""
        counts, models = self._slots.counts(), self._config.models
        if counts.keys() <= models.keys():
            return counts
        served = self.aliases.served
        moved = [name for name in counts if name not in models and served(name) != name]
        if not moved:
            return counts
        merged = dict(counts)
        for name in moved:
            target = served(name)
            merged[target] = merged.get(target, 0) + merged.pop(name)
        return merged

    def _above(self) -> Callable[[str, int], int]:
        """Slots riding above a limit, called as `above(limit, 0)` (a model's name, or ACCOUNT): probes and
        overdue attempts here, and in a fleet the other proxies' overdue attempts (their places are the
        fleet's to use). Alone, the count's own `get`: this runs for every request."""
        riding = self._riding_on
        if not self._slots.confirms:
            return riding.get
        elsewhere = self._slots.riding_elsewhere

        def above(key: str, default: int) -> int:
            return riding.get(key, default) + elsewhere(None if key == ACCOUNT else key)

        return above

    def _lighter_left(self, tiers: Mapping[int, str]) -> bool:
        """Whether a request in flight is served by a model heavier than the lightest its floor admits
        (`tiers`: the request tier of each held slot)."""
        weight = self.pacer.weight
        for slot_id, model in self._held.items():
            tier = tiers.get(slot_id)
            eligible = self._eligible.get(tier) if tier in REQUEST_TIERS else None
            if eligible and weight(model) > min(weight(e.name) for e in eligible):
                return True
        return False

    def quota_status(self) -> dict[str, Any]:
        """The quota as `/api/status` shows it, with pacing: whether it is on, the plan in force, the waits
        it caused (counted apart from the queue's other waits)."""
        return {**self.quota.status(), "pacing": self.pacer.status(self._lighter_left)}

    def _beyond_limits(
        self, ticket: Ticket, eligible: list[ModelEntry], *, account_full: bool
    ) -> Choice | None:
        """Nothing eligible is free within the limits, so the request would wait. A probe one above a
        learned limit when one is due; else, when nothing at all is in flight, a trial on the cooling
        model that ends first; else None."""
        limits, held = self._limits, self._counts().get
        if limits.enabled and ticket.may_probe:
            affordable = self._affordable(ticket, eligible)
            if account_full:
                above = self._above()
                room = [e for e in affordable if held(e.name, 0) < e.capacity + above(e.name, 0)]
                if room and limits.can_probe_account():
                    chosen = room[
                        self._strategy.pick(room, [held(e.name, 0) for e in room], self._costs(ticket, room))
                    ]
                    return chosen.name, f"probing the account limit ({self._account_cap}+1)", "account"
            else:
                due = [e for e in affordable if limits.can_probe(e.name)]
                if due:
                    costs = self._costs(ticket, due)
                    chosen = min(zip(costs, (e.index for e in due), due, strict=True))[2]
                    return chosen.name, f"probing {chosen.name}'s limit ({chosen.capacity}+1)", "model"
        if not self._config.cooldown.trial_when_idle or self._slots.total():
            return None
        cooling = []
        for entry in (self._seeing if ticket.images else self._eligible)[ticket.tier]:
            block = self._cooldowns.block(entry.name)
            if entry.name not in ticket.attempted and entry.capacity and block and block.kind == "cooldown":
                cooling.append((self._cooldowns.remaining(entry.name), entry.index, entry.name))
        if not cooling:
            return None
        return min(cooling)[2], "trial: nothing in flight, cooldown cut short", None

    def _costs(self, ticket: Ticket, entries: list[ModelEntry]) -> list[float]:
        request = ticket.request
        if request is None:
            return [entry.base_cost for entry in entries]
        return [request.cost(entry) for entry in entries]

    def _affordable(self, ticket: Ticket, entries: list[ModelEntry]) -> list[ModelEntry]:
        """The entries the cost guard lets a probe use (a probe never goes over the guard)."""
        if self._max_cost is None or ticket.request is None:
            return entries
        return [
            e for e, cost in zip(entries, self._costs(ticket, entries), strict=True) if cost <= self._max_cost
        ]

    # -- slots ------------------------------------------------------------------------------------

    def acquire(self, model: str) -> Slot | None:
        """A slot of `model` by name, whatever its tier or cooldown: only the caps count; None if it is full
        or unknown. No verdict of z.ai is awaited for it."""
        return self._take(model, "acquired by name", None, awaits_verdict=False)

    def _take(self, model: str, reason: str, probe: Probe | None, *, awaits_verdict: bool) -> Slot | None:
        """Take a slot of `model` within its caps (a probe one above its model's or the account's limit)."""
        entry = self._entries.get(model)
        if entry is None:
            return None
        above = self._above()
        cap, account_cap = entry.capacity + above(model, 0), self._account_cap + above(ACCOUNT, 0)
        if probe == "model":
            cap += 1
        elif probe == "account":
            account_cap += 1
        slots = self._slots
        # slots still held under a name found to be served as this model count here
        cap -= self._counts().get(model, 0) - slots.in_flight(model)
        if not slots.try_acquire(model, cap, account_cap):
            return None
        self.dispatched[model] = self.dispatched.get(model, 0) + 1
        slot_id, self._next_slot_id = self._next_slot_id, self._next_slot_id + 1
        ended = self._ended
        self._arrive(slot_id, model, [other for other in self._held if other not in ended])
        self._held[slot_id] = model
        _count(self._held_on, model, 1)
        self.quota.sent(slot_id, model)
        self._taken_at[slot_id] = self._clock()
        if awaits_verdict:
            self._unanswered[slot_id] = model
            _count(self._unanswered_on, model, 1)
        if probe is not None:
            self._limits.probe_sent(probe, model)
            key = model if probe == "model" else ACCOUNT
            self._probes[slot_id] = key
            _count(self._riding_on, key, 1)
        return Slot(model, reason, slots.in_flight(model), slots.total(), probe, slot_id)

    def _arrive(self, slot_id: int, model: str, beside: list[int]) -> None:
        """What `slot_id`'s request comes to z.ai beside (`routing.arrivals`): the slots `beside`, itself
        not among them, and what other proxies say z.ai serves."""
        shared, slots = self._slots.confirms, self._slots
        self._arrivals.taken(
            slot_id,
            model,
            beside,
            serving={other: self._held[other] for other in beside if other in self._served},
            model_elsewhere=slots.serving_elsewhere(model) if shared else 0,
            account_elsewhere=slots.serving_elsewhere(None) if shared else 0,
        )

    def report_sent(self, slot: Slot) -> None:
        """`slot`'s request was written to z.ai now. z.ai judges it beside the requests that reached it
        first, which need not be those taken before it (`routing.arrivals`): its arrival is taken again
        from the slots whose writing was reported. A pool never told of one keeps the takings."""
        slot_id = slot.slot_id
        if slot_id not in self._held:
            return
        arrivals, ended = self._arrivals, self._ended
        beside = [other for other in arrivals.written_held() if other not in ended and other != slot_id]
        self._arrive(slot_id, slot.model, beside)
        arrivals.written(slot_id, self._clock())

    def _settle(self, slot: Slot) -> None:
        """`slot`'s request has z.ai's verdict, or will never have one: it awaits nothing any more, and a
        probe's slot counts within the limit again (a clean answer raised the limit to hold it)."""
        slot_id = slot.slot_id
        model = self._unanswered.pop(slot_id, None)
        if model is not None:
            _count(self._unanswered_on, model, -1)
        key = self._probes.pop(slot_id, None)
        if key is not None:
            _count(self._riding_on, key, -1)
        overdue = self._overdue.pop(slot_id, None)
        if overdue is not None:
            _count(self._riding_on, overdue, -1)
            _count(self._riding_on, ACCOUNT, -1)
            self._slots.overdue_changed()
        self._queued_probes.pop(slot_id, None)
        self._seated.discard(slot_id)
        if slot_id in self._stalled:
            self._stalled.discard(slot_id)

    def report_unanswered(self, slot: Slot, *, probe_given_up: bool = False) -> None:
        """No verdict will come for `slot`'s request (it ended first, or its attempt was left). A probe given
        up unanswered (its request took a slot within the limits instead) rides above its limit no more,
        and the next probe there waits as after a 1302. Idempotent."""
        judged = slot.slot_id in self._stalled  # its stall already paced the next probe (a seat is no probe)
        if probe_given_up and slot.probe is not None and slot.slot_id in self._probes and not judged:
            self._limits.probe_given_up(slot.probe, slot.model)
            self._probe_judged(slot)
        self._settle(slot)

    def report_overdue(self, slot: Slot) -> None:
        """`slot`'s request has had no head within its patience (see `request.hedging`): z.ai is most
        likely refusing it, and holds no slot for a request it refuses
        (zai.assumptions.REFUSED_HOLDS_NO_SLOT), so until its verdict it rides above its model's and the
        account's limits, its place going to the next request. No-op without learning (a 1302 then cools the
        model down), for a probe (it rides already), a request z.ai seated or one with its verdict."""
        slot_id = slot.slot_id
        if (
            not self._limits.enabled
            or slot_id not in self._unanswered
            or slot_id in self._overdue
            or slot_id in self._probes
            or slot_id in self._seated
        ):
            return
        self._overdue[slot_id] = slot.model
        self._limits.lent_after(self._clock() - self._taken_at[slot_id])
        _count(self._riding_on, slot.model, 1)
        _count(self._riding_on, ACCOUNT, 1)
        self._slots.overdue_changed()
        if len(self._queue):
            self._queue.dispatch()

    def rides(self, slot: Slot) -> bool:
        """Whether `slot`'s attempt is overdue, riding above the limits until its verdict."""
        return slot.slot_id in self._overdue

    def overdue_here(self) -> dict[str, int]:
        """This proxy's attempts riding above the limits, per model: what it tells the fleet."""
        return dict(Counter(self._overdue.values()))

    def report_queued(self, slot: Slot) -> None:
        """z.ai queues (zai.assumptions.MAY_QUEUE), and `slot`'s probe, unanswered,
        is held so: the first slot of its limit that a request z.ai served gives back is the probe's. No-op
        for a slot that is no probe, or whose probe was answered."""
        if slot.slot_id in self._probes:
            self._queued_probes[slot.slot_id] = slot

    def _seat_queued_probe(self, model: str) -> None:
        """A slot of `model` z.ai served went back: a probe z.ai queues on that model (else on the account)
        takes it, counting within the limit from now on. z.ai held it, so it found no room above its limit:
        the next probe there waits as after a refusal, and its answer is a regular request's."""
        queued = sorted(self._queued_probes, key=lambda i: (self._probes[i] != model, i))
        for slot_id in queued:
            if self._probes[slot_id] in (model, ACCOUNT):
                probe = self._queued_probes.pop(slot_id)
                if probe.probe is not None and slot_id not in self._stalled:  # a stall judged it already
                    self._limits.probe_given_up(probe.probe, probe.model)
                    self._probe_judged(probe)
                _count(self._riding_on, self._probes.pop(slot_id), -1)
                self._seated.add(slot_id)
                return

    def _probe_of(self, slot: Slot) -> Probe | None:
        """The limit `slot`'s request probes, as its verdict counts: none once it is seated within it."""
        return None if slot.slot_id in self._seated else slot.probe

    def release(self, slot: Slot) -> bool:
        """Give `slot` back and serve waiters: the one way a slot goes back, exactly once. False (nothing
        changes, `spurious_releases` counts it) for a slot already given back or never taken here."""
        model = self._held.pop(slot.slot_id, None)
        if model is None:
            self.spurious_releases += 1
            return False
        _count(self._held_on, model, -1)
        self._settle(slot)
        self.quota.ended(slot.slot_id)
        self._arrivals.released(slot.slot_id)
        taken_at = self._taken_at.pop(slot.slot_id)
        self._cache_rule.ended(model, self._clock() - taken_at)
        ended = self._ended.pop(slot.slot_id, None)
        if ended is not None:
            _count(self._ended_on, ended, -1)
        if slot.slot_id in self._served:
            self._served.discard(slot.slot_id)
            self._limits.served_for(self._clock() - taken_at)
            self._seat_queued_probe(model)  # z.ai served it: the slot it frees is a queued probe's
        if not self._slots.release(model):  # the store lost it (never)
            self.spurious_releases += 1
            return False
        self.pacer.released(slot.slot_id, self._slots.total())
        self.pacer.drained()
        if len(self._queue):
            delay = self._slots.hold_back()
            if delay > 0:
                self._wake_later(delay)  # another proxy's waiters first (a shared store's fairness)
            else:
                self._queue.dispatch()
        freed, self._freed = self._freed, []
        for future in freed:
            if not future.done():
                future.set_result(None)
        return True

    async def freed(self, timeout: float) -> None:
        """Return once a slot held here is given back, or after `timeout` seconds."""
        future = asyncio.get_running_loop().create_future()
        self._freed.append(future)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(future, timeout)

    def _wake_later(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop, so nobody can be waiting
            return
        if self._wake_timer is None:
            self._wake_timer = loop.call_later(delay, self._on_wake_timer)

    def _on_wake_timer(self) -> None:
        self._wake_timer = None
        self.wake()

    def try_acquire(self, ticket: Ticket) -> Slot | None:
        """Select and take the slot in one step, queue or not; None when nothing eligible is free."""
        return self._attempt(ticket)

    def _attempt(self, ticket: Ticket) -> Slot | None:
        choice, moved = self._select(ticket)
        if choice is None:
            return None
        model, reason, probe = choice
        if not self.pacer.affords(model):  # pacing's hard stop: its weight is over what is left
            self._arm_timer()  # the waiters go at the reset
            return None
        slot = self._take(model, reason, probe, awaits_verdict=True)
        if slot is None:
            return None
        self.pacer.taken(slot.slot_id, ticket.tier, self._slots.total())
        if self._sticky_on and ticket.sticky_key is not None:
            size = 0 if ticket.request is None else ticket.request.input_tokens
            self._sticky.put(ticket.sticky_key, model, size)
            if moved:
                self._sticky.moves += 1
                self._sticky.moved_tokens += size
        if ticket.counts:
            self._shares.served(ticket.session)
        return slot

    def set_back(self, session: str | None, seconds: float) -> None:
        """A request of `session`'s conversation was served `seconds` later than its first attempt was
        sent, which z.ai refused (or left unanswered): the conversation's next request waits in line as
        if it had come that much earlier (`shares`; once: its admission clears it)."""
        self._shares.fell_behind(session, seconds)

    async def admit(
        self, ticket: Ticket, *, since: float | None = None, timeout: float | None = None
    ) -> Slot | None:
        """A slot now, or after a fair wait in the queue; None after the timeout or when waiting is
        pointless (queue off or full, account paused, no model of the tier usable at all). Waiters go by
        how much their `session` was served lately (see `shares`), then by `since` (when the request first
        came: a failover keeps its place; default now). With a shared store, only a slot the fleet
        confirmed is returned, a probe's only with the right to probe its limit (`learning.limits`)."""
        if not self._slots.confirms:
            return await self._admit(ticket, since, timeout)
        started = self._clock()
        since = started if since is None else since
        if timeout is None:
            timeout = self._config.queue.timeout_seconds
        while True:
            selection = await self._admit(ticket, since, max(timeout - (self._clock() - started), 0.0))
            if selection is None:
                return None
            claim = self._claim(selection)
            try:
                confirmed = await self._slots.confirm(selection.model, claim)
            except BaseException:  # cancelled (the client left) or broken: never keep the slot
                if claim is not None and selection.probe is not None:
                    self._limits.probe_claimed(selection.probe, selection.model, sent=False)
                self.release(selection)
                raise
            if claim is not None and selection.probe is not None:
                self._limits.probe_claimed(
                    selection.probe,
                    selection.model,
                    sent=confirmed.taken,
                    held_elsewhere=confirmed.probe_held,
                    refused=confirmed.refused_probes,
                )
            if confirmed.taken:
                slots = self._slots
                return replace(selection, in_flight=slots.in_flight(selection.model), total=slots.total())
            # Another proxy took it first (the mirror knows now), or holds the right to probe its limit:
            # pick again or wait, keeping our place.
            if not confirmed.probe_held:
                self.lost_races += 1
            self.admitted -= 1
            if ticket.counts:
                self._shares.unserved(ticket.session)  # not served: it keeps its place in line
            self.release(selection)

    def _claim(self, slot: Slot) -> ProbeClaim | None:
        """A probe's claim on the right to probe its limit, as the fleet holds it now (None: no probe)."""
        if slot.probe is None:
            return None
        seconds, refused = self._limits.probe_wait(slot.probe, slot.model)
        return ProbeClaim(ACCOUNT if slot.probe == "account" else slot.model, seconds, refused)

    def _probe_judged(self, slot: Slot) -> None:
        """`slot`'s probe has its verdict (or was given up): a fleet holds the right to probe its limit as
        long as this proxy's next probe there waits now (see `learning.limits`). Once for a seated one."""
        if self._slots.confirms and slot.slot_id not in self._seated:
            claim = self._claim(slot)
            if claim is not None:
                self._slots.probe_answered(claim)

    def _note(self, slot: Slot, kind: Literal["clean", "refused", "stall"], level: int, total: int) -> None:
        """A verdict on `slot`'s request as the limits took it: told to the fleet now."""
        self._heard(slot.model, kind, self._probe_of(slot))
        if self._slots.confirms and self._limits.enabled and slot.slot_id in self._held:
            taken_at = self._taken_at.get(slot.slot_id)
            age = None if kind == "clean" or taken_at is None else self._clock() - taken_at
            self._slots.verdicts(slot.model, (Seen(kind, level, total, self._probe_of(slot), age),))

    def listed(self, names: list[str]) -> list[str]:
        """z.ai's models endpoint listed `names`: a model it lists that the catalog lacks is offered where
        its naming gives it a tier (`routing.aliases.offered`); a catalog model it no longer lists leaves
        rotation, and comes back once listed again. A list naming no model the pool serves is not taken
        (another host's, or a broken one). Returns what changed, a line each."""
        serving = [name for name in self._config.models if name not in self._folded]
        if not names or not any(self.aliases.served(n) in serving or n in serving for n in names):
            return []
        before = list(self._config.models)
        self._listed = names
        self.reconfigure(self._given)
        models = self._config.models
        lines = [
            f"{name}: listed by z.ai, offered ({models[name].tier})" for name in models if name not in before
        ]
        lines += [f"{name}: no longer listed by z.ai, withdrawn" for name in before if name not in models]
        listed = set(names)
        for name in self._config.models:
            block = self._cooldowns.block(name)
            if name not in listed and block is None:
                self._cooldowns.take_out(name, NOT_LISTED)
                lines.append(f"{name}: {NOT_LISTED}, out of rotation")
            elif name in listed and block is not None and block.reason == NOT_LISTED:
                self._cooldowns.restore(name)
                lines.append(f"{name}: listed again, back in rotation")
        return lines

    def report_served(self, slot: Slot, served: str) -> bool:
        """z.ai named the model that served `slot`'s request (zai.assumptions.ANSWERS_NAME_SERVED_MODEL): a
        catalog model served as another is folded into it (zai.assumptions.ALIAS_SHARES_COUNTER) from now on,
        a listed model served as itself takes its family's tier (`routing.aliases`). True when the catalog
        changed."""
        if served.lower() == slot.model.lower():
            if slot.model not in self._offered or slot.model in self.aliases.confirmed:
                return False
            self.aliases.confirmed.add(slot.model)  # a listed model served as itself: its family's tier
        elif not self.aliases.learn(slot.model, served):
            return False
        self.reconfigure(self._given)
        return True

    def seen_elsewhere(self, model: str, seen: Sequence[Seen]) -> None:
        """z.ai's verdicts on a request of `model` another proxy of the fleet holds, told as they came: each
        counts here as if this proxy had it (`learning.limits`), at the levels that proxy counted, and a
        refusal or a stall as sent when that proxy sent it (whose refusal it is depends on what z.ai served
        since)."""
        limits = self._limits
        now = self._clock()
        for verdict in seen:
            sent = None if verdict.age is None else now - verdict.age
            self._heard(model, verdict.kind, verdict.probe)
            if verdict.kind == "clean":
                # as evidence only: a probe's clean answer paces the probes here with the right freed
                # (`probe_answered_elsewhere`); heard again as a verdict, it would undo a wait set since (a
                # refused probe, a refusal) and end a probe of this proxy's own
                limits.succeeded(model, verdict.level, verdict.total, None)
            elif verdict.kind == "refused":
                limits.refused(model, verdict.level, verdict.total, verdict.probe, sent)
            else:
                limits.stalled(model, verdict.level, verdict.total, verdict.probe, sent)
        self._limits_changed()

    def _heard(self, model: str, kind: Literal["clean", "refused", "stall"], probe: Probe | None) -> None:
        if probe is not None:
            return  # a probe's verdict says nothing of the levels within the limit
        if kind == "clean":
            self._refusing.discard(model)
        else:
            self._refusing.add(model)

    def refusing(self, model: str) -> bool:
        """Whether z.ai's latest verdict on a request of `model` that was not a probe (here, or told by
        another proxy of the fleet) was a refusal or a stall: one just sent there is likely refused too
        (`fleet.slots`)."""
        return model in self._refusing

    def probe_answered_elsewhere(self, limit: str) -> None:
        """Another proxy's probe of `limit` (a model, or ACCOUNT) was answered cleanly: its next probe may
        go here at once, as after one answered here."""
        self._limits.probe_answered_elsewhere("account" if limit == ACCOUNT else "model", limit)
        if len(self._queue):
            self._queue.dispatch()

    async def _admit(self, ticket: Ticket, since: float | None, timeout: float | None) -> Slot | None:
        selection = self._admit_now(ticket)
        if selection is not None:
            return selection
        started = self._clock()
        if self._may_wait(ticket):
            if timeout is None:
                timeout = self._config.queue.timeout_seconds
            if self.pacer.capped(self._slots.total()):
                self.pacer.waits += 1  # it waits because pacing holds the concurrency down
            self._arm_timer()
            self._slots.queued()
            if ticket.counts:  # a conversation a refusal held up goes ahead of those that came since
                since = (self._clock() if since is None else since) - self._shares.behind(ticket.session)
            selection = await self._queue.wait(ticket, timeout, since, self._shares.level(ticket.session))
        elif len(self._queue):
            selection = self._attempt(ticket)  # the queue is full: no place to wait fairly
        if selection is None:
            self.rejected += 1
            return None
        self.admitted += 1
        self.total_wait += max(self._clock() - started, 0.0)
        return selection

    def admit_now(self, ticket: Ticket) -> Slot | None:
        """The fast path of `admit`, no coroutine needed: a slot at once when nobody waits
        and one is free, else None (and the caller waits). Somebody waiting means the queue's dispatch
        must decide, so that older waiters go first. A shared store's slot must be confirmed: `admit`."""
        if self._slots.confirms:
            return None
        return self._admit_now(ticket)

    def _admit_now(self, ticket: Ticket) -> Slot | None:
        if len(self._queue):
            return None
        selection = self._attempt(ticket)
        if selection is not None:
            self.admitted += 1
        return selection

    def _may_wait(self, ticket: Ticket) -> bool:
        queue = self._config.queue
        return queue.enabled and len(self._queue) < queue.max_waiting and self.unavailable(ticket) is None

    def unavailable(self, ticket: Ticket) -> str | None:
        """Why `ticket` cannot be served however long it waits, else None."""
        pause = self._cooldowns.account_pause()
        if pause is not None:
            return f"account paused for {pause_span(pause[0], self._wall_clock() + pause[0])}: {pause[1]}"
        spent = self.quota_spent_for()
        if spent is not None and spent > self._config.queue.timeout_seconds:
            return f"the 5-hour quota is spent as pacing counts it: it resets in {spent:.0f} s"
        for entry in (self._seeing if ticket.images else self._eligible)[ticket.tier]:
            if entry.name in ticket.attempted:
                continue
            block = self._cooldowns.block(entry.name)
            if block is None or block.until is not None:
                return None
        return f"no usable model left for {ticket.tier} requests"

    def dead_end(self, tier: RequestTier) -> str | None:
        """Why no request of `tier` can be served until the plan changes (every model it may use out of
        rotation for good, or none left once the names z.ai serves as others are folded: waiting fixes
        nothing), else None."""
        if not self._eligible[tier]:
            said = ", ".join(f"{asked} is served as {served}" for asked, served in self._folded.items())
            return f"no model of the catalog serves {tier} requests at their floor ({said or 'none listed'})"
        reasons: dict[str, list[str]] = {}
        for entry in self._eligible[tier]:
            block = self._cooldowns.block(entry.name)
            if block is None or block.kind != "out" or block.until is not None:
                return None
            reasons.setdefault(block.reason, []).append(entry.name)
        if not reasons:
            return None
        said = "; ".join(f"{', '.join(models)}: {reason}" for reason, models in reasons.items())
        return f"every model a {tier} request may use is out of rotation ({said})"

    def quota_spent_for(self) -> float | None:
        """Seconds until the reset while pacing's hard stop holds every model for good (None: it does not)."""
        until = self.pacer.held_until()
        return None if until is None else max(until - self._wall_clock(), 0.0)

    def _quota_changed(self) -> None:
        """A reading (or a 1308) moved pacing's budget: the waiters it held may go."""
        if len(self._queue) and self.pacer.on:
            self._queue.dispatch()
            self._arm_timer()

    def _arm_timer(self) -> None:
        """Wake the queue when the earliest cooldown ends, the next probe is due or pacing's hard stop
        lifts at the reset: each frees capacity without a release."""
        delays = [
            d
            for d in (self._cooldowns.next_expiry(), self._limits.next_probe(), self.pacer.lifts_in())
            if d is not None
        ]
        if not delays:
            return
        delay = min(delays)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop, so nobody can be waiting
            return
        when = loop.time() + delay + 0.001
        if self._timer is not None and not self._timer.cancelled() and self._timer.when() <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if len(self._queue):
            self._queue.dispatch()
            self._arm_timer()

    # -- feedback from upstream -------------------------------------------------------------------

    def report_success(self, selection: Slot, *, at_once: bool = True) -> None:
        """A clean answer from z.ai to the request `selection` sent: confirms (or raises) its limits and
        ends the model's run of busy answers. `at_once`: z.ai served it from its arrival (False: z.ai was
        seen to queue lately, and may have held it until a slot freed)."""
        # z.ai queued it, and serves it now (zai.assumptions.MAY_QUEUE)
        held = selection.slot_id in self._stalled
        seated = selection.slot_id in self._seated  # z.ai held it until a slot freed, then served it there
        # a probe z.ai held was judged at its stall or its seat: served once a slot freed, it found no room
        # above its limit
        probe = None if held else self._probe_of(selection)
        if not held:
            self._arrivals.accepted(selection.slot_id, selection.model)  # z.ai counted it from its arrival on
        self._settle(selection)
        if selection.slot_id in self._held:
            self._served.add(selection.slot_id)
        # z.ai served at least this many at once: what it serves now, or what it served when the request
        # came (heads sent with the first token leave much of what z.ai serves without a head here:
        # zai.assumptions.HEAD_MAY_WAIT_FOR_FIRST_TOKEN); not
        # for a request z.ai may have held: it was full then, and served it only once a slot freed
        queued = held or seated or not at_once
        arrived, arrived_total = (0, 0) if queued else self._arrival_levels(selection, (0, 0), clean=True)
        model = selection.model
        serving, total = max(self._serving(model), arrived), max(self._serving(), arrived_total)
        self.quota.answered(model, selection.slot_id)
        limits = self._limits
        limits.succeeded(model, serving, total, probe)
        self._note(selection, "clean", serving, total)
        if not seated:
            self._probe_judged(selection)
        self._cooldowns.succeeded(model)
        if self._limits_version != limits.version:
            self._limits_changed()
        elif len(self._queue) and (limits.can_probe(model) or limits.can_probe_account()):
            self._queue.dispatch()  # the limit ran full cleanly: a waiter may probe above it now

    def _serving(self, model: str | None = None) -> int:
        """What z.ai serves now, as far as the pool can tell: slots answered cleanly whose answer has not
        ended (of `model`; the account's when None), this proxy's and those other proxies of a fleet said
        they had (their slots z.ai has not answered yet are not z.ai's to serve)."""
        if model is None:
            here = len(self._held) - len(self._unanswered) - len(self._ended)
        else:
            held, unanswered, ended = self._held_on, self._unanswered_on, self._ended_on
            here = held.get(model, 0) - unanswered.get(model, 0) - ended.get(model, 0)
        return here + self._slots.serving_elsewhere(model) if self._slots.confirms else here

    def _arrival_levels(
        self, slot: Slot, otherwise: tuple[int, int], *, clean: bool = False
    ) -> tuple[int, int]:
        """What z.ai served when `slot`'s request came, on its model and on the account, itself included
        (`routing.arrivals`; `clean`: for a clean answer); `otherwise` for a slot no longer held here."""
        if self._slots.confirms:
            elsewhere = self._slots.serving_elsewhere
            levels = self._arrivals.levels(
                slot.slot_id,
                model_elsewhere=elsewhere(slot.model),
                account_elsewhere=elsewhere(None),
                clean=clean,
            )
        else:
            levels = self._arrivals.levels(slot.slot_id, clean=clean)
        return otherwise if levels is None else levels

    def serving_here(self) -> dict[str, int]:
        """This proxy's slots z.ai answered cleanly and still serves, per model (none: left out): what it
        tells the fleet with each notice."""
        unanswered, ended = self._unanswered_on.get, self._ended_on.get
        serving = {}
        for model, held in self._held_on.items():
            count = held - unanswered(model, 0) - ended(model, 0)
            if count > 0:
                serving[model] = count
        return serving

    def report_ended(self, slot: Slot) -> None:
        """z.ai sent `slot`'s answer to its end: it serves it no more, though the slot is held until the
        flow ends (a queuing z.ai starts a held request the moment another ends: it must not count)."""
        if slot.slot_id in self._held and slot.slot_id not in self._ended:
            self._ended[slot.slot_id] = slot.model
            _count(self._ended_on, slot.model, 1)

    def report_stall(self, slot: Slot) -> bool:
        """z.ai holds the head of `slot`'s request far longer than its heads take: a limit passed, as a 1302
        says (zai.assumptions.MAY_QUEUE). Once per slot; the request goes on (z.ai may serve it), and a 1302
        that comes for it later is not counted again. False: its verdict came first."""
        slot_id = slot.slot_id
        if slot_id not in self._unanswered or slot_id in self._stalled:
            return False
        self._stalled.add(slot_id)
        if self._limits.enabled:
            level, account_level = self._arrival_levels(slot, (slot.in_flight, slot.total))
            sent = self._taken_at.get(slot_id)
            self._limits.stalled(slot.model, level, account_level, self._probe_of(slot), sent)
            self._note(slot, "stall", level, account_level)
            self._probe_judged(slot)
            self._limits_changed()
        return True

    def report_error(
        self,
        model: str,
        error: UpstreamError,
        retry_after: float | None = None,
        selection: Slot | None = None,
    ) -> float:
        """Feed a z.ai error on `model` back into routing; returns seconds the model/account is out
        (0 when nothing was blocked). `selection`, the slot the request was sent with, tells a 1302 what
        was in flight then; without it, what is in flight now counts."""
        counted = selection is not None and selection.slot_id in self._stalled
        lent = selection is not None and selection.slot_id in self._overdue
        if selection is not None:
            self._settle(selection)
            if error.action is not Action.UNREACHED:
                self.quota.refused(selection.slot_id)  # z.ai's error answer: not charged
        seconds = self._report_error(model, error, retry_after, selection, counted=counted, lent=lent)
        self._limits_changed()
        if len(self._queue):
            self._arm_timer()  # a slot freed while this block lasts must reach the waiters when it ends
        return seconds

    def _report_error(
        self,
        model: str,
        error: UpstreamError,
        retry_after: float | None,
        selection: Slot | None,
        *,
        counted: bool,
        lent: bool = False,
    ) -> float:
        settings = self._config.cooldown
        probe = self._probe_of(selection) if selection is not None else None
        match error.action:
            case Action.CONCURRENCY if self._limits.enabled:
                taken_at = self._taken_at.get(selection.slot_id) if selection is not None else None
                if taken_at is not None:
                    self._limits.refusal_took(self._clock() - taken_at, lent=lent)
                if counted:
                    return 0.0  # its stall said so already
                if selection is None or not selection.in_flight:
                    in_flight, total = self._slots.in_flight(model), self._slots.total()
                else:
                    in_flight, total = self._arrival_levels(selection, (selection.in_flight, selection.total))
                self._limits.refused(model, in_flight, total, probe, taken_at)
                if selection is not None:
                    self._note(selection, "refused", in_flight, total)
                    self._probe_judged(selection)
                return 0.0
            case Action.CONCURRENCY | Action.COOLDOWN:
                return self._cooldowns.hit(model, error.reason, retry_after)
            case Action.OUT_OF_ROTATION:
                self._cooldowns.take_out(model, error.reason)
                self._rotation.left(model, error.reason, None)
                return math.inf
            case Action.MODEL_DAY:
                seconds = self._until(error.reset_at, retry_after, settings.account_pause_seconds)
                self._cooldowns.take_out(model, error.reason, seconds)
                self._rotation.left(model, error.reason, seconds)
                return seconds
            case Action.ACCOUNT_PAUSE:
                if error.code == SPENT_CODE:
                    self.quota.spent(error.reset_at)
                fallback = FAIR_USE_SECONDS if error.code == FAIR_USE_CODE else settings.account_pause_seconds
                seconds = self._until(error.reset_at, retry_after, fallback)
                self._cooldowns.pause_account(seconds, error.reason)
                return seconds
            case _:
                if probe is not None:
                    self._limits.probe_sent(probe, model)  # it tested nothing: the next one waits its turn
                return 0.0

    def _until(self, reset_at: float | None, retry_after: float | None, fallback: float) -> float:
        """Seconds until a reset z.ai named (capped: a message may name any date), else the fallback."""
        if reset_at is not None:
            seconds = max(reset_at - self._wall_clock(), 0.0)
        else:
            seconds = retry_after if retry_after is not None else fallback
        return min(seconds, self._config.cooldown.max_pause_seconds)

    def reset_limits(self) -> None:
        """Forget every learned limit and alias: back to the catalog's (and the config's) values."""
        self.aliases.forget()
        self.reconfigure(self._given)
        self._limits.reset()
        self._limits_changed()

    def restore(self, model: str) -> bool:
        """Put a model back into rotation (after a plan change, say)."""
        restored = self._cooldowns.restore(model)
        self._rotation.check(self._cooldowns)
        self._queue.dispatch()
        return restored

    # -- status -----------------------------------------------------------------------------------

    def in_flight(self, model: str | None = None) -> int:
        return self._slots.total() if model is None else self._slots.in_flight(model)

    def waiting(self) -> int:
        return len(self._queue)

    def unanswered(self, model: str | None = None) -> int:
        """Slots (of `model`; all when None) whose request z.ai has not answered yet."""
        return len(self._unanswered) if model is None else self._unanswered_on.get(model, 0)

    def first_in_line(self) -> tuple[int, int, float]:
        """(requests waiting, the level of the first in line: its conversation's admissions lately, and
        seconds it has waited: since it first came, a failover's included)."""
        first = self._queue.first()
        if first is None:
            return (0, 0, 0.0)
        level, since = first.order
        return (len(self._queue), level, max(self._clock() - since, 0.0))

    def _follow_limits(self) -> None:
        """Let learned limits drift, and rebuild what derives from them when they changed."""
        self._limits.tick()
        if self._limits_version != self._limits.version:
            self._derive()

    def status(self) -> PoolStatus:
        """The pool's state for status pages, metrics and the dashboard (`status.served` makes it JSON)."""
        self._follow_limits()
        models: dict[str, ModelStatus] = {}
        held = self._slots.snapshot()
        names: Iterable[str] = list(self._entries) + [m for m in held if m not in self._entries]
        serving = {entry.name for entries in self._eligible.values() for entry in entries}
        out_slots = out_in_flight = in_limits = 0
        out_models: dict[str, str] = {}
        probes = Counter(self._probes.values())  # per limit: a model's name, or ACCOUNT
        overdue = Counter(self._overdue.values())
        served_as = self.aliases.all()
        for name in names:
            spec = self._config.models.get(name)
            block = self._cooldowns.block(name)
            out = block is not None and block.kind == "out"
            remaining = self._cooldowns.remaining(name)
            entry = self._entries.get(name)
            unusable = _unusable_reason(self._config, name, block.reason if out and block else None, serving)
            if name in served_as and name not in self._config.models:
                unusable = f"served as {served_as[name]}"
            in_flight, capacity = held.get(name, 0), entry.capacity if entry else 0
            if unusable is not None:
                out_models[name] = unusable
                out_slots += capacity
                out_in_flight += in_flight
            else:
                in_limits += min(in_flight, capacity)
            models[name] = ModelStatus(
                tier=spec.tier if spec else None,
                dispatched=self.dispatched.get(name, 0),
                in_flight=in_flight,
                capacity=capacity,
                above_limit=max(in_flight - capacity, 0),
                probes=probes[name],
                overdue=overdue[name],
                catalog_limit=spec.max_concurrency if spec else 0,
                limit=_model_limit(self._limits.view(name)) if spec else None,
                cooldown_remaining=0.0 if out or math.isinf(remaining) else round(remaining, 3),
                out_of_rotation=block.reason if out and block else None,
                cooldown_reason=block.reason if block and not out else None,
                excluded=name in self._config.chaos_mode.exclude_models,
                free=bool(spec and spec.free),
                usable=unusable is None,
                aliases=sorted(asked for asked, model in served_as.items() if model == name),
                vision=bool(spec and spec.vision),
            )
        pause = self._cooldowns.account_pause()
        waiting = self._queue.waiting()
        used = self._slots.total()
        usable = sum(entry.capacity for name, entry in self._entries.items() if name not in out_models)
        capacity = min(self._account_cap, usable)
        learning = self._config.learning
        account = self._limits.view()
        return PoolStatus(
            enabled=self._config.chaos_mode.enabled,
            strategy=self._config.chaos_mode.strategy,
            models=models,
            total_capacity=capacity,
            account_limit=None if self._account_cap == NO_ACCOUNT_CAP else self._account_cap,
            account=AccountStatus(
                account.value,
                account.start,
                account.ceiling,
                account.reason,
                account.changed_at,
                account.probing,
            ),
            learning=LearningStatus(
                self._limits.enabled, learning.probe_interval_seconds, learning.drift_seconds
            ),
            used_capacity=used,
            in_limits=min(in_limits, capacity),
            above_limits=used - out_in_flight - min(in_limits, capacity),
            utilization=round(min(in_limits, capacity) / capacity, 4) if capacity else 0.0,
            out_capacity=OutCapacity(out_slots, out_in_flight, out_models),
            account_pause=(
                AccountPause(round(pause[0], 3), pause[1], round(self._wall_clock() + pause[0], 3))
                if pause
                else None
            ),
            queue=QueueStatus(
                waiting=len(waiting),
                waiting_by_tier={t: sum(1 for w in waiting if w.ticket.tier == t) for t in REQUEST_TIERS},
                longest_wait=round(self._queue.oldest_wait(), 3),
                timeouts=self._queue.timeouts,
                admitted=self.admitted,
                rejected=self.rejected,
                avg_wait_ms=round(1000 * self.total_wait / self.admitted, 1) if self.admitted else 0.0,
            ),
            sticky=StickyStatus(
                self._sticky_on,
                len(self._sticky),
                self._sticky.moves,
                reread_credits(self._sticky.moved_tokens),
            ),
            spurious_releases=self.spurious_releases,
        )


def _unusable_reason(config: ModelRouting, name: str, out: str | None, serving: set[str]) -> str | None:
    """Why no request can use `name` now (its slots are then not usable capacity), else None.

    A cooldown is not counted: it ends within seconds. An account pause stops every model alike."""
    if out is not None:
        return out
    if name not in config.models:
        return "not in the catalog (dropped by a reload)"
    if name in serving:
        return None
    chaos = config.chaos_mode
    if name in chaos.exclude_models:
        return "excluded (chaosMode.excludeModels)"
    if config.models[name].free and not chaos.include_free_models:
        return "free models off (chaosMode.includeFreeModels)"
    return "below every quality floor (chaosMode.qualityFloor)"


def _model_limit(view: LimitView) -> ModelLimit:
    return ModelLimit(view.value, view.ceiling, view.reason, view.changed_at, view.probing)


def _count(counts: dict[str, int], key: str, step: int) -> None:
    """Add `step` to `counts[key]`, the key gone at zero."""
    left = counts.get(key, 0) + step
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
