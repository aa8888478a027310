"""The scale of the credit weights the catalog does not give, learned from z.ai's readings (with a key).

A model without `creditWeights` counts with the catalog's heaviest (`assumed`). The model of z.ai's
count behind the scale: between two readings of one window (the same reset) its `currentValue` rises by

    rise = known + s * assumed

where `known` is what the answers on models with weights cost by them and `assumed` what the others cost
by the heaviest, both counted as the answers ended between the two readings; `s` is one factor for every
model without weights (their weights taken to be the heaviest's, scaled). Summed over every pair of
readings, s = (sum of rises - sum of known) / sum of assumed: the ratio of totals, in which an answer
counted on one side of a reading and charged on the other cancels out in the next pair. It is said once
the assumed credits summed reach `LEARN_FROM` (z.ai's whole credits then move it by a few percent).

Its limits: other clients of the account spending between readings raise it (their credits are taken for
the assumed models'); models without weights that differ from each other get their mean, weighted by what
each served; weights whose three parts are not in the heaviest's proportions (input against output) get a
factor that holds for the mix of tokens served so far only; a catalog's weights that are wrong bias it.
"""

from __future__ import annotations

from typing import Final

LEARN_FROM: Final = 50.0  # credits counted with assumed weights before the scale is said


class AssumedScale:
    """The factor of the assumed weights (`factor`, None until known), from readings and answers."""

    def __init__(self) -> None:
        self._known = 0.0  # credits since the last reading, by the models' own weights
        self._assumed = 0.0  # ... by the heaviest weights
        self._last: float | None = None  # the currentValue of the last reading
        self.rise = 0.0  # sums over the pairs of readings of one window
        self.known = 0.0
        self.assumed = 0.0

    def charged(self, credits: float, *, assumed: bool) -> None:
        """An answer ended costing `credits` (by the heaviest weights when `assumed`)."""
        if assumed:
            self._assumed += credits
        else:
            self._known += credits

    def read(self, used: float, *, same: bool) -> None:
        """z.ai says `used` credits are spent in its window (`same`: the one the last reading was of)."""
        last = self._last
        if same and last is not None and used >= last:
            self.rise += used - last
            self.known += self._known
            self.assumed += self._assumed
        self._last = used
        self._known = self._assumed = 0.0

    @property
    def factor(self) -> float | None:
        if self.assumed < LEARN_FROM:
            return None
        return max(self.rise - self.known, 0.0) / self.assumed
