"""One routed request from admission to its last byte: the one owner of its slot, attempts and outcome.

Pure: it knows the pool and the stats, never mitmproxy. Everything said to the pool about this request's
slots goes through here: taking one (`admit`, `fail_over`, `spare_slot`), z.ai's verdict on the attempt it
was sent with (`answered`, `judge`; or, for a refusal that may be the request's own (see `refusals`),
`excuse` and `owe`, with the cooldowns owed applied by `pay`), and giving it back (`release_slot`, or
`finish`, whatever ends the request: an answer, a client that leaves, an upstream that breaks, an
exception, shutdown). `finish` records the outcome once; a slot granted after the request ended is given
back at once. An attempt left unanswered for a slot within the limits (see `hedging`) takes its slot with
it: the verdict that comes later is judged on that slot (`judge(..., slot=)`) and it is given back with
`release_left`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from chaos_mode.config.schema import MODEL_NAME
from chaos_mode.doors.messages import MessageRequest
from chaos_mode.observe.stats import Outcome, Stats
from chaos_mode.request.refusals import Refusal, Refusals, Whose, of_kind
from chaos_mode.routing.pool import ChaosPool, RequestInfo, Slot, Ticket
from chaos_mode.zai.catalog import RequestTier
from chaos_mode.zai.errors import Action, UpstreamError

Later = Callable[[float, Callable[[], object]], object]  # call after a delay (the loop's call_later)
Alive = Callable[[], bool]  # whether the client is still there
CLIENT_POLL_SECONDS: Final = 0.25  # how often a waiting request checks that its client is still there


class RequestView(Protocol):
    """What the adapter shows of a routed request (mitmproxy's flow: comment, metadata, request). Through it
    `request` and `forwarding` call the adapter back, their only calls up to `mitm`."""

    def received(self) -> None:
        """The forwarder has the request: the flow shows its real destination again."""

    def attempt(self, body: bytes) -> None:
        """A new attempt goes out with this (encoded) body."""

    def changed(self, request: RoutedRequest) -> None:
        """Something worth showing changed (comment, mark, the metadata mirror)."""


class NoView:
    """For requests nobody looks at (tests, benchmarks)."""

    def received(self) -> None:
        return None

    def attempt(self, body: bytes) -> None:
        return None

    def changed(self, request: RoutedRequest) -> None:
        return None


@dataclass(slots=True)
class Attempt:
    """One try on one model: the slot the pool gave, and z.ai's refusal if it refused."""

    slot: Slot  # its record (`routing.slot_record`) says where it stands with z.ai
    at: float  # when its slot was held (the clock's)
    refusal: str | None = None  # the business code (or reason) z.ai refused this attempt with
    served: str | None = None  # the model z.ai named in its answer, where it differs from the one asked

    @property
    def model(self) -> str:
        return self.slot.model

    @property
    def stalled(self) -> bool:
        """z.ai held its head far longer than its heads take (it queued it)."""
        return self.slot.record is not None and self.slot.record.stalled

    @property
    def overdue(self) -> bool:
        """No head within its patience: it rode above the limits until its verdict."""
        return self.slot.record is not None and self.slot.record.overdue


@dataclass(frozen=True, slots=True)
class Owed:
    """A cooldown a model earned by refusing the request, not applied while whose refusal it was is not
    known (see `refusals`)."""

    model: str
    error: UpstreamError
    retry_after: float | None


class RoutedRequest:
    """A request chaos mode routes: its parsed message, tier, ticket, slot, attempts and outcome."""

    def __init__(
        self,
        message: MessageRequest,
        tier: RequestTier,
        *,
        pool: ChaosPool,
        stats: Stats,
        later: Later,
        clock: Callable[[], float] = time.monotonic,
        routed: bool = True,
        sticky_key: str | None = None,
        session: str | None = None,
        encode: Callable[[bytes], bytes] = bytes,
        view: RequestView | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self.message = message
        self.tier = tier
        self.pool = pool
        self.stats = stats
        self.routed = routed  # False: chaos mode is off, the request is only counted
        self.sticky_key = sticky_key
        self.session = session  # the conversation (Claude Code's session id): its place in the queue
        self.arrived: float | None = None  # first arrival on the pool's clock: a failover keeps its place
        self.encode = encode  # decoded body -> the body as sent (the request's content-encoding)
        self.view: RequestView = view or NoView()
        self.refusals = refusals if refusals is not None else Refusals(clock)  # the addon shares one
        self._later = later
        self._clock = clock
        self.attempts: list[Attempt] = []
        self.refused: frozenset[str] = frozenset()  # models that cannot serve it (not just busy)
        self.busy: frozenset[str] = frozenset()  # models that refused it for capacity since it last waited
        self._burst = 0  # its first attempt since it last waited for a slot to free (`fail_over`)
        self.slot: Slot | None = None  # the slot held now
        self.sent = False  # the current attempt went upstream (z.ai counts it until it ends)
        self.waited = 0.0
        self.outcome: Outcome | None = None
        self.rejected: str | None = None  # why we answered with our own 429 (or 403)
        self.rejected_status = 429
        self.own_refusal: str | None = None  # why z.ai's refusal was found the request's own (see `refusals`)
        self.owed: list[Owed] = []  # cooldowns owed, applied when the refusal turns out to be the model's
        self.usage: tuple[int, int] | None = None
        self.stopped = False
        self._answered = 0  # attempts whose clean answer was reported to the pool

    # -- facts ------------------------------------------------------------------------------------------

    @property
    def original_model(self) -> str:
        return self.message.model

    @property
    def model(self) -> str | None:
        """The model of the latest attempt."""
        return self.attempts[-1].model if self.attempts else None

    @property
    def served(self) -> str | None:
        """The model that served the latest attempt, where z.ai named another than the one asked."""
        return self.attempts[-1].served if self.attempts else None

    @property
    def tried(self) -> list[str]:
        return [attempt.model for attempt in self.attempts]

    @property
    def failovers(self) -> int:
        return max(len(self.attempts) - 1, 0)

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    @property
    def may_fail_over(self) -> bool:
        """Another attempt is allowed: at once, up to `streams.maxFailovers` in a row since it last waited;
        its latest refused for capacity, once a slot frees (`fail_over`)."""
        return not self._burst_spent or self._storm

    @property
    def _burst_spent(self) -> bool:
        return len(self.attempts) - self._burst - 1 >= self.pool.config.streams.max_failovers

    @property
    def _storm(self) -> bool:
        """Its latest attempt was refused for capacity, and the fair queue is there to wait in."""
        return bool(self.attempts) and self.attempts[-1].model in self.busy and self.pool.config.queue.enabled

    @functools.cached_property
    def conversation(self) -> str | None:
        """The request's conversation as the refusals' memory knows it: its head hashed (see `refusals`)."""
        return self.message.sticky_key(None)

    def ticket(self) -> Ticket:
        """What the request may use now: its tier, minus the models that cannot serve it and those that
        refused it for capacity since it last waited. Only the first admission counts toward its
        conversation's share; a failover's does not."""
        first = not self.attempts
        return Ticket(
            self.tier,
            self.refused | self.busy,
            RequestInfo.estimate(self.message.size, self.message.output_budget),
            self.sticky_key,
            self.session,
            first,
            images=self.message.images,
        )

    def body_for(self, model: str) -> bytes:
        """The request body as sent to `model`: only the top-level `model` changed, encoded as it came."""
        return self.encode(self.message.with_model(model))

    # -- taking a slot ------------------------------------------------------------------------------------

    async def admit(self, alive: Alive) -> bool | None:
        """A slot for the first attempt, waiting fairly while `alive()` says the client is still there:
        True (held), False (the queue gave up: timeout, or nothing could ever serve it), None (the client
        left first: no slot is held)."""
        started = self.arrived = self._clock()
        ticket = self.ticket()
        # The common case, a free slot and nobody waiting, takes no coroutine.
        slot = self.pool.admit_now(ticket)
        gone = False
        if slot is None:
            slot, gone = await _while_alive(self.pool, self.pool.admit(ticket, since=started), alive)
        self.waited = self._clock() - started
        self.stats.queue_wait(self.tier, self.waited)
        if gone:
            return None
        return slot is not None and self.hold(slot)

    def hold(self, slot: Slot) -> bool:
        """Own the slot the pool just granted; False (and the slot given back) if the request has ended
        meanwhile or already holds one."""
        if self.finished or self.slot is not None:
            self.pool.release(slot)
            return False
        self.slot = slot
        self.sent = False
        self.attempts.append(Attempt(slot, self._clock()))
        return True

    async def fail_over(self, why: str) -> Slot | None:
        """After the current attempt was refused (`refused_by`): a slot on another model, held, at once or
        after a fair wait in line from the request's first arrival; None when no model could take it
        within the queue's timeout from then (or the request ended meanwhile: then `finished`). Its latest
        attempt refused for capacity, with no other model left to try or as many attempts in a row as
        `streams.maxFailovers` allows (the queue on), it first waits for a slot held here to be given
        back; then the models that refused it for capacity are eligible again, and a new burst begins."""
        failed = self.model or ""
        ticket = self.ticket()
        if self._storm and (self._burst_spent or self.pool.unavailable(ticket) is not None):
            self.busy, self._burst = frozenset(), len(self.attempts)
            ticket = replace(self.ticket(), may_probe=False)  # a slot within the learned limits
            if self.pool.in_flight() and self.pool.unavailable(ticket) is None:  # else none would free
                await self.pool.freed(self._time_left())
                if self.finished:
                    return None
        slot = await self.pool.admit(ticket, since=self.arrived, timeout=self._time_left())
        if slot is None:
            self.stats.failover(failed, None, why)
            return None
        if not self.hold(slot):  # the request ended while it waited
            return None
        self.stats.failover(failed, slot.model, why)
        return slot

    def _time_left(self) -> float:
        """What is left of the queue's timeout, counted from the request's first arrival."""
        arrived = self._clock() if self.arrived is None else self.arrived
        return max(self.pool.config.queue.timeout_seconds - (self._clock() - arrived), 0.0)

    def overdue(self) -> None:
        """The current attempt has had no head within its patience (see `hedging`): z.ai is most likely
        refusing it and holds no slot for it (`zai.assumptions.REFUSED_HOLDS_NO_SLOT`), so it rides above
        the limits until its verdict (`Ledger.overdue`), its place going to the next request. One attempt of
        a request rides at a time: z.ai refuses a second of the same request for the same reason."""
        if (slot := self.slot) is None:
            return
        self.pool.ledger.overdue(slot, lends=not any(attempt.slot.rides for attempt in self.attempts))
        if slot.rides:
            self.view.changed(self)

    async def spare_slot(self) -> Slot | None:
        """A slot within the limits (never a probe) for a new attempt beside the current one, not held yet:
        `switch_to` it, or give it back with `drop`. Not on the model of an attempt of its own that rides
        overdue: z.ai is refusing that one there."""
        ticket = self.ticket()
        riding = {attempt.model for attempt in self.attempts if attempt.slot.rides}
        spare = replace(ticket, attempted=ticket.attempted | riding, may_probe=False)
        return await self.pool.admit(spare, since=self.arrived)

    def drop(self, slot: Slot) -> None:
        """Give back a slot granted (by `spare_slot`) and not used."""
        self.pool.release(slot)

    def give_up_probe(self) -> None:
        """The probe sent with the current slot had no head within its patience (closed by the caller): it
        tested nothing, and its place goes back at once; the request waits for a slot within the limits."""
        probe = self.slot
        if probe is None or probe.probe is None:
            return
        if self.attempts:
            self.attempts[-1].refusal = "probe given up"
        self.pool.ledger.no_verdict(probe, probe_given_up=True)
        self.release_slot()

    def switch_to(self, slot: Slot) -> bool:
        """Leave the current attempt, unanswered, for `slot` (within the limits): a regular attempt keeps
        its own slot until z.ai's verdict on it, which the caller awaits (`left`), and counts a failover; a
        probe is given up (it tested nothing; its place back at once), no failover. False (`slot` given
        back) if the request ended."""
        left = self.slot
        if left is not None and left.probe is not None:
            self.give_up_probe()  # it tested nothing: no failover
        elif left is not None and self.attempts:
            self.attempts[-1].refusal = "no answer yet"
        self.slot = None
        if not self.hold(slot):
            return False
        before = self.attempts[-2]
        if before.refusal == "probe given up":  # now, or at its stall while it waited (z.ai queues)
            self.stats.probes_given_up += 1
        else:
            self.stats.failover(before.model, slot.model, before.refusal or "")
        return True

    # -- z.ai's verdict ---------------------------------------------------------------------------------

    def served_by(self, model: object) -> bool:
        """z.ai's answer to the current attempt names the model that served it (`routing.aliases`;
        `zai.assumptions.ANSWERS_NAME_SERVED_MODEL`); False
        when the name is not one (the request stays counted by the name asked)."""
        attempt = self.attempts[-1] if self.attempts and self.slot is not None else None
        if attempt is None or attempt.served is not None:
            return True
        if not isinstance(model, str) or not MODEL_NAME.fullmatch(model) or not model.isprintable():
            return False  # isprintable: no C1 control, no bidi override (it is logged, shown, saved)
        if model.lower() != attempt.model.lower():
            attempt.served = model
            self.view.changed(self)
        self.pool.learned.served(attempt.slot, model)
        return True

    def answered(self, slot: Slot | None = None, *, at_once: bool = True) -> None:
        """z.ai answered cleanly the attempt sent with `slot` (default: the current one, once per
        attempt): what it was sent with held. `at_once`: z.ai served it from its arrival (False: it may
        have held it first; see `Ledger.success`). With `slot`, a left attempt's: its answer is
        closed unread (the request was answered elsewhere), and counted so."""
        if slot is not None:
            self.refusals.answered(slot.model)
            self.pool.ledger.success(slot, at_once=at_once)
            self.stats.unread_answer(slot.model)
            return
        if self.slot is None or self._answered == len(self.attempts):
            return
        self._answered = len(self.attempts)
        self.refusals.answered(self.slot.model)
        self.pool.ledger.success(self.slot, at_once=at_once)
        if self._answered > 1:  # served only after losing an attempt: its conversation's next request
            # waits in line as if it had come that much earlier (once: its admission clears it)
            self.pool.shares.fell_behind(self.session, self.attempts[-1].at - self.attempts[0].at)
        self.pay()  # another model serves it: the refusals before were their models'

    def written(self, slot: Slot) -> None:
        """The attempt sent with `slot` was written to z.ai now: what z.ai judges it beside (see
        `Ledger.sent`)."""
        self.pool.ledger.sent(slot, whole=not self.message.stream)

    def queued(self, slot: Slot) -> None:
        """z.ai queues (`zai.assumptions.MAY_QUEUE`), and may hold the probe sent with `slot`: the first slot
        of its limit that a request z.ai served gives back is the probe's (`Ledger.queued`)."""
        self.pool.ledger.queued(slot)

    def stalled(self, slot: Slot) -> None:
        """z.ai holds the head of the attempt sent with `slot` far longer than its heads take (it queues it,
        `zai.assumptions.MAY_QUEUE`):
        the pool learns a limit was passed; the attempt goes on, and the flow says so."""
        if self.pool.ledger.stall(slot):  # else its verdict came first
            self.view.changed(self)

    def ended(self) -> None:
        """z.ai sent the current attempt's answer to its end: it serves it no more (the slot is given back
        when the flow ends, the client perhaps still reading)."""
        if self.slot is not None:
            self.pool.ledger.ended(self.slot)

    def judge(self, error: UpstreamError, retry_after: float | None, slot: Slot | None = None) -> None:
        """z.ai refused the attempt sent with `slot` (default: the current one): the pool learns from it,
        the stats count it."""
        slot = slot or self.slot
        if slot is None:
            return
        self.pool.error(slot.model, error, retry_after, slot)
        self.stats.upstream_error(slot.model, error.code, error.status)

    def whose(self, error: UpstreamError, *, may_fail_over: bool, slot: Slot | None = None) -> Whose:
        """Whose z.ai's refusal of the attempt sent with `slot` (default: the current one) is, by the rule of
        `refusals`; `may_fail_over`: the request may be sent again. An attempt left behind (`slot` given) is
        the request's only when its conversation is remembered."""
        left = slot is not None
        slot = slot or self.slot
        if slot is None or error.action is not Action.COOLDOWN:
            return Whose.MODEL  # capacity, the account, the model's day or rotation: never the request's
        memory, conversation, code = self.refusals, self.conversation, error.code
        if code is None or not of_kind(error):
            verdict = Whose.MODEL
        elif left:
            verdict = Whose.REQUEST if memory.remembered(conversation, code) else Whose.MODEL
        else:
            earlier = [owed.model for owed in self.owed if owed.error.code == code]
            verdict = memory.whose(
                Refusal(conversation, code, slot.model, earlier, may_fail_over), self.pool.ledger
            )
        if verdict is not Whose.REQUEST:  # the request's own refusals are no sign of load
            memory.refused(slot.model, conversation)
        return verdict

    def excuse(self, error: UpstreamError, slot: Slot | None = None) -> None:
        """z.ai refused the attempt sent with `slot` (default: the current one) for the request itself: the
        slot has its verdict, which says nothing of the model (nothing cooled, no limit moved), and the
        cooldowns owed for the same code are dropped; each refusal is counted apart."""
        left = slot is not None
        slot = slot or self.slot
        if slot is None:
            return
        self.pool.ledger.no_verdict(slot)
        self.stats.request_refusal(error.code, error.status)
        if left:
            return
        dropped = [owed for owed in self.owed if owed.error.code == error.code]
        self.owed = [owed for owed in self.owed if owed.error.code != error.code]
        for owed in dropped:
            self.stats.request_refusal(owed.error.code, owed.error.status)
        models = [owed.model for owed in dropped] + [slot.model]
        if dropped:
            why = f"{', '.join(models)} refused it with {error.code} while serving others"
        else:
            why = f"{slot.model} refused it with {error.code} again (its conversation is remembered)"
        self.own_refusal = why
        if self.attempts:
            self.attempts[-1].refusal = error.code

    def owe(self, error: UpstreamError, retry_after: float | None) -> None:
        """z.ai refused the current attempt, and whose refusal it is is not known yet: the slot has its
        verdict, and the cooldown the model earned is owed until the request is served elsewhere or ends
        (`pay`), or dropped if the refusal turns out to be the request's own (`excuse`)."""
        slot = self.slot
        if slot is None:
            return
        self.pool.ledger.no_verdict(slot)
        self.owed.append(Owed(slot.model, error, retry_after))

    def pay(self) -> None:
        """The cooldowns owed are applied (late): those refusals were their models' after all."""
        owed, self.owed = self.owed, []
        for each in owed:
            self.pool.error(each.model, each.error, each.retry_after)
            self.stats.upstream_error(each.model, each.error.code, each.error.status)

    def refused_by(self, refusal: str, *, broken: bool) -> None:
        """z.ai refused the current attempt; `broken`: the model cannot serve this request (else it was
        busy: not tried again before the request waited)."""
        if self.attempts:
            self.attempts[-1].refusal = refusal
            model = self.attempts[-1].model
            if broken:
                self.refused = self.refused | {model}
            else:
                self.busy = self.busy | {model}
        self.release_slot()

    def release_left(self, slot: Slot) -> None:
        """An attempt left unanswered (`switch_to`) has its verdict, or will have none: its slot goes back."""
        self.pool.release(slot)

    # -- the end --------------------------------------------------------------------------------------------

    def release_slot(self, grace: float = 0.0) -> None:
        """Give the held slot back, exactly once; after `grace` seconds when z.ai may still count it (its
        request awaits no verdict from then on: a probe left so tested nothing)."""
        slot, self.slot = self.slot, None
        if slot is None:
            return
        if grace > 0:
            self.pool.ledger.no_verdict(slot)
            self._later(grace, functools.partial(self.pool.release, slot))
        else:
            self.pool.release(slot)

    def finish(self, outcome: Outcome, *, grace: float = 0.0) -> bool:
        """Record how the request ended and give its slot back; only the first call counts."""
        if self.finished:
            self.release_slot(grace)  # nothing should be held; if it is, never keep it
            return False
        self.outcome = outcome
        self.pay()
        self.release_slot(grace if self.sent else 0.0)
        self.stats.request_done(self.model or self.original_model, self.tier, outcome, self.message.door)
        self.view.changed(self)
        return True

    def reject(self, why: str, status: int = 429) -> None:
        """We answer with our own 429 (403: waiting fixes nothing)."""
        self.rejected, self.rejected_status = why, status
        self.release_slot()

    def mirror(self) -> dict[str, Any]:
        """Plain values for `flow.metadata` (saved with the flow, read by tests and tools)."""
        attempts = self.attempts
        records = [(attempt.slot.model, attempt.slot.record) for attempt in attempts]
        return {
            "door": self.message.door,
            "originalModel": self.message.model,
            "tier": self.tier,
            "mode": "routed" if self.routed else "off",
            "model": records[-1][0] if records else None,
            "reason": attempts[-1].slot.reason if attempts else None,
            "held": self.slot.model if self.slot is not None else None,
            "attempted": [model for model, _ in records],
            "refusals": [attempt.refusal for attempt in attempts],
            "stalled": [model for model, record in records if record is not None and record.stalled],
            "overdue": [model for model, record in records if record is not None and record.overdue],
            "failovers": max(len(attempts) - 1, 0),
            "waited": round(self.waited, 3),
            "sticky": self.sticky_key,
            "session": self.session,
            "rejected": self.rejected,
            "ownRefusal": self.own_refusal,
            "usage": list(self.usage) if self.usage is not None else None,
            "stopped": self.stopped,
            "outcome": self.outcome,
        }


async def _while_alive(pool: ChaosPool, admission: Any, alive: Alive) -> tuple[Slot | None, bool]:
    """(the slot `admission` (the pool's `admit`) grants, whether the client left first). A client that
    gives up while its request waits keeps no place in line, nor a slot granted just as it left."""
    task: asyncio.Future[Slot | None] = asyncio.ensure_future(admission)
    delivered = False
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=CLIENT_POLL_SECONDS)
            if done:
                delivered = True
                return task.result(), False
            if not alive():
                return None, True
    finally:
        if not delivered:
            if not task.done():
                task.cancel()  # the queue gives back a slot granted meanwhile
            elif not task.cancelled() and (granted := task.result()) is not None:
                pool.release(granted)
