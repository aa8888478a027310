"""What z.ai was serving when a request arrived: the level its refusal or stall is evidence at.

z.ai judges a request by what it serves when the request comes: the requests it accepted and has not
finished. The pool counts more than that in flight: requests whose verdict has not come yet, among them
requests z.ai is refusing, which it does not count (`zai.assumptions.REFUSED_HOLDS_NO_SLOT`; a 1302 takes
seconds, a head comes at once). So the level of a refusal or a stall is taken when its verdict comes, from the
slots that were held beside its own when it was taken and not finished: those z.ai turned out to accept (at
once, or for a refusal or a stall also after holding them: it may have been serving them already when the
request came), itself on top, and what other proxies of a fleet said z.ai served of theirs then (for a clean
answer, which comes within ms, only as far as they still say it now: a slot another proxy served then may have
ended; for a refusal, which comes seconds later, as they said it then or as they say it now, whichever is
more: by then their 1-s requests of then have ended and others run, so what they say now alone fell under
z.ai's level, and in a fleet's first burst they had said nothing yet when the request came, their requests
written with it answered only after it).
Counted at the taking instead (the pool's in flight), every refusal after a limit fell would be counted at
the old limit: the requests being refused there hold the pool's slots for seconds, never z.ai's.

z.ai sees requests in the order they reach it, not the order their slots were taken: each is written on
its own connection, once it is open. So "beside" is taken again when the request is written
(`Ledger.sent`): the slots written before it. And requests written within `AT_ONCE_SECONDS` of
each other reach z.ai in any order (the network's jitter; a server reading the sockets ready at once in
any order): those written just after it that z.ai accepted count beside it too. A swarm's first burst is
written so, all within a millisecond. Counted by the takings, the first one taken would often be refused
"at 1 in flight", under a level z.ai had just served: noise that holds the limit up while it is learned.
Counted with the burst, each refused request is at the level z.ai had filled. Assumed of z.ai, unchecked:
that it judges a request as it reads it, and that the network reorders requests by no more than that
(`zai.assumptions.ARRIVAL_ORDER_SECONDS`).

A request whose answer comes whole (not streamed) has no head before its end: z.ai's 1302 to another, in
seconds, comes before that answer tells whether z.ai was serving it. So a whole request still awaited counts
beside a refusal or a stall as one z.ai may be serving (the side where it says least, below). Left out, a
1302 beside a whole answer to come was counted "at 1 in flight", and a clean answer at 1 then contradicted
it: with whole requests only, a hard limit under the catalog's was never learned.

A clean answer's level leaves those written just after it out. Each verdict is taken on the side where it
says least: a refusal counted with the requests that may have come first says z.ai refused at a level
it may have reached, and lowers a limit no further than that; a clean answer counted with them says z.ai
served a level it may never have served, and raises a limit over z.ai's. It did: with heads sent with the
first token (`realistic`), clean answers on glm-4.5 were counted at 13 on a true 12 (11 written before,
1 just after, itself: 13), the pool held 13 and z.ai refused the 13th.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from chaos_mode.zai.assumptions import ARRIVAL_ORDER_SECONDS

KEEP: Final = 4096  # slots accepted at once remembered after they went back (their verdicts come in seconds)
AT_ONCE_SECONDS: Final = ARRIVAL_ORDER_SECONDS  # requests written this close together reach z.ai in any order


@dataclass(frozen=True, slots=True)
class Beside:
    """What was beside a slot's request when it came (taken, then written): kept on its record."""

    model: str  # the slot's own model
    slots: frozenset[int]  # every slot held and not finished when it was taken
    serving: Mapping[int, str]  # those of them z.ai served then (answered cleanly, however late): models
    model_elsewhere: int  # what other proxies said z.ai served of its model then
    account_elsewhere: int  # and of the account
    written_at: float | None  # when it was written (None: not told)


class Arrivals:
    """Which slots z.ai accepted at once, and when each request was written, beyond a slot's life (what was
    beside each is on its record). `elsewhere`: what the other proxies of a fleet say z.ai serves now (of a
    model; the account's for None)."""

    __slots__ = ("_accepted", "_elsewhere", "_written")

    def __init__(self, elsewhere: Callable[[str | None], int] = lambda _: 0) -> None:
        self._elsewhere = elsewhere
        # slot -> (its model, whether z.ai held it first), oldest first (at most KEEP)
        self._accepted: dict[int, tuple[str, bool]] = {}
        self._written: deque[tuple[float, int]] = deque(maxlen=KEEP)  # (when, slot), oldest first

    def beside(
        self,
        model: str,
        slots: Iterable[int],
        serving: Mapping[int, str] | None = None,
        written: tuple[int, float] | None = None,
    ) -> Beside:
        """A slot of `model` was taken with the slots `slots` held and not finished, `serving` of them
        answered cleanly already (z.ai serves those, even ones it held first); or its request, `written`
        (slot, when: monotonic, never earlier than the last one told), with those written before it."""
        if written is not None:
            self._written.append((written[1], written[0]))
        elsewhere, at = self._elsewhere, None if written is None else written[1]
        return Beside(model, frozenset(slots), serving or {}, elsewhere(model), elsewhere(None), at)

    def accepted(self, slot_id: int, model: str, *, held: bool = False) -> None:
        """z.ai answered the request of the slot (of `model`) cleanly: at once, or after holding it (`held`,
        a stall counted), so it may have served it from any time after its arrival: that counts beside a
        refusal or a stall (a level z.ai may have reached), not beside a clean answer."""
        accepted = self._accepted
        if slot_id not in accepted:
            accepted[slot_id] = (model, held)
            if len(accepted) > KEEP:
                del accepted[next(iter(accepted))]

    def levels(
        self, slot_id: int, beside: Beside, *, clean: bool = False, awaited: Mapping[int, str] | None = None
    ) -> tuple[int, int]:
        """(on its model, on the account) what z.ai served when the slot's request came, itself included.
        `clean`: for a clean answer, the slots written just after it do not count, and what the others said
        then only as far as they still say it (see the module). `awaited`: slots whose answer comes whole,
        its verdict not come yet (their models), counted beside a refusal or a stall (see the module)."""
        model_elsewhere, account_elsewhere = self._elsewhere(beside.model), self._elsewhere(None)
        model = account = 0
        for other in beside.slots if clean else beside.slots | self._written_just_after(slot_id, beside):
            served = beside.serving.get(other)
            if served is None and (accepted := self._accepted.get(other)) and not (clean and accepted[1]):
                served = accepted[0]
            if served is None and awaited:
                served = awaited.get(other)
            if served is not None:
                account += 1
                model += served == beside.model
        if clean:  # what they said then only as far as they still say it (a slot just taken may be refused)
            model += min(beside.model_elsewhere, model_elsewhere)
            account += min(beside.account_elsewhere, account_elsewhere)
        else:  # what they said then, or now if more (see the module)
            model += max(beside.model_elsewhere, model_elsewhere)
            account += max(beside.account_elsewhere, account_elsewhere)
        return model + 1, account + 1

    def _written_just_after(self, slot_id: int, beside: Beside) -> set[int]:
        """The slots whose request was written within `AT_ONCE_SECONDS` after this one's."""
        at = beside.written_at
        if at is None:
            return set()
        written = self._written
        first = bisect.bisect_left(written, at, key=lambda entry: entry[0])
        after: set[int] = set()
        for index in range(first, len(written)):
            when, other = written[index]
            if when > at + AT_ONCE_SECONDS:
                break
            if other != slot_id:
                after.add(other)
        return after
