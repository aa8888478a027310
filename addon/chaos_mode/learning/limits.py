"""Learned concurrency limits: each model's and the account's, estimated from z.ai's answers at run time.

Each limit starts at the catalog's value (`maxConcurrency`; the account's `accountConcurrency`, or none)
and follows its evidence (`evidence`), back toward that value as it fades (`learning.driftSeconds`); only
probes go above it, paced by `explore`. Pure state, driven by injected clocks. What feeds it:

- **A verdict counts for its model and for the account.** A clean answer counts in full on both, at what
  z.ai served at once. A refusal (1302) or a stall (a head held far longer than z.ai's heads take) says a
  limit was passed, not which (zai.assumptions.COUNTS_PER_MODEL_AND_ACCOUNT): a probe's is the limit it
  tested; else the model's in full when z.ai did not answer it cleanly at its level while it decided the
  request (a limit that fell, however often the level was served before; a wrong model limit costs one
  model's slots, a wrong account limit all), else shared by how likely each is to refuse at its level.
- **Probes** are the pool's, for a request that would otherwise wait: one above a limit at a time, only
  once z.ai answered cleanly at the limit (a guess nobody tried is not worth a refusal). One answered
  cleanly counts as such only above its limit: at or under it, it found the room a request z.ai was
  refusing left. One given up unanswered (its request took a slot within the limits) fails its round and
  tells the limit nothing.
- **A fleet learns and probes as one.** Proxies sharing a store (`chaos_state`) send each other every
  verdict as it comes, counted as theirs at the levels it counted (a refused probe's pacing too); what z.ai
  serves at once counts the other proxies' slots it has answered (`routing.pool`). A limit another proxy
  learned is taken only on joining the fleet, as it replaces the evidence with its value (`merge`). The
  right to probe a limit is the fleet's: held while a probe is out (at most the base wait), freed when it
  is answered cleanly (`probe_answered_elsewhere`), held for the prober's wait when it is refused or given
  up. A proxy that finds it held sends no probe there (nothing learned) and counts the limit's failed
  rounds as the fleet does (`probe_claimed`). The store gone, each proxy learns and probes on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from chaos_mode.config.schema import ModelRouting
from chaos_mode.learning.evidence import LevelEvidence
from chaos_mode.learning.explore import Detector, Exploration, Pace, rose_together
from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

Clock = Callable[[], float]
Probe = Literal["model", "account"]

# A refusal's price, in slot-times (`evidence`, rule 2): the seconds it blocks its slot (z.ai's time to
# refuse, from its quickest; the patience, when its place is lent) and `learning.refusalCostSeconds`, over a
# slot's time to serve a clean request (from this); each a moving average of what the pool sees.
SERVICE_START_SECONDS: Final = 3.0
AVERAGE_WEIGHT: Final = 0.1  # of each new duration in the moving averages
COST_RANGE: Final = (0.05, 20.0)
# A limit learned elsewhere (another proxy, an earlier run) weighs as this many clean answers at it and
# refusals just above it: enough to hold, little enough for the next answers to move it.
ADOPTED_WEIGHT: Final = 3.0
STATE_FORMAT: Final = "chaos-mode learned limits"
STATE_VERSION: Final = 1
TICK_SECONDS: Final = 1.0  # how often fading is looked at


@dataclass(slots=True)
class Limit:
    """One learned limit (status pages read it too); `value` None: none known (the account's, unset)."""

    evidence: LevelEvidence
    value: int | None
    reason: str = "catalog"
    changed_at: float | None = None  # wall clock of the last change; None: never changed
    explore: Exploration = field(default_factory=Exploration)
    detector: Detector = field(default_factory=Detector)

    @property
    def probing(self) -> bool:
        return self.explore.probe_since is not None


class LearnedLimits:
    """Each model's limit and the account's, estimated from clean answers, refusals and stalls."""

    def __init__(self, config: ModelRouting, *, clock: Clock, wall_clock: Clock) -> None:
        self._clock, self._wall_clock = clock, wall_clock
        self._pace = Pace(0.0, 0.0, config.learning.drift_seconds)  # as `reconfigure` sets it
        self._models: dict[str, Limit] = {}
        self._account = self._limit(None, 1)
        self._next_tick = -math.inf
        self._blocked_seconds, self._service_seconds = EARLIEST_REFUSAL_SECONDS, SERVICE_START_SECONDS
        self._patience_seconds: float | None = None
        self.version = 0  # bumped on every change of a value: the pool rebuilds what it derives from them
        self.resets = 0  # how many times `reset` forgot everything
        self.reconfigure(config)

    def reconfigure(self, config: ModelRouting) -> None:
        """Follow a new config: limits whose starting value and ceiling did not change are kept."""
        settings, pace = config.learning, self._pace
        self.enabled = settings.enabled
        pace.base, pace.fade = settings.probe_interval_seconds, settings.drift_seconds
        pace.most = max(settings.probe_backoff_max_seconds, settings.probe_interval_seconds)
        self._refusal_cost = settings.refusal_cost_seconds
        models: dict[str, Limit] = {}
        for name, spec in config.models.items():
            start = spec.max_concurrency
            ceiling = math.ceil(start * settings.ceiling_factor) if spec.ceiling is None else spec.ceiling
            models[name] = self._limit(start, max(start, ceiling), self._models.get(name))
        self._models = models
        ceiling = settings.account_ceiling or sum(limit.evidence.ceiling for limit in models.values())
        self._account = self._limit(config.account_concurrency, ceiling, self._account)
        self.version += 1

    def _limit(self, start: int | None, ceiling: int, old: Limit | None = None) -> Limit:
        """`old` while learning is on and its start and ceiling stand, else a limit with no evidence."""
        if old is None or (old.evidence.start, old.evidence.ceiling) != (start, ceiling) or not self.enabled:
            return Limit(LevelEvidence(start, ceiling, self._pace.fade), start)
        old.evidence.fade_seconds = self._pace.fade
        return old

    def _all(self) -> Iterator[Limit]:
        yield from self._models.values()
        yield self._account

    def _entry(self, kind: Probe, model: str) -> Limit | None:
        return self._account if kind == "account" else self._models.get(model)

    @property
    def cost(self) -> float:
        """A refusal's price in slot-times (see `SERVICE_START_SECONDS`)."""
        low, high = COST_RANGE
        return min(max((self._blocked_seconds + self._refusal_cost) / self._service_seconds, low), high)

    @property
    def moves(self) -> tuple[int, int]:
        """How often a change detector fired (`explore.Detector`) for limits that fell, and that rose."""
        return self._pace.seen

    def limit(self, model: str) -> int:
        """The limit the pool holds `model` to now (0 for a model it does not know)."""
        return (self._models[model].value or 0) if model in self._models else 0

    def view(self, model: str | None = None) -> Limit:
        """One model's limit (the account's when `model` is None), for status pages."""
        return self._account if model is None else self._models[model]

    def can_probe(self, model: str | None) -> bool:
        """Whether `model` (the account when None) may take one request above its limit now."""
        now, entry = self._clock(), self._account if model is None else self._models.get(model)
        return (ready := self._probe_ready(entry, now)) is not None and ready <= now

    def _probe_ready(self, entry: Limit | None, now: float) -> float | None:
        """When (monotonic) a probe above `entry` becomes allowed; None: not before new evidence."""
        if not self.enabled or entry is None or entry.value is None or entry.value >= entry.evidence.ceiling:
            return None
        return entry.explore.due(self._pace) if entry.evidence.answered_at(entry.value, now) else None

    def next_probe(self) -> float | None:
        """Seconds until the next probe becomes allowed somewhere (to wake waiters), else None."""
        now = self._clock()
        times = [at for e in self._all() if (at := self._probe_ready(e, now)) is not None and at > now]
        return min(times) - now if times else None

    def refusal_took(self, seconds: float, *, lent: bool = False) -> None:
        """A refusal came `seconds` after its request was sent; `lent`: its attempt had lent its place (it
        blocked its slot only for the patience, `lent_after`)."""
        blocked = self._patience_seconds if lent and self._patience_seconds is not None else seconds
        self._blocked_seconds += AVERAGE_WEIGHT * (max(blocked, 0.0) - self._blocked_seconds)

    def lent_after(self, seconds: float) -> None:
        """An attempt with no head lent its place `seconds` after it was sent (its patience)."""
        if self._patience_seconds is None:
            self._patience_seconds = max(seconds, 0.0)
        self._patience_seconds += AVERAGE_WEIGHT * (max(seconds, 0.0) - self._patience_seconds)

    def served_for(self, seconds: float) -> None:
        """A clean request held its slot `seconds` from sending to its end."""
        if seconds > 0.0:
            self._service_seconds += AVERAGE_WEIGHT * (seconds - self._service_seconds)

    def probe_sent(self, kind: Probe, model: str) -> None:
        if (entry := self._entry(kind, model)) is not None:
            entry.explore.probe_since = self._clock()

    def probe_wait(self, kind: Probe, model: str) -> tuple[float, int]:
        """(seconds the fleet holds the right to probe the limit, its failed rounds), told when a probe of it
        is sent, answered or given up (0: the next probe may follow at once)."""
        if (entry := self._entry(kind, model)) is None:
            return 0.0, 0
        now = self._clock()
        return max(entry.explore.due(self._pace) - now, 0.0), entry.explore.faded(now, self._pace.fade)

    def probe_claimed(
        self, kind: Probe, model: str, *, sent: bool, held_elsewhere: float = 0.0, refused: int = 0
    ) -> None:
        """The fleet's answer to the claim on the right to probe the limit (see the module): not `sent`,
        another proxy took the slot first or holds the right `held_elsewhere` seconds more (no probe)."""
        if (entry := self._entry(kind, model)) is None or not self.enabled:
            return
        explore, now = entry.explore, self._clock()
        explore.faded(now, self._pace.fade)
        explore.failures = max(explore.failures, float(refused))
        if not sent:
            explore.probe_since, explore.ready_at = None, max(explore.ready_at, now + held_elsewhere)

    def probe_answered_elsewhere(self, kind: Probe, model: str) -> None:
        """Another proxy's probe of the limit was answered cleanly: for pacing, as one answered here."""
        if (entry := self._entry(kind, model)) is not None and self.enabled:
            entry.explore.answered()

    def probe_given_up(self, kind: Probe, model: str) -> None:
        """A probe z.ai had not answered was abandoned for a slot within the limits (see the module)."""
        if (entry := self._entry(kind, model)) is not None and self.enabled:
            entry.explore.failed(self._clock(), self._pace)

    def succeeded(self, model: str, in_flight: int, total: int, probe: Probe | None) -> None:
        """A clean answer, z.ai seen to serve `in_flight` on its model and `total` on the account at once."""
        if not self.enabled:
            return
        now, entry = self._clock(), self._models.get(model)
        if probe is not None:
            probed = self._account if probe == "account" else entry or self._account
            probed.explore.probe_since = None
            level = total if probed is self._account else in_flight
            if probed.value is None or level > probed.value:  # counted above it (see the module)
                probed.explore.answered()
        if entry is not None:
            self._observe(entry, in_flight, False, 1.0, now, _served_why(in_flight, probe == "model"))
        self._observe(self._account, total, False, 1.0, now, _served_why(total, probe == "account"))

    def refused(
        self, model: str, level: int, total: int, probe: Probe | None, sent: float | None, what: str = "1302"
    ) -> None:
        """A limit passed (`what`: a 1302, or a "stall": z.ai held the request's head far longer than its
        heads take, queued instead of refused: zai.assumptions.MAY_QUEUE), z.ai serving `level` on its
        model and `total` on the account, for a request sent at `sent` (monotonic; None for another proxy's
        verdict: as long ago as z.ai's refusals take): whose it is (see the module), evidence against it."""
        if not self.enabled:
            return
        now, entry, account = self._clock(), self._models.get(model), self._account
        since = now - EARLIEST_REFUSAL_SECONDS if sent is None else sent
        if probe == "account" or entry is None:
            share = 0.0
        elif probe == "model" or not entry.evidence.answered_since(level, since):
            share = 1.0
        else:
            here = entry.evidence.refusal_estimate(level, now)
            share = here / (here + account.evidence.refusal_estimate(total, now))
        if probe is not None:
            (account if probe == "account" or entry is None else entry).explore.failed(now, self._pace)
        if entry is not None and share > 0.0:
            self._observe(entry, level, True, share, now, f"{what} at {level} in flight")
        if share < 1.0:
            self._observe(account, total, True, 1.0 - share, now, f"{what} at {total} in flight")

    def _observe(self, entry: Limit, level: int, refused: bool, weight: float, now: float, why: str) -> None:
        """A verdict into `entry`'s change detector, evidence and value (`why` it changes)."""
        pace = self._pace
        fired = entry.detector.verdict(level, refused, weight, moved=pace.moved_lately(now) and not pace.rose)
        entry.evidence.observe(level, refused=refused, now=now, weight=weight)
        if refused and not fired and entry is not self._account:
            fired = int(rose_together(limit.detector for limit in self._models.values()))
        if fired:  # z.ai moved: every limit's wait starts over (`explore`)
            pace.changed_at, pace.rose = now, fired < 0
            pace.seen = (pace.seen[0] + (fired > 0), pace.seen[1] + (fired < 0))
            again = now if fired < 0 else now + pace.base
            for limit in self._all():
                limit.explore.failures, limit.explore.ready_at = 0.0, min(limit.explore.ready_at, again)
        entry.explore.verdict(now, pace, level, entry.value, refused=refused)
        self._settle(entry, now, why)

    def _settle(self, entry: Limit, now: float, why: str) -> None:
        """Follow the evidence (under a level closed on trial): a new value, why, and a new version."""
        value = entry.explore.held(entry.value, entry.evidence.limit(now, self.cost))
        if value != entry.value:
            entry.value, entry.reason, entry.changed_at = value, why, self._wall_clock()
            self.version += 1

    def tick(self) -> None:
        """Let limits follow their evidence as it fades; cheap to call often (it looks once a second)."""
        now = self._clock()
        if now < self._next_tick or not self.enabled:
            return
        self._next_tick = now + TICK_SECONDS
        for entry in self._all():
            self._settle(entry, now, "faded toward the catalog" if entry.evidence.start else "faded")

    def reset(self) -> None:
        """Forget everything learned: every limit back to its starting value."""
        for entry in self._all():
            entry.evidence.forget()
            entry.value, entry.reason, entry.changed_at = entry.evidence.start, "reset", self._wall_clock()
            entry.explore, entry.detector = Exploration(), Detector()
        self._pace.changed_at = -math.inf
        self.version, self.resets = self.version + 1, self.resets + 1

    def dump(self) -> dict[str, Any]:
        """What was learned, for the state file (with starting values: a changed catalog makes it stale)."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "savedAt": self._wall_clock(),
            "models": {name: _row(e) for name, e in self._models.items() if e.changed_at is not None},
            "account": _row(self._account) if self._account.changed_at is not None else None,
        }

    def restore(self, data: Any) -> int:
        """Take back what `dump` wrote (unknown models and other starting values skipped, each limit faded
        since); how many limits were restored. `ValueError` for data that is not ours."""
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise ValueError("not a chaos-mode learned-limits file")
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"learned-limits file version {data.get('version')!r}, expected {STATE_VERSION}")
        if not isinstance(models := data.get("models"), dict):
            raise ValueError("learned-limits file: models must be a mapping")
        return self.merge({**models, ACCOUNT: data.get("account")}, newer=False)

    def rows(self, since: float = -math.inf) -> dict[str, dict[str, Any]]:
        """The limits changed after `since` (wall clock) as `dump` has them, the account's as `ACCOUNT`."""
        entries = [*self._models.items(), (ACCOUNT, self._account)]
        return {name: _row(e) for name, e in entries if e.changed_at is not None and e.changed_at > since}

    def merge(self, rows: Mapping[str, Any], *, newer: bool = True) -> int:
        """Take the limits another proxy learned (`rows`), each only when it changed later than ours (the
        last change wins), or whatever their time when not `newer`; how many were taken."""
        if not self.enabled:
            return 0
        taken = 0
        for name, row in rows.items():
            entry = self._account if name == ACCOUNT else self._models.get(name)
            at: Any = row.get("changedAt") if isinstance(row, Mapping) else None
            if entry is None or type(at) not in (int, float) or not math.isfinite(at):  # JSON's numbers
                continue
            mine = entry.changed_at if newer else None
            if row.get("start") == entry.evidence.start and (mine is None or at > mine):
                taken += self._adopt(entry, row, float(at))
        if taken:
            self.version += 1
        return taken

    def _adopt(self, entry: Limit, row: Mapping[str, Any], changed_at: float) -> bool:
        """A limit learned elsewhere (at `changed_at`) as its evidence (`ADOPTED_WEIGHT`), faded since."""
        value = row.get("limit")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        now = self._clock()
        learned = now - max(self._wall_clock() - changed_at, 0.0)
        evidence = entry.evidence
        evidence.forget()
        if value is not None:
            value = min(max(value, 0), evidence.ceiling)
            if value:
                evidence.observe(value, refused=False, now=learned, weight=ADOPTED_WEIGHT)
            if value < evidence.ceiling:
                evidence.observe(value + 1, refused=True, now=learned, weight=ADOPTED_WEIGHT)
        entry.value, entry.changed_at = evidence.limit(now, self.cost), changed_at
        text = row.get("reason") if entry.value == value else "restored, faded since"
        entry.reason = text[:200] if isinstance(text, str) else "learned elsewhere"
        return True


def _row(entry: Limit) -> dict[str, Any]:
    start, changed_at = entry.evidence.start, entry.changed_at
    return {"start": start, "limit": entry.value, "reason": entry.reason, "changedAt": changed_at}


def _served_why(count: int, probe: bool) -> str:
    return f"probe at {count} answered" if probe else f"{count} answered at once"
