"""The fair async wait queue: requests wait here for a slot instead of bouncing off a 429."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


class InVain(Exception):
    """A waiter's attempt: it cannot be served however long it waits (its wait ends, with None)."""


@dataclass(eq=False, slots=True)
class Waiter[K, T]:
    ticket: K
    enqueued_at: float
    future: asyncio.Future[T] = field(repr=False)
    order: tuple[int, float] = (0, 0.0)  # served by (level, since): see WaitQueue


class WaitQueue[K, T]:
    """Waiters holding a ticket `K` (what they may use), each served a `T` (a slot) in fair order.

    Lowest `level` first (the caller's notion of who has had least), then first come, first served,
    among the waiters that can use what was freed. A waiter may count as having come earlier than it did
    (`since`): a request failing over keeps its first arrival.

    `dispatch()` walks the waiters oldest first and offers each the pool (`attempt(ticket)`); a
    waiter that cannot use what is free is passed over, so a heavy request waiting for a heavy model
    never blocks a light one that has room. `group(ticket)` names waiters that want the same thing:
    once one of a group found nothing, the rest of that group are not tried again in that pass.
    A waiter that times out or is cancelled never keeps a slot; one whose attempt raises gets the exception,
    and the others are still served.
    """

    def __init__(
        self,
        attempt: Callable[[K], T | None],
        release: Callable[[T], object],
        group: Callable[[K], object],
        clock: Callable[[], float],
    ) -> None:
        self._attempt = attempt
        self._release = release
        self._group = group
        self._clock = clock
        self._waiters: dict[int, Waiter[K, T]] = {}
        self._ids = itertools.count()
        self.timeouts = 0
        self.served = 0
        self.total_wait = 0.0  # seconds, over served waiters

    def __len__(self) -> int:
        return len(self._waiters)

    def waiting(self) -> list[Waiter[K, T]]:
        """The waiters, in the order they are served."""
        return list(self._waiters.values())

    def first(self) -> Waiter[K, T] | None:
        """The waiter served first, if any."""
        return next(iter(self._waiters.values()), None)

    def oldest_wait(self) -> float:
        """Seconds the longest waiter has waited so far (0 when nobody waits)."""
        oldest = min((waiter.enqueued_at for waiter in self._waiters.values()), default=None)
        return 0.0 if oldest is None else max(self._clock() - oldest, 0.0)

    async def wait(self, ticket: K, timeout: float, since: float | None = None, level: int = 0) -> T | None:
        """Wait up to `timeout` seconds to be served; None on timeout. Cancellation is safe. `level` and
        `since` (the time it counts as having come, default now) place it among the waiters."""
        loop = asyncio.get_running_loop()
        now = self._clock()
        order = (level, now if since is None else min(since, now))
        waiter: Waiter[K, T] = Waiter(ticket, now, loop.create_future(), order)
        key = next(self._ids)
        self._enqueue(key, waiter)
        delivered = False
        try:
            self.dispatch()
            try:
                async with asyncio.timeout(timeout):
                    result = await asyncio.shield(waiter.future)
            except TimeoutError:
                self.timeouts += 1
                return None
            except InVain:
                return None
            delivered = True
            return result
        finally:
            self._waiters.pop(key, None)
            if not delivered:
                # Timed out or cancelled: if a slot was handed over in the meantime, give it back.
                future = waiter.future
                if future.done() and not future.cancelled() and future.exception() is None:
                    self._release(future.result())
                    self.dispatch()
                else:
                    waiter.future.cancel()

    def _enqueue(self, key: int, waiter: Waiter[K, T]) -> None:
        last = next(reversed(self._waiters.values()), None)
        self._waiters[key] = waiter
        if last is not None and waiter.order < last.order:  # not simply the last in line: re-sort
            ordered = sorted(self._waiters.items(), key=lambda item: item[1].order)  # stable
            self._waiters = dict(ordered)

    def dispatch(self) -> int:
        """Serve every waiter that can be served now, oldest first; returns how many were served."""
        served = 0
        failed: set[object] = set()
        for key, waiter in list(self._waiters.items()):
            if waiter.future.done():
                continue
            group = self._group(waiter.ticket)
            if group in failed:
                continue
            try:
                result = self._attempt(waiter.ticket)
            except Exception as exc:  # its own request's to answer: not the flow whose release dispatched
                del self._waiters[key]
                waiter.future.set_exception(exc)
                continue
            if result is None:
                failed.add(group)
                continue
            del self._waiters[key]
            waiter.future.set_result(result)
            self.served += 1
            self.total_wait += max(self._clock() - waiter.enqueued_at, 0.0)
            served += 1
        return served
