"""Fixtures of the end-to-end tests: a z.ai simulator and mitmdump processes on free loopback ports.

The shared simulator and the two shared proxies (reverse and regular mode) live for the session; tests
that change the pool's state (cooldowns, models out of rotation) start their own proxy with
`make_proxy`. Every process is stopped at the end, also when a test fails.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from chaos_mode_tools.devtools.certs import TestCerts, make_certs
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings

from .support import Sim, routing

# Small latencies: answers take tens of ms unless a test asks for more with the x-sim-* headers.
SIM_SETTINGS: dict[str, Any] = {
    "latency_ms": 50,
    "token_interval_ms": 10,
    "output_tokens": 5,
    "reject_delay_ms": 200,  # z.ai takes seconds to say 1302; short here to keep the run short
}

MakeProxy = Callable[..., Awaitable[ProxyProcess]]
MakeSim = Callable[..., Awaitable[Sim]]


@pytest.fixture(scope="session")
def sim_process() -> Iterator[SimProcess]:
    """The simulator at the built-in catalog's limits (glm-4.7 3, glm-4.6 3, glm-4.5-x 2, ...)."""
    with SimProcess(SimSettings(**SIM_SETTINGS)) as process:
        yield process


@pytest.fixture(scope="session")
def test_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    """A throwaway CA and the certificate it signed for localhost / 127.0.0.1 (the HTTPS simulator's)."""
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def tls_sim_process(test_certs: TestCerts) -> Iterator[SimProcess]:
    """The simulator over HTTPS (z.ai's TLS), its certificate signed by the test CA."""
    settings = SimSettings(**SIM_SETTINGS, tls_cert=str(test_certs.cert), tls_key=str(test_certs.key))
    with SimProcess(settings) as process:
        yield process


@pytest.fixture
async def tls_sim(tls_sim_process: SimProcess, test_certs: TestCerts) -> AsyncIterator[Sim]:
    """The HTTPS simulator, idle and reset, controlled by a client that trusts the test CA."""
    trusted = ssl.create_default_context(cafile=str(test_certs.ca))
    async with httpx.AsyncClient(trust_env=False, verify=trusted, timeout=httpx.Timeout(10.0)) as client:
        shared = Sim(tls_sim_process, client)
        stats = await shared.wait_idle()
        assert stats["account"]["inFlight"] == 0, "the HTTPS simulator still holds slots from a previous test"
        await shared.reset()
        yield shared


@pytest.fixture(scope="session")
def reverse_proxy(sim_process: SimProcess) -> Iterator[ProxyProcess]:
    """mitmdump in reverse mode in front of the simulator (ANTHROPIC_BASE_URL=proxy.url/api/anthropic)."""
    with ProxyProcess(upstream=sim_process.base_url, config=routing()) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def regular_proxy(sim_process: SimProcess) -> Iterator[ProxyProcess]:
    """mitmdump in regular proxy mode: clients use it as their HTTP proxy and talk to the simulator."""
    with ProxyProcess(config=routing()) as proxy:
        yield proxy


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """A direct client (no proxy) for the simulator's and the addon's control endpoints."""
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0)) as client:
        yield client


@pytest.fixture
async def sim(sim_process: SimProcess, http: httpx.AsyncClient) -> Sim:
    return Sim(sim_process, http)


@pytest.fixture(autouse=True)
async def clean_sim(sim_process: SimProcess, http: httpx.AsyncClient) -> None:
    """Every test starts on an idle simulator with zeroed counters, peaks and no queued faults."""
    shared = Sim(sim_process, http)
    stats = await shared.wait_idle()
    assert stats["account"]["inFlight"] == 0, "the shared simulator still holds slots from a previous test"
    await shared.reset()


@pytest.fixture
async def make_proxy() -> AsyncIterator[MakeProxy]:
    """Start a dedicated mitmdump (`ProxyProcess` arguments); all are stopped after the test."""
    started: list[ProxyProcess] = []

    async def factory(**kwargs: Any) -> ProxyProcess:
        proxy = ProxyProcess(**kwargs)
        started.append(proxy)
        await asyncio.to_thread(proxy.start)
        return proxy

    try:
        yield factory
    finally:
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in started))


@pytest.fixture
async def make_sim(http: httpx.AsyncClient) -> AsyncIterator[MakeSim]:
    """Start a dedicated simulator (`SimSettings` fields over the shared defaults); stopped after the test."""
    started: list[SimProcess] = []

    async def factory(**overrides: Any) -> Sim:
        process = SimProcess(SimSettings(**{**SIM_SETTINGS, **overrides}))
        started.append(process)
        await asyncio.to_thread(process.start)
        return Sim(process, http)

    try:
        yield factory
    finally:
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in started))
