"""z.ai's Anthropic-endpoint error bodies: business codes, their default messages, the JSON shape."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

BEIJING = dt.timezone(dt.timedelta(hours=8))

MSG_1302 = (
    "[1302][High concurrency usage of this API, please reduce concurrency or contact customer service "
    "to increase limits]"
)
MSG_1113 = "Insufficient balance or no resource package. Please recharge."
MSG_1211 = "Unknown Model, please check the model code."

_STATIC_MESSAGES: dict[str, str] = {
    "1113": MSG_1113,
    "1211": MSG_1211,
    "1302": MSG_1302,
    "1303": (
        "[1303][High frequency usage of this API, please reduce frequency or contact customer service "
        "to increase limits]"
    ),
    "1304": "[1304][The daily call limit for this API has been reached]",
    "1305": "[1305][The service may be temporarily overloaded, please try again later]",
    "1309": "[1309][Your GLM Coding Plan package has expired, please renew it]",
    "1311": "[1311][The current plan does not include access to this model]",
    "1312": "[1312][The model is currently overloaded, please try another model]",
    "1313": (
        "[1313][Your account's current usage pattern does not comply with the Fair Usage Policy, and your "
        "request frequency has been limited. For details, please refer to the Subscription Service "
        "Agreement. To restore access, please submit a request.]"
    ),
    "1314": "[1314][Your enterprise account has reached its usage limit]",
    "1315": "[1315][Your enterprise account is not allowed to use this service]",
}

# The quota windows of 2026 (z.ai's "{next_flush_time}" wording): code -> (what is spent, time to reset).
_WINDOW_MESSAGES: dict[str, tuple[str, dt.timedelta]] = {
    "1310": ("Weekly/Monthly Limit Exhausted.", dt.timedelta(days=7)),
    "1316": ("Usage limit reached for 5 hour.", dt.timedelta(hours=5)),
    "1317": ("Usage limit reached for 7 day.", dt.timedelta(days=7)),
    "1318": ("Sub-account usage limit reached for 5 hour.", dt.timedelta(hours=5)),
    "1319": ("Sub-account usage limit reached for 7 day.", dt.timedelta(days=7)),
    "1320": ("Enterprise usage limit reached for 5 hour.", dt.timedelta(hours=5)),
    "1321": ("Enterprise usage limit reached for 7 day.", dt.timedelta(days=7)),
}

_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def default_message(code: str, now: dt.datetime | None = None) -> str:
    """The message z.ai sends with ``code``; reset times are in Beijing time."""
    if code in _STATIC_MESSAGES:
        return _STATIC_MESSAGES[code]
    now = (now or dt.datetime.now(dt.UTC)).astimezone(BEIJING)
    if code == "1308":
        return spent_message(now + dt.timedelta(hours=5))
    if code in _WINDOW_MESSAGES:
        spent, until = _WINDOW_MESSAGES[code]
        reset = (now + until).strftime("%Y-%m-%d %H:%M:%S")
        return f"[{code}][{spent} Your limit will reset at {reset}]"
    return f"[{code}][Simulated error {code}]"


def chinese_window_message(code: str, reset: dt.datetime) -> str:
    """A quota window's message as z.ai's Chinese endpoint words it (Beijing time), for a fault's
    `message`: "...您的限额将在 2026-08-05 15:16:26 重置。"."""
    shown = reset.astimezone(BEIJING).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{code}][您的额度已用完，您的限额将在 {shown} 重置。]"


def spent_message(reset: dt.datetime) -> str:
    """1308's message: the 5-hour quota is spent until `reset`, said in Beijing time to the second."""
    shown = reset.astimezone(BEIJING).strftime("%Y-%m-%d %H:%M:%S")
    return f"[1308][Usage limit reached for 5 hour. Your limit will reset at {shown}]"


def error_type(status: int) -> str:
    """The Anthropic ``error.type`` for an HTTP status."""
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def new_request_id() -> str:
    """A request id in z.ai's style: a timestamp followed by random hex."""
    return dt.datetime.now(BEIJING).strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:18]


def error_body(
    status: int, message: str, *, code: str | None = None, request_id: str, type_: str | None = None
) -> dict[str, Any]:
    """``{"type":"error","error":{"type":…,"code":…,"message":…},"request_id":…}`` (code optional)."""
    error: dict[str, Any] = {"type": type_ or error_type(status)}
    if code is not None:
        error["code"] = code
    error["message"] = message
    return {"type": "error", "error": error, "request_id": request_id}
