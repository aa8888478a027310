"""Invariants of ChaosPool under any sequence of selections, releases, errors, time and reconfigures."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, RequestInfo, Slot, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.routing.strategies import STRATEGIES, ModelEntry, make_strategy
from chaos_mode.zai.catalog import TIER_RANK, RequestTier
from chaos_mode.zai.errors import BEIJING, classify_error
from support.design_catalog import DESIGN_MODELS, FIXED_LIMITS


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


MODELS = [
    "glm-4.7",
    "glm-4.6",
    "glm-4.5-x",
    "glm-4.5",
    "glm-4.5-air",
    "glm-4.7-flashx",
    "glm-4.7-flash",
    "glm-4.5-flash",
]
TIERS: list[RequestTier] = ["heavy", "medium", "light"]
CODES = [
    "1302",
    "1303",
    "1305",
    "1312",
    "1304",
    "1308",
    "1310",
    "1313",
    "1113",
    "1211",
    "1311",
    "1309",
    "9999",
]

config_options = st.fixed_dictionaries(
    {
        "strategy": st.sampled_from(sorted(STRATEGIES)),
        "excludeModels": st.sampled_from(
            [[], ["glm-4.5-x"], ["glm-4.7", "glm-4.5"], ["glm-4.7-flash", "glm-4.5-flash"]]
        ),
        "includeFreeModels": st.booleans(),
        "maxCostPerRequest": st.sampled_from([None, 0.001, 0.02]),
        "stickyConversations": st.booleans(),
        "qualityFloor": st.sampled_from([{}, {"heavy": "MEDIUM"}, {"medium": "LIGHT", "light": "MEDIUM"}]),
    }
)
account_caps = st.sampled_from([None, 1, 4, 12, 27])
requests = st.none() | st.builds(
    RequestInfo,
    input_tokens=st.integers(min_value=0, max_value=200_000),
    max_output_tokens=st.integers(min_value=1, max_value=64_000),
)


def build(options: dict[str, Any], account_cap: int | None) -> ModelRouting:
    block: dict[str, Any] = {
        "chaosMode": options,
        "sticky": {"ttlSeconds": 60, "maxEntries": 2},
        "cooldown": {"trialWhenIdle": False},  # this machine's model of cooldowns has no trials
        "models": DESIGN_MODELS,
        **FIXED_LIMITS,
    }
    if account_cap is not None:
        block["accountConcurrency"] = account_cap
    return parse_config({"modelRouting": block})


def eligible(config: ModelRouting, model: str, tier: RequestTier) -> bool:
    """Eligibility worked out from the config's fields, independently of `eligible_models`."""
    spec = config.models[model]
    chaos = config.chaos_mode
    return (
        TIER_RANK[spec.tier] >= TIER_RANK[getattr(chaos.quality_floor, tier)]
        and model not in chaos.exclude_models
        and (chaos.include_free_models or not spec.free)
    )


