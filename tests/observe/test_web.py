"""The addon's HTTP server: the dashboard page, /api/status, /api/events, /metrics, and nothing else."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from chaos_mode.config.schema import parse_config
from chaos_mode.observe.metrics import ChaosMetrics
from chaos_mode.observe.stats import Stats, chaos_stats
from chaos_mode.observe.web import WebServer, dashboard_page, parse_listen
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool
from chaos_mode.routing.pool_status import served
from support.design_catalog import DESIGN_MODELS

SEED_KEYS = {
    "enabled",
    "strategy",
    "modelDistribution",
    "totalCapacity",
    "currentUtilization",
    "avgQueueWait",
}


class Addon:
    """What the addon wires into its WebServer: chaos_stats() and the metrics of a real pool."""

    def __init__(self) -> None:
        config = parse_config({"modelRouting": {"chaosMode": {"enabled": True}, "models": DESIGN_MODELS}})
        self.pool = ChaosPool(config)
        self.stats = Stats(config)
        self.metrics = ChaosMetrics(self.pool, self.stats)
        self.web = WebServer(self.status, self.metrics.render)

    def status(self) -> dict[str, Any]:
        return chaos_stats(served(pool_status.status(self.pool)), self.stats)


@pytest.fixture
async def addon() -> AsyncIterator[Addon]:
    addon = Addon()
    yield addon
    addon.web.stop()


@pytest.fixture
async def client(addon: Addon) -> AsyncIterator[httpx.AsyncClient]:
    host, port = addon.web.start("127.0.0.1", 0)
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=5.0) as client:
        yield client


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# -- routes --------------------------------------------------------------------------------------


async def test_dashboard_page_is_self_contained(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    page = response.text
    assert response.content == dashboard_page()
    assert 'id="conn-state"' in page and "api/status" in page
    # No CDN, no external file: it works offline.
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "<script src" not in page and 'rel="stylesheet"' not in page
    assert "@import" not in page and "url(" not in page
    # Status strings (model names, reasons) reach the page only as text: nothing parses them as HTML.
    assert not re.search(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment", page
    )


async def test_page_csp_allows_exactly_its_inline_script(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    policy = response.headers["content-security-policy"]
    scripts = re.findall(rb"<script>(.*?)</script>", response.content, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0]).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy


async def test_status_json_has_the_seed_keys(addon: Addon, client: httpx.AsyncClient) -> None:
    assert addon.pool.acquire("glm-4.7")
    response = await client.get("/api/status")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    status = response.json()
    assert set(status) >= SEED_KEYS
    assert status == json.loads(json.dumps(addon.status()))
    assert status["modelDistribution"]["glm-4.7"]["inFlight"] == 1
    assert {"dispatched", "inFlight", "capacity"} <= set(status["modelDistribution"]["glm-4.5"])


async def test_metrics_in_prometheus_text_format(addon: Addon, client: httpx.AsyncClient) -> None:
    slot = addon.pool.acquire("glm-4.5")
    assert slot
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert 'chaos_model_in_flight{model="glm-4.5"} 1.0' in response.text.splitlines()
    assert addon.pool.release(slot)
    response = await client.get("/metrics")  # read at scrape time
    assert 'chaos_model_in_flight{model="glm-4.5"} 0.0' in response.text.splitlines()


async def test_events_push_the_status_every_second_until_stop(
    addon: Addon, client: httpx.AsyncClient
) -> None:
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        async with client.stream("GET", "/api/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
                    if len(events) == 1:
                        assert addon.pool.acquire("glm-4.6")
                    if len(events) == 2:
                        addon.web.stop()  # ends the stream: the loop below finishes
    assert len(events) >= 2
    assert set(events[0]) >= SEED_KEYS
    assert events[0]["modelDistribution"]["glm-4.6"]["inFlight"] == 0
    assert events[1]["modelDistribution"]["glm-4.6"]["inFlight"] == 1


NOT_SERVED = (
    "/nope",
    "/api",
    "/api/",
    "/api/status/",
    "/api/status/x",
    "/metrics/",
    "/static/dashboard.html",
    "/dashboard.html",
    "/index.html",
    "/favicon.ico",
    "/../etc/passwd",
    "/%2e%2e/addon.py",
)


async def test_everything_else_is_404(client: httpx.AsyncClient) -> None:
    for path in NOT_SERVED:
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.text == "404 Not Found\n"
    assert (await client.post("/nope", content=b"x")).status_code == 404


async def test_only_get(client: httpx.AsyncClient) -> None:
    for path in ("/", "/api/status", "/metrics", "/api/events"):
        for method in ("POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"):
            response = await client.request(method, path)
            assert response.status_code == 405, (method, path)


LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.1:9464", "localhost:9464", "LOCALHOST", "[::1]:9464", "127.1.2.3")
OTHER_HOSTS = ("evil.example", "evil.example:9464", "127.0.0.1.evil.example", "10.0.0.5:9464", "[::2]:80")


async def test_loopback_server_answers_only_loopback_host_names(client: httpx.AsyncClient) -> None:
    """No DNS rebinding: a page of evil.example that resolves to 127.0.0.1 cannot read the status."""
    for path in ("/", "/api/status", "/metrics", "/api/events?x"):
        for host in OTHER_HOSTS:
            response = await client.get(path, headers={"Host": host})
            assert response.status_code == 403, (path, host)
    for path in ("/", "/api/status", "/metrics"):
        for host in LOOPBACK_HOSTS:
            response = await client.get(path, headers={"Host": host})
            assert response.status_code == 200, (path, host)


async def test_server_bound_elsewhere_takes_any_host_name(addon: Addon) -> None:
    _, port = addon.web.start("0.0.0.0", 0)
    async with httpx.AsyncClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{port}/api/status", headers={"Host": "proxy.lan"})
    assert response.status_code == 200


# -- lifecycle -----------------------------------------------------------------------------------


async def test_start_returns_the_bound_port_and_stop_closes_it(addon: Addon) -> None:
    host, port = addon.web.start("127.0.0.1", 0)
    assert (host, port) == addon.web.address
    assert port > 0 and port_open(port)
    addon.web.stop()
    assert addon.web.address is None
    await asyncio.sleep(0)  # the listening socket closes on the loop
    assert not port_open(port)
    addon.web.stop()  # twice is fine


async def test_restart_after_stop_serves_again(addon: Addon) -> None:
    """The addon restarts its server when chaos_web changes (and a reloaded script starts a new one)."""
    _, first = addon.web.start("127.0.0.1", 0)
    addon.web.stop()
    _, second = addon.web.start("127.0.0.1", 0)
    await asyncio.sleep(0)
    assert not port_open(first)
    async with httpx.AsyncClient(timeout=5.0) as client:
        response = await client.get(f"http://127.0.0.1:{second}/api/status")
    assert response.status_code == 200


async def test_no_keep_alive_so_a_stopped_server_serves_nothing_more(addon: Addon) -> None:
    _, port = addon.web.start("127.0.0.1", 0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5.0) as client:
        response = await client.get("/api/status")
        assert response.headers["connection"] == "close"
        addon.web.stop()
        await asyncio.sleep(0)
        with pytest.raises(httpx.ConnectError):
            await client.get("/api/status")


async def test_port_in_use_is_an_oserror(addon: Addon) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            addon.web.start("127.0.0.1", taken.getsockname()[1])
    assert addon.web.address is None


# -- parse_listen --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        (" localhost:0 ", ("localhost", 0)),
        ("[::1]:9464", ("::1", 9464)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("", None),
        ("  ", None),
    ],
)
def test_parse_listen(value: str, expected: tuple[str, int] | None) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("9464", "expected HOST:PORT"),
        (":9464", "expected HOST:PORT"),
        ("localhost:http", "port must be a number"),
        ("localhost:70000", "port out of range"),
        ("localhost:-1", "port out of range"),
    ],
)
def test_parse_listen_rejects(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_listen(value)
