"""What a z.ai error blocks (`zai.errors.Action`): a model cooled down or taken out of rotation (for good,
or until the reset z.ai named), or the account paused; a spent quota told to its tracker."""

from __future__ import annotations

import math

from chaos_mode.config.schema import CooldownSettings
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode.routing.cooldowns import CooldownState
from chaos_mode.routing.rotation import Rotation
from chaos_mode.zai.errors import FAIR_USE_CODE, FAIR_USE_SECONDS, Action, UpstreamError
from chaos_mode.zai.quota import FIVE_HOURS, SPENT_CODE, WEEK, WEEK_SPENT_CODE


def block(
    model: str,
    error: UpstreamError,
    retry_after: float | None,
    parts: tuple[CooldownState, Rotation, QuotaTracker, CooldownSettings],
    *,
    learning: bool,
    now: float,
) -> float:
    """Block what `error` on `model` says: seconds the model or the account is out (0: nothing blocked).
    `learning`: a 1302 blocks nothing (a limit is learned instead); `now`: the wall clock."""
    cooldowns, rotation, quota, settings = parts

    def until(fallback: float) -> float:  # a reset z.ai named (capped: a message may name any date)
        seconds = retry_after if retry_after is not None else fallback
        if error.reset_at is not None and error.reset_at > now:
            seconds = error.reset_at - now
        elif error.reset_at is not None:  # past on our clock (z.ai's behind, or its whole second): imminent
            seconds = retry_after if retry_after is not None else settings.default_seconds
        return min(seconds, settings.max_pause_seconds)

    match error.action:
        case Action.CONCURRENCY if learning:
            return 0.0
        case Action.CONCURRENCY | Action.COOLDOWN:
            return cooldowns.hit(model, error.reason, retry_after)
        case Action.OUT_OF_ROTATION:
            cooldowns.take_out(model, error.reason)
            rotation.left(model, error.reason, None)
            return math.inf
        case Action.MODEL_DAY:
            seconds = until(settings.account_pause_seconds)
            cooldowns.take_out(model, error.reason, seconds)
            rotation.left(model, error.reason, seconds)
            return seconds
        case Action.ACCOUNT_PAUSE:
            if error.code in (SPENT_CODE, WEEK_SPENT_CODE):
                quota.spent(error.reset_at, FIVE_HOURS if error.code == SPENT_CODE else WEEK)
            fallback = FAIR_USE_SECONDS if error.code == FAIR_USE_CODE else settings.account_pause_seconds
            seconds = until(fallback)
            cooldowns.pause_account(seconds, error.reason)
            return seconds
    return 0.0
