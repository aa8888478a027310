"""Each model's own service time, as a latency limiter reads its minimum round trip: the quickest recent heads
at the lowest concurrency. Pure: fed each clean head with its model, the level it was sent at and its
request's size; the clock is injected.

z.ai may send a head only with the first token (`zai.assumptions.HEAD_MAY_WAIT_FOR_FIRST_TOKEN`), so a head
held in z.ai's queue (`zai.assumptions.MAY_QUEUE`) looks like a slow one: its delay is the wait plus the
model's own service time. A wait only adds, so the quickest heads are the ones z.ai did not hold; but a proxy
kept one above a limit has every head there held (each request waits for a slot to free), so its recent heads
at that level, however quick, carry a wait. Heads sent at the lowest levels (one alone on its model cannot
wait for that model's limit) do not. So each model keeps its last `PER_LEVEL` heads at each level; its
baseline is the third quickest (`RANK`: two odd quick heads, a cached answer say, set nothing) of at least
`ENOUGH` heads at its lowest levels, among those seen within `WINDOW_SECONDS` of its newest head (a model
whose service slowed for good reads its new pace as soon as it serves a few at a low level again, while one
kept full keeps what it knew). A model kept at a low limit is seldom served under it: until it has had
`ENOUGH` heads under its highest level (or at level 1), the lower of its own reading and every model's counts
(read alone, a limit-3 model's one or two heads at levels 1 and 2 set a stall so late that z.ai's queue over
a true 2 went unseen). A head held `STALL_FACTOR` times the baseline, at least `STALL_FLOOR_SECONDS`,
is a stall: a model whose own heads vary by more than that reads some as stalls (heads of a lognormal law of
sigma 0.3: about 1 in 3,000; sigma 0.5: 1 in 20, as many as z.ai's noise, `zai.assumptions.NOISE`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Final

STALL_FACTOR: Final = 4.0  # a head held this many times its model's quickest heads is a stall
STALL_FLOOR_SECONDS: Final = 0.25  # never a stall sooner: a loaded proxy or network alone may take this long
PER_LEVEL: Final = 16  # heads kept per model and level
ENOUGH: Final = 8  # heads the baseline is read from: the model's lowest levels' until this many
WINDOW_SECONDS: Final = 120.0  # older than this before the model's newest head: no longer counts
RANK: Final = 2  # the baseline is this quickest of them, from 0 (the quickest)
MAX_LEVEL: Final = 1024  # levels above count as this one (what a request says it was sent at is bounded)

Head = tuple[float, float, int | None]  # (when it came, seconds from sending, request's size)
_EVERY: Final = object()  # the key of every model's heads together


class HeadBaseline:
    """Per model, the quickest recent heads at the lowest concurrency (module docstring)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._levels: dict[Hashable, dict[int, deque[Head]]] = {}
        self._newest: dict[Hashable, float] = {}
        self._seen = 0  # heads seen: what `stall_after` reads changes only with it
        self._last: tuple[tuple[int, Hashable, int | None, float], float | None] | None = None  # its last

    def seen(self, model: Hashable, seconds: float, level: int = 1, size: int | None = None) -> None:
        """A clean head of `model` came `seconds` after its request (of `size` bytes, if known) was sent
        with `level` in flight on the model, itself included."""
        now = self._clock()
        level = min(max(level, 1), MAX_LEVEL)
        head = (now, max(seconds, 0.0), size)
        for key in (model, _EVERY):
            self._levels.setdefault(key, {}).setdefault(level, deque(maxlen=PER_LEVEL)).append(head)
            self._newest[key] = now
        self._seen += 1

    def quickest(self, model: Hashable, size: int | None = None, per_byte: float = 0.0) -> float | None:
        """The `RANK`-th quickest (from 0; the slowest when fewer) of `model`'s recent heads at its lowest
        levels, each as it would be for a request of `size` bytes (`per_byte` seconds later per byte more than
        its own; never earlier for a smaller one); the lower of that and every model's while `model` has had
        fewer than `ENOUGH` under its highest level; None before any head of `model`."""
        if model not in self._levels:
            return None
        own, enough = self._read(model, size, per_byte)
        return own if enough else min(own, self._read(_EVERY, size, per_byte)[0])

    def _read(self, key: Hashable, size: int | None, per_byte: float) -> tuple[float, bool]:
        """The `RANK`-th quickest of `key`'s heads at its lowest levels, and whether `ENOUGH` of them were
        read under its highest level."""
        levels = self._levels[key]
        since = self._newest[key] - WINDOW_SECONDS
        read: list[float] = []
        ordered = sorted(levels)
        enough = False
        for level in ordered:
            if len(read) >= ENOUGH:
                break
            if size is None or not per_byte:  # as they came
                read += [seconds for at, seconds, _ in levels[level] if at >= since]
            else:
                read += [
                    seconds + per_byte * max(0, size - theirs) if theirs is not None else seconds
                    for at, seconds, theirs in levels[level]
                    if at >= since
                ]
            enough = len(read) >= ENOUGH and (level == 1 or level < ordered[-1])
        read.sort()
        return read[min(RANK, len(read) - 1)], enough

    def stall_after(self, model: Hashable, size: int | None = None, per_byte: float = 0.0) -> float | None:
        """How long a head of `model` may be held before it is a stall; None before any head of it. Asked
        when an attempt is sent and when its head comes: the last answer is kept until the next head."""
        key = (self._seen, model, size, per_byte)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        quickest = self.quickest(model, size, per_byte)
        after = None if quickest is None else max(STALL_FACTOR * quickest, STALL_FLOOR_SECONDS)
        self._last = key, after
        return after
