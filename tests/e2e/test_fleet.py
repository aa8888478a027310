"""Two real proxies sharing one simulator account through a real Redis: no over-admission (issue 11)."""

from __future__ import annotations

import pytest

from chaos_mode.bench.fleet import FleetSpec, measure
from chaos_mode.child import RedisProcess
from chaos_mode.sim import SimProcess, SimSettings
from redis_support import require_redis_server

pytestmark = pytest.mark.e2e


async def test_two_proxies_on_one_account_never_over_admit() -> None:
    require_redis_server()
    spec = FleetSpec(agents=40, requests=2, latency_ms=150, output_tokens=4, token_interval_ms=20)
    settings = SimSettings(latency_ms=150, token_interval_ms=20, output_tokens=4)
    with SimProcess(settings) as sim, RedisProcess() as redis:
        figures = await measure(sim, redis.url, 2, spec.workload(), spec, bound=1.0)
    assert figures["failed"] == 0 and figures["requests"] == 80
    assert figures["upstream429"] == 0 and figures["client429"] == 0
    assert figures["overCaps"] == {} and figures["accountPeak"] <= 28
