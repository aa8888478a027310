"""ChaosPool: which model serves a request — eligibility, strategy, slots, cooldowns, queue, stickiness."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .admission import AdmissionQueue
from .catalog import REQUEST_TIERS, RequestTier
from .config import ModelRouting
from .cooldown import Cooldowns, CooldownState
from .slots import MemorySlots, SlotStore
from .sticky import StickyMap
from .strategies import ModelEntry, Strategy, make_strategy
from .zai_errors import Action, UpstreamError

NO_ATTEMPTS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Selection:
    """The model chosen for a request, and why."""

    model: str
    reason: str


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


def _entries(config: ModelRouting) -> dict[str, ModelEntry]:
    return {
        name: ModelEntry(
            name=name,
            index=index,
            capacity=spec.max_concurrency,
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

    `select_model` only looks; `try_acquire` selects and takes the slot in one step (no await in
    between); `acquire_or_wait` also queues fairly when nothing eligible is free. Every slot taken
    must be given back with `release` exactly once.
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
        self._sticky = StickyMap(config.sticky.ttl_seconds, config.sticky.max_entries, clock)
        self._queue: AdmissionQueue[Ticket, Selection] = AdmissionQueue(
            attempt=self._attempt,
            release=self._release_selection,
            group=lambda ticket: (ticket.tier, ticket.attempted),
            clock=clock,
        )
        self._timer: asyncio.TimerHandle | None = None
        self.dispatched: dict[str, int] = {}
        self.admitted = 0  # requests that got a slot through acquire_or_wait
        self.rejected = 0  # requests acquire_or_wait answered None
        self.total_wait = 0.0  # seconds waited, over admitted requests
        self.spurious_releases = 0
        self.reconfigure(config)

    # -- configuration ----------------------------------------------------------------------------

    @property
    def config(self) -> ModelRouting:
        return self._config

    @property
    def cooldowns(self) -> CooldownState:
        return self._cooldowns

    def reconfigure(self, config: ModelRouting) -> None:
        """Apply a new config; in-flight counts, cooldowns and sticky entries are kept."""
        self._config = config
        self._strategy: Strategy = make_strategy(config.chaos_mode.strategy, self._rng)
        self._entries = _entries(config)
        self._eligible: dict[RequestTier, list[ModelEntry]] = {
            tier: [self._entries[name] for name in config.eligible_models(tier)] for tier in REQUEST_TIERS
        }
        self._account_cap = config.total_capacity
        self._max_cost = config.chaos_mode.max_cost_per_request
        self._sticky_on = config.chaos_mode.sticky_conversations
        self._cooldowns.reconfigure(config.cooldown)
        self._sticky.reconfigure(config.sticky.ttl_seconds, config.sticky.max_entries)
        self._queue.dispatch()  # capacity may have grown

    # -- selection --------------------------------------------------------------------------------

    def select_model(
        self,
        tier: RequestTier,
        attempted: frozenset[str] = NO_ATTEMPTS,
        *,
        request: RequestInfo | None = None,
        sticky_key: str | None = None,
    ) -> Selection | None:
        """The best eligible model with a free slot for a request of `tier`; None = backpressure."""
        return self._select(Ticket(tier, attempted, request, sticky_key))[0]

    def _select(self, ticket: Ticket) -> tuple[Selection | None, bool]:
        """(selection, moved): moved when a sticky conversation had to leave its model."""
        slots = self._slots
        if slots.total() >= self._account_cap or self._cooldowns.account_pause() is not None:
            return None, False
        blocked = self._cooldowns.blocked()
        attempted = ticket.attempted
        held = slots.counts().get
        eligible = self._eligible[ticket.tier]
        if attempted or blocked:
            eligible = [e for e in eligible if e.name not in attempted and e.name not in blocked]
        candidates = [e for e in eligible if held(e.name, 0) < e.capacity]
        in_flight = [held(e.name, 0) for e in candidates]
        if not candidates:
            return None, False

        moved = False
        stuck: str | None = None
        if self._sticky_on and ticket.sticky_key is not None:
            stuck = self._sticky.get(ticket.sticky_key)
            if stuck is not None:
                for entry in candidates:
                    if entry.name == stuck:
                        return Selection(stuck, "sticky"), False
                moved = True

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
        return Selection(chosen.name, reason), moved

    # -- slots ------------------------------------------------------------------------------------

    def acquire(self, model: str) -> bool:
        """Take a slot of `model` (the seed's acquire); False if it is full or unknown."""
        entry = self._entries.get(model)
        if entry is None or not self._slots.try_acquire(model, entry.capacity, self._account_cap):
            return False
        self.dispatched[model] = self.dispatched.get(model, 0) + 1
        return True

    def release(self, model: str) -> bool:
        """Give a slot of `model` back and serve waiters; False (clamped at zero) if none was held."""
        if not self._slots.release(model):
            self.spurious_releases += 1
            return False
        if len(self._queue):
            self._queue.dispatch()
        return True

    def _release_selection(self, selection: Selection) -> None:
        self.release(selection.model)

    def try_acquire(
        self,
        tier: RequestTier,
        attempted: frozenset[str] = NO_ATTEMPTS,
        *,
        request: RequestInfo | None = None,
        sticky_key: str | None = None,
    ) -> Selection | None:
        """Select and take the slot in one step; None when nothing eligible is free."""
        return self._attempt(Ticket(tier, attempted, request, sticky_key))

    def _attempt(self, ticket: Ticket) -> Selection | None:
        selection, moved = self._select(ticket)
        if selection is None or not self.acquire(selection.model):
            return None
        if self._sticky_on and ticket.sticky_key is not None:
            self._sticky.put(ticket.sticky_key, selection.model)
            if moved:
                self._sticky.moves += 1
        return selection

    async def acquire_or_wait(
        self,
        tier: RequestTier,
        attempted: frozenset[str] = NO_ATTEMPTS,
        *,
        request: RequestInfo | None = None,
        sticky_key: str | None = None,
        timeout: float | None = None,
    ) -> Selection | None:
        """A slot now, or after a fair wait in the queue; None after the timeout or when waiting is
        pointless (queue off or full, account paused, no model of the tier usable at all)."""
        ticket = Ticket(tier, attempted, request, sticky_key)
        selection = self.admit_now(ticket)
        if selection is not None:
            return selection
        started = self._clock()
        if self._may_wait(ticket):
            if timeout is None:
                timeout = self._config.queue.timeout_seconds
            self._arm_timer()
            selection = await self._queue.wait(ticket, timeout)
        elif len(self._queue):
            selection = self._attempt(ticket)  # the queue is full: no place to wait fairly
        if selection is None:
            self.rejected += 1
            return None
        self.admitted += 1
        self.total_wait += max(self._clock() - started, 0.0)
        return selection

    def admit_now(self, ticket: Ticket) -> Selection | None:
        """The fast path of `acquire_or_wait`, no coroutine needed: a slot at once when nobody waits
        and one is free, else None (and the caller waits). Somebody waiting means the queue's dispatch
        must decide, so that older waiters go first."""
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
            return f"account paused for {pause[0]:.0f} s: {pause[1]}"
        for entry in self._eligible[ticket.tier]:
            if entry.name in ticket.attempted:
                continue
            block = self._cooldowns.block(entry.name)
            if block is None or block.until is not None:
                return None
        return f"no usable model left for {ticket.tier} requests"

    def _arm_timer(self) -> None:
        """Wake the queue when the earliest cooldown ends: that frees capacity without a release."""
        delay = self._cooldowns.next_expiry()
        if delay is None:
            return
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

    def report_error(self, model: str, error: UpstreamError, retry_after: float | None = None) -> float:
        """Feed a z.ai error on `model` back into routing; returns seconds the model/account is out
        (0 when nothing was blocked)."""
        seconds = self._report_error(model, error, retry_after)
        if len(self._queue):
            self._arm_timer()  # a slot freed while this block lasts must reach the waiters when it ends
        return seconds

    def _report_error(self, model: str, error: UpstreamError, retry_after: float | None) -> float:
        settings = self._config.cooldown
        match error.action:
            case Action.COOLDOWN:
                return self._cooldowns.hit(model, error.reason, retry_after)
            case Action.OUT_OF_ROTATION:
                self._cooldowns.take_out(model, error.reason)
                return math.inf
            case Action.MODEL_DAY:
                seconds = self._until(error.reset_at, retry_after, settings.account_pause_seconds)
                self._cooldowns.take_out(model, error.reason, seconds)
                return seconds
            case Action.ACCOUNT_PAUSE:
                fallback = settings.max_seconds if error.code == "1313" else settings.account_pause_seconds
                seconds = self._until(error.reset_at, retry_after, fallback)
                self._cooldowns.pause_account(seconds, error.reason)
                return seconds
            case _:
                return 0.0

    def _until(self, reset_at: float | None, retry_after: float | None, fallback: float) -> float:
        if reset_at is not None:
            return max(reset_at - self._wall_clock(), 0.0)
        return retry_after if retry_after is not None else fallback

    def restore(self, model: str) -> bool:
        """Put a model back into rotation (after a plan change, say)."""
        restored = self._cooldowns.restore(model)
        self._queue.dispatch()
        return restored

    # -- status -----------------------------------------------------------------------------------

    def in_flight(self, model: str | None = None) -> int:
        return self._slots.total() if model is None else self._slots.in_flight(model)

    def waiting(self) -> int:
        return len(self._queue)

    def get_status(self) -> dict[str, Any]:
        """The pool's state for status pages, metrics and the dashboard (camelCase keys)."""
        models: dict[str, dict[str, Any]] = {}
        held = self._slots.snapshot()
        names: Iterable[str] = list(self._entries) + [m for m in held if m not in self._entries]
        for name in names:
            spec = self._config.models.get(name)
            block = self._cooldowns.block(name)
            out = block is not None and block.kind == "out"
            remaining = self._cooldowns.remaining(name)
            models[name] = {
                "tier": spec.tier if spec else None,
                "dispatched": self.dispatched.get(name, 0),
                "inFlight": held.get(name, 0),
                "capacity": spec.max_concurrency if spec else 0,
                "cooldownRemaining": 0.0 if out or math.isinf(remaining) else round(remaining, 3),
                "outOfRotation": block.reason if out and block else None,
                "cooldownReason": block.reason if block and not out else None,
                "excluded": name in self._config.chaos_mode.exclude_models,
                "free": bool(spec and spec.free),
            }
        pause = self._cooldowns.account_pause()
        waiting = self._queue.waiting()
        used = self._slots.total()
        return {
            "enabled": self._config.chaos_mode.enabled,
            "strategy": self._config.chaos_mode.strategy,
            "models": models,
            "totalCapacity": self._account_cap,
            "usedCapacity": used,
            "utilization": round(used / self._account_cap, 4) if self._account_cap else 0.0,
            "accountPause": {"remaining": round(pause[0], 3), "reason": pause[1]} if pause else None,
            "queue": {
                "waiting": len(waiting),
                "waitingByTier": {t: sum(1 for w in waiting if w.ticket.tier == t) for t in REQUEST_TIERS},
                "longestWait": round(self._queue.oldest_wait(), 3),
                "timeouts": self._queue.timeouts,
                "admitted": self.admitted,
                "rejected": self.rejected,
                "avgWaitMs": round(1000 * self.total_wait / self.admitted, 1) if self.admitted else 0.0,
            },
            "sticky": {"enabled": self._sticky_on, "entries": len(self._sticky), "moves": self._sticky.moves},
            "spuriousReleases": self.spurious_releases,
        }
