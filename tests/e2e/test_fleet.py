"""Two real proxies sharing one simulator account through a real Redis: no over-admission (issue 11)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos_mode_tools.bench.fleet.run import (
    FleetSpec,
    kill_one,
    measure,
    restart_redis,
    start_fleet,
    stop_fleet,
)
from chaos_mode_tools.devtools.processes import ProxyProcess, RedisProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings
from support.redis_support import require_redis_server

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


SHORT = FleetSpec(agents=24, requests=4, latency_ms=150, output_tokens=4, token_interval_ms=20, lease_ms=1500)
SHORT_SIM = SimSettings(latency_ms=150, token_interval_ms=20, output_tokens=4)


async def test_a_proxy_killed_with_sigkill_gives_its_slots_back_within_the_lease() -> None:
    require_redis_server()
    with SimProcess(SHORT_SIM) as sim, RedisProcess() as redis:
        figures = await kill_one(sim, redis.url, 3, SHORT.workload(), SHORT, after=0.6)
    assert figures["leasesHeldWhenKilled"] > 0  # it held slots when it died
    back = figures["slotsBackSeconds"]
    assert back is not None and back <= 1.5 + 0.5 + 0.3  # the TTL, a renewal of a survivor, polling
    assert figures["survivorRequests"] == 16 * 4 and figures["survivorFailed"] == 0
    assert figures["overCaps"] == {}


async def test_redis_stopped_and_restarted_mid_run_fails_no_request_and_the_counts_come_back() -> None:
    require_redis_server()
    with SimProcess(SHORT_SIM) as sim, RedisProcess() as redis:
        figures, again = await restart_redis(sim, redis, 2, SHORT.workload(), SHORT, after=0.4, down=0.6)
        again.stop()
    assert figures["requests"] == 24 * 4 and figures["failed"] == 0
    assert all(outages >= 1 for outages in figures["outages"])  # both proxies saw it go
    joined = figures["joinedSeconds"]  # every proxy had written its leases again and counted on Redis
    assert joined is not None and joined <= 1.5  # within one lease TTL of its return
    # And Redis's count equals the slots the proxies hold, checked at an instant when none is on its way in
    # or out: under this traffic 1.5-2 s after Redis's return on a quiet machine, up to 7 s on a loaded one
    # (the check reads each proxy's status), so only "it comes back" is asserted (within 3 TTLs + 5 s).
    assert figures["countsRightSeconds"] is not None
    assert figures["upstream429"] == 0 and figures["overCaps"] == {}


async def test_the_fleet_in_each_proxys_metrics() -> None:
    """Two real proxies on one Redis: each one's /metrics says it is connected and counts two proxies;
    Redis stopped, each says it serves alone and counts the outage."""
    require_redis_server()
    with SimProcess(SHORT_SIM) as sim, RedisProcess() as redis:
        proxies = await start_fleet(sim, redis.url, 2, SHORT.lease_ms)
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=5) as http:

                async def figures(proxy: ProxyProcess) -> dict[str, float]:
                    text = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
                    return {
                        sample.name: sample.value
                        for family in text_string_to_metric_families(text)
                        if family.name.startswith("chaos_fleet_")
                        for sample in family.samples
                    }

                async with asyncio.timeout(5):  # each counts the other from its next renewal on
                    while any([(await figures(p))["chaos_fleet_proxies"] < 2 for p in proxies]):
                        await asyncio.sleep(0.05)
                for proxy in proxies:
                    seen = await figures(proxy)
                    assert seen["chaos_fleet_connected"] == 1 and seen["chaos_fleet_proxies"] == 2, seen
                    assert seen["chaos_fleet_outages_total"] == 0, seen
                await asyncio.to_thread(redis.stop)
                async with asyncio.timeout(5):
                    while any([(await figures(p))["chaos_fleet_connected"] for p in proxies]):
                        await asyncio.sleep(0.05)
                for proxy in proxies:
                    seen = await figures(proxy)
                    assert seen["chaos_fleet_outages_total"] == 1 and seen["chaos_fleet_proxies"] == 0, seen
        finally:
            await stop_fleet(proxies)
