"""Connections end to end: regular proxy mode over HTTPS (CONNECT), and an upstream that goes away."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings

from .conftest import SIM_SETTINGS
from .support import (
    CLIENT_TIMEOUT,
    FLOOR,
    HAIKU,
    OPUS,
    SONNET,
    Result,
    Sim,
    httpx_stream,
    outcome_delta,
    poll,
    routing,
    sdk_stream,
    sim_headers,
    status,
    trust,
    wait_status_idle,
)
from .swarm import Planned, run_swarm, swarm_plan

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

TEST_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def tls_front(sim_process: SimProcess) -> Iterator[ProxyProcess]:
    """z.ai over HTTPS: a plain mitmdump in reverse mode terminates TLS in front of the simulator
    (streaming every body: plain mitmdump buffers SSE whole)."""
    front = ProxyProcess(
        upstream=sim_process.base_url, addon=False, extra_args=["--set", "stream_large_bodies=1"]
    )
    with front:
        yield front


@pytest.fixture(scope="module")
def tls_proxy(sim_process: SimProcess) -> Iterator[ProxyProcess]:
    """The addon in regular mode, intercepting TLS with its own CA (in its own confdir)."""
    # The front's certificate is signed by another mitmproxy CA: like ssl_insecure for a test upstream.
    proxy = ProxyProcess(config=routing(), own_ca=True, extra_args=["--set", "ssl_insecure=true"])
    with proxy:
        yield proxy


async def test_https_connect_swarm(
    tls_front: ProxyProcess, tls_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient
) -> None:
    """HTTPS_PROXY=<proxy>: the SDK tunnels with CONNECT, the addon routes inside TLS."""
    client = anthropic.AsyncAnthropic(
        base_url=f"https://127.0.0.1:{tls_front.port}/api/anthropic",
        api_key="sk-test-https",
        max_retries=0,
        timeout=CLIENT_TIMEOUT,
        http_client=anthropic.DefaultAsyncHttpxClient(
            proxy=tls_proxy.url, verify=trust(tls_proxy), trust_env=False
        ),
    )

    async def send(p: Planned) -> Result:
        return await sdk_stream(client, p.model, headers=p.headers, abort_after_first=p.abort)

    async with client:
        # One request first: the proxy makes its certificate for 127.0.0.1 once, not under the swarm.
        warm = await sdk_stream(client, HAIKU, headers={})
        assert warm.status == 200 and warm.complete, warm
        await sim.wait_idle()
        await sim.reset()
        # 60 TLS handshakes (two proxies) keep two cores busy for a while: the first tokens come after
        # that storm, so it cannot hold back the first deltas and squeeze the streams' timing.
        await run_swarm(swarm_plan(30, first_token_ms=1000), send, sim, http, tls_proxy)


async def test_https_failover_streams_over_tls(
    tls_front: ProxyProcess, tls_proxy: ProxyProcess, sim: Sim, http: httpx.AsyncClient
) -> None:
    """A 1302 inside the tunnel: the forwarder sends the request again, over TLS, to another model, and
    the answer streams."""
    await sim.add_faults({"model": "*", "code": "1302"})
    url = f"https://127.0.0.1:{tls_front.port}/api/anthropic/v1/messages"
    before = await status(http, tls_proxy)
    async with (
        httpx.AsyncClient(
            proxy=tls_proxy.url, verify=trust(tls_proxy), trust_env=False, timeout=CLIENT_TIMEOUT
        ) as c,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        result = await httpx_stream(
            c, url, SONNET, headers=sim_headers(latency_ms=20, tokens=10, interval_ms=40)
        )
    assert result.status == 200 and result.complete, result
    assert len(result.deltas) == 10 and result.delta_span > 0.15, result.deltas  # streamed, not whole
    assert result.served in FLOOR[SONNET], result
    rejected = await sim.rejections()
    assert sum(codes.get("1302", 0) for codes in rejected.values()) == 1, rejected
    assert result.served not in rejected
    after = await wait_status_idle(http, tls_proxy)
    assert after["failovers"] - before["failovers"] == 1
    assert outcome_delta(before, after)["ok"] == 1


@dataclass
class UpstreamGone:
    streams: int
    refused_count: int
    cut: list[Result]
    refused: list[Result]
    after_cut: dict[str, Any]
    after_refused: dict[str, Any]
    moved: dict[str, int]


async def upstream_gone_scenario() -> UpstreamGone:
    """12 streams flowing when the upstream stops (closing them all), then 6 requests it refuses."""
    with SimProcess(SimSettings(**SIM_SETTINGS)) as lonely:
        # Lazy: connect upstream per request, so requests reach the addon before the refusal (the
        # default, eager, drops the client connection itself in reverse mode, before any hook runs).
        lazy = ["--set", "connection_strategy=lazy"]
        with ProxyProcess(upstream=lonely.base_url, config=routing(), extra_args=lazy) as proxy:
            url = proxy.url + "/api/anthropic/v1/messages"
            long = sim_headers(latency_ms=20, tokens=200, interval_ms=20)  # 4 s streams
            models = [OPUS, SONNET, HAIKU] * 4
            async with (
                httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
                asyncio.timeout(TEST_TIMEOUT),
            ):
                before = await status(client, proxy)
                streams = [asyncio.create_task(httpx_stream(client, url, m, headers=long)) for m in models]
                flowing = await poll(
                    lambda: status(client, proxy), lambda d: d["usedCapacity"] == len(models), 5.0
                )
                assert flowing["usedCapacity"] == len(models), flowing
                await asyncio.sleep(0.2)  # the streams are flowing
                await asyncio.to_thread(lonely.stop)
                cut = list(await asyncio.gather(*streams))
                after_cut = await wait_status_idle(client, proxy)
                # With the upstream gone, each attempt is refused: after the failovers, our 429.
                refused = list(
                    await asyncio.gather(*(httpx_stream(client, url, m, headers={}) for m in models[:6]))
                )
                after_refused = await wait_status_idle(client, proxy)
    return UpstreamGone(
        len(models),
        len(refused),
        cut,
        refused,
        after_cut,
        after_refused,
        outcome_delta(before, after_refused),
    )


@pytest.fixture(scope="module")
def upstream_gone() -> UpstreamGone:
    """Run once (its own simulator and proxy), looked at by the two tests below."""
    return asyncio.run(upstream_gone_scenario())


def test_upstream_gone_mid_stream_releases_every_slot(upstream_gone: UpstreamGone) -> None:
    """The upstream closes every stream (it stops), then refuses connections: no slot is kept."""
    gone = upstream_gone
    assert all(r.status == 200 and not r.complete and r.deltas for r in gone.cut), gone.cut
    assert gone.after_cut["usedCapacity"] == 0, gone.after_cut
    assert all(r.status == 429 and "not reached" in r.body["error"]["message"] for r in gone.refused), (
        gone.refused
    )
    assert gone.after_refused["usedCapacity"] == 0, gone.after_refused
    assert sum(gone.moved.values()) == gone.streams + gone.refused_count, gone.moved
    assert gone.moved["ok"] == 0, gone.moved


def test_upstream_failures_are_not_counted_as_client_aborts(upstream_gone: UpstreamGone) -> None:
    """No client left: /api/status should say error (cut streams) and rejected (our 429s for requests z.ai
    never took), not aborted (aborted = the client went away)."""
    assert upstream_gone.moved["aborted"] == 0, upstream_gone.moved
    assert upstream_gone.moved["error"] == upstream_gone.streams, upstream_gone.moved
    assert upstream_gone.moved["rejected"] == upstream_gone.refused_count, upstream_gone.moved
