"""ChaosPool: which model serves a request — eligibility, strategy, slots, cooldowns, queue, stickiness.

How a model is chosen for a request, the rules in the order they apply (`_select`, `_beyond_limits`):

1. **Nothing while the account is paused** (1308, 1310, 1313-1321: z.ai refuses everything until its reset).
2. **Paced** (`quota.pace`, only while the quota runs out before its reset; `quota.pacing`): nothing
   once the paced concurrency is in flight (the request waits in the fair queue, counted in
   `pacer.waits`), and among the models free within the limits only the lightest by `quotaWeight`; and,
   whether the quota runs out or not, no request whose weight is over what is left of the window as the
   readings and the proxy's own count bound it (the hard stop, `try_acquire`: it waits, for the reset if
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
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace

from chaos_mode.config.schema import ModelRouting
from chaos_mode.learning.limits import LearnedLimits, Probe
from chaos_mode.quota.pacer import Pacer
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.routing.aliases import Aliases
from chaos_mode.routing.blocks import block
from chaos_mode.routing.cache_rule import WAIT, CacheRule
from chaos_mode.routing.cooldowns import Cooldowns, CooldownState
from chaos_mode.routing.learned import Learned
from chaos_mode.routing.ledger import Ledger
from chaos_mode.routing.pool_status import (
    NO_ACCOUNT_CAP,
    pause_span,
)
from chaos_mode.routing.rotation import Rotation
from chaos_mode.routing.served_lately import ServedLately
from chaos_mode.routing.slot_record import Slot as Slot
from chaos_mode.routing.slots import MemorySlots, SlotStore
from chaos_mode.routing.sticky import StickyMap
from chaos_mode.routing.strategies import ModelEntry, Strategy, make_strategy
from chaos_mode.routing.ticket import RequestInfo as RequestInfo
from chaos_mode.routing.ticket import Ticket as Ticket
from chaos_mode.routing.wait_queue import InVain, WaitQueue
from chaos_mode.zai.catalog import ACCOUNT, REQUEST_TIERS, RequestTier
from chaos_mode.zai.errors import UpstreamError

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
    counted in `spurious_releases`). Between the two, z.ai's verdicts on the request the slot was sent with
    go to `ledger` (`routing.ledger`), and what is learned of z.ai beside the slots to `learned`.
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
        self.slots: SlotStore = slots or MemorySlots()
        self.cooldowns: CooldownState = cooldowns or Cooldowns(config.cooldown, clock)
        self.limits = LearnedLimits(config, clock=clock, wall_clock=wall_clock)
        self._sticky = StickyMap(config.sticky.ttl_seconds, config.sticky.max_entries, clock)
        self._cache_rule = CacheRule()
        self.shares = ServedLately(clock)  # each conversation's place in the fair queue
        self._queue: WaitQueue[Ticket, Slot] = WaitQueue(
            attempt=self._waiter_tries,
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
        self._next_slot_id = 1
        self.lost_races = 0  # slots taken on the local mirror that another proxy had taken first
        # The quota: each clean answer counts its weight, a 1308 (1310) says the 5 hours (week) are spent.
        self.quota = QuotaTracker(config.quota_weight, wall_clock)
        self.pacer = Pacer(self.quota, clock, wall_clock)  # `quota.pace`
        self.quota.changed = self._quota_changed  # a reading may lift pacing's hard stop
        self._rotation = Rotation(wall_clock)  # the models logged out of rotation
        self.aliases = Aliases(wall_clock)  # names z.ai serves as another model (`routing.aliases`)
        self.learned = Learned(
            self.limits,
            self.aliases,
            refold=lambda: self.reconfigure(self._given),
            limits_changed=self._limits_changed,
            cooldowns=lambda: self.cooldowns,
        )
        # z.ai's verdicts on the held slots: one record each (`routing.ledger`)
        self.ledger = Ledger(self.limits, self.quota, self._queue, self._limits_changed, clock)
        self.use(slots=self.slots, cooldowns=self.cooldowns)
        self.reconfigure(config)

    # -- configuration ----------------------------------------------------------------------------

    def use(self, *, slots: SlotStore | None = None, cooldowns: CooldownState | None = None) -> None:
        """Count slots in `slots` and keep cooldowns in `cooldowns` from now on (shared with other proxies).
        Only at start-up, while nothing is held: a held slot must be released where it was taken."""
        if slots is not None:
            self.slots = self.ledger.store = slots
            self.pacer.alone = not slots.confirms  # pacing's budget counts this proxy's requests only
        if cooldowns is not None:
            self.cooldowns = self.ledger.cooldowns = cooldowns

    def wake(self, delay: float = 0.0) -> None:
        """Capacity may have been freed elsewhere (another proxy of the fleet gave a slot back, blocked or
        restored a model): serve the waiters, now or after `delay` seconds (the slot was owed to another
        proxy first), and when the earliest block ends."""
        if delay > 0:
            self._wake_later(delay)
        elif len(self._queue):
            self._queue.dispatch()
            self._arm_timer()

    def reconfigure(self, config: ModelRouting) -> None:
        """Apply a new config; in-flight counts, cooldowns and sticky entries are kept. The pool serves its
        catalog as z.ai does (`routing.aliases.fold`): `config` names the catalog as given."""
        self._given = config
        self.config = config = self.learned.catalog(config)
        self._strategy: Strategy = make_strategy(config.chaos_mode.strategy, self._rng)
        self.limits.reconfigure(config)
        self._derive()
        self._max_cost = config.chaos_mode.max_cost_per_request
        self._sticky_on = config.chaos_mode.sticky_conversations
        self.cooldowns.reconfigure(config.cooldown)
        self.ledger.lending.allow(config.learning.lend_overdue)
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
        config, limits = self.config, self.limits
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
            account = limits.view().value
            self._account_cap = NO_ACCOUNT_CAP if account is None else account
        else:
            self._account_cap = config.total_capacity
        self._limits_version = limits.version

    def _limits_changed(self) -> bool:
        """Follow the learned limits; waiters may use what a raised limit gives. Whether they changed."""
        if self._limits_version == self.limits.version:
            return False
        self._derive()
        if len(self._queue):
            self._queue.dispatch()
        return True

    # -- selection --------------------------------------------------------------------------------

    def _select(self, ticket: Ticket) -> tuple[Choice | None, bool]:
        """(choice, moved): moved when a sticky conversation had to leave its model."""
        self._follow_limits()
        slots = self.slots
        if self.cooldowns.account_pause() is not None:
            return None, False
        plan = self.pacer.plan(self._lighter_left)
        if self.pacer.spent() or (plan.max_concurrency is not None and slots.total() >= plan.max_concurrency):
            return None, False  # paced: it waits in the fair queue
        blocked = self.cooldowns.blocked()
        if self._rotation.out:
            self._rotation.check(self.cooldowns)
        attempted = ticket.attempted
        held = self._counts().get
        eligible = (self._seeing if ticket.images else self._eligible)[ticket.tier]
        if attempted or blocked:
            eligible = [e for e in eligible if e.name not in attempted and e.name not in blocked]
        above = self._above()
        if slots.total() >= self._account_cap + above(ACCOUNT, 0):
            return self._beyond_limits(ticket, eligible, account_full=True), False
        candidates = [e for e in eligible if held(e.name, 0) < e.capacity + above(e.name, 0)]
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
        counts, models = self.slots.counts(), self.config.models
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
        fleet's to use, and z.ai serves none of them). A count's own `get`: this runs for every request."""
        riding, elsewhere = self.ledger.riding_on, self.slots.riding_elsewhere()
        if not elsewhere:
            return riding.get
        both = Counter(riding)
        both.update(elsewhere)
        return both.get

    def _lighter_left(self, tiers: Mapping[int, str]) -> bool:
        """Whether a request in flight is served by a model heavier than the lightest its floor admits
        (`tiers`: the request tier of each held slot)."""
        weight = self.pacer.weight
        for record in self.ledger.records.values():
            tier, model = tiers.get(record.slot_id), record.model
            eligible = self._eligible.get(tier) if tier in REQUEST_TIERS else None
            if eligible and weight(model) > min(weight(e.name) for e in eligible):
                return True
        return False

    def _beyond_limits(
        self, ticket: Ticket, eligible: list[ModelEntry], *, account_full: bool
    ) -> Choice | None:
        """Nothing eligible is free within the limits, so the request would wait. A probe one above a
        learned limit when one is due; else, when nothing at all is in flight, a trial on the cooling
        model that ends first; else None."""
        limits, held = self.limits, self._counts().get
        if limits.enabled and ticket.may_probe:
            affordable = self._affordable(ticket, eligible)
            if account_full:
                above = self._above()
                room = [e for e in affordable if held(e.name, 0) < e.capacity + above(e.name, 0)]
                if room and limits.can_probe(None):
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
        # a cooling model tried once more for a request it just refused would be refused again at once
        if not self.config.cooldown.trial_when_idle or self.slots.total() or not ticket.may_probe:
            return None
        cooling = []
        for entry in (self._seeing if ticket.images else self._eligible)[ticket.tier]:
            block = self.cooldowns.block(entry.name)
            if entry.name not in ticket.attempted and entry.capacity and block and block.kind == "cooldown":
                cooling.append((self.cooldowns.remaining(entry.name), entry.index, entry.name))
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
        slots = self.slots
        # slots still held under a name found to be served as this model count here
        cap -= self._counts().get(model, 0) - slots.in_flight(model)
        if not slots.try_acquire(model, cap, account_cap):
            return None
        self.dispatched[model] = self.dispatched.get(model, 0) + 1
        slot_id, self._next_slot_id = self._next_slot_id, self._next_slot_id + 1
        record = self.ledger.take(slot_id, model, probe, above, awaits=awaits_verdict)
        return Slot(model, reason, slots.in_flight(model), slots.total(), probe, slot_id, record)

    def release(self, slot: Slot) -> bool:
        """Give `slot` back and serve waiters: the one way a slot goes back, exactly once. False (nothing
        changes, `spurious_releases` counts it) for a slot already given back or never taken here."""
        record = self.ledger.release(slot)
        if record is None:
            self.spurious_releases += 1
            return False
        model = record.model
        self._cache_rule.ended(model, self._clock() - record.taken_at)
        if not self.slots.release(model):  # the store lost it (never)
            self.spurious_releases += 1
            return False
        self.pacer.released(slot.slot_id, self.slots.total())
        self.pacer.drained()
        if len(self._queue):
            delay = self.slots.hold_back()
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
        self.pacer.taken(slot.slot_id, ticket.tier, self.slots.total())
        if self._sticky_on and ticket.sticky_key is not None:
            size = 0 if ticket.request is None else ticket.request.input_tokens
            self._sticky.put(ticket.sticky_key, model, size)
            if moved:
                self._sticky.moves += 1
                self._sticky.moved_tokens += size
        if ticket.counts:
            self.shares.served(ticket.session)
        return slot

    async def admit(
        self, ticket: Ticket, *, since: float | None = None, timeout: float | None = None
    ) -> Slot | None:
        """A slot now, or after a fair wait in the queue; None after the timeout or when waiting is
        pointless (queue off or full, account paused, no model of the tier usable at all). Waiters go by
        how much their `session` was served lately (see `shares`), then by `since` (when the request first
        came: a failover keeps its place; default now). With a shared store, only a slot the fleet
        confirmed is returned, a probe's only with the right to probe its limit (`learning.limits`)."""
        if not self.slots.confirms:
            return await self._admit(ticket, since, timeout)
        started = self._clock()
        since = started if since is None else since
        if timeout is None:
            timeout = self.config.queue.timeout_seconds
        while True:
            selection = await self._admit(ticket, since, max(timeout - (self._clock() - started), 0.0))
            if selection is None:
                return None
            claim = self.ledger.claim(selection.probe, selection.model)
            try:
                confirmed = await self.slots.confirm(selection.model, claim)
            except BaseException:  # cancelled (the client left) or broken: never keep the slot
                if claim is not None and selection.probe is not None:
                    self.limits.probe_claimed(selection.probe, selection.model, sent=False)
                self.release(selection)
                raise
            if claim is not None and selection.probe is not None:
                self.limits.probe_claimed(
                    selection.probe,
                    selection.model,
                    sent=confirmed.taken,
                    held_elsewhere=confirmed.probe_held,
                    refused=confirmed.refused_probes,
                )
            if confirmed.taken:
                slots = self.slots
                return replace(selection, in_flight=slots.in_flight(selection.model), total=slots.total())
            # Another proxy took it first (the mirror knows now), or holds the right to probe its limit:
            # pick again or wait, keeping our place.
            if not confirmed.probe_held:
                self.lost_races += 1
            self.admitted -= 1
            if ticket.counts:
                self.shares.unserved(ticket.session)  # not served: it keeps its place in line
            self.release(selection)

    async def _admit(self, ticket: Ticket, since: float | None, timeout: float | None) -> Slot | None:
        selection = self.admit_now(ticket, unconfirmed=True)
        if selection is not None:
            return selection
        started = self._clock()
        if self._may_wait(ticket):
            if timeout is None:
                timeout = self.config.queue.timeout_seconds
            if self.pacer.capped(self.slots.total()):
                self.pacer.waits += 1  # it waits because pacing holds the concurrency down
            self._arm_timer()
            self.slots.queued()
            if ticket.counts:  # a conversation a refusal held up goes ahead of those that came since
                since = (self._clock() if since is None else since) - self.shares.behind(ticket.session)
            selection = await self._queue.wait(ticket, timeout, since, self.shares.level(ticket.session))
        elif len(self._queue):
            selection = self.try_acquire(ticket)  # the queue is full: no place to wait fairly
        if selection is None:
            self.rejected += 1
            return None
        self.admitted += 1
        self.total_wait += max(self._clock() - started, 0.0)
        return selection

    def _waiter_tries(self, ticket: Ticket) -> Slot | None:
        """A waiter's try: a slot, None to wait on; `InVain` once its tier is a `dead_end` (a pause it
        waits through: it may end within its time)."""
        if (selection := self.try_acquire(ticket)) is None and self.dead_end(ticket.tier) is not None:
            raise InVain
        return selection

    def admit_now(self, ticket: Ticket, *, unconfirmed: bool = False) -> Slot | None:
        """The fast path of `admit`, no coroutine needed: a slot at once when nobody waits
        and one is free, else None (and the caller waits). Somebody waiting means the queue's dispatch
        must decide, so that older waiters go first. A shared store's slot must be confirmed: `admit`
        (`unconfirmed`: its first step)."""
        if len(self._queue) or (self.slots.confirms and not unconfirmed):
            return None
        selection = self.try_acquire(ticket)
        if selection is not None:
            self.admitted += 1
        return selection

    def _may_wait(self, ticket: Ticket) -> bool:
        queue = self.config.queue
        return queue.enabled and len(self._queue) < queue.max_waiting and self.unavailable(ticket) is None

    def unavailable(self, ticket: Ticket) -> str | None:
        """Why `ticket` cannot be served however long it waits, else None."""
        pause = self.cooldowns.account_pause()
        if pause is not None:
            return f"account paused for {pause_span(pause[0], self._wall_clock() + pause[0])}: {pause[1]}"
        spent = self.quota_spent_for()
        if spent is not None and spent > self.config.queue.timeout_seconds:
            return f"the 5-hour quota is spent as pacing counts it: it resets in {spent:.0f} s"
        for entry in (self._seeing if ticket.images else self._eligible)[ticket.tier]:
            if entry.name in ticket.attempted:
                continue
            block = self.cooldowns.block(entry.name)
            if block is None or block.until is not None:
                return None
        return f"no usable model left for {ticket.tier} requests"

    def dead_end(self, tier: RequestTier) -> str | None:
        """Why no request of `tier` can be served until the plan changes (every model it may use out of
        rotation for good, or none left once the names z.ai serves as others are folded: waiting fixes
        nothing), else None."""
        if not self._eligible[tier]:
            said = ", ".join(
                f"{asked} is served as {served}" for asked, served in self.learned.folded.items()
            )
            return f"no model of the catalog serves {tier} requests at their floor ({said or 'none listed'})"
        reasons: dict[str, list[str]] = {}
        for entry in self._eligible[tier]:
            block = self.cooldowns.block(entry.name)
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
            for d in (self.cooldowns.next_expiry(), self.limits.next_probe(), self.pacer.lifts_in())
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

    def error(
        self, model: str, error: UpstreamError, retry_after: float | None = None, slot: Slot | None = None
    ) -> float:
        """A z.ai error on `model` to the request of `slot` (`Ledger.refused`): seconds the model or the
        account is out (0: nothing blocked)."""
        self.ledger.refused(model, error, slot)
        parts = (self.cooldowns, self._rotation, self.quota, self.config.cooldown)
        now = self._wall_clock()
        seconds = block(model, error, retry_after, parts, learning=self.limits.enabled, now=now)
        self._limits_changed()
        if len(self._queue):
            self._arm_timer()  # a slot freed while this block lasts must reach the waiters when it ends
        return seconds

    def restore(self, model: str) -> bool:
        """Put a model back into rotation (after a plan change, say)."""
        restored = self.cooldowns.restore(model)
        self._rotation.check(self.cooldowns)
        self._queue.dispatch()
        return restored

    # -- status -----------------------------------------------------------------------------------

    def in_flight(self, model: str | None = None) -> int:
        return self.slots.total() if model is None else self.slots.in_flight(model)

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
        self.limits.tick()
        if self._limits_version != self.limits.version:
            self._derive()
