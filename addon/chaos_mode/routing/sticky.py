"""What the pool remembers of a conversation (`stickyConversations`): the models that served it lately, each
until `ttl` seconds after it last did (z.ai's prompt cache there: `zai.quota.PROMPT_CACHE_SECONDS`), and the
size of its last prompt; an LRU map on an injected clock. `routing.cache_rule` decides with it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class StickyMap:
    """Conversation key -> ({model: last served}, prompt tokens); a model is forgotten `ttl` seconds after it
    last served the conversation, the conversation with its last model."""

    def __init__(self, ttl: float, max_entries: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[dict[str, float], int]] = OrderedDict()
        self.moves = 0  # conversations that went cold: served by a model where no prompt of theirs was warm
        self.moved_tokens = 0  # the prompt tokens those moves read again at the full input weight

    def __len__(self) -> int:
        return len(self._entries)

    def reconfigure(self, ttl: float, max_entries: int) -> None:
        self._ttl, self._max = ttl, max_entries
        self._trim()

    def warm(self, key: str) -> list[str]:
        """The models that served `key` within the TTL, the latest first (empty: none, or not known)."""
        entry = self._entries.get(key)
        if entry is None:
            return []
        since = self._clock() - self._ttl
        models = [m for m, t in reversed(entry[0].items()) if t > since]  # kept in the order they served
        if not models:
            del self._entries[key]
        return models

    def get(self, key: str) -> str | None:
        """The model that served `key` last, if within the TTL."""
        return next(iter(self.warm(key)), None)

    def put(self, key: str, model: str, prompt_tokens: int = 0) -> None:
        """`model` serves `key` now, with a prompt of `prompt_tokens` (refreshing its LRU position)."""
        now = self._clock()
        entry = self._entries.get(key)
        since = now - self._ttl
        models = {} if entry is None else {m: t for m, t in entry[0].items() if t > since and m != model}
        models[model] = now
        self._entries[key] = (models, max(prompt_tokens, 0))
        self._entries.move_to_end(key)
        self._trim()

    def _trim(self) -> None:
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
