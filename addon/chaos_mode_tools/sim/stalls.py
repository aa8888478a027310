"""Stalls: z.ai holding a request over the limit instead of refusing it. The request waits inside z.ai (no
response head sent) until a slot within the limits frees, then is served; with a maximum wait it is refused
with 1302 when that runs out (Hmbown/Codewhale#3496: 4 parallel GLM-5.2 streams waited 45 s for their
heads; RicherTunes/ai-proxy: "Z.AI queues rather than hard-rejects").

Waiters are served first come, first served, except that one whose model (or the account) is still full does
not hold back a later one that fits. Pure bookkeeping: the state takes the slots, the server awaits.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

LONG_WAIT_SECONDS = 1.0  # a wait counted in `over1s`


def resolve(future: asyncio.Future[None]) -> None:
    """A `Waiter`'s `wake` for a future its request awaits: set, unless it was cancelled meanwhile."""
    if not future.done():
        future.set_result(None)


@dataclass(eq=False, slots=True)
class Waiter:
    """One request held inside z.ai. `wake` is called once, when a slot was taken for it."""

    model: str
    since: float
    wake: Callable[[], None]
    admitted: bool = False


@dataclass(slots=True)
class Stalls:
    """The requests waiting now, and how long every request that waited did."""

    waiting: list[Waiter] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)  # seconds, of every request that waited
    log: list[tuple[str, float, float]] = field(default_factory=list)  # (model, since, seconds) of each
    origin: float = 0.0  # when the counts were last cleared: `log` times are from then
    timed_out: int = 0
    left: int = 0  # the client went away while its request waited

    def add(self, waiter: Waiter) -> None:
        self.waiting.append(waiter)

    def admitted(self, waiter: Waiter, now: float) -> None:
        """`waiter` got its slot: out of the queue, its wait recorded, woken."""
        self.waiting.remove(waiter)
        self._waited(waiter, now)
        waiter.admitted = True
        waiter.wake()

    def leave(self, waiter: Waiter, now: float, why: Literal["timeout", "left"]) -> None:
        """`waiter` stops waiting without a slot (its maximum wait ran out, or its client left)."""
        if waiter.admitted or waiter not in self.waiting:
            return
        self.waiting.remove(waiter)
        self._waited(waiter, now)
        if why == "timeout":
            self.timed_out += 1
        else:
            self.left += 1

    def _waited(self, waiter: Waiter, now: float) -> None:
        seconds = max(0.0, now - waiter.since)
        self.waits.append(seconds)
        self.log.append((waiter.model, waiter.since, seconds))

    def clear_counts(self, now: float = 0.0) -> None:
        """Forget past waits (the waiting requests still wait); later ones are logged from `now`."""
        self.waits, self.log, self.origin = [], [], now
        self.timed_out = self.left = 0

    def doc(self, now: float) -> dict[str, Any]:
        """The `zaiWaits` of `/sim/stats`: waiting now, and over every request that waited (its longest
        wait so far counted for the ones still waiting)."""
        waits = sorted([*self.waits, *(max(0.0, now - w.since) for w in self.waiting)])
        return {
            "waitingNow": len(self.waiting),
            "waited": len(waits),
            "maxMs": round(1000 * waits[-1], 1) if waits else 0.0,
            "p99Ms": round(1000 * nearest_rank(waits, 99), 1) if waits else 0.0,
            "over1s": sum(1 for w in waits if w > LONG_WAIT_SECONDS),
            "timedOut": self.timed_out,
            "left": self.left,
            # every wait that ended: [model, when it began (seconds from the counts' clearing), seconds]
            "log": [[m, round(since - self.origin, 3), round(wait, 3)] for m, since, wait in self.log],
        }


def nearest_rank(ordered: list[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100) of sorted, non-empty values by the nearest-rank method."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
