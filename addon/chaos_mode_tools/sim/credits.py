"""The simulator's credit plan (`sim.credit_caps`): credits counted per answer in every window z.ai counts
(the 5-hour one, the week), refused 1308 / 1310 once one is spent, and the quota endpoint's `CREDIT_LIMIT`
rows (`zai.quota`).

An answer costs, from its usage, input x 6.9 + cached input x 1.7 + output x 24 credits per
`UNIT_TOKENS` tokens (GLM-5.3's weights as one source reports them, for every model unless
`credit_weights` names it; the unit of the weights, a thousand tokens, is `zai.quota`'s assumption). An
answer is charged when it ends (as z.ai bills usage), so the answers in flight when a window runs out all
count: its `currentValue` may pass its cap.

The 5-hour window starts at an account's first answer after the last one ended (no `nextResetTime`
before); the week starts when the simulator does and runs back to back. Each window is independent: a
spent week refuses every request 1310 (its message naming the week's reset in Beijing time, as z.ai's
Chinese endpoint words it) even while the 5-hour window has room.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from chaos_mode.zai.quota import CREDIT_UNIT_TOKENS as UNIT_TOKENS
from chaos_mode.zai.quota import FIVE_HOURS, SPENT_CODE, WEEK_SPENT_CODE, window_of
from chaos_mode.zai.quota import GLM_5_3_CREDITS as GLM_5_3
from chaos_mode_tools.sim.errors import chinese_window_message, spent_message

ROWS: Final = {"5h": (3, 5), "1w": (6, 1)}  # the windows the simulator can count: (unit, number)
PLANS: Final[dict[str, dict[str, float]]] = {  # the caps reported for each plan (`zai.quota`)
    "lite": {"5h": 2000.0, "1w": 10000.0},
    "pro": {"5h": 12000.0, "1w": 60000.0},
    "max": {"5h": 28000.0, "1w": 140000.0},
}


@dataclass
class CreditWindow:
    """One window: its cap in credits, length, start (None: not started) and what is spent in it."""

    name: str
    cap: float
    seconds: float
    starts_at_first_use: bool
    start: float | None = None
    used: float = 0.0
    spent_at: float | None = None  # when this window's credits ran out

    def roll(self, now: float) -> None:
        """A window past its end: the next one, not started (the 5-hour) or from where this one ended."""
        if self.start is None or now < self.start + self.seconds:
            return
        if self.starts_at_first_use:
            self.start = None
        else:
            self.start += (now - self.start) // self.seconds * self.seconds
        self.used, self.spent_at = 0.0, None

    @property
    def spent(self) -> bool:
        return self.used >= self.cap

    @property
    def resets_at(self) -> float | None:
        return None if self.start is None else self.start + self.seconds

    def row(self) -> dict[str, Any]:
        """The quota endpoint's row: whole credits, as z.ai shows them; a percent rounded down."""
        unit, number = ROWS[self.name]
        spent = math.floor(self.used)
        row: dict[str, Any] = {
            "type": "CREDIT_LIMIT",
            "unit": unit,
            "number": number,
            "usage": round(self.cap),
            "currentValue": spent,
            "remaining": max(round(self.cap) - spent, 0),
            "percentage": min(math.floor(self.used * 100 / self.cap), 100),
        }
        if self.resets_at is not None:
            row["nextResetTime"] = int(self.resets_at * 1000)
        return row


class SimCredits:
    """The credit windows of one account (`caps`: name -> credits; `seconds`: a name's length if not
    z.ai's, for tests)."""

    def __init__(
        self,
        caps: Mapping[str, float],
        seconds: Mapping[str, float],
        weights: Mapping[str, Sequence[float]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock  # unix seconds: resets are wall-clock times
        self.weights = {model: tuple(w) for model, w in weights.items()}
        now = clock()
        self.windows = [
            CreditWindow(
                name,
                cap,
                seconds.get(name) or _length(name),
                starts_at_first_use=name == FIVE_HOURS,
                start=None if name == FIVE_HOURS else now,
            )
            for name, cap in caps.items()
        ]
        self.refused: dict[str, int] = {}  # code -> refusals sent

    def _rolled(self) -> list[CreditWindow]:
        now = self._clock()
        for window in self.windows:
            window.roll(now)
        return self.windows

    def refusal(self) -> tuple[str, str] | None:
        """(code, message) of a request refused now: 1310 while the week is spent, else 1308 while the
        5-hour window is; None when every window has room. Counted as sent."""
        spent = {w.name: w for w in self._rolled() if w.spent}
        week, five = spent.get("1w"), spent.get(FIVE_HOURS)
        if week is not None and week.resets_at is not None:
            code = WEEK_SPENT_CODE
            message = chinese_window_message(code, dt.datetime.fromtimestamp(week.resets_at, dt.UTC))
        elif five is not None and five.resets_at is not None:
            code = SPENT_CODE
            message = spent_message(dt.datetime.fromtimestamp(five.resets_at, dt.UTC))
        else:
            return None
        self.refused[code] = self.refused.get(code, 0) + 1
        return code, message

    def cost(self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """The credits an answer on `model` with this usage costs."""
        fresh, cached, output = self.weights.get(model, GLM_5_3)
        return (input_tokens * fresh + cached_tokens * cached + output_tokens * output) / UNIT_TOKENS

    def charge(self, model: str, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> None:
        """An answer ended: its cost counts in every window (the 5-hour one starts with it)."""
        credits = self.cost(model, input_tokens, output_tokens, cached_tokens)
        now = self._clock()
        for window in self._rolled():
            if window.start is None:
                window.start = now
            window.used += credits
            if window.spent and window.spent_at is None:
                window.spent_at = now

    def body(self, level: str = "sim") -> dict[str, Any]:
        """The quota endpoint's answer for a credit plan."""
        rows = [window.row() for window in self._rolled()]
        data = {"limits": rows, "level": level}
        return {"code": 200, "msg": "Operation successful", "success": True, "data": data}

    def snapshot(self) -> dict[str, Any]:
        """`/sim/stats`' view: each window's true figures (and what its row says), for tests."""
        return {
            "windows": {
                w.name: {
                    "cap": w.cap,
                    "used": round(w.used, 3),
                    "windowStart": w.start,
                    "resetsAt": w.resets_at,
                    "spentAt": w.spent_at,
                    "row": w.row(),
                }
                for w in self._rolled()
            },
            "refused": dict(self.refused),
        }


def _length(name: str) -> float:
    unit, number = ROWS[name]
    known = window_of(unit, number)
    assert known is not None
    return known[1]


def check_credits(
    caps: Mapping[str, float], seconds: Mapping[str, float], weights: Mapping[str, Any]
) -> None:
    """Raise ValueError naming the first bad credit setting."""
    for name, cap in {**caps, **seconds}.items():
        if name not in ROWS:
            raise ValueError(f"credit windows: {name!r} is not one of {', '.join(ROWS)}")
        if isinstance(cap, bool) or not isinstance(cap, int | float) or not cap > 0:
            raise ValueError(f"credit windows.{name}: must be > 0, got {cap!r}")
    for model, weight in weights.items():
        if (
            not isinstance(weight, list | tuple)
            or len(weight) != 3
            or not all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in weight)
        ):
            raise ValueError(f"credit_weights.{model}: expected [input, cached input, output] >= 0")
