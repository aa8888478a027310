"""How long an unanswered probe is worth waiting for: z.ai sends an accepted stream's head at once, and
takes seconds to refuse. Pure: the forwarder feeds it the head times of clean answers."""

from __future__ import annotations

from collections import deque
from typing import Final

FLOOR_SECONDS: Final = 0.25  # never less: a loaded proxy or network alone may take this long
FACTOR: Final = 2.0  # patience is this times the slowest recent head
KEEP: Final = 32  # how many recent heads count
ENOUGH: Final = 8  # no patience (never give a probe up) before this many heads were seen


class ProbePatience:
    """Seconds from sending a probe after which, with no head yet, a slot within the limits replaces it.

    Twice the slowest of the last `KEEP` clean answers' heads (send to status line), at least
    `FLOOR_SECONDS`; None (wait for the probe's answer, as before) until `ENOUGH` heads were seen, so a z.ai
    that sends its head only with the first token is never cut short on a guess.
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
        if len(self._heads) < ENOUGH:
            return None
        return max(FLOOR_SECONDS, FACTOR * max(self._heads))
