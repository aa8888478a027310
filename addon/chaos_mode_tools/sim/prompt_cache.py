"""The simulator's prompt cache (`prompt_cache_seconds`): per served model and conversation, the prompt it
read last, kept that many seconds after its last use.

A request whose conversation was read on the same model within that time finds the prompt read then
warm: that many of its input tokens (at most all of them) are cached (`usage.cache_read_input_tokens` at
the Anthropic door, beside the fresh `input_tokens`; `prompt_tokens_details.cached_tokens` within
`prompt_tokens` at the OpenAI door), charged at the cached weight (`sim.credits`), and its first token
comes sooner: the time to it shrinks with the share cached, to `WARM_LATENCY_SHARE` of it for a prompt
cached whole. The cache is per model, as z.ai's is: a conversation moved to another model reads its whole
prompt fresh there, and one coming back within the time finds its prefix still warm (a switch is not an
eviction). **Assumed**: z.ai caches a conversation's whole previous prompt (its prefix) for a few
minutes; its cache's real keys, granularity and lifetime are unchecked.

A conversation is Claude Code's `x-claude-code-session-id` header when the request has one, else its
system prompt and first message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Final

SESSION_HEADER: Final = "x-claude-code-session-id"
WARM_LATENCY_SHARE: Final = 0.25  # the time to the first token of a prompt cached whole, as a share


def conversation(payload: dict[str, Any], session: str | None) -> str:
    """The conversation a request belongs to: its session id, else a digest of how it begins."""
    if session:
        return "session:" + session
    messages = payload.get("messages")
    messages = messages if isinstance(messages, list) else []
    system = [m for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    first = next((m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")), None)
    opening = json.dumps([payload.get("system"), system, first], sort_keys=True, default=str)
    return "prefix:" + hashlib.sha256(opening.encode()).hexdigest()[:32]


class PromptCache:
    """(model, conversation) -> (last read, prompt tokens), entries kept `ttl` seconds after their use."""

    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[tuple[str, str], tuple[float, int]] = {}
        self._prune_at = 1024
        self.reads = 0  # prompts read
        self.input_tokens = 0  # their tokens, cached or not
        self.cached_tokens = 0  # of which cached

    def read(self, model: str, conversation: str, prompt_tokens: int) -> int:
        """A prompt of `prompt_tokens` read on `model`: how many of them are cached. Remembered."""
        now = self._clock()
        key = (model, conversation)
        entry = self._entries.get(key)
        cached = 0
        if entry is not None and now - entry[0] < self._ttl:
            cached = min(entry[1], prompt_tokens)
        self._entries[key] = (now, max(prompt_tokens, 0))
        self.reads += 1
        self.input_tokens += max(prompt_tokens, 0)
        self.cached_tokens += cached
        if len(self._entries) > self._prune_at:  # now and then, forget what expired
            self._entries = {k: v for k, v in self._entries.items() if now - v[0] < self._ttl}
            self._prune_at = max(1024, 2 * len(self._entries))
        return cached

    @staticmethod
    def latency(latency_ms: float, prompt_tokens: int, cached: int) -> float:
        """The time to the first token of a prompt with `cached` of its tokens cached."""
        if prompt_tokens <= 0 or cached <= 0:
            return latency_ms
        share = min(cached / prompt_tokens, 1.0)
        return latency_ms * (1.0 - share * (1.0 - WARM_LATENCY_SHARE))

    def snapshot(self) -> dict[str, Any]:
        """`/sim/stats`' view: prompts read, their tokens and the cached share."""
        share = self.cached_tokens / self.input_tokens if self.input_tokens else 0.0
        return {
            "reads": self.reads,
            "inputTokens": self.input_tokens,
            "cachedTokens": self.cached_tokens,
            "cachedShare": round(share, 4),
        }
