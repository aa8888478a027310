"""Per-model cooldowns with burst dampening, models out of rotation, and account-wide pauses."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from chaos_mode.config.schema import CooldownSettings

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Block:
    """Why a model (or the account) is unusable, and until when (monotonic; None = until restored)."""

    reason: str
    until: float | None
    kind: str  # "cooldown" | "out" | "pause"


class CooldownState(Protocol):
    """What the pool needs of cooldown state; `Cooldowns` keeps it in memory, a shared backend
    (`fleet.cooldowns`, which calls back into a `Cooldowns`) may keep it elsewhere without touching the
    policy."""

    def reconfigure(self, settings: CooldownSettings) -> None: ...
    def hit(self, model: str, reason: str, retry_after: float | None = None) -> float: ...
    def succeeded(self, model: str) -> None: ...
    def take_out(self, model: str, reason: str, seconds: float | None = None) -> None: ...
    def restore(self, model: str) -> bool: ...
    def pause_account(self, seconds: float, reason: str) -> None: ...
    def blocked(self) -> frozenset[str]: ...
    def block(self, model: str) -> Block | None: ...
    def remaining(self, model: str) -> float: ...
    def account_pause(self) -> tuple[float, str] | None: ...
    def next_expiry(self) -> float | None: ...
    def lending_off(self, reason: str) -> None:
        """The pool's check turned lending off (`routing.lending`): a fleet tells the others."""
        ...


class Cooldowns:
    """When each model may be used again. Pure state, driven by an injected monotonic clock.

    - `hit(model)`: a short cooldown, from Retry-After or the default, grown by burst dampening:
      every recent hit multiplies the next cooldown; quiet time decays the hit count (half-life
      `decaySeconds`); always capped at `maxSeconds`. Busy answers that arrive while the model is
      already cooling down (requests sent before it began) are one burst, not more strikes; a clean
      answer ends the run (`succeeded`).
    - `take_out(model, reason)`: out of rotation (1113/1211/1311), until restored or a set time (1304).
    - `pause_account(seconds, reason)`: nothing may be used (1308/1310/1313).
    """

    def __init__(self, settings: CooldownSettings, clock: Clock) -> None:
        self._settings = settings
        self._clock = clock
        self._blocks: dict[str, Block] = {}
        self._strikes: dict[str, tuple[float, float]] = {}  # model -> (decayed hit count, at)
        self._pause: Block | None = None
        self._blocked: frozenset[str] = frozenset()
        self._valid_until = math.inf  # when `_blocked` must be recomputed

    def reconfigure(self, settings: CooldownSettings) -> None:
        self._settings = settings

    # -- feedback -------------------------------------------------------------------------------

    def hit(self, model: str, reason: str, retry_after: float | None = None) -> float:
        """Cool `model` down after a busy answer; returns the cooldown in seconds."""
        settings = self._settings
        now = self._clock()
        current = self._blocks.get(model)
        if current is not None and current.until is not None and current.until <= now:
            current = None  # an expired block (not yet purged) is no block
        count, at = self._strikes.get(model, (0.0, now))
        count = count * math.pow(0.5, (now - at) / settings.decay_seconds)
        if current is None or current.kind != "cooldown":
            count += 1.0  # a new strike; one that lands while the model already cools is the same burst
        count = max(count, 1.0)
        self._strikes[model] = (count, now)
        dampened = settings.default_seconds * math.pow(settings.burst_multiplier, count - 1.0)
        seconds = min(max(dampened, retry_after or 0.0), settings.max_seconds)
        if current is not None and current.kind == "out":
            return seconds  # out of rotation outranks a cooldown
        until = now + seconds
        if current is None or current.until is None or current.until < until:
            self._set(model, Block(reason, until, "cooldown"))
        return seconds

    def impose(self, model: str, seconds: float, reason: str) -> None:
        """A cooldown of `seconds` set elsewhere (another proxy's): no strike here; a longer block stays."""
        current = self.block(model)
        until = self._clock() + max(seconds, 0.0)
        if current is None or (
            current.kind == "cooldown" and current.until is not None and current.until < until
        ):
            self._set(model, Block(reason, until, "cooldown"))

    def succeeded(self, model: str) -> None:
        """A clean answer from `model`: its run of busy answers is over (the next one starts afresh)."""
        if self._strikes:
            self._strikes.pop(model, None)

    def take_out(self, model: str, reason: str, seconds: float | None = None) -> None:
        """Take `model` out of rotation, for good (None) or for `seconds`."""
        until = None if seconds is None else self._clock() + max(seconds, 0.0)
        self._set(model, Block(reason, until, "out"))

    def restore(self, model: str) -> bool:
        """Put `model` back into rotation at once; False if it was not blocked."""
        self._strikes.pop(model, None)
        if self._blocks.pop(model, None) is None:
            return False
        self._invalidate()
        return True

    def pause_account(self, seconds: float, reason: str) -> None:
        until = self._clock() + max(seconds, 0.0)
        if self._pause is None or self._pause.until is None or self._pause.until < until:
            self._pause = Block(reason, until, "pause")

    def resume_account(self) -> None:
        self._pause = None

    # -- queries --------------------------------------------------------------------------------

    def blocked(self) -> frozenset[str]:
        """Models that may not be used now. Cheap: recomputed only when a block expires."""
        if self._clock() >= self._valid_until:
            self._purge()
        return self._blocked

    def block(self, model: str) -> Block | None:
        """The block on `model` now, if any."""
        block = self._blocks.get(model)
        if block is None or (block.until is not None and block.until <= self._clock()):
            return None
        return block

    def remaining(self, model: str) -> float:
        """Seconds until `model` may be used again (inf when out for good, 0 when usable)."""
        block = self.block(model)
        if block is None:
            return 0.0
        return math.inf if block.until is None else block.until - self._clock()

    def account_pause(self) -> tuple[float, str] | None:
        """(seconds left, reason) of an account-wide pause in force, else None."""
        pause = self._pause
        if pause is None or pause.until is None:
            return None
        left = pause.until - self._clock()
        if left <= 0:
            self._pause = None
            return None
        return left, pause.reason

    def lending_off(self, reason: str) -> None:
        pass  # one proxy: nobody to tell

    def next_expiry(self) -> float | None:
        """Seconds until the earliest timed block ends (for waking waiters), else None."""
        now = self._clock()
        ends = [b.until for b in self._blocks.values() if b.until is not None and b.until > now]
        if self._pause is not None and self._pause.until is not None and self._pause.until > now:
            ends.append(self._pause.until)
        return min(ends) - now if ends else None

    # -- internals ------------------------------------------------------------------------------

    def _set(self, model: str, block: Block) -> None:
        self._blocks[model] = block
        self._invalidate()

    def _invalidate(self) -> None:
        self._valid_until = -math.inf

    def _purge(self) -> None:
        now = self._clock()
        self._blocks = {m: b for m, b in self._blocks.items() if b.until is None or b.until > now}
        self._blocked = frozenset(self._blocks)
        ends = [b.until for b in self._blocks.values() if b.until is not None]
        self._valid_until = min(ends) if ends else math.inf
