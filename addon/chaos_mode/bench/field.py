"""Field presets: the simulator's true limits unlike the catalog's (lower, higher, changing, with noise),
and the lower bound on the makespan those true limits allow."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from chaos_mode.bench.ideal import Capacity, LowerBound, slots_by_tier, timed_lower_bound
from chaos_mode.bench.scenarios import SCENARIOS, Scenario, parse_names
from chaos_mode.bench.workload import Workload, WorkloadSpec
from chaos_mode.config.schema import parse_config
from chaos_mode.sim import LimitChange, ScheduledChange, SimSettings, SimState, default_limits
from chaos_mode.zai.catalog import RequestTier

# The proxy in every preset: chaos mode, least-loaded, on the built-in catalog (whose limits are guesses).
PROXY: Final[Scenario] = SCENARIOS["least-loaded"]
# 1-second streamed requests: 250 ms to the first token, then 25 more every 30 ms (each +-50%).
FIELD_SPEC: Final = WorkloadSpec(latency_ms=250.0, output_tokens=26, token_interval_ms=30.0)


@dataclass(frozen=True, slots=True)
class FieldPreset:
    """True limits for the simulator (the catalog's, changed by `limits`), and the swarm to run on them.

    `boost` is applied for the middle third of the run and taken back after it: from T/3 to 2T/3, where T
    is the lower bound of the run on that very schedule.
    """

    name: str
    description: str
    agents: int
    requests: int
    limits: Mapping[str, int] = field(default_factory=dict)
    account_limit: int | None = None
    hold: Mapping[str, int] = field(default_factory=dict)
    refuse: tuple[str, ...] = ()
    fault_rates: Mapping[str, float] = field(default_factory=dict)
    boost: LimitChange | None = None
    sample_seconds: float = 0.25  # how often the proxy's /api/status is read

    def spec(self, **overrides: Any) -> WorkloadSpec:
        """The workload: FIELD_SPEC with this preset's agents and requests, then `overrides`."""
        fields = {"agents": self.agents, "requests": self.requests, **overrides}
        return dataclasses.replace(FIELD_SPEC, **fields)

    def sim_settings(self, workload: Workload, **timings: Any) -> SimSettings:
        """The simulator's settings (`timings`: reject_delay_ms, retry_after), the boost's schedule
        included."""
        spec = workload.spec
        base = SimSettings(
            latency_ms=spec.latency_ms,
            token_interval_ms=spec.token_interval_ms,
            output_tokens=spec.output_tokens,
            limits={**default_limits(), **self.limits},
            account_limit=self.account_limit,
            hold=dict(self.hold),
            refuse=list(self.refuse),
            fault_rates=dict(self.fault_rates),
            fault_seed=spec.seed,
            **timings,
        )
        if self.boost is None:
            return base
        period = boosted_period(workload, base, self.boost)
        return dataclasses.replace(base, schedule=boost_schedule(base, self.boost, period))


PRESETS: Final[dict[str, FieldPreset]] = {
    p.name: p
    for p in (
        FieldPreset(
            "lower",
            "true limits below the catalog: glm-4.7 takes 2, another client holds a glm-4.6 slot, "
            "glm-4.5-x and glm-4.7-flashx refused (1113)",
            agents=40,
            requests=6,
            limits={"glm-4.7": 2},
            hold={"glm-4.6": 1},
            refuse=("glm-4.5-x", "glm-4.7-flashx"),
        ),
        FieldPreset(
            "higher",
            "true limits above the catalog: glm-4.7 9, glm-4.6 6, glm-4.5-air 9, account 40",
            agents=60,
            requests=6,
            limits={"glm-4.7": 9, "glm-4.6": 6, "glm-4.5-air": 9},
            account_limit=40,
        ),
        FieldPreset(
            "changing",
            "catalog limits with an account limit of 24; every limit doubled (account 48) for the middle "
            "third of the run",
            agents=48,
            requests=24,  # the boost lasts 12 s: longer than the 10 s a refused limit waits to probe again
            account_limit=24,
            boost=LimitChange(
                limits={m: 2 * n for m, n in default_limits().items()},
                account_limit=48,
                sets_account_limit=True,
            ),
        ),
        FieldPreset(
            "soak",
            "catalog limits; 2% of requests answered 1302 and 2% 1305 at random",
            agents=40,
            requests=20,  # 800 requests; 30 each took 141 s before learned limits (LB 42.5 s)
            fault_rates={"1302": 0.02, "1305": 0.02},
            sample_seconds=0.1,
        ),
    )
}


def parse_presets(text: str) -> list[FieldPreset]:
    """A comma-separated list of preset names ("all" = every one), in the order given."""
    return parse_names(text, PRESETS, list(PRESETS.values()), "field preset")


# -- the truth and its bound ---------------------------------------------------------------------------


def planned_changes(settings: SimSettings) -> list[dict[str, Any]]:
    """The `limitChanges` the simulator will report for these settings (its own bookkeeping, run ahead)."""
    state = SimState(settings.limits, settings.account_limit, settings.hold)
    for scheduled in settings.schedule:
        state.apply(scheduled.change, scheduled.at_seconds)
    return state.limit_changes


def true_timeline(
    changes: Sequence[Mapping[str, Any]], refused: Sequence[str], lead: float = 0.0
) -> list[Capacity]:
    """The slots a client can have over time, from the simulator's `limitChanges`: limit - held per model
    (0 when refused), the account limit - every held slot; times moved `lead` seconds earlier (what had
    happened by then starts at 0)."""
    timeline: list[Capacity] = []
    for change in changes:
        start = max(0.0, float(change["at"]) - lead)
        hold: Mapping[str, int] = change.get("hold", {})
        models = {
            m: 0 if m in refused else max(0, int(n) - int(hold.get(m, 0)))
            for m, n in change["limits"].items()
        }
        account = max(0, int(change["accountLimit"]) - sum(int(n) for n in hold.values()))
        if timeline and timeline[-1].start >= start:
            timeline.pop()
        timeline.append(Capacity(start, models, account))
    return timeline


def eligible_by_tier() -> dict[RequestTier, list[str]]:
    """The models each tier may use under the proxy's quality floors (the catalog's tiers)."""
    eligible, _, _ = slots_by_tier(parse_config({"modelRouting": PROXY.config()}))
    return eligible


def field_bound(workload: Workload, timeline: Sequence[Capacity]) -> LowerBound:
    """LB of the workload on the true slots over time (see `ideal.timed_lower_bound`)."""
    return timed_lower_bound(workload.work_by_tier(), eligible_by_tier(), timeline, workload.work_by_agent())


def boost_schedule(base: SimSettings, boost: LimitChange, period: float) -> list[ScheduledChange]:
    """`boost` at period/3, and back to `base`'s values for what it changed at 2 period/3."""
    back = LimitChange(
        limits={m: base.limits[m] for m in boost.limits},
        hold={m: base.hold.get(m, 0) for m in boost.hold},
        account_limit=base.account_limit,
        sets_account_limit=boost.sets_account_limit,
    )
    return [ScheduledChange(period / 3, boost), ScheduledChange(2 * period / 3, back)]


def boosted_period(workload: Workload, base: SimSettings, boost: LimitChange) -> float:
    """The T for which the LB with the boost from T/3 to 2T/3 is T itself (by bisection: above that T
    the LB is below T, under it above)."""

    def bound(period: float) -> float:
        settings = dataclasses.replace(base, schedule=boost_schedule(base, boost, period))
        return field_bound(workload, true_timeline(planned_changes(settings), settings.refuse)).seconds

    low, high = 0.0, bound(0.0)
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if bound(middle) > middle else (low, middle)
    return high
