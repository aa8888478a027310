"""The pure parts of the callgrind benchmark: reading the totals, the per-request formula."""

from __future__ import annotations

import pytest

from chaos_mode_tools.bench.cost.instructions import callgrind_total, cost_percent, per_request

SAMPLE = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4242
cmd:  /work/main/.venv/bin/python /work/main/.venv/bin/mitmdump -p 8080
part: 1

positions: line
events: Ir
summary: 3245214524

fl=(1) ???
fn=(1) 0x0000000000001100
0 5
totals: 3245214524
"""


def test_totals_line() -> None:
    assert callgrind_total(SAMPLE) == 3_245_214_524


def test_summary_line_alone() -> None:
    assert callgrind_total("events: Ir\nsummary: 12 7\n") == 12


def test_no_totals() -> None:
    with pytest.raises(ValueError, match="totals"):
        callgrind_total("events: Ir\n")


def test_per_request_cancels_fixed_costs() -> None:
    fixed = 3_000_000_000
    assert per_request((50, fixed + 50 * 9_000_000), (250, fixed + 250 * 9_000_000)) == 9_000_000
    with pytest.raises(ValueError):
        per_request((250, 1), (50, 2))


def test_cost_percent() -> None:
    assert cost_percent(10.0, 11.0) == pytest.approx(10.0)
