"""One routed request from admission to its last byte: the one owner of its slot, attempts and outcome.

Pure: it knows the pool and the stats, never mitmproxy. Whatever ends the request (an answer, a client
that leaves, an upstream that breaks, an exception, shutdown), `finish` records the outcome once and
`release_slot` gives the slot back once; a slot granted after the request ended is given back at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from chaos_mode.doors.messages import MessageRequest
from chaos_mode.observe.stats import Outcome, Stats
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.catalog import RequestTier

Later = Callable[[float, Callable[[], None]], object]  # call a function after a delay (the loop's call_later)


class RequestView(Protocol):
    """What the adapter shows of a routed request (mitmproxy's flow: comment, metadata, request)."""

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

    selection: Slot
    refusal: str | None = None  # the business code (or reason) z.ai refused this attempt with

    @property
    def model(self) -> str:
        return self.selection.model


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
        routed: bool = True,
        sticky_key: str | None = None,
        session: str | None = None,
        encode: Callable[[bytes], bytes] = bytes,
        view: RequestView | None = None,
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
        self._later = later
        self.attempts: list[Attempt] = []
        self.refused: frozenset[str] = frozenset()  # models that cannot serve it (not just busy)
        self.slot: Slot | None = None  # the slot held now
        self.sent = False  # the current attempt went upstream (z.ai counts it until it ends)
        self.waited = 0.0
        self.outcome: Outcome | None = None
        self.rejected: str | None = None  # why we answered with our own 429
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
    def tried(self) -> list[str]:
        return [attempt.model for attempt in self.attempts]

    @property
    def failovers(self) -> int:
        return max(len(self.attempts) - 1, 0)

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def ticket(self) -> Ticket:
        """What the request may use now: its tier, minus the models that refused it. Only the first
        admission counts toward its conversation's share; a failover's does not."""
        first = not self.attempts
        return Ticket(self.tier, self.refused, self.message.info, self.sticky_key, self.session, first)

    def body_for(self, model: str) -> bytes:
        """The request body as sent to `model`: only the top-level `model` changed, encoded as it came."""
        return self.encode(self.message.with_model(model))

    # -- the slot -----------------------------------------------------------------------------------------

    def hold(self, selection: Slot) -> bool:
        """Own the slot the pool just granted; False (and the slot given back) if the request has ended
        meanwhile or already holds one."""
        if self.finished or self.slot is not None:
            self.pool.release_selection(selection)
            return False
        self.slot = selection
        self.sent = False
        self.attempts.append(Attempt(selection))
        return True

    def release_slot(self, grace: float = 0.0) -> None:
        """Give the held slot back, exactly once; after `grace` seconds when z.ai may still count it."""
        slot, self.slot = self.slot, None
        if slot is None:
            return
        self.pool.verdict_done(slot)  # no verdict to wait for any more (a probe left so tested nothing)
        if grace > 0:
            self._later(grace, lambda: self._release_model(slot.model))
        else:
            self.pool.release(slot.model)

    def _release_model(self, model: str) -> None:
        self.pool.release(model)

    def answered(self) -> None:
        """z.ai answered the current attempt cleanly: what it was sent with held. Once per attempt."""
        if self.slot is None or self._answered == len(self.attempts):
            return
        self._answered = len(self.attempts)
        self.pool.report_success(self.slot)

    def refused_by(self, refusal: str, *, broken: bool) -> None:
        """z.ai refused the current attempt; `broken`: the model cannot serve this request (not busy)."""
        if self.attempts:
            self.attempts[-1].refusal = refusal
            if broken:
                self.refused = self.refused | {self.attempts[-1].model}
        self.release_slot()

    def move_on(self) -> None:
        """The current attempt, unanswered, is left for a slot within the limits: its slot goes with it
        (held until z.ai's verdict on it, which the forwarder still hears) and the request holds none."""
        if self.attempts:
            self.attempts[-1].refusal = "no answer yet"
        self.slot = None

    def give_up_probe(self) -> None:
        """The current attempt, a probe z.ai has not answered, is abandoned for a slot within the limits:
        neither a refusal nor a clean answer (it tested nothing), its place given back once."""
        if self.attempts:
            self.attempts[-1].refusal = "probe given up"
        if self.slot is not None:
            self.pool.give_up_probe(self.slot)
        self.release_slot()

    # -- the end --------------------------------------------------------------------------------------------

    def finish(self, outcome: Outcome, *, grace: float = 0.0) -> bool:
        """Record how the request ended and give its slot back; only the first call counts."""
        if self.finished:
            self.release_slot(grace)  # nothing should be held; if it is, never keep it
            return False
        self.outcome = outcome
        self.release_slot(grace if self.sent else 0.0)
        self.stats.request_done(self.model or self.original_model, self.tier, outcome, self.message.door)
        self.view.changed(self)
        return True

    def reject(self, why: str) -> None:
        """We answer with our own 429."""
        self.rejected = why
        self.release_slot()

    def mirror(self) -> dict[str, Any]:
        """Plain values for `flow.metadata` (saved with the flow, read by tests and tools)."""
        return {
            "door": self.message.door,
            "originalModel": self.original_model,
            "tier": self.tier,
            "mode": "routed" if self.routed else "off",
            "model": self.model,
            "reason": self.attempts[-1].selection.reason if self.attempts else None,
            "held": self.slot.model if self.slot is not None else None,
            "attempted": self.tried,
            "refusals": [attempt.refusal for attempt in self.attempts],
            "failovers": self.failovers,
            "waited": round(self.waited, 3),
            "sticky": self.sticky_key,
            "session": self.session,
            "rejected": self.rejected,
            "usage": list(self.usage) if self.usage is not None else None,
            "stopped": self.stopped,
            "outcome": self.outcome,
        }
