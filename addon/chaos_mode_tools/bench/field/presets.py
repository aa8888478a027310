"""Field presets: the simulator's true limits unlike the catalog's (lower, higher, changing, with noise) and
the field's shapes (random refusals, soft bands, queuing, the content filter, halved limits, realistic
timing), and the lower bound on the makespan that the true (clean) limits allow."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from chaos_mode.config.schema import parse_config
from chaos_mode.routing.aliases import Aliases, fold
from chaos_mode.zai.catalog import RequestTier
from chaos_mode_tools.bench.swarm.ideal import (
    Capacity,
    LowerBound,
    least_served_makespan,
    slots_by_tier,
    timed_lower_bound,
)
from chaos_mode_tools.bench.swarm.scenarios import SCENARIOS, Scenario, parse_names
from chaos_mode_tools.bench.swarm.workload import Workload, WorkloadSpec
from chaos_mode_tools.sim import (
    Lengths,
    LimitChange,
    ScheduledChange,
    SimSettings,
    SimState,
    catalog_settings,
    default_limits,
)

# The proxy in every preset: chaos mode, least-loaded, on the built-in catalog (whose limits are guesses).
PROXY: Final[Scenario] = SCENARIOS["least-loaded"]
# 1-second streamed requests: 250 ms to the first token, then 25 more every 30 ms (each +-50%).
FIELD_SPEC: Final = WorkloadSpec(latency_ms=250.0, output_tokens=26, token_interval_ms=30.0)
# The soft preset's clean levels where they are not the catalog's (each band as wide as its clean level).
SOFT_CLEAN: Final = {"glm-4.7": 5, "glm-4.5-air": 7, "glm-4.5": 8}
# The true limits of the presets where z.ai queues over them (queuing, mixed): under the catalog's.
QUEUING_LIMITS: Final = {"glm-4.7": 2, "glm-4.6": 2, "glm-4.5": 6, "glm-4.5-air": 3}
# The limits that fall for good `FALLS_AT_SECONDS` into the `fallen` preset: four models to a half or less.
FALLEN_LIMITS: Final = {"glm-4.7": 1, "glm-4.6": 1, "glm-4.5": 5, "glm-4.5-air": 2}
FALLS_AT_SECONDS: Final = 8.0
# The phrase z.ai's content filter refused in the system prompt (NousResearch/hermes-agent #60118, #63534).
FILTER_PHRASE: Final = "You run on Hermes Agent"


@dataclass(frozen=True, slots=True)
class FieldPreset:
    """True limits for the simulator (the catalog's, changed by `limits`), and the swarm to run on them.

    `change` is applied for the middle third of the run and taken back after it: from T/3 to 2T/3, where
    T is the lower bound of the run on that very schedule; `schedule`: changes at fixed times, kept.
    `shapes`: more simulator settings (soft bands, queuing, heads with the first token...), `workload`:
    WorkloadSpec fields (latency, answer lengths).
    `filtered_agent`: that agent's system prompt trips z.ai's content filter (`FILTER_PHRASE`). `twin`:
    the fields that make the same run without the shape under test, run after it for comparison.
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
    change: LimitChange | None = None
    schedule: tuple[ScheduledChange, ...] = ()
    shapes: Mapping[str, Any] = field(default_factory=dict)
    workload: Mapping[str, Any] = field(default_factory=dict)
    filtered_agent: int | None = None
    twin: Mapping[str, Any] | None = None
    sample_seconds: float = 0.25  # how often the proxy's /api/status is read
    catalog: str = "early-2026"  # the simulator's catalog (`sim.catalog`); 2026-12: the proxy's built-in one

    def spec(self, **overrides: Any) -> WorkloadSpec:
        """The workload: FIELD_SPEC with this preset's agents, requests and `workload`, then `overrides`."""
        fields = {"agents": self.agents, "requests": self.requests, **self.workload, **overrides}
        return dataclasses.replace(FIELD_SPEC, **fields)

    def twin_preset(self) -> FieldPreset | None:
        """The same run without the shape under test (`twin`), named `<name>-twin`; None when it has none."""
        if self.twin is None:
            return None
        description = f"the {self.name} run without its shape ({', '.join(self.twin)} changed)"
        return dataclasses.replace(
            self, name=f"{self.name}-twin", description=description, twin=None, **self.twin
        )

    def sim_settings(self, workload: Workload, **timings: Any) -> SimSettings:
        """The simulator's settings (`timings`: reject_delay_ms, retry_after), the change's schedule
        included; ValueError naming a bad setting of `shapes`."""
        spec = workload.spec
        catalog = catalog_settings(self.catalog)
        base = SimSettings.from_mapping(
            {
                "latency_ms": spec.latency_ms,
                "token_interval_ms": spec.token_interval_ms,
                "output_tokens": spec.output_tokens,
                **catalog,
                "limits": {**catalog["limits"], **self.limits},
                "account_limit": self.account_limit,
                "hold": dict(self.hold),
                "refuse": list(self.refuse),
                "fault_rates": dict(self.fault_rates),
                "fault_seed": spec.seed,
                "filter_phrases": [FILTER_PHRASE] if self.filtered_agent is not None else [],
                "schedule": list(self.schedule),
                **self.shapes,
                **timings,
            }
        )
        if self.change is None:
            return base
        period = middle_third_period(workload, base, self.change, self.catalog)
        return dataclasses.replace(base, schedule=middle_third_schedule(base, self.change, period))


PRESETS: Final[dict[str, FieldPreset]] = {
    p.name: p
    for p in (
        FieldPreset(
            "today",
            "the Coding Plan of December 2026 (the simulator's 2026-12 catalog: glm-5.4 2, glm-5.3 3, "
            "glm-5.3-flash 5, glm-4.6v 2, older names on their served model's counter) and the built-in "
            "catalog",
            agents=40,
            requests=6,
            catalog="2026-12",
        ),
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
            requests=24,  # the change lasts 12 s: longer than a refused limit waits to probe again (5-10 s)
            account_limit=24,
            change=LimitChange(
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
        # -- the field's shapes (issue 21) ------------------------------------------------------------
        FieldPreset(
            "noisy",
            "catalog limits; 3% of the requests within every limit refused 1302 at random (twin: none)",
            agents=40,
            requests=6,
            fault_rates={"1302": 0.03},
            twin={"fault_rates": {}},
        ),
        FieldPreset(
            "soft",
            "soft limits as the measured glm-4.7's (clean to 9, sporadic 429s above): clean to a level, "
            "then a band as wide, refused ever more often; glm-4.7 clean 5 (catalog 3), glm-4.5-air 7 (5), "
            "glm-4.5 8 (10, inside its band), the others at the catalog's; account 40",
            agents=40,
            requests=6,
            limits=SOFT_CLEAN,
            account_limit=40,
            shapes={"bands": {**default_limits(), **SOFT_CLEAN}},
        ),
        FieldPreset(
            "queuing",
            "true limits under the catalog (glm-4.7 2, glm-4.6 2, glm-4.5 6, glm-4.5-air 3) and no 1302: "
            "z.ai holds a request over them, its head unsent, until a slot frees",
            agents=40,
            requests=6,
            limits=QUEUING_LIMITS,
            shapes={"over_limit": "queue"},
        ),
        FieldPreset(
            "filtered",
            "catalog limits; agent 0's system prompt trips z.ai's content filter (1305 from every model, "
            "HTTP 529); it gives up after its first request (twin: a plain prompt)",
            agents=40,
            requests=6,
            filtered_agent=0,
            twin={"filtered_agent": None},
        ),
        FieldPreset(
            "halved",
            "catalog limits, each halved (rounded down, at least 1; glm-4.5 5) for the middle third of the "
            "run, then restored",
            agents=40,
            requests=15,  # the halved third lasts about 9 s
            change=LimitChange(limits={m: max(1, n // 2) for m, n in default_limits().items()}),
        ),
        FieldPreset(
            "realistic",
            "heads sent with the first token (0.8 s), 1302s after 3 s, heavy-tailed answers (lognormal, "
            "sigma 1, mean 26 tokens, cap 130); true limits glm-4.7 2, glm-4.5-air 3, glm-4.5 12",
            agents=60,  # with 40, one agent's chain of long answers would be the bound, not the slots
            requests=6,
            limits={"glm-4.7": 2, "glm-4.5-air": 3, "glm-4.5": 12},
            shapes={"head_with_first_token": True},
            workload={"latency_ms": 800.0, "lengths": Lengths("lognormal", sigma=1.0, cap=130)},
        ),
        FieldPreset(
            "prompts",
            "realistic's, with prompts of heavy-tailed sizes (lognormal, sigma 0.8, mean 10,000 tokens, cap "
            "60,000) whose first token comes 0.1 s later per 1000 tokens (z.ai reads the prompt first)",
            agents=60,
            requests=6,
            limits={"glm-4.7": 2, "glm-4.5-air": 3, "glm-4.5": 12},
            shapes={"head_with_first_token": True},
            workload={
                "latency_ms": 800.0,
                "lengths": Lengths("lognormal", sigma=1.0, cap=130),
                "prompt_tokens": 10_000,
                "prompt_lengths": Lengths("lognormal", sigma=0.8, cap=60_000),
                "prefill_ms_per_1k": 100.0,
            },
        ),
        FieldPreset(
            "mixed",
            "queuing's true limits, but only glm-4.7 and glm-4.6 queue over theirs (as the field's GLM-5.2 "
            "held heads 45 s); glm-4.5 and glm-4.5-air refuse 1302 over theirs, after 3 s",
            agents=40,
            requests=6,
            limits=QUEUING_LIMITS,
            shapes={"queue_models": ["glm-4.7", "glm-4.6"]},
        ),
        # -- the shapes the learner missed (issue 46) -------------------------------------------------
        FieldPreset(
            "queuing-late-heads",
            "queuing's true limits and z.ai holding what is over them, every head sent with the first token "
            "(0.3 s): a request held inside z.ai looks like a slow one",
            agents=40,
            requests=6,
            limits=QUEUING_LIMITS,
            shapes={"over_limit": "queue", "head_with_first_token": True},
            workload={"latency_ms": 300.0},
        ),
        FieldPreset(
            "fallen",
            f"catalog limits until {FALLS_AT_SECONDS:g} s in, then, for good, glm-4.7 1 (catalog 3), "
            "glm-4.6 1 (3), glm-4.5 5 (10), glm-4.5-air 2 (5)",
            agents=40,
            requests=12,
            schedule=(ScheduledChange(FALLS_AT_SECONDS, LimitChange(limits=FALLEN_LIMITS)),),
        ),
        FieldPreset(
            "other-client",
            "queuing's true limits as hard ones (1302 over them), and another client of the account holding "
            "a glm-4.7 slot and a glm-4.5 slot the whole run",
            agents=40,
            requests=6,
            limits=QUEUING_LIMITS,
            hold={"glm-4.7": 1, "glm-4.5": 1},
        ),
    )
}


def refused_held(preset: FieldPreset) -> FieldPreset:
    """`preset` on a z.ai that holds the slot of a request it refuses until its 1302 (`refused_holds`),
    named `<name>-held`, without a twin."""
    return dataclasses.replace(
        preset,
        name=f"{preset.name}-held",
        description=f"{preset.name}'s, with z.ai holding a refused request's slot until its 1302",
        shapes={**preset.shapes, "refused_holds": True},
        twin=None,
    )


PRESETS.update((held.name, held) for held in (refused_held(PRESETS["noisy"]), refused_held(PRESETS["soft"])))


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
    happened by then starts at 0). A soft limit's `limits` is its clean level: its band does not count."""
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


def eligible_by_tier(catalog: str = "early-2026") -> dict[RequestTier, list[str]]:
    """The models that serve what each tier may use under the proxy's quality floors, on the simulator's
    `catalog`: the proxy's catalog folded by the simulator's aliases (`routing.aliases.fold`), each name
    counted on the model serving it and judged by that one's tier."""
    config = parse_config({"modelRouting": dataclasses.replace(PROXY, catalog=catalog).config()})
    aliases = Aliases(lambda: 0.0)
    aliases.configure(catalog_settings(catalog)["aliases"])
    eligible, _, _ = slots_by_tier(fold(config, aliases)[0])
    return eligible


def field_bound(workload: Workload, timeline: Sequence[Capacity], catalog: str = "early-2026") -> LowerBound:
    """LB of the workload on the true slots over time (see `ideal.timed_lower_bound`)."""
    eligible = eligible_by_tier(catalog)
    return timed_lower_bound(workload.work_by_tier(), eligible, timeline, workload.work_by_agent())


def field_queue_makespan(
    workload: Workload, timeline: Sequence[Capacity], catalog: str = "early-2026"
) -> float | None:
    """The makespan of an ideal proxy on the true slots: the proxy's own queue order
    (`ideal.least_served_makespan`: agents served least so far first), the true (clean) limits known from
    the start, no overhead, no refusal. What a proxy that learns the limits can approach, where LB may be out
    of reach: LB spreads the work perfectly, while the long answers an agent happens to send last end the
    run. None when the slots change during the run."""
    if len(timeline) != 1:
        return None
    step = timeline[0]
    return least_served_makespan(workload.jobs(), eligible_by_tier(catalog), step.models, step.account)


def middle_third_schedule(base: SimSettings, change: LimitChange, period: float) -> list[ScheduledChange]:
    """`change` at period/3, and back to `base`'s values for what it changed at 2 period/3."""
    back = LimitChange(
        limits={m: base.limits[m] for m in change.limits},
        hold={m: base.hold.get(m, 0) for m in change.hold},
        account_limit=base.account_limit,
        sets_account_limit=change.sets_account_limit,
    )
    return [ScheduledChange(period / 3, change), ScheduledChange(2 * period / 3, back)]


def middle_third_period(
    workload: Workload, base: SimSettings, change: LimitChange, catalog: str = "early-2026"
) -> float:
    """The T for which the LB with `change` from T/3 to 2T/3 is T itself (by bisection: above that T
    the LB is below T, under it above; a change that adds slots has it below the LB without the change,
    one that takes slots away above it)."""

    def bound(period: float) -> float:
        settings = dataclasses.replace(base, schedule=middle_third_schedule(base, change, period))
        timeline = true_timeline(planned_changes(settings), settings.refuse)
        return field_bound(workload, timeline, catalog).seconds

    low, high = 0.0, bound(0.0)
    while bound(high) > high:  # a change that takes slots away ends later than without it: widen
        low, high = high, 2 * high
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if bound(middle) > middle else (low, middle)
    return high
