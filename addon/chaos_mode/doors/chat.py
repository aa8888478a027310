"""An OpenAI chat-completions request body: parsed and rewritten exactly as an Anthropic message is.

The same promise as `message_request` (the top-level `model` value's bytes change, nothing else; anything
odd is a `BadRequest` and passes untouched), the same scanner; what differs is what the body says about
streaming, usage and the output budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chaos_mode.doors.door import Door
from chaos_mode.doors.messages import MessageRequest, parse_message


@dataclass(frozen=True, slots=True)
class ChatRequest(MessageRequest):
    """A chat-completions body; usable wherever a `MessageRequest` is (routing, rewrite, sticky key)."""

    door: ClassVar[Door] = "openai"

    @property
    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk (`stream_options.include_usage`)."""
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def conversation_head(self) -> object:
        """The messages up to the first user message: here the system prompt is a message, and agents of
        one tool share it, so the first message alone would make them one conversation."""
        messages = self.body.get("messages")
        if not isinstance(messages, list):
            return None
        for i, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return messages[: i + 1]
        return messages[:1]

    @property
    def output_budget(self) -> object:
        """`max_completion_tokens` (OpenAI's current name) bounds the output, else `max_tokens`."""
        budget = self.body.get("max_completion_tokens")
        return budget if _positive(budget) else self.body.get("max_tokens")


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def parse_chat(content: bytes, *, limit: int) -> ChatRequest:
    """Parse a decoded chat-completions body; `BadRequest` when it cannot be routed exactly."""
    message = parse_message(content, limit=limit)
    return ChatRequest(body=message.body, model=message.model, raw=message.raw, model_span=message.model_span)
