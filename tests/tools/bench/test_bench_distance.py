"""`python -m chaos_mode_tools.bench.cost.distance`, small: three proxies in front of an HTTPS simulator 20 ms
away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.run import run_module

pytestmark = [pytest.mark.e2e]


def test_the_addon_opens_no_connection_to_zai_per_client_connection(tmp_path: Path) -> None:
    """Counted at the relay, not timed: plain mitmdump opens one connection to z.ai per client connection
    (and uses it); the addon with mitmproxy's eager default opens one too, and uses none; the addon as it runs
    reaches z.ai through the forwarder's kept connections (one more at most for the two sent at once)."""
    out = tmp_path / "distance.json"
    args = ["--rtt-ms", "20", "--rounds", "1", "--fresh", "2", "--burst", "2", "--json", str(out)]
    result = run_module("chaos_mode_tools.bench.cost.distance", *args, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    sides = json.loads(out.read_text(encoding="utf-8"))["sides"]
    assert [side["errors"] for side in sides.values()] == [0, 0, 0]
    per_round = 2 + 2  # fresh, then the burst: a new client connection each
    assert sides["plain"]["connectionsToZai"] == [per_round]
    assert sides["addon-eager"]["connectionsToZai"][0] >= per_round
    assert sides["addon"]["connectionsToZai"][0] <= 1
    assert sides["plain"]["freshRatio"] == 1.0 and sides["addon"]["freshMedianMs"] > 0
