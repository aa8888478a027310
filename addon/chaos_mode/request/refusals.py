"""Refusals that belong to a request, not to the model that sent them: whose a refusal is, and the memory.

The model of z.ai. z.ai refuses for two reasons that its codes do not tell apart. **Load** belongs to a
model (or the account): while it lasts the model refuses the requests it is sent, whoever sends them, and
serves none of them. **Content** belongs to one request: z.ai's filter answers 1305 for a phrase in the
system prompt, on every model, at once, whatever the load (HTTP 529 `overloaded_error` at the Anthropic
door, 429 at the OpenAI door), while those models serve everyone else. One refusal cannot tell the two
apart; the same request refused by a second model with the same code while both serve others can. Cooling
models down for a request's own refusal punishes every other request; failing it over only sends it to
be refused again.

The rule. A refusal *may be the request's* when its business code is one of load or content (`of_kind`):
an overload or frequency code (1303, 1305, 1312) or a code the table does not know, on a busy status. Never
1302 (capacity: the learned limits' evidence), an account-wide code (1308, 1310, 1313), the model's day
(1304), a model out of rotation (1113, 1211, 1311) or an expired plan (1309). A busy status with no code
(a bare 429, or 529 `overloaded_error`) is load, as a 429 is: it is not the request's. A model *serves*
when z.ai answered one of its requests cleanly within the last `SERVED_LATELY_SECONDS`, or one it answered
cleanly is still running. For a refusal of request R by model M with code C of that kind, in this order:

1. R's conversation was found refused for itself with C within the last `REMEMBER_SECONDS`: R's own.
2. Another model refused R with C before (its cooldown owed, below) and it and M both serve: R's own, and
   R's conversation is remembered.
3. M looks overloaded (within the last `SERVED_LATELY_SECONDS` it served nobody and refused another
   conversation for load or content), or R cannot fail over any more: M's, judged as any refusal (cooled).
4. Otherwise undecided: M's cooldown is owed, not applied, and R fails over keeping its place in line.
   A model nobody else was sent to is undecided too: being idle is no sign of load (at a proxy's start
   nothing has been served yet, and the filter answers before any other request's head).

What it costs when wrong: a truly overloaded model that served others lately is cooled one failover late;
two models overloaded at once with the same code, while serving others, send z.ai's own answer (retryable,
as a 529 or 429) to that request instead of another failover, and its conversation's retries get it at once
until the memory forgets. With nobody else served the two cannot be told apart: the models are cooled.

R's own: z.ai's answer (status, headers, body) goes to the client at once, no failover; nothing is cooled
and no limit moves (the cooldowns owed for C are dropped); it is counted apart (`requestRefusals`). An owed
cooldown is applied, late, when another model serves R, or when R ends any other way (our 429, the client
gone): the refusal was M's after all. A conversation is its head (system prompt and first message: what
the filter reads, and what every turn and retry of it repeats), hashed; the memory keeps at most
`MAX_REMEMBERED` of them, the least recently refused dropped first. Pure: the clock is injected, the
pool is read through `Activity`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from chaos_mode.zai.errors import Action, UpstreamError

SERVED_LATELY_SECONDS: Final = 10.0  # a clean answer this recent says the model serves
REMEMBER_SECONDS: Final = 300.0  # a conversation refused for itself is remembered this long
MAX_REMEMBERED: Final = 1024


class Whose(StrEnum):
    """Whose refusal it is."""

    REQUEST = "request"  # the request's own: z.ai's answer to the client, nothing cooled
    UNDECIDED = "undecided"  # not known yet: the model's cooldown owed, the request fails over
    MODEL = "model"  # the model's: judged as any refusal


class Activity(Protocol):
    """What the pool says of a model now (its `Ledger` is one)."""

    def in_flight(self, model: str) -> int:
        """Slots of `model` held now."""

    def unanswered(self, model: str) -> int:
        """Of those, the ones whose request z.ai has not answered yet."""


def of_kind(error: UpstreamError) -> bool:
    """Whether the refusal may be the request's own (a load or content code), not about capacity, the
    account, the model's day or its rotation (zai.assumptions.FILTER_REFUSES_EVERY_MODEL)."""
    return error.action is Action.COOLDOWN and error.code is not None


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refusal of a request's attempt, as the rule reads it."""

    conversation: str | None  # the request's conversation (None: it cannot be told, nor remembered)
    code: str
    model: str
    earlier: Collection[str] = ()  # other models that refused the request with `code`, their cooldown owed
    may_fail_over: bool = True


