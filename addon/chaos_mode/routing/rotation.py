"""Models leaving rotation and coming back, each said once in the log, with why and until when.

A model leaves rotation on z.ai's word (1113, 1211, 1311: for good, until the proxy restarts; 1304: until
the next day) and comes back when its time is up or it is restored (here, or by another proxy of a fleet).
Pure: the pool tells it what it sees; the wall clock is injected.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from chaos_mode.routing.cooldowns import CooldownState

log = logging.getLogger("chaos_mode")


class Rotation:
    """The models logged out of rotation, so that each leaving and each return is one line."""

    def __init__(self, wall_clock: Callable[[], float]) -> None:
        self._wall_clock = wall_clock
        self.out: dict[str, str] = {}  # model -> why it is out, as logged

    def left(self, model: str, reason: str, seconds: float | None) -> None:
        """`model` is out for `seconds` (None: for good); said once while it stays out for one reason."""
        if self.out.get(model) == reason:
            return
        self.out[model] = reason
        if seconds is None:
            until = "until the proxy restarts"
        else:
            at = datetime.fromtimestamp(self._wall_clock() + seconds, UTC)
            until = f"until {at:%Y-%m-%d %H:%M} UTC"
        log.warning("chaos-mode: %s leaves rotation: %s, %s", model, reason, until)

    def check(self, cooldowns: CooldownState) -> None:
        """Say which of the models out are back (their time up, or restored). Cheap when none is out."""
        for model in [m for m in self.out if _back(cooldowns, m)]:
            log.info("chaos-mode: %s is back in rotation (was out: %s)", model, self.out.pop(model))


def _back(cooldowns: CooldownState, model: str) -> bool:
    block = cooldowns.block(model)
    return block is None or block.kind != "out"
