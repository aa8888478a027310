"""How long an unanswered attempt is worth waiting for, and when its wait is a stall. Pure: the forwarder
feeds it the head times of clean streamed answers.

z.ai sends an accepted stream's head at once (or with its first token:
`zai.assumptions.HEAD_MAY_WAIT_FOR_FIRST_TOKEN`) and takes seconds to refuse (`zai.timing`). So an attempt
with no head after `seconds()` (1.5 times the upper quartile of recent heads: not the slowest, so that heads
z.ai held do not stretch it) is most likely being refused: it may be left for a slot within the limits
(hedging). One with no head after `stall_after()` (`forwarding.head_baseline`: several times its model's
quickest recent heads at the lowest concurrency, which z.ai did not hold) is held: z.ai queues it instead of
refusing (`zai.assumptions.MAY_QUEUE`), which says a limit was passed as a 1302 does. A head that comes after
its stall says z.ai queues: for `QUEUE_MEMORY_SECONDS` no attempt is left (leaving a held request would throw
away what z.ai is about to serve), and such heads never count among the recent ones.

**A larger prompt takes longer.** When z.ai sends a head with its first token, the head comes after the
prompt was read (prefill), which grows with the prompt (`zai.assumptions.HEAD_GROWS_WITH_PROMPT`). So each
recent head is kept with its request's size, the recent heads give how much later a head comes per byte of
request (Theil-Sen: the median of the slopes between pairs of heads, never below 0, so robust to a quarter of
odd heads and to time that has nothing to do with the size), and for an attempt larger than a head's request,
that head counts as it would for the attempt's size: that much later per byte more; never earlier for a
smaller one. Heads sent at once (no prefill in them) give a slope of about 0 and nothing changes. Without it,
with prompts of heavy-tailed sizes (`prompts` in the field benchmark), the largest prompts' heads read as
stalls and refusals: limits fell below the truth ("stall at 3 in flight" on a true 3) and prompts were served
twice (left as refused, accepted after all).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from typing import Final

from chaos_mode.forwarding.head_baseline import HeadBaseline

FLOOR_SECONDS: Final = 0.25  # never less: a loaded proxy or network alone may take this long
FACTOR: Final = 1.5  # patience is this times the recent heads' upper quartile
QUANTILE: Final = 0.75  # of the recent heads: robust to a quarter of them held by a queuing z.ai
KEEP: Final = 32  # how many recent heads count
ENOUGH: Final = 8  # heads seen before the floor is FLOOR_SECONDS
EARLY_FLOOR_SECONDS: Final = 1.0  # the floor before that: a margin while z.ai's pace is barely known
UNKNOWN_STALL_SECONDS: Final = 4.0  # the stall of a model none of whose heads was seen yet: a wide margin
QUEUE_MEMORY_SECONDS: Final = 60.0  # no attempt is left this long after z.ai was seen to queue
SLOPE_EVERY: Final = 8  # new heads before the seconds per byte are worked out again
# Pairs of heads whose requests differ by less say nothing of the prefill: their jitter over a few bytes made
# slopes of 0.01-0.03 s a byte, and a stall 0.1-0.3 s later for a request a dozen bytes larger.
SLOPE_MIN_BYTES: Final = 1000


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
        self._heads: deque[tuple[float, int | None]] = deque(maxlen=KEEP)  # (seconds, request's size)
        self._slope: float | None = None  # seconds per byte (module docstring); None: not worked out yet
        self._new_heads = 0  # since the slope was worked out
        self._queued_at = -float("inf")
        self._baseline = HeadBaseline(clock=clock)

    def head(
        self, seconds: float, size: int | None = None, *, model: str | None = None, level: int = 1
    ) -> None:
        """A clean answer's head came `seconds` after its request (of `size` bytes, if known) was sent to
        `model` with `level` in flight there, itself included."""
        if seconds >= self.stall_after(size, model):
            # z.ai held it, then served it: it queues (zai.assumptions.MAY_QUEUE)
            self._queued_at = self._clock()
            return
        self._heads.append((max(seconds, 0.0), size))
        self._new_heads += 1
        self._baseline.seen(model, seconds, level, size)

    def seconds_per_byte(self) -> float:
        """How much later a head comes per byte of request, from the recent heads (module docstring). Worked
        out again after each new head until `KEEP` are kept, then every `SLOPE_EVERY` (about 70 us each time,
        for `KEEP` heads): a slope from the first few heads must not stand for long."""
        filling = self._new_heads > 0 and len(self._heads) < KEEP
        if self._slope is None or filling or self._new_heads >= SLOPE_EVERY:
            self._new_heads = 0
            sized = sorted((size, seconds) for seconds, size in self._heads if size is not None)
            sizes = [size for size, _ in sized]
            # each pair once, the larger request second: only those SLOPE_MIN_BYTES apart or more
            slopes = sorted(
                (h2 - h1) / (s2 - s1)
                for i, (s1, h1) in enumerate(sized)
                for s2, h2 in sized[bisect_left(sizes, s1 + SLOPE_MIN_BYTES, i + 1) :]
            )
            self._slope = max(0.0, slopes[len(slopes) // 2]) if slopes else 0.0
        return self._slope

    def _heads_for(self, size: int | None) -> list[float]:
        """The recent heads, sorted, each as it would be for a request of `size` (module docstring)."""
        if size is None or not (slope := self.seconds_per_byte()):  # heads sent at once: as they came
            return sorted(seconds for seconds, _ in self._heads)
        return sorted(
            seconds + slope * max(0, size - theirs) if theirs is not None else seconds
            for seconds, theirs in self._heads
        )

    def _patience(self, size: int | None) -> float | None:
        if self._fixed is not None:
            return self._fixed
        if not self._heads:
            return None
        floor = FLOOR_SECONDS if len(self._heads) >= ENOUGH else EARLY_FLOOR_SECONDS
        heads = self._heads_for(size)
        return max(floor, FACTOR * heads[int(QUANTILE * (len(heads) - 1))])

    def queues(self) -> bool:
        """Whether z.ai was seen to queue lately (a held head, served after all)."""
        return self._clock() - self._queued_at < QUEUE_MEMORY_SECONDS

    def leaves_none(self) -> bool:
        """Whether no attempt is left now: z.ai queues (and the patience is not fixed)."""
        return self._fixed is None and self.queues()

    def seconds(self, size: int | None = None) -> float | None:
        """How long to wait for the head of a request of `size` bytes (None: unknown) before its attempt
        may be left; None: wait for it."""
        return None if self.leaves_none() else self._patience(size)

    def stall_after(self, size: int | None = None, model: str | None = None) -> float:
        """How long the head of a request of `size` bytes (None: unknown) to `model` may be held before the
        attempt counts as stalled."""
        after = self._baseline.stall_after(model, size, self.seconds_per_byte() if size is not None else 0.0)
        return UNKNOWN_STALL_SECONDS if after is None else after
