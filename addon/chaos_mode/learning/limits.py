"""Learned concurrency limits: each model's and the account's, estimated from z.ai's answers at run time.

The catalog's `maxConcurrency` is where a model starts. Each limit (every model's, and the account's) is an
estimator of z.ai's refusals level by level (`evidence`): the limit is the highest level z.ai served under
the lowest it refuses with confidence. What feeds it, and what the pool may do above it:

- **A verdict counts for its model and for the account.** A clean answer is an observation at the count z.ai
  served at once, on its model and on the account, in full. A refusal (1302) or a stall (a head held far
  longer than z.ai's heads take) says a limit was passed, not which. A probe knows what it tested. Else
  the model is blamed in full when z.ai did not answer it cleanly at its level while it decided the request
  (from its sending to the verdict: a limit that fell, however often the level was served before; a wrong
  model limit costs one model's slots, a wrong account limit all); otherwise it is shared in proportion to
  how likely each is to refuse at its level (its refusals there against the clean answers at it and above).
- **Probes** are the pool's, for a request that would otherwise wait: one above a limit at a time, only once
  z.ai answered cleanly at the limit (a guess nobody tried is not worth a refusal to go above), none within
  `probeIntervalSeconds` of a refusal of the limit at any level (p never falls as n grows: z.ai refusing at
  or under the limit refuses above it too), and, after a refused probe, a wait that doubles with each
  refused probe up to `probeBackoffMaxSeconds`. Limits whose last probe was refused take turns (one such
  probe in flight in the pool), so a pool at its true limits sees one refused probe at a time, and their
  turns spread over their waits, in two groups: the limits lowered from a level z.ai served them (a move of
  z.ai's brings them back) and those at their highest. z.ai moves its limits plan-wide, so a refused probe
  says the others' of its group would be refused now too, and the next of them waits its share of its wait
  (the wait over the limits of the group held back; a probe given up, until its refusal would have come): a
  move is found within a share of the wait, not after every limit's wait ran out at once. A probe answered
  cleanly above its limit lets its limit's next probe follow at once; counted at or under it, it found the
  room a request z.ai was refusing left, says nothing of the level above, and a pause set since (a
  refusal's) stands. Answered above after a refused one, it says z.ai moved the
  limit: it also resets the wait of every limit lowered from a level z.ai served it (z.ai moves its limits
  plan-wide, off-peak; a limit that never served more keeps its wait). Answered after clean ones (a climb,
  or a soft band's luck: a band's first level answers most requests) it says nothing of the other limits. A
  probe given up unanswered (its request took a slot within the limits) counts as refused for pacing only:
  it tells the limit nothing.
- **A fleet learns and probes as one.** Proxies sharing a store (`chaos_state`) learn from one body of
  evidence: every verdict a proxy has goes to the others as it comes, and counts there as theirs
  (evidence, and a refused probe's pacing: a clean one's comes with the right freed), at the levels it
  counted; what z.ai serves at once counts the other
  proxies' slots as they say z.ai serves them (`routing.pool`), never one z.ai has not answered yet. A
  limit another proxy learned is taken only on joining the fleet (it replaces the evidence with its
  value). The right to probe each limit is one for the fleet: a probe goes only with it, and it is held
  while the probe is out (at most `probeIntervalSeconds`, as one proxy's next probe waits for an
  unanswered one), freed at once when the probe is answered cleanly (another proxy's next probe may follow
  at once, as this proxy's own: `probe_answered_elsewhere`), and held for the prober's wait when it is
  refused or given up. A proxy that finds it held sends no probe there until it is free: not a refused
  probe, nothing learned; it counts the limit's refused probes in a row as the fleet counted them, so its
  own next refusal waits as long as the fleet's next would. **The turns of the limits held back are the
  fleet's too**: a held-back limit's probe also takes its group's turn (`turn_wait`), held while it is out
  and, once refused or given up, for the share its prober's group waits, so N proxies send one refused
  probe at a time, as one does. The store gone, each proxy learns and probes on its own.
- **What was learned fades** with a half-life of `driftSeconds`: a limit nobody confirms goes back to the
  catalog's value, and a level refused long ago may be tried again.

Pure state, driven by injected clocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from chaos_mode.config.schema import LearningSettings, ModelRouting
from chaos_mode.learning.evidence import LevelEvidence
from chaos_mode.zai.catalog import ACCOUNT
from chaos_mode.zai.timing import EARLIEST_REFUSAL_SECONDS

Clock = Callable[[], float]
Probe = Literal["model", "account"]

# A refusal's cost, in slot-times: how long z.ai takes to refuse over how long a slot serves a clean
# request, each a moving average of what the pool sees (these before the first of each).
REFUSAL_START_SECONDS: Final = EARLIEST_REFUSAL_SECONDS
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
    """One learned limit: its evidence, the value in force (None: none known, the account's before any
    refusal) and the state of its probes."""

    evidence: LevelEvidence
    value: int | None
    reason: str = "catalog"
    changed_at: float | None = None  # wall clock of the last change; None: never changed
    probe_since: float | None = None  # a probe sent and not yet answered (monotonic)
    no_probe_until: float = -math.inf  # after a refused probe (monotonic)
    refused_probes: int = 0  # refused in a row since a probe was answered cleanly anywhere

    @property
    def start(self) -> int | None:
        return self.evidence.start

    @property
    def ceiling(self) -> int:
        return self.evidence.ceiling

    @property
    def held_back(self) -> bool:
        """Its last probe was refused: its probes take turns with the other such limits'."""
        return self.refused_probes > 0


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
    """Each model's limit and the account's, estimated from clean answers, refusals and stalls."""

    def __init__(self, config: ModelRouting, *, clock: Clock, wall_clock: Clock) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._fade = config.learning.drift_seconds
        self._models: dict[str, Limit] = {}
        self._account = self._new(None, 1)
        self._next_tick = -math.inf
        # the next probe of a limit held back (its last probe refused) goes no sooner (monotonic), for the
        # limits lowered (True) and those at their highest (False): they take turns, spread over their waits
        self._next_turn = _no_turns()
        self._refusal_seconds = REFUSAL_START_SECONDS
        self._service_seconds = SERVICE_START_SECONDS
        self.version = 0  # bumped on every change of a value: the pool rebuilds what it derives from them
        self.reconfigure(config)

    def _new(self, start: int | None, ceiling: int) -> Limit:
        return Limit(LevelEvidence(start, ceiling, self._fade), start)

    def reconfigure(self, config: ModelRouting) -> None:
        """Follow a new config: limits whose starting value and ceiling did not change are kept."""
        settings = config.learning
        self._enabled = settings.enabled
        self._interval = settings.probe_interval_seconds
        self._backoff_max = max(settings.probe_backoff_max_seconds, settings.probe_interval_seconds)
        self._fade = settings.drift_seconds
        models: dict[str, Limit] = {}
        for name, spec in config.models.items():
            start, ceiling = spec.max_concurrency, self._ceiling(spec.max_concurrency, spec.ceiling, settings)
            old = self._models.get(name)
            keep = old is not None and old.start == start and old.ceiling == ceiling and self._enabled
            models[name] = old if keep and old is not None else self._new(start, ceiling)
        self._models = models
        for limit in models.values():
            limit.evidence.fade_seconds = self._fade
        ceiling = settings.account_ceiling or sum(limit.ceiling for limit in models.values())
        account = config.account_concurrency
        if self._account.start != account or self._account.ceiling != ceiling or not self._enabled:
            self._account = self._new(account, ceiling)
        self._account.evidence.fade_seconds = self._fade
        self.version += 1

    @staticmethod
    def _ceiling(start: int, ceiling: int | None, settings: LearningSettings) -> int:
        if ceiling is not None:
            return max(ceiling, start)
        return max(start, math.ceil(start * settings.ceiling_factor))

    def _all(self) -> Iterator[Limit]:
        yield from self._models.values()
        yield self._account

    # -- reading ----------------------------------------------------------------------------------

    @property
    def cost(self) -> float:
        """What a refusal costs its request, in slot-times (see `evidence`): z.ai's time to refuse over a
        slot's time to serve, as the pool saw them lately."""
        low, high = COST_RANGE
        return min(max(self._refusal_seconds / self._service_seconds, low), high)

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

    def _probe_ready(self, entry: Limit, now: float) -> float | None:
        """When (monotonic) a probe above `entry` becomes allowed; None: not before new evidence (no value,
        at the ceiling, or z.ai never answered cleanly at its value)."""
        value = entry.value
        if value is None or value >= entry.ceiling or not entry.evidence.answered_at(value, now):
            return None
        ready = max(entry.no_probe_until, self._out_until(entry))
        # held back, it waits for its group's turn; which group is asked (a pass over the evidence) only
        # when a turn is later than the rest of its wait
        if entry.held_back and max(self._next_turn.values()) > ready:
            ready = max(ready, self._next_turn[self._lowered(entry, now)])
        return ready

    def _out_until(self, entry: Limit) -> float:
        """Until when (monotonic) `entry`'s probe out, unanswered, holds its next one: the interval."""
        return -math.inf if entry.probe_since is None else entry.probe_since + self._interval

    @staticmethod
    def _lowered(entry: Limit, now: float) -> bool:
        """Whether `entry` is under a level z.ai served it (a move of z.ai's would bring it back)."""
        return entry.value is not None and entry.value < entry.evidence.served_level(now)

    def _probe_due(self, entry: Limit) -> bool:
        """Due, and, for a limit whose last probe was refused, its turn: the only such probe in flight, and
        no sooner than its share of the last such refusal's wait (`_probe_refused`). Limits never refused,
        or whose last probe found room, probe side by side."""
        now = self._clock()
        ready = self._probe_ready(entry, now)
        if ready is None or ready > now:
            return False
        if not entry.held_back:
            return True
        for other in self._all():
            since = other.probe_since
            if other is not entry and other.held_back and since is not None and now - since < self._interval:
                return False
        return True

    def next_probe(self) -> float | None:
        """Seconds until the next probe becomes allowed somewhere (to wake waiters), else None."""
        if not self._enabled:
            return None
        now = self._clock()
        times = []
        for entry in self._all():
            ready = self._probe_ready(entry, now)
            if ready is not None and ready > now:
                times.append(ready - now)
        return min(times) if times else None

    def evidence(self, model: str | None = None) -> LevelEvidence:
        """What z.ai said of one model's limit (the account's when `model` is None), level by level."""
        return self._account.evidence if model is None else self._models[model].evidence

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

    def refusal_took(self, seconds: float) -> None:
        """A refusal came `seconds` after its request was sent."""
        self._refusal_seconds += AVERAGE_WEIGHT * (max(seconds, 0.0) - self._refusal_seconds)

    def served_for(self, seconds: float) -> None:
        """A clean request held its slot `seconds` from sending to its end."""
        if seconds > 0.0:
            self._service_seconds += AVERAGE_WEIGHT * (seconds - self._service_seconds)

    def probe_sent(self, kind: Probe, model: str) -> None:
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is not None:
            entry.probe_since = self._clock()

    def probe_wait(self, kind: Probe, model: str) -> tuple[float, int]:
        """(seconds before the limit's next probe may go, its probes refused in a row): how long the fleet
        holds the right to probe it, told when a probe of it is sent and when it is answered or given up
        (0: the next probe may follow at once)."""
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is None:
            return 0.0, 0
        now = self._clock()
        ready = max(entry.no_probe_until, self._out_until(entry))
        return max(ready - now, 0.0), entry.refused_probes

    def turn_wait(self, kind: Probe, model: str) -> tuple[str, float]:
        """(its group, seconds before the group's next probe may go) for a limit held back, ("", 0) for
        another: how long the fleet holds its group's turn (`_probe_due`), told when a probe of it is sent
        (held while it is in flight) and when it is answered or given up. Groups: "lowered" and "highest"."""
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is None or not entry.held_back:
            return "", 0.0
        now = self._clock()
        lowered = self._lowered(entry, now)
        ready = max(self._next_turn[lowered], self._out_until(entry))
        return TURN_GROUPS[lowered], max(ready - now, 0.0)

    def probe_claimed(
        self,
        kind: Probe,
        model: str,
        *,
        sent: bool,
        held_elsewhere: float = 0.0,
        refused: int = 0,
        turn_elsewhere: float = 0.0,
    ) -> None:
        """The fleet's answer to the claim on the right to probe the limit, made with the probe's slot (see
        the module). `refused`, the limit's probes refused in a row as the fleet counts them, counts here
        when more. Not `sent` (another proxy took the slot first, holds the right `held_elsewhere` seconds
        more, or its group's turn `turn_elsewhere` seconds more): the probe is no probe at all, and none
        goes here before the right (or every probe of its group before the turn) is free."""
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is None or not self._enabled:
            return
        entry.refused_probes = max(entry.refused_probes, refused)
        if sent:
            return
        entry.probe_since = None
        now = self._clock()
        if held_elsewhere > 0.0:
            entry.no_probe_until = max(entry.no_probe_until, now + held_elsewhere)
        if turn_elsewhere > 0.0:
            lowered = self._lowered(entry, now)
            self._next_turn[lowered] = max(self._next_turn[lowered], now + turn_elsewhere)

    def probe_answered_elsewhere(self, kind: Probe, model: str) -> None:
        """Another proxy's probe of the limit was answered cleanly: for pacing, as one answered here."""
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is not None and self._enabled:
            self._probe_answered(entry, self._clock())

    def probe_given_up(self, kind: Probe, model: str) -> None:
        """A probe z.ai had not answered when a slot within the limits came for its request was abandoned.
        It tells the limit nothing; its next probe waits as after a refusal (it most likely was one), keeping
        its turn among the limits held back until its refusal would have come."""
        entry = self._account if kind == "account" else self._models.get(model)
        if entry is None or not self._enabled:
            return
        now = self._clock()
        sent = entry.probe_since if entry.probe_since is not None else now
        self._probe_refused(entry, now)
        lowered = self._lowered(entry, now)
        self._next_turn[lowered] = max(self._next_turn[lowered], sent + EARLIEST_REFUSAL_SECONDS)

    def succeeded(self, model: str, in_flight: int, total: int, probe: Probe | None) -> None:
        """A clean answer, z.ai seen to serve `in_flight` requests on its model and `total` on the account
        at once (itself included)."""
        if not self._enabled:
            return
        now = self._clock()
        entry = self._models.get(model)
        if probe is not None:
            probed = self._account if probe == "account" else entry or self._account
            probed.probe_since = None
            # Room above the limit only if counted above it. Counted at or under it, z.ai had room because
            # a request it was refusing, or one just ended, left it: a pause set since (a refusal's) stands
            level = total if probed is self._account else in_flight
            if probed.value is None or level > probed.value:
                self._probe_answered(probed, now)
        if entry is not None:
            entry.evidence.observe(in_flight, refused=False, now=now)
            self._settle(entry, now, _served_why(in_flight, probe == "model"))
        self._account.evidence.observe(total, refused=False, now=now)
        self._settle(self._account, now, _served_why(total, probe == "account"))

    def _probe_answered(self, probed: Limit, now: float) -> None:
        moved = probed.held_back  # its last probe found no room, this one did: z.ai moved the limit
        probed.refused_probes, probed.no_probe_until = 0, -math.inf
        if not moved:
            return  # a climb (or luck in a band) says nothing of the other limits
        self._next_turn = _no_turns()
        # z.ai moves its limits plan-wide: every limit lowered from a level it served may try again now
        for limit in self._all():
            if self._lowered(limit, now):
                limit.refused_probes, limit.no_probe_until = 0, -math.inf

    def refused(
        self, model: str, in_flight: int, total: int, probe: Probe | None, sent: float | None = None
    ) -> None:
        """A concurrency answer (1302) to a request sent at `sent` (monotonic; None, as for a verdict another
        proxy saw: as long ago as z.ai's refusals take) that came when z.ai served `in_flight` on its model
        and `total` on the account (itself included): evidence against both, shared (see the module)."""
        self._passed(model, in_flight, total, probe, sent, "1302")

    def stalled(
        self, model: str, in_flight: int, total: int, probe: Probe | None, sent: float | None = None
    ) -> None:
        """z.ai held the head of a request (sent at `sent`, as for `refused`) that came when it served
        `in_flight` on its model and `total` on the account far longer than its heads take: a limit passed,
        as a 1302 says (z.ai queues it instead of refusing: zai.assumptions.MAY_QUEUE)."""
        self._passed(model, in_flight, total, probe, sent, "stall")

    def _passed(
        self, model: str, in_flight: int, total: int, probe: Probe | None, sent: float | None, what: str
    ) -> None:
        if not self._enabled:
            return
        now = self._clock()
        entry = self._models.get(model)
        account = self._account
        since = now - self._refusal_seconds if sent is None else sent
        # whose refusal it is: zai.assumptions.COUNTS_PER_MODEL_AND_ACCOUNT
        if probe == "account" or entry is None:
            share = 0.0
        elif probe == "model" or not entry.evidence.answered_since(in_flight, since):
            share = 1.0
        else:  # shared by how likely each is to refuse there (little of it when z.ai served both lately)
            here = entry.evidence.refusal_estimate(in_flight, now)
            there = account.evidence.refusal_estimate(total, now)
            share = here / (here + there)
        if probe is not None:
            self._probe_refused(account if probe == "account" or entry is None else entry, now)
        if entry is not None and share > 0.0:
            self._refusal(entry, in_flight, share, now, f"{what} at {in_flight} in flight")
        if share < 1.0:
            self._refusal(account, total, 1.0 - share, now, f"{what} at {total} in flight")

    def _refusal(self, entry: Limit, level: int, weight: float, now: float, why: str) -> None:
        entry.evidence.observe(level, refused=True, now=now, weight=weight)
        self._settle(entry, now, why)
        # p never falls as n grows (zai.assumptions.REFUSALS_RISE_WITH_LOAD): refused at any level, z.ai
        # refuses above the limit too (no probe now)
        entry.no_probe_until = max(entry.no_probe_until, now + self._interval)

    def _probe_refused(self, entry: Limit, now: float) -> None:
        entry.probe_since = None
        doublings = min(entry.refused_probes, 30)
        entry.refused_probes += 1
        wait = min(self._interval * 2.0**doublings, self._backoff_max)
        entry.no_probe_until = now + wait
        # z.ai moves its limits plan-wide (zai.assumptions.LIMITS_MOVE_TOGETHER), so one refused probe says
        # the others' of its group (lowered, or at their highest) would be refused now too: the next probe of
        # the group waits its share of this wait, so that their probes spread over it instead of going (and
        # being refused) together, and a move is found within a share
        lowered = self._lowered(entry, now)
        turns = sum(1 for other in self._all() if other.held_back and self._lowered(other, now) == lowered)
        self._next_turn[lowered] = max(self._next_turn[lowered], now + wait / max(turns, 1))

    def _settle(self, entry: Limit, now: float, why: str) -> None:
        """Follow the evidence: a new value, why, and a new version for the pool."""
        value = entry.evidence.limit(now, self.cost)
        if value != entry.value:
            self._set(entry, value, why)

    # -- time -------------------------------------------------------------------------------------

    def tick(self) -> None:
        """Let what was learned fade: limits follow their evidence as it fades. Cheap to call often: it looks
        at most once a second."""
        now = self._clock()
        if now < self._next_tick or not self._enabled:
            return
        self._next_tick = now + TICK_SECONDS
        for entry in self._all():
            self._settle(entry, now, "faded toward the catalog" if entry.start else "faded")

    def reset(self) -> None:
        """Forget everything learned: every limit back to its starting value."""
        for entry in self._all():
            entry.evidence.forget()
            entry.value, entry.reason, entry.changed_at = entry.start, "reset", self._wall_clock()
            entry.probe_since, entry.no_probe_until, entry.refused_probes = None, -math.inf, 0
        self._next_turn = _no_turns()
        self.version += 1

    def _set(self, entry: Limit, value: int | None, reason: str) -> None:
        entry.value = None if value is None else min(max(value, 0), entry.ceiling)
        entry.reason = reason
        entry.changed_at = self._wall_clock()
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
        ago has faded toward its starting value meanwhile."""
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
            if self._adopt(entry, row):
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
            if self._adopt(entry, row):
                taken += 1
        if taken:
            self.version += 1
        return taken

    def _adopt(self, entry: Limit, row: Any) -> bool:
        """Take a limit learned elsewhere (another proxy, an earlier run) as the evidence for it: served up
        to it, refused just above, as of when it was learned (so it has faded since)."""
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
        now = self._clock()
        learned = now - max(self._wall_clock() - changed_at, 0.0)
        evidence = entry.evidence
        evidence.forget()
        if value is not None:
            value = min(max(value, 0), entry.ceiling)
            if value:
                evidence.observe(value, refused=False, now=learned, weight=ADOPTED_WEIGHT)
            if value < entry.ceiling:
                evidence.observe(value + 1, refused=True, now=learned, weight=ADOPTED_WEIGHT)
        entry.value = evidence.limit(now, self.cost)
        text = row.get("reason")
        entry.reason = text[:200] if isinstance(text, str) else "learned elsewhere"
        if entry.value != value:
            entry.reason = "restored, faded since"
        entry.changed_at = float(changed_at)
        return True


# The groups of held-back limits, as the fleet names their turns: lowered from a level z.ai served (True), or
# at their highest (False).
TURN_GROUPS: Final = {True: "lowered", False: "highest"}


def _no_turns() -> dict[bool, float]:
    """No held-back limit's probe waits for a turn: the lowered limits' (True) and the others' (False)."""
    return {True: -math.inf, False: -math.inf}


def _served_why(count: int, probe: bool) -> str:
    return f"probe at {count} answered" if probe else f"{count} answered at once"
