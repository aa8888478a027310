"""The text panel of the `chaos.status` command (chaos_mode.panel), rendered from real pool state."""

from __future__ import annotations

from typing import Any

import pytest

from chaos_mode.config import ModelRouting, parse_config
from chaos_mode.panel import _bar, render_panel
from chaos_mode.pool import ChaosPool
from chaos_mode.stats import Stats, chaos_stats
from chaos_mode.zai_errors import classify_error
from seed_catalog import FIXED_LIMITS

WALL = 1_757_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def config(**routing: Any) -> ModelRouting:
    return parse_config({"modelRouting": {"chaosMode": {"enabled": True}, **FIXED_LIMITS, **routing}})


def panel(pool: ChaosPool) -> str:
    return render_panel(chaos_stats(pool.get_status(), Stats(pool.config)))


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
    assert "Strategy: least-loaded    Utilization: 0% (0/28)" in text
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
    assert "Utilization: 14% (4/28)" in text


def test_cooldowns_out_of_rotation_and_account_pause_are_shown() -> None:
    clock = Clock()
    pool = ChaosPool(config(), clock=clock, wall_clock=lambda: WALL)
    busy = classify_error(429, b'{"error":{"code":"1302","message":"busy"}}', now=WALL)
    refused = classify_error(429, b'{"type":"error","error":{"type":"1113","message":"no"}}', now=WALL)
    fair_use = classify_error(429, b'{"error":{"code":"1313","message":"[1313]"}}', now=WALL)
    assert busy and refused and fair_use
    pool.report_error("glm-4.6", busy, 8.0)
    pool.report_error("glm-4.5-x", refused)
    text = panel(pool)
    row = rows(text)
    assert row["glm-4.6"].rstrip(" │").endswith("1302 (8.0s)")
    assert "out: no balance or model not in plan (1113)" in row["glm-4.5-x"]
    assert row["glm-4.7"].rstrip(" │").endswith("-")
    assert "Account paused" not in text
    clock.now += 1.5
    assert rows(panel(pool))["glm-4.6"].rstrip(" │").endswith("1302 (6.5s)")
    pool.report_error("glm-4.7", fair_use, 30.0)
    assert "Account paused 30s: fair-use throttle (1313)" in panel(pool)


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
