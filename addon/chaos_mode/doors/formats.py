"""What each door speaks: how its requests are parsed, its streamed answers read and our own errors written.

The adapter looks the door up once per request (`doors.door.door_of`) and then uses only these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from chaos_mode.doors.chat import parse_chat
from chaos_mode.doors.chat_stream import ChatStreamObserver
from chaos_mode.doors.door import Door
from chaos_mode.doors.error_bodies import (
    chat_gateway_error,
    chat_permission_error,
    chat_rate_limit_error,
    gateway_error,
    permission_error,
    rate_limit_error,
)
from chaos_mode.doors.messages import MessageRequest, parse_message
from chaos_mode.doors.messages_stream import SseObserver, StreamObserver


class Parse(Protocol):
    def __call__(self, content: bytes, *, limit: int) -> MessageRequest: ...


class RateLimitError(Protocol):
    def __call__(
        self, message: str, *, retry_after: float | None, tried: list[str], resets_at: float | None = None
    ) -> tuple[bytes, dict[str, str]]: ...


@dataclass(frozen=True, slots=True)
class DoorFormat:
    door: Door
    parse: Parse  # decoded request body -> a request to route (`BadRequest`: pass it untouched)
    observer: Callable[[], StreamObserver]  # a new observer of one streamed answer
    rate_limit_error: RateLimitError  # (body, headers) of our own 429
    gateway_error: Callable[[str], tuple[bytes, dict[str, str]]]  # (body, headers) of our own 502
    # (body, headers) of our own 403: waiting fixes nothing (message, models tried)
    permission_error: Callable[[str, list[str]], tuple[bytes, dict[str, str]]]


FORMATS: Final[dict[Door, DoorFormat]] = {
    "anthropic": DoorFormat(
        "anthropic", parse_message, SseObserver, rate_limit_error, gateway_error, permission_error
    ),
    "openai": DoorFormat(
        "openai",
        parse_chat,
        ChatStreamObserver,
        chat_rate_limit_error,
        chat_gateway_error,
        chat_permission_error,
    ),
}
