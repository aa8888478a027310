"""Fair shares between conversations: how much each has been served lately, to order the wait queue.

First come, first served is fair to requests, not to the agents that send them: an agent whose request
was refused (z.ai takes 3-6 s to say so) or that simply came late stays behind the others, and a swarm
ends when its last agent does. So waiting requests go by the number of requests their conversation
(Claude Code's session header) was admitted lately, fewest first, and first come first served among
equals: least attained service, the classic policy that needs no knowledge of what is left to do. The
counts decay with a half-life, so a conversation long past does not weigh on a new one; a request with
no conversation counts as an average one. Among equals, a conversation whose request z.ai held up (refused
an attempt of it, served it elsewhere later) would stay that far behind every one that came meanwhile, for
the rest of its chain: its next request counts as having come that much earlier (`fell_behind`).
Pure; the clock is injected.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

HALF_LIFE_SECONDS: Final = 300.0
MAX_ENTRIES: Final = 10_000


class ServedLately:
    """Requests admitted per conversation key, decaying with `half_life`; bounded in size."""

    def __init__(
        self,
        clock: Callable[[], float],
        half_life: float = HALF_LIFE_SECONDS,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._clock = clock
        self._half_life = half_life
        self._max = max_entries
        self._served: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (count, as of)
        self._average: tuple[int, float] = (0, -math.inf)  # (level, when computed): cached, O(n) to make
        self._behind: OrderedDict[str, float] = OrderedDict()  # key -> seconds its next request makes up

    def __len__(self) -> int:
        return len(self._served)

    def served(self, key: str | None) -> None:
        """One more request of `key`'s conversation admitted (nothing without a key)."""
        if key is None:
            return
        now = self._clock()
        count = self._decayed(self._served.pop(key, None), now) + 1.0
        self._behind.pop(key, None)  # made up, if it had fallen behind
        self._served[key] = (count, now)
        while len(self._served) > self._max:
            self._served.popitem(last=False)

    def unserved(self, key: str | None) -> None:
        """An admission counted by `served` was taken back: the slot was lost to another proxy of the
        fleet, so the conversation was not served and keeps its place in line."""
        entry = self._served.get(key) if key is not None else None
        if key is None or entry is None:
            return
        now = self._clock()
        self._served[key] = (max(self._decayed(entry, now) - 1.0, 0.0), now)

    def fell_behind(self, key: str | None, seconds: float) -> None:
        """A request of `key`'s conversation was held up `seconds` (z.ai refused an attempt of it): its next
        request goes in line as if it had come that much earlier (`behind`), until its next admission."""
        if key is None or seconds <= 0.0:
            return
        behind = self._behind
        behind[key] = behind.pop(key, 0.0) + seconds
        while len(behind) > self._max:
            behind.popitem(last=False)

    def behind(self, key: str | None) -> float:
        """The seconds `key`'s conversation fell behind since its last admission (`fell_behind`): its next
        request makes them up, and its admission (`served`) clears them."""
        return 0.0 if key is None else self._behind.get(key, 0.0)

    def level(self, key: str | None) -> int:
        """The conversation's place in line: its recent admissions, rounded (fewer goes first). With no
        key, the average conversation's."""
        now = self._clock()
        if key is not None:
            return round(self._decayed(self._served.get(key), now))
        level, when = self._average
        if now - when >= 1.0:
            total = sum(self._decayed(entry, now) for entry in self._served.values())
            level = round(total / len(self._served)) if self._served else 0
            self._average = (level, now)
        return level

    def _decayed(self, entry: tuple[float, float] | None, now: float) -> float:
        if entry is None:
            return 0.0
        count, since = entry
        return count * math.pow(2.0, -max(now - since, 0.0) / self._half_life)
