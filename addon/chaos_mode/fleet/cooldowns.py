"""Cooldowns shared by a fleet of proxies: the in-process `Cooldowns`, with every block set here told to
the others (`tell`) and every block they tell applied here (`heard`). Pure: the fleet's store is the
caller's; times travel as seconds left, so no two proxies' clocks need to agree."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from chaos_mode.config.schema import CooldownSettings
from chaos_mode.routing.cooldowns import Block, Cooldowns

if TYPE_CHECKING:
    from chaos_mode.routing.pool import ChaosPool

BlockKind = Literal["cooldown", "out", "restore", "pause", "lending"]


@dataclass(frozen=True, slots=True)
class BlockNotice:
    """A block set by one proxy: a cooldown, a model out of rotation (`seconds` None: until restored), a
    model put back, the account paused, or lending turned off (`routing.lending`: for the fleet's life)."""

    kind: BlockKind
    model: str
    seconds: float | None
    reason: str


class SharedCooldowns:
    """`CooldownState` over a fleet (see the module)."""

    def __init__(self, inner: Cooldowns, tell: Callable[[BlockNotice], None]) -> None:
        self.inner = inner
        self.tell = tell
        self.heard_count = 0  # blocks the other proxies told, applied here

    # -- feedback: applied here, then told ---------------------------------------------------------

    def hit(self, model: str, reason: str, retry_after: float | None = None) -> float:
        seconds = self.inner.hit(model, reason, retry_after)
        block = self.inner.block(model)
        if block is not None and block.kind == "cooldown":
            self.tell(BlockNotice("cooldown", model, self.inner.remaining(model), block.reason))
        return seconds

    def take_out(self, model: str, reason: str, seconds: float | None = None) -> None:
        self.inner.take_out(model, reason, seconds)
        self.tell(BlockNotice("out", model, seconds, reason))

    def restore(self, model: str) -> bool:
        restored = self.inner.restore(model)
        if restored:
            self.tell(BlockNotice("restore", model, None, "restored"))
        return restored

    def pause_account(self, seconds: float, reason: str) -> None:
        self.inner.pause_account(seconds, reason)
        self.tell(BlockNotice("pause", "", seconds, reason))

    def lending_off(self, reason: str) -> None:
        self.tell(BlockNotice("lending", "", None, reason))

    def heard(self, notice: BlockNotice) -> None:
        """Another proxy's block: applied here, not told again."""
        self.heard_count += 1
        seconds = notice.seconds
        match notice.kind:
            case "cooldown" if seconds is not None:
                self.inner.impose(notice.model, seconds, notice.reason)
            case "out":
                self.inner.take_out(notice.model, notice.reason, seconds)
            case "restore":
                self.inner.restore(notice.model)
            case "pause" if seconds is not None and math.isfinite(seconds):
                self.inner.pause_account(seconds, notice.reason)

    # -- the rest: as the in-process state says ----------------------------------------------------

    def reconfigure(self, settings: CooldownSettings) -> None:
        self.inner.reconfigure(settings)

    def succeeded(self, model: str) -> None:
        self.inner.succeeded(model)

    def blocked(self) -> frozenset[str]:
        return self.inner.blocked()

    def block(self, model: str) -> Block | None:
        return self.inner.block(model)

    def remaining(self, model: str) -> float:
        return self.inner.remaining(model)

    def account_pause(self) -> tuple[float, str] | None:
        return self.inner.account_pause()

    def next_expiry(self) -> float | None:
        return self.inner.next_expiry()


def heard_block(pool: ChaosPool, cooldowns: SharedCooldowns, notice: BlockNotice) -> None:
    """Another proxy's block applied here: lending turned off (for the fleet's life), or a cooldown and the
    like; the pool's waiters look again."""
    if notice.kind == "lending":
        pool.ledger.lending_off(f"{notice.reason} (another proxy of the fleet)", heard=True)
    else:
        cooldowns.heard(notice)
    pool.wake()
