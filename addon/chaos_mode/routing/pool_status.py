"""The pool's state as typed values, and the one place they become the camelCase JSON that is served.

`status(pool)` returns a `PoolStatus`; metrics read its fields; `served()` turns it into the JSON of
`/api/status`, the dashboard and the `chaos.status` panel (snake_case field names become camelCase keys;
a field marked `flat` spreads its own fields into its parent's object).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from chaos_mode.config.schema import ModelRouting
from chaos_mode.learning.limits import Limit
from chaos_mode.routing.cache_rule import reread_credits
from chaos_mode.zai.catalog import REQUEST_TIERS
from chaos_mode.zai.quota import WINDOW_SECONDS

if TYPE_CHECKING:
    from chaos_mode.routing.pool import ChaosPool

FLAT: Final = {"flat": True}
NO_ACCOUNT_CAP: Final = sys.maxsize  # no account limit known: only the models' own limits count


@dataclass(frozen=True, slots=True)
class ModelLimit:
    """A catalog model's learned limit."""

    learned_limit: int | None
    limit_ceiling: int
    limit_reason: str
    limit_changed_at: float | None
    probing: bool


@dataclass(frozen=True, slots=True)
class ModelStatus:
    tier: str | None
    dispatched: int
    in_flight: int  # every slot held, above the limit included
    capacity: int  # the limit in force
    above_limit: int  # slots held above it: probes and overdue attempts riding there, or requests sent
    # before the limit fell
    probes: int  # probes of its limit out and unanswered
    overdue: int  # attempts with no head within their patience, riding above the limits until their verdict
    catalog_limit: int
    limit: ModelLimit | None = field(metadata=FLAT)  # None: not in the catalog (a reload dropped it, busy)
    cooldown_remaining: float
    out_of_rotation: str | None
    cooldown_reason: str | None
    excluded: bool
    free: bool
    usable: bool
    aliases: list[str]  # names z.ai serves as this model (the config's and the learned)
    vision: bool


@dataclass(frozen=True, slots=True)
class AccountStatus:
    """The account's learned limit; `limit` None: none known."""

    limit: int | None
    configured: int | None
    ceiling: int
    reason: str
    changed_at: float | None
    probing: bool


@dataclass(frozen=True, slots=True)
class LearningStatus:
    enabled: bool
    probe_interval_seconds: float
    drift_seconds: float
    lend_overdue: bool  # whether an overdue attempt lends its place now (`routing.lending`)
    lending: str  # why, or why not
    lending_nats: float  # the check's highest CUSUM so far (`routing.lending`: off at ALARM_NATS)
    limits_moved: dict[str, int]  # how often a change was detected: limits that fell ("down"), rose ("up")


@dataclass(frozen=True, slots=True)
class OutCapacity:
    """The slots no request can use now: how many, how many of them still finish a request, whose and why."""

    slots: int
    in_flight: int
    models: dict[str, str]


@dataclass(frozen=True, slots=True)
class AccountPause:
    remaining: float
    reason: str
    resets_at: float  # unix seconds: when the pause ends (z.ai's reset, when it named one)


