"""The text panel of the `chaos.status` command (chaos_mode.observe.panel), rendered from real pool state."""

from __future__ import annotations

from typing import Any

import pytest

from chaos_mode.config.schema import ModelRouting, parse_config
from chaos_mode.observe.panel import _bar, render_panel
from chaos_mode.observe.stats import Stats, chaos_stats
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.routing.pool_status import served
from chaos_mode.zai.errors import classify_error
from support.design_catalog import DESIGN_MODELS, FIXED_LIMITS
from support.learned import learn_account_limit, lower_glm_4_7, probe_glm_4_7

WALL = 1_757_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def config(**routing: Any) -> ModelRouting:
    return parse_config(
        {"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS, **FIXED_LIMITS, **routing}}
    )


def panel(pool: ChaosPool) -> str:
    return render_panel(chaos_stats(served(pool_status.status(pool)), Stats(pool.config)))


def rows(text: str) -> dict[str, str]:
    """The model rows of the panel, by model name."""
    found = {}
    for line in text.splitlines():
        parts = line.strip("│ ").split()
        if parts and parts[0].startswith(("glm-", "a-model")):
            found[parts[0]] = line
    return found


def test_every_model_has_a_row_and_the_box_is_aligned() -> None:
    pool = ChaosPool(config())
    text = panel(pool)
    lines = text.splitlines()
    assert set(rows(text)) == set(pool.config.models)
    assert len({len(line) for line in lines}) == 1  # every line as wide as the box
    assert lines[0].startswith("┌─ Chaos Mode ") and lines[-1].startswith("└")
    assert "Strategy: least-loaded    Utilization: 0% (0/28 usable slots)" in text
    assert "Queue: 0 waiting" in text and "failovers: 0" in text


def test_in_flight_counts_bars_and_utilization() -> None:
    pool = ChaosPool(config())
    for _ in range(3):
        pool.acquire("glm-4.7")
    pool.acquire("glm-4.5")
    text = panel(pool)
    row = rows(text)
    assert row["glm-4.7"].split()[2:4] == ["███", "3/3"]
    assert row["glm-4.5"].split()[2:4] == ["█░░░░░░░░░", "1/10"]
    assert "3/3" in row["glm-4.7"] and "1/10" in row["glm-4.5"] and "0/2" in row["glm-4.5-x"]
    assert "Utilization: 14% (4/28 usable slots)" in text


def test_cooldowns_out_of_rotation_and_account_pause_are_shown() -> None:
    clock = Clock()
    pool = ChaosPool(config(), clock=clock, wall_clock=lambda: WALL)
    busy = classify_error(429, b'{"error":{"code":"1302","message":"busy"}}', now=WALL)
    refused = classify_error(429, b'{"type":"error","error":{"type":"1113","message":"no"}}', now=WALL)
    fair_use = classify_error(429, b'{"error":{"code":"1313","message":"[1313]"}}', now=WALL)
    assert busy and refused and fair_use
    pool.error("glm-4.6", busy, 8.0)
    pool.error("glm-4.5-x", refused)
    text = panel(pool)
    row = rows(text)
    assert row["glm-4.6"].rstrip(" │").endswith("1302 (8.0s)")
    assert "out: no balance or model not in plan (1113)" in row["glm-4.5-x"]
    # Its slots are not usable capacity: said apart, not counted in the utilization (issue 13).
    assert "Utilization: 0% (0/26 usable slots)    Out: 2 slots: glm-4.5-x (no balance or model" in text
    assert row["glm-4.7"].rstrip(" │").endswith("-")
    assert "Account paused" not in text
    clock.now += 1.5
    assert rows(panel(pool))["glm-4.6"].rstrip(" │").endswith("1302 (6.5s)")
    pool.error("glm-4.7", fair_use, 30.0)
    assert "Account paused for 30 s: fair-use throttle (1313)" in panel(pool)


def test_chaos_mode_off_is_said() -> None:
    pool = ChaosPool(parse_config({"modelRouting": {"chaosMode": {"strategy": "round-robin"}}}))
    assert "Strategy: round-robin (chaos mode OFF)" in panel(pool)


def test_long_model_names_keep_the_box_aligned() -> None:
    name = "a-model-with-a-rather-long-name-v2"
    pool = ChaosPool(config(models={name: {"tier": "HEAVY", "maxConcurrency": 250}}))
    pool.acquire(name)
    text = panel(pool)
    assert len({len(line) for line in text.splitlines()}) == 1
    assert "1/250" in rows(text)[name]


def learning_pool(clock: Clock, **routing: Any) -> ChaosPool:
    """A pool that learns limits (the other tests fix them at the catalog's values)."""
    routing = {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS, **routing}
    return ChaosPool(
        parse_config({"modelRouting": routing}), clock=clock, wall_clock=lambda: WALL + clock.now
    )


def cell(text: str, model: str, column: str, after: str) -> str:
    """The text of a model's row under the header's `column`, up to the header's `after`."""
    header = text.splitlines()[4]
    return rows(text)[model][header.index(column) : header.index(after)].strip()


def limit_cell(text: str, model: str) -> str:
    """The Limit column of a model's row: between the in-flight/capacity cell and the cooldown."""
    return cell(text, model, "Limit", "Cooldown")


BUSY = classify_error(429, b'{"error":{"code":"1302","message":"busy"}}', now=WALL)
assert BUSY is not None


def test_learned_limits_show_next_to_the_catalog_value_with_probing_marks() -> None:
    clock = Clock()
    pool = learning_pool(clock)
    text = panel(pool)
    assert "Learning: on (probe interval 5s, drift 600s)" in text
    assert "Limit" in text.splitlines()[4]
    assert {name: limit_cell(text, name) for name in ("glm-4.7", "glm-4.5")} == {
        "glm-4.7": "3",
        "glm-4.5": "10",
    }
    lower_glm_4_7(pool, BUSY)
    text = panel(pool)
    assert limit_cell(text, "glm-4.7") == "3→2 (1302 at 3 in flight)"
    assert rows(text)["glm-4.7"].split()[3] == "2/2"  # the capacity column: the limit in force
    assert rows(text)["glm-4.7"].rstrip(" │").endswith("-")  # learning: a 1302 is no cooldown
    assert limit_cell(text, "glm-4.6") == "3"
    assert len({len(line) for line in text.splitlines()}) == 1
    clock.now += 10.0
    probe = probe_glm_4_7(pool)
    text = panel(pool)
    assert limit_cell(text, "glm-4.7") == "3→2 (1302 at 3 in flight) probing"
    assert cell(text, "glm-4.7", "Capacity", "Limit") == "2/2 +1 probe"  # never 3/2: the probe apart
    pool.ledger.success(probe)
    assert limit_cell(panel(pool), "glm-4.7") == "3"  # the answered probe took it back to the catalog's


def test_the_account_limit_line() -> None:
    assert "Account limit: none learned" in panel(learning_pool(Clock()))
    assert "Account limit: 20 (configured)" in panel(learning_pool(Clock(), accountConcurrency=20))
    fixed = panel(ChaosPool(config()))
    assert "Learning: off (catalog limits fixed)    Account limit: none" in fixed


def test_an_account_limit_learned_from_1302s() -> None:
    pool = learning_pool(Clock())
    learn_account_limit(pool, BUSY)
    assert "Account limit: 3 (1302 at 4 in flight)" in panel(pool)


def test_a_configured_account_limit_raised_by_a_probe() -> None:
    pool = learning_pool(Clock(), accountConcurrency=2)
    first, second = pool.try_acquire(Ticket("light")), pool.try_acquire(Ticket("light"))
    assert first is not None and second is not None
    assert pool.try_acquire(Ticket("light")) is None  # 2 never ran full with a clean answer: no probe yet
    pool.ledger.success(first)
    pool.ledger.success(second)
    probe = pool.try_acquire(Ticket("light"))
    assert probe is not None and (probe.probe, probe.total) == ("account", 3)
    assert "Account limit: 2 (configured) probing" in panel(pool)
    pool.ledger.success(probe)
    assert "Account limit: 2→3 (probe at 3 answered)" in panel(pool)


@pytest.mark.parametrize(
    ("in_flight", "capacity", "bar"),
    [
        (0, 3, "░░░"),
        (3, 3, "███"),
        (1, 3, "█░░"),
        (1, 100, "█░░░░░░░░░"),  # busy is never drawn as empty
        (50, 100, "█████░░░░░"),
        (120, 100, "██████████"),  # over capacity (after a reload) is drawn full
        (0, 0, "░"),
    ],
)
def test_bars(in_flight: int, capacity: int, bar: str) -> None:
    assert _bar(in_flight, capacity) == bar


def test_utilization_never_passes_100_percent_and_a_probe_is_shown_apart() -> None:
    """Every usable slot held and a probe riding above glm-4.7's limit: 100%, with the probe said apart."""
    clock = Clock()
    pool = learning_pool(clock)
    lower_glm_4_7(pool, BUSY)  # glm-4.7's limit 2, both held
    clock.now += 10.0
    models = served(pool_status.status(pool))["models"]
    held = [pool.acquire(name) for name, m in models.items() for _ in range(m["capacity"] - m["inFlight"])]
    assert all(held)
    probe_glm_4_7(pool)
    status = served(pool_status.status(pool))
    assert (status["inLimits"], status["totalCapacity"], status["aboveLimits"]) == (27, 27, 1)
    assert status["utilization"] == 1.0
    glm = status["models"]["glm-4.7"]
    assert (glm["inFlight"], glm["capacity"], glm["aboveLimit"], glm["probes"]) == (3, 2, 1, 1)
    text = panel(pool)
    assert "Utilization: 100% (27/27 usable slots) +1 above the limits" in text
    assert cell(text, "glm-4.7", "Capacity", "Limit") == "2/2 +1 probe"


def test_an_overdue_attempt_is_shown_apart_from_the_slots_within_the_limit() -> None:
    """glm-4.7 full (3 of 3), the last with no head within its patience: its place went to the next
    request, and the panel says what is above the limit."""
    pool = learning_pool(Clock())
    taken = [pool.acquire("glm-4.7") for _ in range(2)]
    late = pool.try_acquire(Ticket("heavy"))
    while late is not None and late.model != "glm-4.7":
        late = pool.try_acquire(Ticket("heavy"))
    assert late is not None and all(taken)
    assert pool.acquire("glm-4.7") is None
    pool.ledger.overdue(late)
    assert pool.acquire("glm-4.7") is not None  # its place, lent
    glm = served(pool_status.status(pool))["models"]["glm-4.7"]
    assert (glm["inFlight"], glm["capacity"], glm["aboveLimit"], glm["overdue"]) == (4, 3, 1, 1)
    assert cell(panel(pool), "glm-4.7", "Capacity", "Limit") == "3/3 +1 overdue"


def quota_panel(quota: dict[str, Any]) -> str:
    pool = ChaosPool(config(), clock=Clock(), wall_clock=lambda: WALL)
    stats = chaos_stats(served(pool_status.status(pool)), Stats(pool.config))
    return render_panel({**stats, "quota": quota}, WALL)


def quota_line(text: str) -> str:
    return next(line.strip("│ ") for line in text.splitlines() if "Quota" in line)


def test_the_quota_line_says_used_reset_burn_and_forecast() -> None:
    pool = ChaosPool(config(), clock=Clock(), wall_clock=lambda: WALL)
    quota = pool.quota.status()
    assert quota_line(quota_panel(quota)).startswith("Quota (estimate): not known yet (0 prompts counted")
    credits = {**quota, "estimate": {**quota["estimate"], "unit": "credits", "units": 12.5}}
    assert quota_line(quota_panel(credits)).startswith(
        "Quota (estimate): not known yet (12.5 credits counted"
    )
    known = {**quota, "usedPercent": 40.0, "resetsAt": WALL + 3 * 3600, "burnPerHour": 30.0}
    assert quota_line(quota_panel({**known, "runsOutAt": WALL + 7200})) == (
        "Quota (estimate): 40.0% used, resets in 3h00m, 30.0%/h, runs out in 2h00m"
    )
    paced = {**known, "runsOutAt": WALL + 60, "pacing": {"enabled": True, "preferLowerWeight": True,
             "maxConcurrency": 4, "reason": "", "pacedWaits": 7}}  # fmt: skip
    assert quota_line(quota_panel(paced)).endswith("runs out in 1m; paced: at most 4 at once (7 paced waits)")
    lasting = {**known, "runsOutAt": None, "source": "zai", "error": "quota not read: HTTP 500"}
    assert quota_line(quota_panel(lasting)) == (
        "Quota (zai): 40.0% used, resets in 3h00m, 30.0%/h, lasts; quota not read: HTTP 500"
    )


def test_the_quota_line_has_every_window_in_credits_and_what_paces() -> None:
    pool = ChaosPool(config(), clock=Clock(), wall_clock=lambda: WALL)
    quota = pool.quota.status()
    five = {
        "name": "5h",
        "seconds": 18000.0,
        "source": "zai",
        "started": False,
        "usedPercent": 0.0,
        "used": 0.0,
        "cap": 2000.0,
        "left": 2000.0,
        "resetsAt": None,
        "burnPerHour": 0.0,
        "runsOutAt": None,
    }
    week = {**five, "name": "1w", "seconds": 604800.0, "started": True, "usedPercent": 40.0, "used": 4000.0,
            "cap": 10000.0, "left": 6000.0, "resetsAt": WALL + 6 * 86400, "burnPerHour": 1.67,
            "runsOutAt": WALL + 36 * 3600}  # fmt: skip
    pacing = {"enabled": True, "preferLowerWeight": True, "maxConcurrency": 1, "reason": "",
              "pacedWaits": 0, "window": "1w"}  # fmt: skip
    shown = {**quota, "source": "zai", "usedPercent": 0.0, "windows": [five, week], "pacing": pacing}
    assert quota_line(quota_panel(shown)) == (
        "Quota (zai): not started (2000 credits; it starts at first use); 1w: 40.0% used (4000 of 10000"
        " credits), resets in 6d00h, 1.7%/h, runs out in 1d12h; paced by 1w: at most 1 at once"
    )
    held = {**shown, "pacing": {**pacing, "maxConcurrency": 0}}
    assert quota_line(quota_panel(held)).endswith("; paced by 1w: none until back on an even pace")