class Refusals:
    """The memory the rule reads: when each model last answered cleanly, which conversation it last refused,
    and the conversations refused for themselves (bounded, each for `remember_for` seconds)."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        lately: float = SERVED_LATELY_SECONDS,
        remember_for: float = REMEMBER_SECONDS,
        max_remembered: int = MAX_REMEMBERED,
    ) -> None:
        self._clock = clock
        self._lately = lately
        self._remember_for = remember_for
        self._max = max_remembered
        self._answered: dict[str, float] = {}  # model -> its last clean answer (the catalog bounds it)
        self._refused: dict[str, tuple[float, str | None]] = {}  # model -> (its last refusal, of whom)
        self._remembered: OrderedDict[tuple[str, str], float] = OrderedDict()  # (conversation, code) -> when

    def __len__(self) -> int:
        """Conversations (with a code) remembered now."""
        self._expire()
        return len(self._remembered)

    def answered(self, model: str) -> None:
        """z.ai answered a request of `model` cleanly just now."""
        self._answered[model] = self._clock()

    def refused(self, model: str, conversation: str | None) -> None:
        """z.ai refused a request of `conversation` on `model` just now, for load or content (a code of the
        kind, or a busy status with none), and the refusal was not found the request's own."""
        self._refused[model] = (self._clock(), conversation)

    def serves(self, model: str, activity: Activity) -> bool:
        """z.ai answered a request of `model` cleanly within the last `lately` seconds, or one it answered
        cleanly is still running."""
        at = self._answered.get(model)
        if at is not None and self._clock() - at <= self._lately:
            return True
        return activity.in_flight(model) > activity.unanswered(model)

    def overloaded(self, model: str, conversation: str | None, activity: Activity) -> bool:
        """`model` served nobody and refused another conversation within the last `lately` seconds."""
        last = self._refused.get(model)
        if last is None or self._clock() - last[0] > self._lately:
            return False
        other = conversation is None or last[1] != conversation
        return other and not self.serves(model, activity)

    def remembered(self, conversation: str | None, code: str) -> bool:
        """`conversation` was found refused for itself with `code` within the last `remember_for` s."""
        if conversation is None:
            return False
        self._expire()
        key = (conversation, code)
        if key not in self._remembered:
            return False
        self._remembered.move_to_end(key)  # the least recently refused goes first when full
        return True

    def remember(self, conversation: str | None, code: str) -> None:
        """`conversation` is refused for itself with `code`, from now; its refusals are no sign of load."""
        if conversation is None:
            return
        self._refused = {m: last for m, last in self._refused.items() if last[1] != conversation}
        key = (conversation, code)
        self._remembered.pop(key, None)
        self._remembered[key] = self._clock()
        while len(self._remembered) > self._max:
            self._remembered.popitem(last=False)

    def whose(self, refusal: Refusal, activity: Activity) -> Whose:
        """The rule (module docstring), for a refusal of the kind (`of_kind`); 2 remembers the conversation.
        The refusing request's own slot on `refusal.model` is still held."""
        conversation, code, model = refusal.conversation, refusal.code, refusal.model
        if self.remembered(conversation, code):
            return Whose.REQUEST
        serves = self.serves(model, activity)
        if serves and any(m != model and self.serves(m, activity) for m in refusal.earlier):
            self.remember(conversation, code)
            return Whose.REQUEST
        if not refusal.may_fail_over or self.overloaded(model, conversation, activity):
            return Whose.MODEL
        return Whose.UNDECIDED

    def _expire(self) -> None:
        oldest = self._clock() - self._remember_for
        remembered = self._remembered
        stale = [key for key, at in remembered.items() if at < oldest]
        for key in stale:
            del remembered[key]
