"""The pool's state as typed values, and the one place they become the camelCase JSON that is served.

`ChaosPool.status()` returns a `PoolStatus`; metrics read its fields; `served()` turns it into the JSON of
`/api/status`, the dashboard and the `chaos.status` panel (snake_case field names become camelCase keys;
a field marked `flat` spreads its own fields into its parent's object).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from chaos_mode.zai.quota import WINDOW_SECONDS

FLAT: Final = {"flat": True}


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
