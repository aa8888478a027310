"""Sticky conversations: conversation key -> model, an LRU map with a TTL on an injected clock."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class StickyMap:
    """Remembers which model served a conversation; entries expire `ttl` seconds after last use."""

    def __init__(self, ttl: float, max_entries: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.moves = 0  # conversations moved off a model that was no longer usable

    def __len__(self) -> int:
        return len(self._entries)

    def reconfigure(self, ttl: float, max_entries: int) -> None:
        self._ttl, self._max = ttl, max_entries
        self._trim()

    def get(self, key: str) -> str | None:
        """The model `key` is stuck to, if the entry has not expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        model, expires = entry
        if expires <= self._clock():
            del self._entries[key]
            return None
        return model

    def put(self, key: str, model: str) -> None:
        """Stick `key` to `model` (refreshing its TTL and LRU position)."""
        self._entries[key] = (model, self._clock() + self._ttl)
        self._entries.move_to_end(key)
        self._trim()

    def _trim(self) -> None:
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
