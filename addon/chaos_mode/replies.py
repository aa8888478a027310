"""Answers the addon makes itself: 429s in the format of the door the request came through (Anthropic's or
OpenAI's), with a Retry-After, never a 5xx."""

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


def _headers(retry_after: float | None, tried: list[str]) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "retry-after": str(retry_after_seconds(retry_after)),
    }
    if tried:
        headers[TRIED_HEADER] = ", ".join(tried)
    return headers
