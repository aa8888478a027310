"""z.ai's content filter: a request whose system prompt holds a filtered phrase (exact, case-sensitive) is
refused with code 1305 on every model, whatever the load: HTTP 529 `overloaded_error` at the Anthropic door,
HTTP 429 at the OpenAI door (NousResearch/hermes-agent #60118, #89278, #63534: "You run on Hermes Agent" in
the system role; the same phrase in a user or assistant message passed). `scope="all"` also looks in the
messages, for a filter that does."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

FILTER_SCOPES: Final = ("system", "all")
SYSTEM_ROLES: Final = ("system", "developer")  # OpenAI's system messages


@dataclass(frozen=True, slots=True)
class ContentFilter:
    phrases: tuple[str, ...] = ()
    scope: str = "system"

    def trips(self, payload: Mapping[str, Any]) -> bool:
        """Whether z.ai's filter refuses this request body (Anthropic Messages or OpenAI chat)."""
        if not self.phrases:
            return False
        texts = list(system_texts(payload))
        if self.scope == "all":
            texts += message_texts(payload)
        return any(phrase in text for phrase in self.phrases for text in texts)


def system_texts(payload: Mapping[str, Any]) -> Iterator[str]:
    """The system prompt's texts: Anthropic's `system` (a string or text blocks), OpenAI's system messages."""
    yield from _texts(payload.get("system"))
    for message in _messages(payload):
        if message.get("role") in SYSTEM_ROLES:
            yield from _texts(message.get("content"))


def message_texts(payload: Mapping[str, Any]) -> list[str]:
    """The texts of every message that is not a system message."""
    return [
        text
        for message in _messages(payload)
        if message.get("role") not in SYSTEM_ROLES
        for text in _texts(message.get("content"))
    ]


def _messages(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = payload.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return []
    return [m for m in messages if isinstance(m, Mapping)]


def _texts(content: Any) -> Iterator[str]:
    """A string, or the `text` of each block of a list (Anthropic's and OpenAI's content parts)."""
    if isinstance(content, str):
        yield content
    elif isinstance(content, Sequence):
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                yield block["text"]
