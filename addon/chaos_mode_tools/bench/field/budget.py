"""Issue 46's refusal budget per limit: at most `PER_STEP` of z.ai's refusals per level a learned limit moves
down, and per exploration round (a probe sent above it).

Each limit (a model's, or the account's: `ACCOUNT`) is charged the 1302s z.ai sent for passing it (the
simulator's reason: a model's limit or band, the account's), not its random ones (noise no learner causes).
Its levels down are read from the learned limits as sampled (a fall and a rise between two samples are not
seen: the budget read is at most the true one).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Final

from chaos_mode.zai.catalog import ACCOUNT

PER_STEP: Final = 2
ACCOUNT_REASONS: Final = frozenset({"account", "accountBand"})


@dataclasses.dataclass
class RefusalBudget:
    refused: Counter[str] = dataclasses.field(default_factory=Counter)
    down: Counter[str] = dataclasses.field(default_factory=Counter)
    probes: Counter[str] = dataclasses.field(default_factory=Counter)
    _last: dict[str, int] = dataclasses.field(default_factory=dict)

    def refusal(self, model: str, reason: str | None) -> None:
        """z.ai refused a request of `model` for `reason` (the simulator's)."""
        if reason != "random":
            self.refused[ACCOUNT if reason in ACCOUNT_REASONS else model] += 1

    def probe(self, model: str, *, account: bool) -> None:
        """A probe sent above `model`'s limit, or the account's."""
        self.probes[ACCOUNT if account else model] += 1

    def sample(self, limits: Mapping[str, int]) -> None:
        """The learned limits now, by limit."""
        for limit, value in limits.items():
            if value < self._last.get(limit, value):
                self.down[limit] += self._last[limit] - value
            self._last[limit] = value

    def allowed(self, limit: str) -> int:
        return PER_STEP * (self.down[limit] + self.probes[limit])

    def over(self) -> list[str]:
        """The limits charged more refusals than their budget, each as `name refused/allowed`."""
        return [
            f"{limit.removeprefix('glm-')} {self.refused[limit]}/{self.allowed(limit)}"
            for limit in sorted(self.refused)
            if self.refused[limit] > self.allowed(limit)
        ]

    def charged(self) -> int:
        """How many limits z.ai refused requests for."""
        return len(+self.refused)
