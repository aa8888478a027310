"""The simulator's 5-hour quota: prompts counted per window (weighted by model), 1308 once spent, and the
quota endpoint z.ai serves (`zai.quota`), which tests can make answer 401, 500, junk, hang or drop, with
JSON nested 100,000 deep (`nested`) or with a refusal that quotes the key it was sent (`echo`).

A window opens with the first prompt served after the last one ended and lasts `window_seconds` (z.ai's:
5 hours; a test's: seconds). `percentage` is whole, rounded down, as public monitors show it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

QUOTA_ANSWERS: Final = ("ok", "401", "500", "junk", "hang", "drop", "nested", "echo")
NESTED_DEPTH: Final = 100_000
ECHO_SAYS: Final = "the authorization token you sent is not valid: "  # then the key
UNAUTHORIZED: Final = {"code": 401, "msg": "token expired or incorrect", "success": False}


class SimQuota:
    """Prompts used in the current window of `prompts` (None: no quota: nothing is ever refused)."""

    def __init__(
        self,
        prompts: float | None,
        window_seconds: float,
        weights: Mapping[str, float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.prompts = prompts
        self.window_seconds = window_seconds
        self.weights = dict(weights)
        self._clock = clock  # unix seconds: reset times are wall-clock times
        self.start: float | None = None
        self.used = 0.0
        self.refused = 0  # 1308s sent
        self.spent_at: float | None = None  # when this window's quota ran out
        self.answer = "ok"  # how the quota endpoint answers (QUOTA_ANSWERS)
        self.reads = 0

    def _roll(self, now: float) -> None:
        if self.start is not None and now >= self.start + self.window_seconds:
            self.start, self.used, self.spent_at = None, 0.0, None

    def spent(self) -> bool:
        """Whether a prompt now is refused 1308."""
        now = self._clock()
        self._roll(now)
        return self.prompts is not None and self.used >= self.prompts

    def charge(self, model: str) -> None:
        """A prompt on `model` was served: its weight counts."""
        now = self._clock()
        self._roll(now)
        if self.start is None:
            self.start = now
        self.used += self.weights.get(model, 1.0)
        if self.prompts is not None and self.used >= self.prompts and self.spent_at is None:
            self.spent_at = now

    def resets_at(self) -> float:
        """When the window resets (a window not open yet: one opened now)."""
        now = self._clock()
        self._roll(now)
        return (self.start if self.start is not None else now) + self.window_seconds

    def percentage(self) -> int:
        self._roll(self._clock())
        if not self.prompts:
            return 0
        # of the exact share: in floats 29 / 100 * 100 is 28.999999999999996, which floors to 28
        return min(math.floor(Fraction(self.used) * 100 / Fraction(self.prompts)), 100)

    def body(self) -> dict[str, Any]:
        """The quota endpoint's answer, in the shape public monitors read."""
        reset_ms = int(self.resets_at() * 1000)
        return {
            "code": 200,
            "msg": "Operation successful",
            "success": True,
            "data": {
                "level": "sim",
                "limits": [
                    {
                        "type": "TOKENS_LIMIT",
                        "unit": 3,
                        "number": 5,
                        "percentage": self.percentage(),
                        "nextResetTime": reset_ms,
                    },
                    {"type": "TIME_LIMIT", "unit": 5, "number": 1, "usage": 4000, "currentValue": 0,
                     "remaining": 4000, "percentage": 0, "nextResetTime": reset_ms},
                ],
            },
        }  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """`/sim/stats`' and `/sim/quota`'s view: the true figures, for tests to compare with."""
        self._roll(self._clock())
        return {
            "prompts": self.prompts,
            "used": round(self.used, 3),
            "percentage": self.percentage(),
            "windowStart": self.start,
            "resetsAt": self.resets_at(),
            "spentAt": self.spent_at,
            "refused": self.refused,
            "answer": self.answer,
            "reads": self.reads,
        }
