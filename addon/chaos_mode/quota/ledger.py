"""The proxy's own requests as z.ai may have charged them, in `quotaWeight` units, counted since the start.

z.ai charges a request at some moment between its arrival and its answer; the simulator charges it when
it starts serving it, and charges no request it refuses. So at any moment what z.ai has charged of the
proxy's requests lies between `lo`, the weight of those answered cleanly, and `hi`, the weight of those
sent and not refused (answered, awaiting z.ai's verdict, or ended with none: a request whose client left
or whose connection broke may have been charged). `changes` counts what happened, so that a reading asked
for and answered with no change between knows the count exactly.
"""

from __future__ import annotations


class Ledger:
    """`lo` and `hi` (see the module docstring), the requests still awaiting a verdict."""

    def __init__(self) -> None:
        self.lo = 0.0
        self.hi = 0.0
        self.changes = 0
        self._open: dict[int, float] = {}  # request key -> weight, for those awaiting z.ai's verdict
        self.open_units = 0.0

    @property
    def open(self) -> int:
        """Requests sent that have no verdict yet."""
        return len(self._open)

    def sent(self, key: int, weight: float) -> None:
        self._open[key] = weight
        self.open_units += weight
        self.hi += weight
        self.changes += 1

    def answered(self, key: int) -> None:
        """z.ai answered it cleanly: charged."""
        weight = self._close(key)
        if weight is not None:
            self.lo += weight

    def refused(self, key: int) -> None:
        """z.ai refused it (an error answer): not charged."""
        weight = self._close(key)
        if weight is not None:
            self.hi -= weight

    def ended(self, key: int) -> None:
        """It ended with no verdict of z.ai (if it had none yet): perhaps charged, it stays in `hi`."""
        self._close(key)

    def _close(self, key: int) -> float | None:
        weight = self._open.pop(key, None)
        if weight is not None:
            self.open_units = self.open_units - weight if self._open else 0.0
            self.changes += 1
        return weight
