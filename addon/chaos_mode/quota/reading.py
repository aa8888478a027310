"""z.ai's quota body read defensively: the 5-hour window's used percent and reset, and what was odd.

The body is undocumented (`zai.quota`): a field missing or of another shape is a warning, never an
exception; a body with no usable percentage is no reading at all. Text quoted from the body has the key
masked before it is cut (`masked`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from chaos_mode.zai import json_body
from chaos_mode.zai.quota import WINDOW_TYPE, WINDOW_UNIT

MASK: Final = "<key>"
KEY_RUN: Final = 8  # a run of the key's first characters this long or longer is masked too (a cut copy)


@dataclass(frozen=True, slots=True)
class QuotaReading:
    """The 5-hour window as z.ai counts it: percent used (0-100) and when it resets (unix s, if said)."""

    used_percent: float
    resets_at: float | None
    level: str | None = None  # the plan ("lite", "pro", "max"), if said


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What one body gave: a reading (None: unusable) and one line per thing that was not as expected."""

    reading: QuotaReading | None
    warnings: tuple[str, ...] = ()


def read_quota(body: bytes | str, key: str = "") -> ReadResult:
    """The 5-hour window of a quota body (see the module docstring); `key` is masked in what it quotes."""
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
    entry = _window_entry(limits)
    if entry is None:
        return ReadResult(None, (f"the quota answer has no {WINDOW_TYPE} entry",))
    percent = _number(entry.get("percentage"))
    if percent is None:
        return ReadResult(None, (f"{WINDOW_TYPE}.percentage is missing or not a number",))
    warnings: list[str] = []
    if not 0 <= percent <= 100:
        warnings.append(f"{WINDOW_TYPE}.percentage {percent:g} is outside 0-100: clamped")
    reset_ms = _number(entry.get("nextResetTime"))
    if reset_ms is None or reset_ms <= 0:
        warnings.append(f"{WINDOW_TYPE}.nextResetTime is missing or not a number")
    level = data.get("level") if isinstance(data, dict) else None
    reading = QuotaReading(
        used_percent=min(max(percent, 0.0), 100.0),
        resets_at=reset_ms / 1000 if reset_ms is not None and reset_ms > 0 else None,
        level=level if isinstance(level, str) else None,
    )
    return ReadResult(reading, tuple(warnings))


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


def _window_entry(limits: list[Any]) -> dict[str, Any] | None:
    """The 5-hour window's entry: TOKENS_LIMIT with unit 3 and number 5, else the first TOKENS_LIMIT."""
    entries = [e for e in limits if isinstance(e, dict) and e.get("type") == WINDOW_TYPE]
    exact = [e for e in entries if (e.get("unit"), e.get("number")) == WINDOW_UNIT]
    chosen = exact or entries
    return chosen[0] if chosen else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
