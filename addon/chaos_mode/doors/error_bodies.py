"""Answers the addon makes itself, in the format of the door the request came through (Anthropic's or
OpenAI's): 429s with a Retry-After when no model can take a request in time, and a 502 only when z.ai
cannot be reached for a reason no other model changes (a setting to fix, as mitmproxy itself answers)."""

from __future__ import annotations

import json
import math
import uuid

MAX_RETRY_AFTER = 60  # Claude Code honours Retry-After up to 60 s
TRIED_HEADER = "x-chaos-models-tried"


def retry_after_seconds(seconds: float | None) -> int:
    """A Retry-After value: whole seconds, at least 1, at most 60."""
    if seconds is None or math.isnan(seconds):
        return 1
    if math.isinf(seconds):
        return MAX_RETRY_AFTER if seconds > 0 else 1
    return int(min(max(math.ceil(seconds), 1), MAX_RETRY_AFTER))


def rate_limit_error(
    message: str, *, retry_after: float | None, tried: list[str]
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 429, shaped like Anthropic's and z.ai's."""
    body = {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": f"chaos-mode: {message}"},
        "request_id": f"chaos_{uuid.uuid4().hex[:24]}",
    }
    return json.dumps(body).encode(), _headers(retry_after, tried)


def chat_rate_limit_error(
    message: str, *, retry_after: float | None, tried: list[str]
) -> tuple[bytes, dict[str, str]]:
    """Body and headers of our own 429 at the OpenAI door, shaped like OpenAI's. Its code is a word, never
    digits: nothing reads it as one of z.ai's business codes."""
    error = {"message": f"chaos-mode: {message}", "type": "rate_limit_error", "code": "rate_limit_exceeded"}
    return json.dumps({"error": error}).encode(), _headers(retry_after, tried)


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


def _headers(retry_after: float | None, tried: list[str]) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "retry-after": str(retry_after_seconds(retry_after)),
    }
    if tried:
        headers[TRIED_HEADER] = ", ".join(tried)
    return headers