class PoolMachine(RuleBasedStateMachine):
    """Drives one pool; `held` is every slot the test holds, `given_back` every slot it gave back."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(1000.0)
        self.wall = FakeClock(1_780_000_000.0)
        self.held: list[Slot] = []
        self.given_back: list[Slot] = []
        self.over_cap_allowance = 0  # slots held above a cap lowered by reconfigure

    @initialize(options=config_options, account_cap=account_caps, seed=st.integers(0, 2**32 - 1))
    def start(self, options: dict[str, Any], account_cap: int | None, seed: int) -> None:
        self.config = build(options, account_cap)
        self.pool = ChaosPool(self.config, clock=self.clock, wall_clock=self.wall, rng=random.Random(seed))
        self.caps = {name: spec.max_concurrency for name, spec in self.config.models.items()}

    # -- helpers ----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return {model: self.pool.in_flight(model) for model in MODELS}

    def could_serve(self, tier: RequestTier, attempted: frozenset[str]) -> bool:
        if self.pool.cooldowns.account_pause() is not None:
            return False
        if self.pool.in_flight() >= self.config.total_capacity:
            return False
        return any(
            eligible(self.config, model, tier)
            and model not in attempted
            and self.pool.cooldowns.block(model) is None
            and self.pool.in_flight(model) < self.caps[model]
            for model in MODELS
        )

    def waits_warm(self, tier: RequestTier, attempted: frozenset[str], key: str | None) -> bool:
        """The cache rule may hold a request back for a model its conversation is warm on: one eligible,
        usable and full (`routing.cache_rule`)."""
        if key is None or not self.config.chaos_mode.sticky_conversations:
            return False
        return any(
            eligible(self.config, model, tier)
            and model not in attempted
            and self.pool.cooldowns.block(model) is None
            and self.pool.in_flight(model) >= self.caps[model]
            for model in self.pool._sticky.warm(key)
        )

    def check_selection(self, selection: Slot, tier: RequestTier, attempted: frozenset[str]) -> None:
        model = selection.model
        assert eligible(self.config, model, tier), selection
        assert model not in attempted, selection
        assert self.pool.cooldowns.block(model) is None, selection

    # -- rules ------------------------------------------------------------------------------------

    @rule(
        tier=st.sampled_from(TIERS),
        attempted=st.frozensets(st.sampled_from(MODELS), max_size=4),
        request=requests,
        sticky_key=st.none() | st.sampled_from(["conv-a", "conv-b", "conv-c"]),
    )
    def acquire(
        self,
        tier: RequestTier,
        attempted: frozenset[str],
        request: RequestInfo | None,
        sticky_key: str | None,
    ) -> None:
        before = self.counts()
        total = self.pool.in_flight()
        expected = self.could_serve(tier, attempted)
        waits = self.waits_warm(tier, attempted, sticky_key)
        selection = self.pool.try_acquire(Ticket(tier, attempted, request=request, sticky_key=sticky_key))
        if selection is None:
            assert not expected or waits, "backpressure while an eligible model had a free slot"
            assert self.counts() == before
            return
        assert expected
        self.check_selection(selection, tier, attempted)
        assert before[selection.model] < self.caps[selection.model]
        assert total < self.config.total_capacity
        after = self.counts()
        assert after == before | {selection.model: before[selection.model] + 1}
        self.held.append(selection)

    @rule(
        tier=st.sampled_from(TIERS),
        attempted=st.frozensets(st.sampled_from(MODELS), max_size=4),
        request=requests,
        sticky_key=st.none() | st.sampled_from(["conv-a", "conv-b"]),
    )
    def take_and_give_back(
        self,
        tier: RequestTier,
        attempted: frozenset[str],
        request: RequestInfo | None,
        sticky_key: str | None,
    ) -> None:
        """A slot taken and given back at once (a request that ends before it is sent) leaves the counts
        as they were."""
        before = self.counts()
        expected = self.could_serve(tier, attempted)
        waits = self.waits_warm(tier, attempted, sticky_key)
        selection = self.pool.try_acquire(Ticket(tier, attempted, request=request, sticky_key=sticky_key))
        assert (selection is not None) == expected or (selection is None and waits)
        if selection is not None:
            self.check_selection(selection, tier, attempted)
            assert before[selection.model] < self.caps[selection.model]
            assert self.pool.release(selection) is True
            self.given_back.append(selection)
        assert self.counts() == before

    @rule(model=st.sampled_from([*MODELS, "not-a-model"]))
    def acquire_by_name(self, model: str) -> None:
        """The Chaos Mode design's acquire(model): only caps count, not eligibility or cooldowns."""
        before = self.counts()
        room = (
            model in self.caps
            and before[model] < self.caps[model]
            and self.pool.in_flight() < self.config.total_capacity
        )
        slot = self.pool.acquire(model)
        assert (slot is not None) is room
        if slot is not None:
            assert slot.model == model
            self.held.append(slot)

    @rule(index=st.integers(min_value=0))
    def release_held(self, index: int) -> None:
        if not self.held:
            return
        slot = self.held.pop(index % len(self.held))
        assert self.pool.release(slot) is True
        self.given_back.append(slot)

    @rule(index=st.integers(min_value=0), model=st.sampled_from([*MODELS, "not-a-model"]))
    def release_not_held(self, index: int, model: str) -> None:
        """A slot given back already, or one never taken here (of any model, known or not), gives back
        nothing: not even another slot of its model that is held."""
        candidates = [*self.given_back, Slot(model, "never taken here")]
        slot = candidates[index % len(candidates)]
        before = self.counts()
        spurious = self.pool.spurious_releases
        assert self.pool.release(slot) is False
        assert self.counts() == before
        assert self.pool.spurious_releases == spurious + 1

    @rule(
        model=st.sampled_from(MODELS),
        code=st.sampled_from(CODES),
        status=st.sampled_from([429, 400, 503]),
        retry_after=st.none() | st.sampled_from([0.0, 1.0, 7.5, 120.0, 100_000.0]),
        reset_in=st.none() | st.sampled_from([-60, 30, 3600]),
    )
    def report_error(
        self, model: str, code: str, status: int, retry_after: float | None, reset_in: int | None
    ) -> None:
        message = f"[{code}] limit"
        if reset_in is not None:
            reset = datetime.fromtimestamp(self.wall() + reset_in, BEIJING)
            message += f"; your limit will reset at {reset:%Y-%m-%d %H:%M:%S}"
        body = json.dumps(
            {"type": "error", "error": {"type": "rate_limit_error", "code": code, "message": message}}
        )
        error = classify_error(status, body, now=self.wall())
        if error is not None:
            assert self.pool.error(model, error, retry_after) >= 0.0

    @rule(seconds=st.sampled_from([0.001, 1.0, 5.0, 30.0, 301.0, 3600.0, 86_400.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.wall.advance(seconds)

    @rule(model=st.sampled_from(MODELS))
    def restore(self, model: str) -> None:
        self.pool.restore(model)
        assert self.pool.cooldowns.block(model) is None

    @rule(options=config_options, account_cap=account_caps)
    def reconfigure(self, options: dict[str, Any], account_cap: int | None) -> None:
        before = self.counts()
        self.config = build(options, account_cap)
        self.pool.reconfigure(self.config)
        assert self.counts() == before
        self.over_cap_allowance = self.pool.in_flight()

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def counts_match_what_is_held(self) -> None:
        if not hasattr(self, "pool"):
            return
        counts = self.counts()
        for model, n in counts.items():
            assert 0 <= n <= self.caps[model]
        assert counts == {model: Counter(s.model for s in self.held)[model] for model in MODELS}
        assert self.pool.in_flight() == len(self.held)
        assert self.pool.in_flight() <= max(self.config.total_capacity, self.over_cap_allowance)
        status = served(pool_status.status(self.pool))
        assert status["usedCapacity"] == len(self.held)
        assert sum(m["inFlight"] for m in status["models"].values()) == len(self.held)
        for model, n in counts.items():  # a slot given back awaits no verdict any more
            assert 0 <= self.pool.ledger.unanswered(model) <= n

    def teardown(self) -> None:
        if not hasattr(self, "pool"):
            return
        while self.held:
            assert self.pool.release(self.held.pop()) is True
        assert self.pool.in_flight() == 0 and self.pool.ledger.unanswered() == 0
        status = served(pool_status.status(self.pool))
        assert status["usedCapacity"] == 0
        assert all(m["inFlight"] == 0 for m in status["models"].values())


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPoolMachine = PoolMachine.TestCase


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(STRATEGIES)),
    slots=st.lists(
        st.tuples(st.integers(1, 12), st.integers(0, 12), st.sampled_from([0.0, 1.3, 2.8, 11.1])),
        min_size=1,
        max_size=10,
    ),
    picks=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_strategy_picks_a_candidate_with_a_free_slot(
    name: str, slots: list[tuple[int, int, float]], picks: int, seed: int
) -> None:
    candidates, in_flight, costs = [], [], []
    for index, (cap, used, cost) in enumerate(slots):
        candidates.append(ModelEntry(f"m{index}", index, cap, cost, cost, 0.0))
        in_flight.append(min(used, cap - 1))  # the pool only offers models with a free slot
        costs.append(cost)
    strategy = make_strategy(name, random.Random(seed))
    for _ in range(picks):
        chosen = strategy.pick(candidates, in_flight, costs)
        assert 0 <= chosen < len(candidates)
        assert in_flight[chosen] < candidates[chosen].capacity
        if name == "least-loaded":
            best = max((e.capacity - n) / e.capacity for e, n in zip(candidates, in_flight, strict=True))
            assert (candidates[chosen].capacity - in_flight[chosen]) / candidates[chosen].capacity == best


def test_reset_times_in_messages_round_trip() -> None:
    # The machine writes reset times as z.ai does; make sure they parse back to the intended moment.
    wall = 1_780_000_000.0
    reset = datetime.fromtimestamp(wall + 3600, BEIJING)
    body = json.dumps({"error": {"code": "1308", "message": f"reset at {reset:%Y-%m-%d %H:%M:%S}"}})
    error = classify_error(429, body, now=wall)
    assert error is not None and error.reset_at == wall + 3600
    assert reset.utcoffset() == timedelta(hours=8)
