"""One failover followed through the real rig: mitmproxy's master in-process with its default addons, the
flow list mitmweb shows (`mitmproxy.addons.view`) and the addon; slots shared through a real Redis; the
simulator refusing the first attempt with a 1302. Which folders call which (`support.journey`), measured
where the proxy runs, and every call up the layers (`test_lint.LAYERS`) named with what carries it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mitmproxy import addons, master, options
from mitmproxy.addons.view import View

from chaos_mode.mitm.addon import META, ChaosMode
from chaos_mode_tools.sim import Fault, SimServer, SimSettings
from support.design_catalog import DESIGN_MODELS
from support.journey import followed
from support.redis_support import RedisProcess, redis_process
from test_lint import LAYERS

FAST: dict[str, Any] = {"latency_ms": 5, "token_interval_ms": 1, "output_tokens": 4, "reject_delay_ms": 0}
MESSAGE = {
    "model": "claude-opus-4-5",
    "max_tokens": 64,
    "stream": True,
    "messages": [{"role": "user", "content": "hi"}],
}
WAIT = 5.0

# The calls up the layers, each through an interface the lower folder defines and the upper one fills in.
CALLBACKS = {
    # The flow's face in mitmweb (`mitm.flow_view.FlowView`, a `request.routed.RequestView`): told of each
    # change of the routed request, and that the forwarder took it.
    ("request", "mitm"): "RequestView",
    ("forwarding", "mitm"): "RequestView",
    # The forwarder's learned head patience, asked as a hedged attempt waits (`request.hedging.Patience`).
    ("request", "forwarding"): "Patience",
    # With a fleet, the pool's slots and cooldowns are the fleet's (`routing.slots.SlotStore`,
    # `routing.cooldowns.CooldownState`); they call down into the pool again (its queue, its cooldowns).
    ("routing", "fleet"): "SlotStore, CooldownState",
}


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisProcess]:
    yield from redis_process()


@dataclass
class Rig:
    view: View
    sim: SimServer
    proxy: str  # the proxy's URL (reverse mode to the simulator)


@pytest.fixture
async def rig(tmp_path: Path, redis: RedisProcess) -> AsyncIterator[Rig]:
    sim = SimServer(SimSettings(**FAST))
    await sim.start()
    config = tmp_path / "chaos.json"
    routing = {"chaosMode": {"enabled": True}, "upstreamHosts": ["127.0.0.1"], "models": DESIGN_MODELS}
    config.write_text(json.dumps({"modelRouting": routing}), encoding="utf-8")
    proxy = master.Master(options.Options())
    view, addon = View(), ChaosMode()
    proxy.addons.add(*addons.default_addons(), view, addon)
    proxy.options.update(
        mode=[f"reverse:http://127.0.0.1:{sim.port}"],
        listen_host="127.0.0.1",
        listen_port=0,
        chaos_config=str(config),
        chaos_web="",
        chaos_limits_file="off",
        chaos_state=redis.url,
    )
    running = asyncio.create_task(proxy.run())
    try:
        server = proxy.addons.get("proxyserver")
        async with asyncio.timeout(WAIT):
            while not server.listen_addrs() or addon.fleet is None or not addon.fleet.up:
                await asyncio.sleep(0.01)
        host, port = server.listen_addrs()[0][:2]
        yield Rig(view, sim, f"http://{host}:{port}")
    finally:
        proxy.shutdown()
        async with asyncio.timeout(WAIT):
            await running
        await sim.stop(timeout=2.0)


async def test_one_failover_through_mitmproxy_and_a_fleet_calls_up_only_through_its_callbacks(
    rig: Rig,
) -> None:
    """The proxy's hook hands the request to the routed request and the forwarder, which fail it over
    through the pool (and its fleet); the facts answer and call nothing; every call up the layers is one of
    `CALLBACKS`, and each of them is seen."""
    rig.sim.add_fault(Fault(model="*", code="1302", count=1, retry_after=9))
    async with httpx.AsyncClient(timeout=WAIT) as client, asyncio.timeout(WAIT):
        with followed() as journey:
            response = await client.post(
                f"{rig.proxy}/api/anthropic/v1/messages",
                json=MESSAGE,
                headers={"x-api-key": "sk-ant-api03-JourneyTestKey0123456789"},
            )
    assert response.status_code == 200
    (flow,) = rig.view  # mitmweb's list shows the one flow, failed over
    assert flow.metadata[META]["failovers"] == 1 and "(1302)" in flow.comment
    assert journey.threads == {threading.current_thread().name}  # all of it on the event loop's thread
    assert ("mitm", "forwarding") in journey.calls()  # the flow pointed at the forwarder
    assert ("forwarding", "request", "routing", "learning") in journey.chains  # the failover's path
    assert journey.facts_calling_on() == set()
    assert journey.handing_on() == {"mitm", "forwarding", "request", "routing", "fleet"}
    upward = {
        (caller, callee)
        for caller, callee in journey.calls()
        if caller in LAYERS and callee in LAYERS and LAYERS.index(callee) < LAYERS.index(caller)
    }
    assert upward == set(CALLBACKS)
