"""z.ai error answers -> what the pool should do about them (`_ACTIONS`: its business codes, read)."""

from __future__ import annotations

import contextlib
import json
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
    "1314": Action.ACCOUNT_PAUSE,
    "1315": Action.ACCOUNT_PAUSE,
    **{str(code): Action.ACCOUNT_PAUSE for code in range(1316, 1322)},
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
    "1314": "enterprise account limit (1314)",
    "1315": "enterprise account limit (1315)",
    "1316": "5-hour limit (1316)",
    "1317": "7-day limit (1317)",
    "1318": "5-hour sub-account limit (1318)",
    "1319": "7-day sub-account limit (1319)",
    "1320": "5-hour enterprise limit (1320)",
    "1321": "7-day enterprise limit (1321)",
    "1113": "no balance or model not in plan (1113)",
    "1211": "unknown model (1211)",
}

# The quota windows: the account is spent until the reset z.ai names (the 5-hour one, the week's or
# the month's). Our own 429 tells the client to stop until then, not to retry (`request.rate_limited`).
QUOTA_WINDOW_CODES: Final[frozenset[str]] = frozenset({"1308", "1310", *map(str, range(1316, 1322))})
QUOTA_WINDOW_REASONS: Final[frozenset[str]] = frozenset(_REASONS[code] for code in QUOTA_WINDOW_CODES)
# 1313 (fair use) cools the account for z.ai's Retry-After or the time its message names, else this long.
FAIR_USE_CODE: Final = "1313"
FAIR_USE_SECONDS: Final = 60.0

# Statuses that mean "busy, try elsewhere" even without a business code.
_BUSY_STATUSES = frozenset({429, 502, 503, 504, 529})

_CODE_IN_MESSAGE = re.compile(r"^\s*\[(\d{3,5})\]")
# The reset a message names: "...will reset at 2026-09-09 05:38:28" or "...将在 2026-08-05 15:16:26 重置",
# in Beijing time unless the time carries its own offset ("2026-08-14T00:00:00Z").
_RESET_AT = re.compile(
    r"(?:resets? at|将在|将于)\s*(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?)"
    r"(Z|[+-]\d{2}:?\d{2}|\s*UTC[+-]\d{1,2}\b)?",
    re.IGNORECASE,
)


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
    """The reset time a quota message names (English or Chinese), as unix time; Beijing time unless the
    message gives an offset. None when it names none."""
    match = _RESET_AT.search(message)
    if not match:
        return None
    stamp, zone = match.group(1).replace(" ", "T"), (match.group(2) or "").strip().upper()
    if zone.startswith("UTC"):
        sign, hours = zone[3], int(zone[4:])
        zone = f"{sign}{hours:02d}:00"
    try:
        moment = datetime.fromisoformat(stamp + zone.replace("Z", "+00:00"))
        return (moment if moment.tzinfo else moment.replace(tzinfo=BEIJING)).timestamp()
    except (ValueError, OverflowError):
        return None


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


# What the first bytes of a body cut at a cap still say: z.ai's error object opens with its code (its `type`
# may come first), `{"error":{"code":"1302","message":"..."`, the message whole when it is short.
CUT_WINDOW: Final = 4096
_CUT_CODE: Final = re.compile(rb'"error"\s*:\s*\{[^{}]*?"code"\s*:\s*"?(\d{3,5})[",}\s]')
_CUT_MESSAGE: Final = re.compile(rb'"message"\s*:\s*("(?:[^"\\]|\\.)*")')


def cut_error_body(prefix: bytes) -> bytes:
    """The first bytes of an error body too large to read whole, as `classify_error` reads them: z.ai's
    error object with the business code (and the message) its first `CUT_WINDOW` bytes give, else the bytes
    as they are."""
    window = prefix[:CUT_WINDOW]
    code = _CUT_CODE.search(window)
    if code is None:
        return prefix
    error = {"code": code.group(1).decode("ascii"), "message": ""}
    if (message := _CUT_MESSAGE.search(window, code.end())) is not None:
        with contextlib.suppress(ValueError):  # a string literal: nothing nested
            error["message"] = str(json.loads(message.group(1)))
    return json.dumps({"error": error}).encode()
