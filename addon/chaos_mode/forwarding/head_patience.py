"""How long an unanswered attempt is worth waiting for: z.ai sends an accepted stream's head at once, and
takes seconds to refuse. Pure: the forwarder feeds it the head times of clean answers."""

from __future__ import annotations

from collections import deque
from typing import Final

FLOOR_SECONDS: Final = 0.25  # never less: a loaded proxy or network alone may take this long
FACTOR: Final = 2.0  # patience is this times the slowest recent head
KEEP: Final = 32  # how many recent heads count
ENOUGH: Final = 8  # heads seen before the floor is FLOOR_SECONDS
EARLY_FLOOR_SECONDS: Final = 1.0  # the floor before that: a margin while z.ai's pace is barely known


class HeadPatience:
    """Seconds from sending an attempt after which, with no head yet, a slot within the limits replaces it.

    Twice the slowest of the last `KEEP` clean answers' heads (send to status line), at least
    `FLOOR_SECONDS`; before `ENOUGH` heads were seen, at least `EARLY_FLOOR_SECONDS` (the first probes go
    out after the first few answers, and a refused one would otherwise cost its request z.ai's 3 s); None
    (wait for the answer) before any head was seen.
    """

    def __init__(self, fixed: float | None = None) -> None:
        self._fixed = fixed
        self._heads: deque[float] = deque(maxlen=KEEP)

    def head(self, seconds: float) -> None:
        """A clean answer's head came `seconds` after its request was sent."""
        self._heads.append(max(seconds, 0.0))

    def seconds(self) -> float | None:
        if self._fixed is not None:
            return self._fixed
        if not self._heads:
            return None
        floor = FLOOR_SECONDS if len(self._heads) >= ENOUGH else EARLY_FLOOR_SECONDS
        return max(floor, FACTOR * max(self._heads))
