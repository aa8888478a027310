"""Answers the addon makes itself, in the format of the door the request came through (Anthropic's or
OpenAI's): 429s with a Retry-After when no model can take a request in time, and a 502 only when z.ai
cannot be reached for a reason no other model changes (a setting to fix, as mitmproxy itself answers).

A 429 while the account is paused for a quota window (`resets_at` given) says so the way Claude Code reads
it, so that the agent stops instead of retrying for hours: `retry-after` the real seconds to the reset
(Claude Code gives up at once on one over 60 s), `x-should-retry: false` (the Python anthropic SDK would
sleep hours on such a Retry-After), and at the Anthropic door
`anthropic-ratelimit-unified-status: rejected` with `anthropic-ratelimit-unified-reset` (unix seconds).
Any other 429 is transient: `retry-after` of 1-60 s, and the client retries.

When waiting fixes nothing (every model a request may use is out of rotation, the plan expired) the answer
is a 403 the clients show at once and do not retry: `permission_error` at either door."""

from __future__ import annotations

import json
import math
import uuid

MAX_RETRY_AFTER = 60  # Claude Code honours Retry-After up to 60 s: a transient 429 stays within it
MAX_PAUSE_RETRY_AFTER = 31 * 86_400  # a quota window's reset is sent as it is, up to a month
TRIED_HEADER = "x-chaos-models-tried"
UNIFIED_STATUS = "anthropic-ratelimit-unified-status"
UNIFIED_RESET = "anthropic-ratelimit-unified-reset"


def retry_after_seconds(seconds: float | None, cap: int | None = MAX_RETRY_AFTER) -> int:
    """A Retry-After value: whole seconds, at least 1, at most `cap` (None: as long as it is)."""
    if seconds is None or math.isnan(seconds):
        return 1
    top = cap if cap is not None else MAX_PAUSE_RETRY_AFTER
    if math.isinf(seconds):
        return top if seconds > 0 else 1
    return int(min(max(math.ceil(seconds), 1), top))


def rate_limit_error(
    message: str, *, retry_after: float | None, tried: list[str], resets_at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 429, shaped like Anthropic's and z.ai's; `resets_at`: the unix time a
    quota window the account is paused for resets (see the module)."""
    body = {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": f"chaos-mode: {message}"},
        "request_id": f"chaos_{uuid.uuid4().hex[:24]}",
    }
    headers = _headers(retry_after, tried, window=resets_at is not None)
    if resets_at is not None:
        headers[UNIFIED_STATUS] = "rejected"
        headers[UNIFIED_RESET] = str(math.ceil(resets_at))
    return json.dumps(body).encode(), headers


def chat_rate_limit_error(
    message: str, *, retry_after: float | None, tried: list[str], resets_at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 429 at the OpenAI door, shaped like OpenAI's: `retry-after` alone says
    when (to the reset of a quota window when `resets_at` is given). Its code is a word, never digits:
    nothing reads it as one of z.ai's business codes."""
    error = {"message": f"chaos-mode: {message}", "type": "rate_limit_error", "code": "rate_limit_exceeded"}
    return json.dumps({"error": error}).encode(), _headers(retry_after, tried, window=resets_at is not None)


def permission_error(message: str, tried: list[str]) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 403, shaped like Anthropic's: nothing will serve the request."""
    body = {
        "type": "error",
        "error": {"type": "permission_error", "message": f"chaos-mode: {message}"},
        "request_id": f"chaos_{uuid.uuid4().hex[:24]}",
    }
    return json.dumps(body).encode(), _tried({"content-type": "application/json"}, tried)


def chat_permission_error(message: str, tried: list[str]) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 403 at the OpenAI door, shaped like OpenAI's errors."""
    error = {"message": f"chaos-mode: {message}", "type": "permission_error", "code": "no_usable_model"}
    return json.dumps({"error": error}).encode(), _tried({"content-type": "application/json"}, tried)


def gateway_error(message: str) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 502, shaped like Anthropic's errors."""
    body = {
        "type": "error",
        "error": {"type": "api_error", "message": f"chaos-mode: {message}"},
        "request_id": f"chaos_{uuid.uuid4().hex[:24]}",
    }
    return json.dumps(body).encode(), {"content-type": "application/json"}


def chat_gateway_error(message: str) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 502 at the OpenAI door, shaped like OpenAI's errors."""
    error = {"message": f"chaos-mode: {message}", "type": "api_error", "code": "upstream_unreachable"}
    return json.dumps({"error": error}).encode(), {"content-type": "application/json"}


def _headers(retry_after: float | None, tried: list[str], *, window: bool) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "retry-after": str(retry_after_seconds(retry_after, None if window else MAX_RETRY_AFTER)),
    }
    if window:  # the SDKs (anthropic, openai) wait out any Retry-After unless told not to retry
        headers["x-should-retry"] = "false"
    return _tried(headers, tried)


def _tried(headers: dict[str, str], tried: list[str]) -> dict[str, str]:
    if tried:
        headers[TRIED_HEADER] = ", ".join(tried)
    return headers
