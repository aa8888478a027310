"""Where the proxy and its dashboard listen: a warning when the proxy is reachable beyond loopback, and a
second proxy on a taken dashboard port runs on without it, naming the option to change."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy
from .support import Sim, poll, routing, status

pytestmark = pytest.mark.e2e

EXPOSED = "not only loopback: anyone who can reach this machine can send requests through it"


async def test_a_proxy_on_every_interface_warns_at_start_and_on_the_status(
    make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    proxy = await make_proxy(config=routing(), listen_host="0.0.0.0")
    lines = [line for line in proxy.output().splitlines() if EXPOSED in line]
    assert len(lines) == 1 and "listens on 0.0.0.0" in lines[0]
    assert (await status(http, proxy))["exposedListen"] == ["0.0.0.0"]


async def test_a_loopback_proxy_says_nothing_of_it(
    reverse_proxy: ProxyProcess, http: httpx.AsyncClient
) -> None:
    assert EXPOSED not in reverse_proxy.output()
    assert (await status(http, reverse_proxy))["exposedListen"] == []


async def test_a_second_proxy_on_a_taken_dashboard_port_runs_without_it(
    make_proxy: MakeProxy, sim: Sim, http: httpx.AsyncClient
) -> None:
    first = await make_proxy(upstream=sim.base_url, config=routing())
    second = await make_proxy(upstream=sim.base_url, config=routing(), web_port=first.web_port)

    def said(text: str) -> bool:
        return "chaos-mode: dashboard not started" in text

    output = await poll(lambda: asyncio.to_thread(second.output), said, timeout=10)
    expected = f"--set chaos_web=127.0.0.1:{first.web_port + 1}, or --set chaos_web= for none"
    lines = [line for line in output.splitlines() if said(line)]
    assert len(lines) == 1 and lines[0].endswith(expected)
    assert "Traceback" not in output
    # The second proxy still routes: a request through it is served by a GLM model.
    response = await http.post(
        second.url + "/api/anthropic/v1/messages",
        json={"model": "claude-opus-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200
    assert response.json()["model"].startswith("glm-")
    assert second.proc is not None and second.proc.poll() is None
