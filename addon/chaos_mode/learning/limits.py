"""Learned concurrency limits: each model's and the account's, found from z.ai's answers at run time.

The catalog's `maxConcurrency` is a starting guess. A concurrency answer (1302) lowers a limit to what was
in flight when the request was sent, less one; a clean answer to a request sent above a limit (a probe)
raises it by one. Probes are the pool's to make, only for a request that would otherwise wait, at most one
per model (or account) at a time, only once the limit has run full with a clean answer, and none within
`probeIntervalSeconds` of an over-limit answer, a wait that doubles with each refused probe (up to
`probeBackoffMaxSeconds`) until a probe anywhere is answered cleanly: in steady state a probe costs at most
one 429 per model per interval, and fewer the longer the limits hold. A limit nobody confirmed for
`driftSeconds` steps back toward its starting value. Pure state, driven by injected clocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from chaos_mode.config.schema import LearningSettings, ModelRouting
from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

Clock = Callable[[], float]
Probe = Literal["model", "account"]
Blame = Literal["model", "account", "race"]

STATE_FORMAT: Final = "chaos-mode learned limits"
STATE_VERSION: Final = 1
TICK_SECONDS: Final = 1.0  # how often drift is looked at
CUT: Final = 0.75  # a limit z.ai confirmed, then refused at: what is kept of it


@dataclass(slots=True)
class Limit:
    """One learned limit. `value` None: none known (the account before its first 1302)."""

    start: int | None  # the catalog's (or the config's) value: where drift leads back to
    ceiling: int
    value: int | None
    reason: str = "catalog"
    changed_at: float | None = None  # wall clock of the last change; None: never changed
    changed_mono: float = -math.inf  # the same on the monotonic clock (drift, probe pacing)
    confirmed_at: float = -math.inf  # last clean answer at the limit (monotonic)
    failed_at: float = -math.inf  # last over-limit answer blamed on it (monotonic)
    probe_since: float | None = None  # a probe sent and not yet answered (monotonic)
    confirmed: bool = False  # a clean answer came at the current value since it was set
    refusals: int = 0  # 1302s blamed on it since the last probe answered cleanly anywhere
    held_back: bool = False  # its last word was a 1302: its probes take turns with the others'
    turn_until: float = -math.inf  # a probe given up keeps its turn until then (monotonic)

    def probe_ready(self, interval: float, backoff_max: float) -> float | None:
        """When (monotonic) a probe above this limit becomes allowed; None: not before new evidence (no
        value, at the ceiling, or not yet run at its value with a clean answer)."""
        if self.value is None or self.value >= self.ceiling or (self.value and not self.confirmed):
            return None
        doublings = min(max(self.refusals - 1, 0), 30)
        wait = min(interval * 2.0**doublings, max(backoff_max, interval))
        ready = self.failed_at + wait
        return ready if self.probe_since is None else max(ready, self.probe_since + interval)


@dataclass(frozen=True, slots=True)
class LimitView:
    """A limit as status pages show it."""

    start: int | None
    ceiling: int
    value: int | None
    reason: str
    changed_at: float | None
    probing: bool


class LearnedLimits:
    """Each model's limit and the account's, learned from 1302s and clean answers."""

    def __init__(self, config: ModelRouting, *, clock: Clock, wall_clock: Clock) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._models: dict[str, Limit] = {}
        self._account = Limit(None, 1, None)
        self._clean_total = (0, 0, -math.inf)  # (max total this window, last window's, window start)
        # A 1302 that may have been the account's, blamed on its model for now:
        # (model, its limit before, total in flight, when).
        self._suspect: tuple[str, int | None, int, float] | None = None
        self._next_tick = -math.inf
        self.version = 0  # bumped on every change of a value: the pool rebuilds what it derives from them
        self.reconfigure(config)

    def reconfigure(self, config: ModelRouting) -> None:
        """Follow a new config: limits whose starting value and ceiling did not change are kept."""
        settings = config.learning
        self._enabled = settings.enabled
        self._interval = settings.probe_interval_seconds
        self._backoff_max = settings.probe_backoff_max_seconds
        self._drift = settings.drift_seconds
        models: dict[str, Limit] = {}
        for name, spec in config.models.items():
            start, ceiling = spec.max_concurrency, self._ceiling(spec.max_concurrency, spec.ceiling, settings)
            old = self._models.get(name)
            keep = old is not None and old.start == start and old.ceiling == ceiling and self._enabled
            models[name] = old if keep and old is not None else Limit(start, ceiling, start)
        self._models = models
        ceiling = settings.account_ceiling or sum(limit.ceiling for limit in models.values())
        account = config.account_concurrency
        if self._account.start != account or self._account.ceiling != ceiling or not self._enabled:
            self._account = Limit(account, ceiling, account)
        self.version += 1

    @staticmethod
    def _ceiling(start: int, ceiling: int | None, settings: LearningSettings) -> int:
        if ceiling is not None:
            return max(ceiling, start)
        return max(start, math.ceil(start * settings.ceiling_factor))

    # -- reading ----------------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self._enabled

    def limit(self, model: str) -> int:
        """The limit the pool holds `model` to now (0 for a model it does not know)."""
        entry = self._models.get(model)
        return (entry.value or 0) if entry is not None else 0

    def account(self) -> int | None:
        """The account's learned (or configured) limit; None when none is known."""
        return self._account.value

    def can_probe(self, model: str) -> bool:
        """Whether `model` may take one request above its limit now."""
        entry = self._models.get(model)
        return self._enabled and entry is not None and self._probe_due(entry)

    def can_probe_account(self) -> bool:
        return self._enabled and self._probe_due(self._account)

    def _probe_due(self, entry: Limit) -> bool:
        """Due, and, for a limit whose last word was a 1302, the only such probe in flight: limits found
        right take turns, so a pool at its true limits sees one refused probe at a time, not one per
        model. Limits never refused, or whose last probe found room, probe side by side (slow start)."""
        now = self._clock()
        ready = entry.probe_ready(self._interval, self._backoff_max)
        if ready is None or ready > now:
            return False
        if not entry.held_back:
            return True
        for other in (*self._models.values(), self._account):
            since = other.probe_since
            if other is entry or not other.held_back:
                continue
            if (since is not None and now - since < self._interval) or other.turn_until > now:
                return False
        return True

    def next_probe(self) -> float | None:
        """Seconds until the next probe becomes allowed somewhere (to wake waiters), else None."""
        if not self._enabled:
            return None
        now = self._clock()
        times = []
        for entry in (*self._models.values(), self._account):
            ready = entry.probe_ready(self._interval, self._backoff_max)
            if ready is not None and ready > now:
                times.append(ready - now)
        return min(times) if times else None

    def view(self, model: str | None = None) -> LimitView:
        """One model's limit (the account's when `model` is None), for status pages."""
        entry = self._account if model is None else self._models[model]
        return LimitView(
            entry.start,
            entry.ceiling,
            entry.value,
            entry.reason,
            entry.changed_at,
            entry.probe_since is not None,
        )

    # -- evidence ---------------------------------------------------------------------------------

    def probe_sent(self, kind: Probe, model: str) -> None:
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is not None:
            entry.probe_since = self._clock()

    def probe_given_up(self, kind: Probe, model: str) -> None:
        """A probe z.ai had not answered when a slot within the limits came for its request was abandoned.
        Accepted streams get their head at once, so it was most likely refused: its limit stays, but the
        next probe waits as after a 1302 (the wait doubling, limits found right taking turns)."""
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is None or not self._enabled:
            return
        now = self._clock()
        sent = entry.probe_since if entry.probe_since is not None else now
        entry.probe_since = None
        entry.turn_until = sent + EARLIEST_REFUSAL_SECONDS
        entry.refusals += 1
        entry.failed_at = now
        entry.held_back = True

    def succeeded(self, model: str, in_flight: int, total: int, probe: Probe | None) -> None:
        """A clean answer, with `in_flight` requests on its model and `total` on the account (itself
        included) answered cleanly and running: z.ai serves that many at once. Above a limit (a probe, or
        a request beside one) it raises the limit; at it, it confirms it."""
        if not self._enabled:
            return
        now = self._clock()
        self._note_clean_total(total, now)
        entry = self._models.get(model)
        if entry is not None:
            if probe == "model":
                entry.probe_since = None
            self._served(entry, in_flight, probe == "model", now)
        if probe == "account":
            self._account.probe_since = None
        self._served(self._account, total, probe == "account", now)

    def _served(self, entry: Limit, count: int, probe: bool, now: float) -> None:
        if entry.value is None:
            return
        if count > entry.value:
            why = f"probe at {count} answered" if probe else f"{count} answered at once"
            self._set(entry, count, why, now)
            self._probe_answered(entry)
        if count >= entry.value:
            entry.confirmed_at, entry.confirmed = now, True

    def _probe_answered(self, grown: Limit) -> None:
        """A limit went up: z.ai moves its limits for the whole plan at once (off-peak), so every limit
        may probe again at the base interval."""
        grown.held_back = False
        for entry in (*self._models.values(), self._account):
            entry.refusals = 0

    def refused(
        self, model: str, in_flight: int, total: int, probe: Probe | None, sent_at: float = math.inf
    ) -> Blame:
        """A concurrency answer (1302) to a request sent at `sent_at` (monotonic; unknown: inf) with
        `in_flight` on its model and `total` on the account (itself included): lower the limit it points
        at; returns which ("race": neither, see `_blame`)."""
        now = self._clock()
        entry = self._models.get(model)
        verdict = self._blame(entry, in_flight, total, probe, now, sent_at)
        if verdict == "race":
            return verdict
        blame: Blame = verdict if verdict != "suspect" else "model"
        if verdict == "suspect":
            blame, total = self._second_opinion(model, entry, total, now)
        target = self._account if blame == "account" or entry is None else entry
        count = total if target is self._account else in_flight
        if probe is not None:
            (self._account if probe == "account" else target).probe_since = None
        fresh = probe is not None or now - target.failed_at >= self._interval
        if fresh:
            target.refusals += 1  # a burst of answers to one over-admission is one piece of evidence
        target.failed_at = now
        target.held_back = True
        lowered, why = self._lowered(target, count, cut=probe is None), f"1302 at {count} in flight"
        if self._enabled and (target.value is None or lowered < target.value):
            self._set(target, lowered, why if lowered == count - 1 else f"{why}, cut", now)
        return blame

    @staticmethod
    def _lowered(target: Limit, count: int, *, cut: bool) -> int:
        """Where a 1302 with `count` in flight takes a limit.

        - Unknown, or never run full cleanly: to what was in flight less one.
        - At a limit that ran full cleanly since it was set: z.ai lowered its limits (they move with the
          load on its side), so cut by a quarter at once rather than learn it one 429 at a time. The next
          cut waits until the new limit, too, has run full cleanly: 1302s still coming back for requests
          sent before the cut say nothing new.
        - Below a known limit: one step. A 1302 far under what z.ai has been serving is a moment's
          crowding (another client, noise); if it is more, the next ones say so.
        - Above it (a regular request let through beside a probe riding there): nothing below it.
        """
        value = target.value
        if value is None:
            return max(count - 1, 0)
        if count < value:
            return max(value - 1, 0)
        if count > value:  # sent above the limit, beside a probe riding there: says nothing below it
            return value
        if cut and target.confirmed:
            return max(min(count - 1, math.floor(value * CUT)), 0)
        return max(count - 1, 0)

    def _second_opinion(self, model: str, entry: Limit | None, total: int, now: float) -> tuple[Blame, int]:
        """One model refusing below its limit may be that model (another client on it); a second model
        doing the same within the probe interval is the account: the first model gets its limit back."""
        suspect = self._suspect
        if suspect is None or suspect[0] == model or now - suspect[3] >= self._interval:
            self._suspect = (model, entry.value if entry is not None else None, total, now)
            return "model", total
        self._suspect = None
        first, before, first_total, _ = suspect
        first_entry = self._models.get(first)
        if first_entry is not None and before is not None and (first_entry.value or 0) < before:
            self._set(first_entry, before, "1302 was the account's", now)
        return "account", min(total, first_total)

    def _blame(
        self,
        entry: Limit | None,
        in_flight: int,
        total: int,
        probe: Probe | None,
        now: float,
        sent_at: float,
    ) -> Blame | Literal["suspect"]:
        """z.ai says 1302 for a full model and a full account alike. A probe knows what it tested.

        A model that served its whole limit at once cleanly after the request was sent (confirmed since
        `sent_at`) was not full at a count within that limit: the request lost a race to one sent after
        it (requests overtake each other on the way) or met the account's limit. The account is blamed
        when the total was above any z.ai served cleanly lately, else the 1302 was a race: neither limit
        moves. Otherwise the account is suspected when the model was below its learned limit and the total
        was above any served cleanly lately (so the account limit never falls below a total z.ai just
        served), and blamed once a second model confirms it. With no such evidence the model is blamed: a
        wrong model limit costs one model's slots, a wrong account limit all."""
        if entry is None or entry.value is None:
            return "account"
        if probe == "model" or in_flight > entry.value:
            return "model"
        account = self._account.value
        if probe == "account" or (account is not None and total > account):
            return "account"
        clean = self._recent_clean_total(now)
        above_clean = 0 < clean < total
        if entry.confirmed_at >= sent_at:
            return "account" if above_clean else "race"
        if in_flight < entry.value and above_clean:
            return "suspect"
        return "model"

    def _note_clean_total(self, total: int, now: float) -> None:
        best, previous, since = self._clean_total
        if now - since >= self._interval:
            previous = best if now - since < 2 * self._interval else 0
            best, since = 0, now
        self._clean_total = (max(best, total), previous, since)

    def _recent_clean_total(self, now: float) -> int:
        best, previous, since = self._clean_total
        if now - since >= 2 * self._interval:
            return 0
        return max(best, previous) if now - since < self._interval else best

    # -- time -------------------------------------------------------------------------------------

    def tick(self) -> None:
        """Let limits nobody confirmed for `driftSeconds` step back toward their starting value.
        Cheap to call often: it looks at most once a second."""
        now = self._clock()
        if now < self._next_tick or not self._enabled:
            return
        self._next_tick = now + TICK_SECONDS
        for entry in (*self._models.values(), self._account):
            if entry.value is None or entry.value == entry.start:
                continue
            if now - max(entry.confirmed_at, entry.changed_mono) < self._drift:
                continue
            if entry.start is None:  # the account: up a step, and forgotten once at its ceiling
                value: int | None = entry.value + 1 if entry.value + 1 < entry.ceiling else None
            else:
                value = entry.value + (1 if entry.start > entry.value else -1)
            self._set(entry, value, "drift toward the catalog" if entry.start else "drift", now)

    def reset(self) -> None:
        """Forget everything learned: every limit back to its starting value."""
        for entry in (*self._models.values(), self._account):
            entry.value, entry.reason, entry.changed_at = entry.start, "reset", self._wall_clock()
            entry.changed_mono, entry.failed_at, entry.probe_since = self._clock(), -math.inf, None
            entry.confirmed, entry.refusals, entry.held_back = False, 0, False
            entry.turn_until = -math.inf
        self._clean_total = (0, 0, -math.inf)
        self._suspect = None
        self.version += 1

    def _set(self, entry: Limit, value: int | None, reason: str, now: float) -> None:
        entry.value = None if value is None else min(max(value, 0), entry.ceiling)
        entry.reason = reason
        entry.changed_at = self._wall_clock()
        entry.changed_mono = now
        entry.confirmed = False
        self.version += 1

    # -- persistence ------------------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        """What was learned, as JSON-ready data for the state file (starting values included, so a
        changed catalog makes an entry stale)."""

        def row(entry: Limit) -> dict[str, Any]:
            return {
                "start": entry.start,
                "limit": entry.value,
                "reason": entry.reason,
                "changedAt": entry.changed_at,
            }

        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "savedAt": self._wall_clock(),
            "models": {name: row(e) for name, e in self._models.items() if e.changed_at is not None},
            "account": row(self._account) if self._account.changed_at is not None else None,
        }

    def restore(self, data: Any) -> int:
        """Take back what `dump` wrote; returns how many limits were restored. `ValueError` for data that
        is not ours. Entries for unknown models or another starting value are skipped; a limit saved long
        ago has drifted toward its starting value meanwhile."""
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise ValueError("not a chaos-mode learned-limits file")
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"learned-limits file version {data.get('version')!r}, expected {STATE_VERSION}")
        models = data.get("models")
        if not isinstance(models, dict):
            raise ValueError("learned-limits file: models must be a mapping")
        restored = 0
        if not self._enabled:
            return restored
        rows: list[tuple[Limit, Any]] = [(e, models.get(n)) for n, e in self._models.items()]
        rows.append((self._account, data.get("account")))
        for entry, row in rows:
            if self._restore_row(entry, row):
                restored += 1
        if restored:
            self.version += 1
        return restored

    def rows(self, since: float = -math.inf) -> dict[str, dict[str, Any]]:
        """The limits changed after `since` (wall clock) as `dump` writes them, the account's as
        `ACCOUNT`: what a proxy tells the fleet."""
        data = self.dump()
        rows: dict[str, dict[str, Any]] = dict(data["models"])
        if data["account"] is not None:
            rows[ACCOUNT] = data["account"]
        return {name: row for name, row in rows.items() if row["changedAt"] > since}

    def merge(self, rows: Mapping[str, Any]) -> int:
        """Take the limits another proxy learned (`rows`), each only when it changed later than ours (the
        last change wins); returns how many were taken."""
        taken = 0
        if not self._enabled:
            return taken
        for name, row in rows.items():
            entry = self._account if name == ACCOUNT else self._models.get(name)
            if entry is None or not isinstance(row, Mapping):
                continue
            changed_at = row.get("changedAt")
            if not isinstance(changed_at, int | float) or isinstance(changed_at, bool):
                continue
            if entry.changed_at is not None and changed_at <= entry.changed_at:
                continue
            if self._restore_row(entry, row):
                taken += 1
        if taken:
            self.version += 1
        return taken

    def _restore_row(self, entry: Limit, row: Any) -> bool:
        if not isinstance(row, Mapping) or row.get("start") != entry.start:
            return False
        value, changed_at = row.get("limit"), row.get("changedAt")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        if (
            isinstance(changed_at, bool)
            or not isinstance(changed_at, int | float)
            or not math.isfinite(changed_at)
        ):
            return False
        reason = row.get("reason")
        steps = int(max(self._wall_clock() - changed_at, 0.0) // self._drift)
        if value is not None and entry.start is not None and steps:
            gap = entry.start - value
            value += max(-steps, min(steps, gap))
        entry.value = None if value is None else min(max(value, 0), entry.ceiling)
        entry.reason = reason[:200] if isinstance(reason, str) and not steps else "restored"
        entry.changed_at = float(changed_at)
        entry.changed_mono = self._clock()
        return True
