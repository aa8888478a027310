"""An asyncio event loop in virtual time, for the benchmarks' models (`fleet.virtual`, `field.virtual`): the
real pool code runs on it, and its clock jumps to the next timer whenever nothing is ready."""

from __future__ import annotations

import asyncio
import heapq


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer when nothing is ready: no waiting, no CPU noise."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0].cancelled():  # as the loop itself drops them, before jumping
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
            heapq.heappop(scheduled)
        if not self._ready and scheduled:  # type: ignore[attr-defined]
            self._now = max(self._now, scheduled[0].when())
        super()._run_once()  # type: ignore[misc]
