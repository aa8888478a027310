"""How long an unanswered attempt is worth waiting for, and when its wait is a stall. Pure: the forwarder
feeds it the head times of clean streamed answers.

z.ai sends an accepted stream's head at once (or with its first token) and takes seconds to refuse
(`zai.timing`). So an attempt with no head after `seconds()` (1.5 times the upper quartile of recent heads:
not the slowest, so that heads z.ai held do not stretch it) is most likely being refused: it may be left
for a slot within the limits (hedging). One with no head after `stall_after()` (four times z.ai's quickest
recent heads, at least `FLOOR_SECONDS`: z.ai may hold most heads when it queues, never its quickest) is
held: z.ai queues it instead of refusing, which says a limit was passed as a 1302 does. A head that comes
after its stall says z.ai queues: for `QUEUE_MEMORY_SECONDS` no attempt is left (leaving a held request
would throw away what z.ai is about to serve), and such heads never count among the recent ones.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final

FLOOR_SECONDS: Final = 0.25  # never less: a loaded proxy or network alone may take this long
FACTOR: Final = 1.5  # patience is this times the recent heads' upper quartile
QUANTILE: Final = 0.75  # of the recent heads: robust to a quarter of them held by a queuing z.ai
KEEP: Final = 32  # how many recent heads count
ENOUGH: Final = 8  # heads seen before the floor is FLOOR_SECONDS
EARLY_FLOOR_SECONDS: Final = 1.0  # the floor before that: a margin while z.ai's pace is barely known
STALL_FACTOR: Final = 4.0  # a head held this many times z.ai's quickest heads is a stall
STALL_QUANTILE: Final = 0.1  # z.ai's quickest heads: those of requests it did not hold (it may hold most)
STALL_FLOOR_SECONDS: Final = FLOOR_SECONDS  # never a stall sooner: as for the patience
QUEUE_MEMORY_SECONDS: Final = 60.0  # no attempt is left this long after z.ai was seen to queue


class HeadPatience:
    """Seconds from sending an attempt after which, with no head yet, a slot within the limits replaces it.

    1.5 times the upper quartile of the last `KEEP` clean answers' heads (send to status line), at least
    `FLOOR_SECONDS`; before `ENOUGH` heads were seen, at least `EARLY_FLOOR_SECONDS` (the first probes go
    out after the first few answers, and a refused one would otherwise cost its request z.ai's 3 s); None
    while z.ai queues (wait for the answer), and before any head was seen (not known yet: an attempt sent
    then asks again as it waits, `hedging`).
    """

    def __init__(self, fixed: float | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._fixed = fixed
        self._clock = clock
        self._heads: deque[float] = deque(maxlen=KEEP)
        self._queued_at = -float("inf")

    def head(self, seconds: float) -> None:
        """A clean answer's head came `seconds` after its request was sent."""
        if seconds >= self.stall_after():
            self._queued_at = self._clock()  # z.ai held it, then served it: it queues
            return
        self._heads.append(max(seconds, 0.0))

    def _patience(self) -> float | None:
        if self._fixed is not None:
            return self._fixed
        if not self._heads:
            return None
        floor = FLOOR_SECONDS if len(self._heads) >= ENOUGH else EARLY_FLOOR_SECONDS
        heads = sorted(self._heads)
        return max(floor, FACTOR * heads[int(QUANTILE * (len(heads) - 1))])

    def queues(self) -> bool:
        """Whether z.ai was seen to queue lately (a held head, served after all)."""
        return self._clock() - self._queued_at < QUEUE_MEMORY_SECONDS

    def leaves_none(self) -> bool:
        """Whether no attempt is left now: z.ai queues (and the patience is not fixed)."""
        return self._fixed is None and self.queues()

    def seconds(self) -> float | None:
        """How long to wait for a head before an attempt may be left; None: wait for it."""
        return None if self.leaves_none() else self._patience()

    def stall_after(self) -> float:
        """How long a head may be held before the attempt counts as stalled."""
        if not self._heads:
            return STALL_FACTOR * EARLY_FLOOR_SECONDS  # nothing known yet: a wide margin
        heads = sorted(self._heads)
        return max(STALL_FACTOR * heads[int(STALL_QUANTILE * (len(heads) - 1))], STALL_FLOOR_SECONDS)
