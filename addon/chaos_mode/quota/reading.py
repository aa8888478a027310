"""z.ai's quota body read defensively: each window's used share, credits and reset, and what was odd.

The body is undocumented (`zai.quota`): rows are told apart by `type` and by `unit` and `number`, never by
their place; a row, field or unit missing or new is a warning, never an exception; a body with no window
read is no reading at all. Text quoted from the body has the key masked before it is cut (`masked`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from chaos_mode.zai import json_body
from chaos_mode.zai.quota import FIVE_HOURS, WINDOW_TYPES, window_of

MASK: Final = "<key>"
KEY_RUN: Final = 8  # a run of the key's first characters this long or longer is masked too (a cut copy)
LEVEL_CHARS: Final = 40  # the plan's name is cut to this


@dataclass(frozen=True, slots=True)
class WindowReading:
    """One window as z.ai counts it: percent used (0-100), when it resets (unix s; None: not said, or
    not started); in credits, when said, the cap, the spent (which may overshoot the cap) and the rest."""

    name: str  # "5h", "1w" (`zai.quota.window_of`)
    seconds: float
    used_percent: float
    resets_at: float | None
    cap: float | None = None
    used: float | None = None
    left: float | None = None

    @property
    def started(self) -> bool:
        """A credit window with no reset and nothing spent has not started (it starts at first use)."""
        return self.resets_at is not None or self.cap is None or bool(self.used)


@dataclass(frozen=True, slots=True)
class QuotaReading:
    """The windows z.ai counts the account against (each once, by name) and the plan, if said."""

    windows: tuple[WindowReading, ...]
    level: str | None = None  # the plan ("lite", "pro", "max"), if said (masked, cut)

    def window(self, name: str = FIVE_HOURS) -> WindowReading | None:
        return next((w for w in self.windows if w.name == name), None)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What one body gave: a reading (None: unusable) and one line per thing that was not as expected."""

    reading: QuotaReading | None
    warnings: tuple[str, ...] = ()


def read_quota(body: bytes | str, key: str = "") -> ReadResult:
    """The windows of a quota body (see the module docstring); `key` is masked in what it quotes."""
    try:
        document = json_body.loads(body)
    except ValueError:  # not JSON, or nested too deeply
        return ReadResult(None, ("the quota answer is not JSON",))
    if not isinstance(document, dict):
        return ReadResult(None, ("the quota answer is not a JSON object",))
    if document.get("success") is False or document.get("code") not in (None, 200, "200"):
        message = document.get("msg") or document.get("message")
        said = f": {masked(message, key)[:80]}" if isinstance(message, str) and message else ""
        code = masked(str(document.get("code")), key)[:12]
        return ReadResult(None, (f"the quota answer says code {code}{said}",))
    data = document.get("data")
    limits = data.get("limits") if isinstance(data, dict) else None
    if not isinstance(limits, list):
        return ReadResult(None, ("the quota answer has no data.limits list",))
    rows = [e for e in limits if isinstance(e, dict) and e.get("type") in WINDOW_TYPES]
    if not rows:
        return ReadResult(None, (f"the quota answer has no {' or '.join(WINDOW_TYPES)} entry",))
    windows: dict[str, WindowReading] = {}
    warnings: list[str] = []
    for row in rows:
        window = _window(row, key, warnings)
        if window is not None and window.name in windows:
            warnings.append(f"{row['type']} {window.name} comes twice: the first is read")
        elif window is not None:
            windows[window.name] = window
    if not windows:
        return ReadResult(None, (warnings[0],))
    level = data.get("level") if isinstance(data, dict) else None
    plan = masked(level, key)[:LEVEL_CHARS] if isinstance(level, str) else None
    reading = QuotaReading(tuple(windows.values()), plan)
    return ReadResult(reading, tuple(warnings))


def _window(row: dict[str, Any], key: str, warnings: list[str]) -> WindowReading | None:
    """One row's window, its oddities added to `warnings` (`key` masked); None: no window to read."""
    kind, unit, number = row["type"], row.get("unit"), row.get("number")
    known = window_of(unit, number) if type(unit) is int and type(number) is int else None
    if known is None:
        unit_said, number_said = (masked(str(value), key)[:12] for value in (unit, number))
        warnings.append(f"{kind} of unit {unit_said} number {number_said} is no window known")
        return None
    name, seconds = known
    cap, used, left = (_number(row.get(field)) for field in ("usage", "currentValue", "remaining"))
    percent = _number(row.get("percentage"))
    if cap is not None and cap > 0 and used is not None:
        percent = used * 100 / cap  # finer than the whole percent; an overshoot is z.ai's, not odd
    elif percent is None:
        warnings.append(f"{kind} {name}.percentage is missing or not a number")
        return None
    elif not 0 <= percent <= 100:
        warnings.append(f"{kind} {name}.percentage {percent:g} is outside 0-100: clamped")
    reset_ms = _number(row.get("nextResetTime"))
    resets_at = reset_ms / 1000 if reset_ms is not None and reset_ms > 0 else None
    if resets_at is None and (cap is None or used is None or used > 0):  # only a fresh window has none
        warnings.append(f"{kind} {name}.nextResetTime is missing or not a number")
    percent = min(max(percent, 0.0), 100.0)
    return WindowReading(name, seconds, percent, resets_at, cap, used, left)


def masked(text: str, key: str) -> str:
    """`text` with `key` replaced by `MASK`, and so is any run of its first `KEY_RUN` or more characters
    (what is left of a copy that was cut)."""
    if not key:
        return text
    text = text.replace(key, MASK)
    head = key[:KEY_RUN]
    if len(head) < KEY_RUN:
        return text
    at = text.find(head)
    while at != -1:
        end = at + KEY_RUN
        while end < len(text) and end - at < len(key) and text[end] == key[end - at]:
            end += 1
        text = text[:at] + MASK + text[end:]
        at = text.find(head, at + len(MASK))
    return text


def _number(value: Any) -> float | None:
    """A JSON number as a float; None: not a number, or not a finite float (an integer too large)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
