"""z.ai error answers -> what the pool should do about them (`_ACTIONS`: its business codes, read)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, Final

from chaos_mode.zai import json_body

BEIJING = timezone(timedelta(hours=8), "UTC+8")


class Action(StrEnum):
    """What an upstream error means for routing."""

    CONCURRENCY = "concurrency"  # this model or the account is at its limit: learn it, try another model
    COOLDOWN = "cooldown"  # this model is busy: short cooldown, try another model
    MODEL_DAY = "model-day"  # this model's daily limit: out until the next day (Beijing time)
    OUT_OF_ROTATION = "out-of-rotation"  # this model is unusable on this account
    ACCOUNT_PAUSE = "account-pause"  # account-wide quota: nothing will work until the reset
    FATAL = "fatal"  # the plan is unusable: nothing will work
    UNREACHED = "unreached"  # no verdict from z.ai (the proxy could not reach it): try another model
    NONE = "none"  # not a routing matter (a bad request, say): pass it on


_ACTIONS: dict[str, Action] = {
    "1302": Action.CONCURRENCY,
    "1303": Action.COOLDOWN,
    "1305": Action.COOLDOWN,
    "1312": Action.COOLDOWN,
    "1304": Action.MODEL_DAY,
    "1308": Action.ACCOUNT_PAUSE,
    "1310": Action.ACCOUNT_PAUSE,
    "1313": Action.ACCOUNT_PAUSE,
    "1113": Action.OUT_OF_ROTATION,
    "1211": Action.OUT_OF_ROTATION,
    "1311": Action.OUT_OF_ROTATION,
    "1309": Action.FATAL,
}

KNOWN_CODES: Final[frozenset[str]] = frozenset(_ACTIONS)

_REASONS: dict[str, str] = {
    "1302": "concurrency limit (1302)",
    "1303": "request frequency limit (1303)",
    "1304": "daily call limit (1304)",
    "1305": "overloaded (1305)",
    "1308": "5-hour usage limit (1308)",
    "1309": "plan expired (1309)",
    "1310": "weekly/monthly limit (1310)",
    "1311": "model not in plan (1311)",
    "1312": "model overloaded (1312)",
    "1313": "fair-use throttle (1313)",
    "1113": "no balance or model not in plan (1113)",
    "1211": "unknown model (1211)",
}

# Statuses that mean "busy, try elsewhere" even without a business code.
_BUSY_STATUSES = frozenset({429, 502, 503, 504, 529})

_CODE_IN_MESSAGE = re.compile(r"^\s*\[(\d{3,5})\]")
_RESET_AT = re.compile(r"reset at (\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})")


@dataclass(frozen=True, slots=True)
class UpstreamError:
    """One error answer from z.ai, classified."""

    status: int
    code: str | None
    action: Action
    reason: str
    reset_at: float | None = None  # unix time the message says the limit resets, if it says

    @property
    def fails_over(self) -> bool:
        """Whether another model may succeed where this one failed."""
        return self.action in _FAILS_OVER


_FAILS_OVER = frozenset(
    {Action.CONCURRENCY, Action.COOLDOWN, Action.MODEL_DAY, Action.OUT_OF_ROTATION, Action.UNREACHED}
)
UNREACHED_REASON: Final = "upstream not reached"


def extract_code(payload: Any) -> tuple[str | None, str]:
    """(business code, message) from an Anthropic- or OpenAI-shaped z.ai error body."""
    if not isinstance(payload, dict):
        return None, ""
    error = payload.get("error")
    if not isinstance(error, dict):
        return None, ""
    message = error.get("message")
    message = message if isinstance(message, str) else ""
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and value.isdigit():
            return value, message
    if match := _CODE_IN_MESSAGE.match(message):
        return match.group(1), message
    return None, message


def parse_reset_time(message: str) -> float | None:
    """The reset time a 1308/1310 message gives, in Beijing time, as unix time."""
    match = _RESET_AT.search(message)
    if not match:
        return None
    try:
        moment = datetime.fromisoformat(match.group(1).replace(" ", "T"))
    except ValueError:
        return None
    return moment.replace(tzinfo=BEIJING).timestamp()


def next_beijing_midnight(now: float) -> float:
    """Unix time of the next midnight in Beijing: when a daily limit resets."""
    today = datetime.fromtimestamp(now, BEIJING).replace(hour=0, minute=0, second=0, microsecond=0)
    return (today + timedelta(days=1)).timestamp()


def classify_error(
    status: int, body: bytes | str | None, *, now: float, proxy_made: bool = False
) -> UpstreamError | None:
    """Classify an upstream answer; None when it is not an error routing cares about.

    `now` is the wall clock (unix time), used for codes whose limit resets at a calendar time.
    `proxy_made`: the answer came from the proxy itself (mitmproxy's 502 when z.ai could not be reached),
    not from z.ai: no verdict on the model, so another model is tried and nothing is cooled down.
    """
    if status < 400:
        return None
    if proxy_made:
        return UpstreamError(
            status, None, Action.UNREACHED, f"{UNREACHED_REASON} (HTTP {status} from the proxy)"
        )
    payload: Any = None
    if body:
        try:
            payload = json_body.loads(body)  # a byte that is not UTF-8 replaced: the code is still read
        except ValueError:  # not JSON, or nested too deeply: a plain busy answer
            payload = None
    code, message = extract_code(payload)
    action = _ACTIONS.get(code or "")
    if action is None:
        if status not in _BUSY_STATUSES:
            return None
        action = Action.COOLDOWN
        reason = f"HTTP {status}" + (f" ({code})" if code else "")
    else:
        reason = _REASONS[code or ""]
    reset_at: float | None = None
    if action is Action.ACCOUNT_PAUSE:
        reset_at = parse_reset_time(message)
    elif action is Action.MODEL_DAY:
        reset_at = next_beijing_midnight(now)
    return UpstreamError(status=status, code=code, action=action, reason=reason, reset_at=reset_at)


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    if not math.isfinite(seconds):  # NaN, "inf", "1e999": no usable delay
        return None
    return max(seconds, 0.0)  # a date in the past: now
