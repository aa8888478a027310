"""Fixtures of the simulator's tests: simulators on free loopback ports, a client, and no trouble logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from chaos_mode_tools.sim import SimServer, SimSettings
from support.sim_client import FAST, TIMEOUT, MakeSim


@pytest.fixture(autouse=True)
def no_logged_trouble(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A disconnect, a 429 or a shutdown must never make tornado, asyncio or the sim log a warning."""
    yield
    bad = [
        r
        for r in caplog.records
        if r.name.startswith(("tornado", "asyncio", "chaos_mode_tools.sim")) and r.levelno >= logging.WARNING
    ]
    assert not bad, [r.getMessage() for r in bad]


@pytest.fixture
async def make_sim() -> AsyncIterator[MakeSim]:
    servers: list[SimServer] = []

    async def factory(**overrides: Any) -> SimServer:
        server = SimServer(SimSettings(**{**FAST, **overrides}))
        await server.start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        async with asyncio.timeout(10):
            await server.stop()


@pytest.fixture
async def sim(make_sim: MakeSim) -> SimServer:
    return await make_sim()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=TIMEOUT, verify=False) as client:
        yield client
