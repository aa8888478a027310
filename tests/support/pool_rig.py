"""A pool on fake clocks for tests of learning and cooldowns, and z.ai's refusals as the pool reads them."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.zai.errors import UpstreamError, classify_error
from support.fakes import FakeClock

WALL = datetime(2026, 3, 1, 15, 0, 0, tzinfo=UTC).timestamp()
PAIR = {"h": {"tier": "HEAVY", "maxConcurrency": 2}, "l": {"tier": "LIGHT", "maxConcurrency": 3}}


def routing(models: dict[str, Any] | None = None, **block: Any) -> ModelRouting:
    return parse_config({"modelRouting": {"models": models or PAIR, **block}})


def error(code: str, message: str = "busy") -> UpstreamError:
    body = json.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "code": code, "message": message}}
    )
    classified = classify_error(429, body, now=WALL)
    assert classified is not None
    return classified


class Rig:
    def __init__(self, config: ModelRouting | None = None) -> None:
        self.clock = FakeClock()
        self.wall = FakeClock(WALL)
        self.pool = ChaosPool(
            config or routing(), clock=self.clock, wall_clock=self.wall, rng=random.Random(0)
        )
        for _ in range(60):  # 1-s answers, 3-s refusals, as on the benchmark: a refusal costs 3 slot-times
            self.pool.limits.served_for(1.0)

    def take(self, tier: str = "heavy") -> Slot:
        selection = self.pool.try_acquire(Ticket(tier))  # type: ignore[arg-type]
        assert selection is not None
        return selection

    def fill(self, tier: str = "heavy", count: int = 2) -> list[Slot]:
        """`count` requests, all answered cleanly: the limit ran full, so a probe may go above it."""
        taken = [self.take(tier) for _ in range(count)]
        for selection in taken:
            self.pool.ledger.success(selection)
        return taken
