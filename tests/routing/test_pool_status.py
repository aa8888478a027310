"""The typed status and the one place it becomes camelCase JSON."""

from __future__ import annotations

import json

from chaos_mode.config.schema import default_config
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.routing.pool_status import ModelLimit, ModelStatus, camel, served


def test_camel() -> None:
    assert [camel(n) for n in ("tier", "in_flight", "avg_wait_ms")] == ["tier", "inFlight", "avgWaitMs"]


def model(limit: ModelLimit | None) -> ModelStatus:
    return ModelStatus(
        tier="heavy",
        dispatched=1,
        in_flight=2,
        capacity=3,
        above_limit=0,
        probes=0,
        overdue=0,
        catalog_limit=3,
        limit=limit,
        cooldown_remaining=0.0,
        out_of_rotation=None,
        cooldown_reason=None,
        excluded=False,
        free=False,
        usable=True,
        aliases=[],
        vision=False,
    )


def test_a_flat_field_spreads_into_its_parent_and_is_left_out_when_none() -> None:
    limit = ModelLimit(5, 12, "probed", 10.0, True)
    doc = served(model(limit))
    assert doc["inFlight"] == 2 and doc["catalogLimit"] == 3
    spread = ("learnedLimit", "limitCeiling", "limitReason", "limitChangedAt", "probing")
    assert [doc[k] for k in spread] == [5, 12, "probed", 10.0, True]
    assert "limit" not in doc
    assert not {"learnedLimit", "limit"} & set(served(model(None)))


def test_the_pool_status_is_typed_and_serves_as_json() -> None:
    pool = ChaosPool(default_config())
    selection = pool.try_acquire(Ticket("heavy"))
    assert selection is not None
    status = pool_status.status(pool)
    assert status.used_capacity == 1 and status.models[selection.model].in_flight == 1
    doc = json.loads(json.dumps(served(status)))  # plain JSON values all the way down
    assert doc["usedCapacity"] == 1 and doc["models"][selection.model]["inFlight"] == 1
    assert doc["queue"]["waitingByTier"] == {"heavy": 0, "medium": 0, "light": 0}
    assert doc["accountPause"] is None and set(doc["account"]) >= {"limit", "changedAt", "probing"}