def pause_span(seconds: float, resets_at: float) -> str:
    """An account pause's length in words: seconds within z.ai's 5-hour window; beyond it (a weekly or
    monthly limit) days and hours, and the reset's date (UTC)."""
    if seconds <= WINDOW_SECONDS:
        return f"{seconds:.0f} s"
    days, hours = divmod(round(seconds / 3600), 24)
    when = datetime.fromtimestamp(resets_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{days} d {hours} h" if days else f"{hours} h") + f", until {when}"


@dataclass(frozen=True, slots=True)
class QueueStatus:
    waiting: int
    waiting_by_tier: dict[str, int]
    longest_wait: float
    timeouts: int
    admitted: int
    rejected: int
    avg_wait_ms: float


@dataclass(frozen=True, slots=True)
class StickyStatus:
    enabled: bool
    entries: int
    moves: int  # conversations that went cold (`routing.cache_rule`)
    move_credits: float  # what their prompts cost again, by GLM-5.3's weights (`zai.quota`)


@dataclass(frozen=True, slots=True)
class PoolStatus:
    enabled: bool
    strategy: str
    models: dict[str, ModelStatus]
    total_capacity: int
    account_limit: int | None
    account: AccountStatus
    learning: LearningStatus
    used_capacity: int  # every slot held
    in_limits: int  # slots held within the limits of usable models (what utilization counts)
    above_limits: int  # slots held above the limits (probes, or requests sent before a limit fell)
    utilization: float  # in_limits / total_capacity: never above 1
    out_capacity: OutCapacity
    account_pause: AccountPause | None
    queue: QueueStatus
    sticky: StickyStatus
    spurious_releases: int


def status(pool: ChaosPool) -> PoolStatus:
    """The pool's state for status pages, metrics and the dashboard (`served` makes it JSON)."""
    pool._follow_limits()  # the pool's selection state is read here as it stands
    models: dict[str, ModelStatus] = {}
    held = pool.slots.snapshot()
    names: Iterable[str] = list(pool._entries) + [m for m in held if m not in pool._entries]
    serving = {entry.name for entries in pool._eligible.values() for entry in entries}
    out_slots = out_in_flight = in_limits = 0
    out_models: dict[str, str] = {}
    probes, overdue = pool.ledger.probes(), pool.ledger.overdue_here()
    served_as = pool.aliases.all()
    for name in names:
        spec = pool.config.models.get(name)
        block = pool.cooldowns.block(name)
        out = block is not None and block.kind == "out"
        remaining = pool.cooldowns.remaining(name)
        entry = pool._entries.get(name)
        unusable = _unusable_reason(pool.config, name, block.reason if out and block else None, serving)
        if name in served_as and name not in pool.config.models:
            unusable = f"served as {served_as[name]}"
        in_flight, capacity = held.get(name, 0), entry.capacity if entry else 0
        if unusable is not None:
            out_models[name] = unusable
            out_slots += capacity
            out_in_flight += in_flight
        else:
            in_limits += min(in_flight, capacity)
        models[name] = ModelStatus(
            tier=spec.tier if spec else None,
            dispatched=pool.dispatched.get(name, 0),
            in_flight=in_flight,
            capacity=capacity,
            above_limit=max(in_flight - capacity, 0),
            probes=probes[name],
            overdue=overdue[name],
            catalog_limit=spec.max_concurrency if spec else 0,
            limit=_model_limit(pool.limits.view(name)) if spec else None,
            cooldown_remaining=0.0 if out or math.isinf(remaining) else round(remaining, 3),
            out_of_rotation=block.reason if out and block else None,
            cooldown_reason=block.reason if block and not out else None,
            excluded=name in pool.config.chaos_mode.exclude_models,
            free=bool(spec and spec.free),
            usable=unusable is None,
            aliases=sorted(asked for asked, model in served_as.items() if model == name),
            vision=bool(spec and spec.vision),
        )
    pause = pool.cooldowns.account_pause()
    waiting = pool._queue.waiting()
    used = pool.slots.total()
    usable = sum(entry.capacity for name, entry in pool._entries.items() if name not in out_models)
    capacity = min(pool._account_cap, usable)
    learning = pool.config.learning
    account = pool.limits.view()
    return PoolStatus(
        enabled=pool.config.chaos_mode.enabled,
        strategy=pool.config.chaos_mode.strategy,
        models=models,
        total_capacity=capacity,
        account_limit=None if pool._account_cap == NO_ACCOUNT_CAP else pool._account_cap,
        account=AccountStatus(
            account.value,
            account.evidence.start,
            account.evidence.ceiling,
            account.reason,
            account.changed_at,
            account.probing,
        ),
        learning=LearningStatus(
            pool.limits.enabled,
            learning.probe_interval_seconds,
            learning.drift_seconds,
            pool.ledger.lending.on,
            pool.ledger.lending.why,
            round(pool.ledger.lending.nats, 2),
            dict(zip(("down", "up"), pool.limits.moves, strict=True)),
        ),
        used_capacity=used,
        in_limits=min(in_limits, capacity),
        above_limits=used - out_in_flight - min(in_limits, capacity),
        utilization=round(min(in_limits, capacity) / capacity, 4) if capacity else 0.0,
        out_capacity=OutCapacity(out_slots, out_in_flight, out_models),
        account_pause=(
            AccountPause(round(pause[0], 3), pause[1], round(pool._wall_clock() + pause[0], 3))
            if pause
            else None
        ),
        queue=QueueStatus(
            waiting=len(waiting),
            waiting_by_tier={t: sum(1 for w in waiting if w.ticket.tier == t) for t in REQUEST_TIERS},
            longest_wait=round(pool._queue.oldest_wait(), 3),
            timeouts=pool._queue.timeouts,
            admitted=pool.admitted,
            rejected=pool.rejected,
            avg_wait_ms=round(1000 * pool.total_wait / pool.admitted, 1) if pool.admitted else 0.0,
        ),
        sticky=StickyStatus(
            pool._sticky_on,
            len(pool._sticky),
            pool._sticky.moves,
            reread_credits(pool._sticky.moved_tokens),
        ),
        spurious_releases=pool.spurious_releases,
    )


def quota(pool: ChaosPool) -> dict[str, Any]:
    """The quota as `/api/status` shows it, with pacing: whether it is on, the plan in force, the waits it
    caused (counted apart from the queue's other waits)."""
    return {**pool.quota.status(), "pacing": pool.pacer.status(pool._lighter_left)}


def _unusable_reason(config: ModelRouting, name: str, out: str | None, serving: set[str]) -> str | None:
    """Why no request can use `name` now (its slots are then not usable capacity), else None.

    A cooldown is not counted: it ends within seconds. An account pause stops every model alike."""
    if out is not None:
        return out
    if name not in config.models:
        return "not in the catalog (dropped by a reload)"
    if name in serving:
        return None
    chaos = config.chaos_mode
    if name in chaos.exclude_models:
        return "excluded (chaosMode.excludeModels)"
    if config.models[name].free and not chaos.include_free_models:
        return "free models off (chaosMode.includeFreeModels)"
    return "below every quality floor (chaosMode.qualityFloor)"


def _model_limit(view: Limit) -> ModelLimit:
    return ModelLimit(view.value, view.evidence.ceiling, view.reason, view.changed_at, view.probing)


def served(value: Any) -> Any:
    """The JSON form of a status value: dataclasses become objects with camelCase keys."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.metadata.get("flat"):
                if item is not None:
                    out.update(served(item))
            else:
                out[camel(f.name)] = served(item)
        return out
    if isinstance(value, dict):
        return {key: served(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [served(item) for item in value]
    return value


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
