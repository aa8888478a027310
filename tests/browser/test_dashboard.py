"""The live dashboard in headless Chromium while the simulator and a real mitmdump carry a swarm.

Chromium is Debian's (`/usr/bin/chromium`, or $CHAOS_CHROMIUM; driven by Playwright, nothing
downloaded). Without it the test is skipped, unless the environment variable CI is set: then it fails.
Screenshots go to artifacts/; with CHAOS_UPDATE_SCREENSHOT=1 the README's copy is refreshed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess, RedisProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim import SimSettings, default_limits
from support.design_catalog import CAPS, DESIGN_MODELS, TIERS
from support.redis_support import require_redis_server

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("CHAOS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
SCREENSHOT = ARTIFACTS / "dashboard.png"
SCREENSHOT_DOWN = ARTIFACTS / "dashboard-down.png"
README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
TEST_BUDGET = 150.0  # seconds for the whole test, processes included
WAIT_MS = 10_000  # one expectation on the page

# Each answer streams for about two seconds: long enough to see, short enough to keep the test quick.
# z.ai's true limits differ from the catalog's: glm-4.6 takes 2 at once (the catalog says 3), so the swarm
# meets 1302s there (more than one: one alone may be chance) and the pool learns a lower limit; glm-4.5-x
# takes 3 (the catalog says 2), so a probe above its limit is answered.
TRUE_LIMITS = {**default_limits(), "glm-4.6": 2, "glm-4.5-x": 3}
SIM = SimSettings(
    latency_ms=1500, token_interval_ms=50, output_tokens=10, reject_delay_ms=200, limits=TRUE_LIMITS
)
# The simulator serves the design's (early-2026) catalog: so does the proxy.
PROXY_CONFIG: dict[str, object] = {
    "chaosMode": {"enabled": True},
    "upstreamHosts": ["127.0.0.1"],
    "models": DESIGN_MODELS,
}
TIER_MODELS = {"heavy": "claude-opus-4-1", "medium": "claude-sonnet-4-5", "light": "claude-haiku-4-5"}
CHAT_MODELS = {"heavy": "glm-4.7", "medium": "glm-4.5", "light": "glm-4.5-flash"}  # the OpenAI door's
MESSAGES = [{"role": "user", "content": "dashboard test"}]
SWARM = ["heavy"] * 9 + ["medium"] * 6 + ["light"] * 5  # 20; heavy: 5 slots while glm-4.7 cools
# Every second request of the swarm comes through the OpenAI door: one pool, both doors counted apart.
DOORS_SHOWN = """([anthropic, openai]) => document.getElementById('door-anthropic').textContent === anthropic
    && document.getElementById('door-openai').textContent === openai"""


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium; skip without it, but fail when CI is set."""
    if Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    why = f"{CHROMIUM} not found: install Debian's chromium package (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(why + " — required when CI is set", pytrace=False)
    pytest.skip(why)


try:
    from playwright.async_api import Page, async_playwright
except ImportError:  # pragma: no cover - playwright is a test dependency
    if os.environ.get("CI"):
        raise
    pytest.skip("playwright is not installed", allow_module_level=True)


@pytest.fixture
async def sim() -> AsyncIterator[SimProcess]:
    async with SimProcess(SIM) as sim:
        yield sim


@pytest.fixture
async def proxy(sim: SimProcess) -> AsyncIterator[ProxyProcess]:
    proxy = ProxyProcess(upstream=sim.base_url, config=PROXY_CONFIG, start_timeout=30.0)
    async with proxy:
        yield proxy


async def _stream(client: httpx.AsyncClient, proxy: ProxyProcess, tier: str, *, chat: bool = False) -> int:
    """One streamed request through the proxy, read to the end; its status. Anthropic messages, or with
    `chat` OpenAI chat completions (the other door)."""
    if chat:
        path, model, headers = (
            "/api/paas/v4/chat/completions",
            CHAT_MODELS[tier],
            {"authorization": "Bearer test-key"},
        )
    else:
        path, model = "/api/anthropic/v1/messages", TIER_MODELS[tier]
        headers = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
    body = {
        "model": model,
        "max_tokens": 256,
        "stream": True,
        "messages": [{"role": "user", "content": f"dashboard test, {tier} request"}],
    }
    async with client.stream("POST", proxy.url + path, json=body, headers=headers) as r:
        async for _ in r.aiter_bytes():
            pass
        return r.status_code


async def _rows(page: Page) -> dict[str, dict[str, Any]]:
    """Each model row's hooks: state, in-flight, capacity, cooldown, lit bar segments, texts; its limit
    (learned, catalog, probing, why) as data and as the Limit cell shows it."""
    rows: dict[str, dict[str, Any]] = await page.eval_on_selector_all(
        "tr[data-model]",
        """rows => Object.fromEntries(rows.map(r => [r.dataset.model, {
            tier: r.dataset.tier, state: r.dataset.state, inflight: +r.dataset.inflight,
            capacity: +r.dataset.capacity, cooldown: +r.dataset.cooldown, out: r.dataset.out,
            lit: r.querySelectorAll('.bar > i.on').length, text: r.innerText,
            segments: r.querySelectorAll('.bar > i').length, cut: r.querySelectorAll('.bar > i.cut').length,
            learned: +r.dataset.learned, catalog: +r.dataset.catalog, probing: r.dataset.probing === 'true',
            reason: r.dataset.limitReason, changedAt: r.dataset.limitChangedAt,
            limit: r.querySelector('td.limit .lv').innerText,
            shownCatalog: r.querySelector('td.limit .cat').checkVisibility()
                ? r.querySelector('td.limit .cat').innerText : null,
            shownProbing: r.querySelector('td.limit .probing').checkVisibility(),
            why: r.querySelector('td.limit .lwhy').checkVisibility()
                ? r.querySelector('td.limit .lwhy').innerText : null}]))""",
    )
    return rows


SOME_IN_FLIGHT = """() => [...document.querySelectorAll('tr[data-model]')]
    .some(r => +r.dataset.inflight > 0 && r.querySelectorAll('.bar > i.on').length > 0)"""
BUSY_SWARM = """() => {
    const used = +document.getElementById('used').textContent;
    const waiting = +document.getElementById('queue-waiting').textContent;
    return used >= 15 && waiting >= 1;
}"""
ALL_IDLE = """() => {
    const rows = [...document.querySelectorAll('tr[data-model]')];
    return rows.length > 0 && rows.every(r => r.dataset.inflight === '0'
        && r.querySelectorAll('.bar > i.on').length === 0);
}"""
ONE_FAILOVER = """() => document.getElementById('failover-count').textContent === '1'
    && document.querySelectorAll('#failovers li').length === 1"""
LOWERED = """model => {
    const r = document.querySelector(`tr[data-model="${model}"]`);
    return r && r.dataset.learned !== '' && +r.dataset.learned < +r.dataset.catalog;
}"""
BUSY_AND_LOWERED = f"""model => ({BUSY_SWARM})() && ({LOWERED})(model)"""
COOLING = """model => {
    const r = document.querySelector(`tr[data-model="${model}"]`);
    return r && r.dataset.state === 'cooling' && +r.dataset.cooldown > 0;
}"""


def _assert_lowered(row: dict[str, Any]) -> None:
    """A learned limit below the catalog's, shown as `catalog → learned` with why and when."""
    assert row["learned"] < row["catalog"] == 3
    assert row["capacity"] == row["learned"]  # the slots column counts against the limit in force
    assert (row["shownCatalog"], row["limit"]) == ("3", str(row["learned"]))
    refused = re.fullmatch(r"1302 at (\d+) in flight", row["reason"])
    assert refused, row["reason"]
    assert row["learned"] == int(refused[1]) - 1  # what z.ai refused, less one
    assert row["why"] is not None and row["why"].startswith(row["reason"] + " · "), row["why"]
    assert row["why"].endswith(("just now", " s ago")), row["why"]
    assert time.time() - 60 < float(row["changedAt"]) <= time.time() + 1


async def test_dashboard_follows_a_swarm(chromium: str, sim: SimProcess, proxy: ProxyProcess) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    web = f"http://127.0.0.1:{proxy.web_port}/"
    async with asyncio.timeout(TEST_BUDGET), async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            context = await browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="dark")
            page = await context.new_page()
            page.set_default_timeout(WAIT_MS)
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            await page.goto(web)

            # The rows appear: every model of the catalog, grouped by tier, live.
            await page.wait_for_selector("#conn-state[data-state='live']")
            await page.wait_for_function("() => document.querySelectorAll('tr[data-model]').length === 8")
            rows = await _rows(page)
            assert list(rows) == list(DESIGN_MODELS)
            for name, capacity in CAPS.items():
                assert rows[name]["tier"] == TIERS[name]
                assert rows[name]["capacity"] == capacity
                assert (rows[name]["state"], rows[name]["inflight"], rows[name]["lit"]) == ("free", 0, 0)
            tiers = await page.eval_on_selector_all("tr.tier", "rows => rows.map(r => r.dataset.tier)")
            assert tiers == ["HEAVY", "MEDIUM", "LIGHT"]
            assert await page.text_content("#chaos-enabled") == "chaos ON"
            assert await page.is_hidden("#exposed-banner")  # the proxy listens on loopback only
            assert await page.text_content("#strategy") == "least-loaded"
            # Learned limits: on, every limit still the catalog's, no account limit known yet.
            assert await page.text_content("#learning") == "learning ON"
            assert await page.text_content("#account-limit") == "none learned"
            assert await page.text_content("#account-configured") == "configured none"
            for name, row in rows.items():
                assert (row["learned"], row["catalog"]) == (row["capacity"], row["capacity"]), name
                assert (row["limit"], row["shownCatalog"], row["why"]) == (str(row["capacity"]), None, None)
                assert (row["reason"], row["changedAt"], row["probing"]) == ("catalog", "", False), name
                assert row["cut"] == 0, name

            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
                # A 1312 (overloaded) on glm-4.7: three heavy requests at once reach each heavy model once;
                # the one on glm-4.7 fails over and the model cools down for the Retry-After. (A 1302
                # would lower its learned limit instead: that comes with the swarm.)
                fault = {"model": "glm-4.7", "code": "1312", "count": 1, "retryAfter": 30}
                (await client.post(sim.base_url + "/sim/faults", json=fault)).raise_for_status()
                heavy = await asyncio.gather(*(_stream(client, proxy, "heavy") for _ in range(3)))
                assert heavy == [200, 200, 200]
                await page.wait_for_function(COOLING, arg="glm-4.7")
                first = (await _rows(page))["glm-4.7"]
                assert 0 < first["cooldown"] <= 30
                assert "cooling" in first["text"] and "1312" in first["text"]
                await page.wait_for_timeout(1500)
                later = (await _rows(page))["glm-4.7"]
                assert later["state"] == "cooling"
                assert later["cooldown"] < first["cooldown"]  # it counts down
                await page.wait_for_function(ONE_FAILOVER)
                assert "glm-4.7 →" in (await page.text_content("#failovers li") or "")

                # The swarm: bars fill while it runs (one heavy request even waits) and empty after.
                started = time.monotonic()
                swarm = asyncio.gather(
                    *(_stream(client, proxy, tier, chat=i % 2 == 1) for i, tier in enumerate(SWARM))
                )
                try:
                    await page.wait_for_function(SOME_IN_FLIGHT)
                    # Busy, and glm-4.6's 1302 has lowered its learned limit below the catalog's.
                    await page.wait_for_function(BUSY_AND_LOWERED, arg="glm-4.6")
                    await page.screenshot(path=str(SCREENSHOT), full_page=True)
                    during = await _rows(page)
                finally:
                    statuses = await swarm
                assert statuses == [200] * len(SWARM)
                assert time.monotonic() - started < 30
            assert sum(row["inflight"] for row in during.values()) >= 15
            for name, row in during.items():
                # A segment per slot of the catalog or the limit, and per request in flight above both.
                assert row["segments"] == max(row["capacity"], row["catalog"], row["inflight"], 1), name
                assert row["cut"] == row["segments"] - row["capacity"], name  # above the limit: hatched
                assert row["lit"] == row["inflight"], name
                # A probe goes one above the limit; a lowered limit leaves those in flight to finish.
                assert row["inflight"] <= max(row["capacity"] + 1, row["catalog"]), name
            assert during["glm-4.7"]["inflight"] == 0  # cooling: skipped
            _assert_lowered(during["glm-4.6"])
            await page.wait_for_function(ALL_IDLE)
            assert await page.text_content("#used") == "0"
            # Requests by door: the three heavy ones and half the swarm as messages, half as chat.
            await page.wait_for_function(DOORS_SHOWN, arg=[str(3 + len(SWARM) // 2), str(len(SWARM) // 2)])
            assert problems == [], problems  # no script error, no CSP violation

            # The proxy stops: the page says so.
            await asyncio.to_thread(proxy.stop)
            await page.wait_for_selector("#conn-state[data-state='down']")
            assert "not answering" in (await page.text_content("#conn-state") or "")
            await page.screenshot(path=str(SCREENSHOT_DOWN))
            if os.environ.get("CHAOS_UPDATE_SCREENSHOT"):
                shutil.copyfile(SCREENSHOT, README_SCREENSHOT)
        finally:
            await browser.close()


@contextlib.asynccontextmanager
async def dashboard_of(chromium: str, **proxy_args: Any) -> AsyncIterator[Page]:
    """The dashboard page of a fresh proxy (`ProxyProcess` arguments), loaded in Chromium."""
    async with ProxyProcess(start_timeout=30.0, **proxy_args) as proxy, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page()
            page.set_default_timeout(WAIT_MS)
            await page.goto(f"http://127.0.0.1:{proxy.web_port}/")
            yield page
        finally:
            await browser.close()


async def test_dashboard_warns_when_the_proxy_listens_beyond_loopback(chromium: str) -> None:
    async with dashboard_of(chromium, config=PROXY_CONFIG, listen_host="0.0.0.0") as page:
        await page.wait_for_selector("#exposed-banner:not([hidden])")
        text = await page.text_content("#exposed-banner")
        assert text is not None and text.startswith("The proxy listens on 0.0.0.0, not only loopback")
        assert "--listen-host 127.0.0.1" in text


async def test_dashboard_counts_only_usable_slots_and_shows_the_rest_apart(chromium: str) -> None:
    """A model no request may use (here excluded) is not capacity: 26 usable slots, 2 out (issue 13)."""
    config = {**PROXY_CONFIG, "chaosMode": {"enabled": True, "excludeModels": ["glm-4.5-x"]}}
    async with dashboard_of(chromium, config=config) as page:
        await page.wait_for_selector("#out-capacity:not([hidden])")
        assert await page.text_content("#out-capacity") == "+ 2 slots out: glm-4.5-x"
        assert await page.text_content("#total") == "26"
        heavy = await page.text_content('tr.tier[data-tier="HEAVY"] span')
        assert heavy == "3 models · 0/6 usable slots in use · 2 out"


async def test_dashboard_shows_the_fleet_and_when_redis_goes_away(chromium: str) -> None:
    require_redis_server()
    redis = RedisProcess().start()
    try:
        extra = ["--set", f"chaos_state={redis.url}", "--set", "chaos_state_lease_ms=600"]
        async with dashboard_of(chromium, config=PROXY_CONFIG, extra_args=extra) as page:
            await page.wait_for_selector('#fleet-card[data-connected="true"]')
            assert await page.text_content("#fleet-alive") == "1"
            assert await page.text_content("#fleet-share") == "all (fleet-wide counts)"
            assert await page.locator('#fleet-proxies li[data-self="true"]').count() == 1
            await asyncio.to_thread(redis.stop)
            await page.wait_for_selector('#fleet-card[data-connected="false"]')
            assert (await page.text_content("#fleet-redis") or "").startswith(
                "unreachable · redis://127.0.0.1:"
            )
            assert await page.text_content("#fleet-share") == "100% of each limit, alone"  # it was alone
    finally:
        redis.stop()


FILTERED = "You run on Hermes Agent"  # z.ai's content filter refuses it in a system prompt, on every model
OWN_REFUSALS = """n => document.getElementById('request-refusals').textContent === n"""


async def test_dashboard_counts_refusals_that_were_the_requests_own_apart(chromium: str) -> None:
    """A filtered prompt refused by two models serving others: counted apart, no model shown cooling."""
    settings = SimSettings(latency_ms=20, token_interval_ms=100, output_tokens=20, filter_phrases=[FILTERED])
    async with (
        asyncio.timeout(TEST_BUDGET),
        SimProcess(settings) as sim,
        ProxyProcess(upstream=sim.base_url, config=PROXY_CONFIG, start_timeout=30.0) as proxy,
        async_playwright() as pw,
        httpx.AsyncClient(trust_env=False, timeout=30.0) as client,
    ):
        browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page()
            page.set_default_timeout(WAIT_MS)
            await page.goto(f"http://127.0.0.1:{proxy.web_port}/")
            await page.wait_for_function(OWN_REFUSALS, arg="0")
            url = proxy.url + "/api/anthropic/v1/messages"
            headers = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
            plain = {"model": TIER_MODELS["heavy"], "max_tokens": 64, "stream": True, "messages": MESSAGES}
            async with contextlib.AsyncExitStack() as others:  # one 2-s stream on each heavy model
                for _ in range(3):
                    await others.enter_async_context(client.stream("POST", url, json=plain, headers=headers))
                filtered = await client.post(url, json={**plain, "system": FILTERED}, headers=headers)
            assert filtered.status_code == 529 and filtered.json()["error"]["code"] == "1305"
            await page.wait_for_function(OWN_REFUSALS, arg="2")
            assert await page.text_content("#upstream-errors") == "0"
            rows = await _rows(page)
            assert not [name for name, row in rows.items() if row["state"] == "cooling"], rows
        finally:
            await browser.close()


QUOTA_KEY = "0123456789abcdef0123456789abcdef.DashboardQuotaKey"
QUOTA_READ = """() => document.getElementById('quota-card').dataset.source === 'zai'
    && document.getElementById('quota-used').textContent === '30.0%'"""


async def test_dashboard_shows_the_quota_read_from_zai(chromium: str) -> None:
    """The quota card: used, the reset's countdown, the burn, the forecast and a chart; the key nowhere."""
    settings = SimSettings(
        latency_ms=20,
        token_interval_ms=5,
        output_tokens=5,
        quota=10,
        quota_key=QUOTA_KEY,
        quota_window_seconds=600,
    )
    config = {**PROXY_CONFIG, "quota": {"windowSeconds": 600}}
    async with (
        asyncio.timeout(TEST_BUDGET),
        SimProcess(settings) as sim,
        httpx.AsyncClient(trust_env=False, timeout=30.0) as client,
    ):
        headers = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
        body = {"model": "glm-4.5", "max_tokens": 16, "messages": MESSAGES}
        for _ in range(3):  # 30% of the window, before the proxy starts
            (
                await client.post(sim.anthropic_base_url + "/v1/messages", json=body, headers=headers)
            ).raise_for_status()
        extra = ["--set", "chaos_key=DASHBOARD_QUOTA_KEY"]
        async with (
            ProxyProcess(
                upstream=sim.base_url,
                config=config,
                extra_args=extra,
                env={"DASHBOARD_QUOTA_KEY": QUOTA_KEY},
                start_timeout=30.0,
            ) as proxy,
            async_playwright() as pw,
        ):
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
            try:
                page = await browser.new_page()
                page.set_default_timeout(WAIT_MS)
                problems: list[str] = []
                page.on(
                    "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
                )
                page.on("pageerror", lambda e: problems.append(str(e)))
                await page.goto(f"http://127.0.0.1:{proxy.web_port}/")
                await page.wait_for_function(QUOTA_READ)
                assert await page.text_content("#quota-source") == "read from z.ai"
                reset = await page.text_content("#quota-reset") or ""
                assert re.fullmatch(r"\d+ min", reset), reset
                assert (await page.text_content("#quota-burn") or "").endswith(" % / h")
                forecast = await page.text_content("#quota-forecast") or ""
                assert forecast.startswith(("runs out in ", "lasts until the reset")), forecast
                assert await page.get_attribute("#quota-chart polyline", "points")
                assert await page.is_hidden("#quota-error")
                assert QUOTA_KEY not in await page.content()
                assert problems == [], problems
                ARTIFACTS.mkdir(exist_ok=True)
                await page.locator("#quota-card").screenshot(path=str(ARTIFACTS / "quota-card.png"))
            finally:
                await browser.close()
        assert QUOTA_KEY not in proxy.output()


async def test_dashboard_names_the_aliases_each_model_serves(chromium: str) -> None:
    """A catalog model z.ai serves as another is no row of its own: the model serving it names it."""
    config = {**PROXY_CONFIG, "aliases": {"glm-4.6": "glm-4.7", "glm-5.1": "glm-4.7"}}
    async with dashboard_of(chromium, config=config) as page:
        await page.wait_for_selector('tr.model[data-model="glm-4.7"] .aliases')
        assert await page.text_content('tr.model[data-model="glm-4.7"] .aliases') == "as glm-4.6, glm-5.1"
        assert await page.locator('tr.model[data-model="glm-4.6"]').count() == 0


async def test_dashboard_shows_a_credit_plans_windows(chromium: str) -> None:
    """A credit plan: the card's windows line has the 5-hour window and the week in credits."""
    settings = SimSettings(
        latency_ms=20,
        token_interval_ms=5,
        output_tokens=100,
        quota_key=QUOTA_KEY,
        credit_caps={"5h": 400, "1w": 2000},
        credit_window_seconds={"5h": 600, "1w": 600 * 33.6},  # the proxy scales z.ai's week alike
    )
    config = {**PROXY_CONFIG, "quota": {"windowSeconds": 600}}
    async with (
        asyncio.timeout(TEST_BUDGET),
        SimProcess(settings) as sim,
        httpx.AsyncClient(trust_env=False, timeout=30.0) as client,
    ):
        headers = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
        body = {"model": "glm-4.5", "max_tokens": 16, "messages": MESSAGES}
        (
            await client.post(sim.anthropic_base_url + "/v1/messages", json=body, headers=headers)
        ).raise_for_status()
        spent = (await client.get(sim.base_url + "/sim/stats")).json()["credits"]["windows"]["1w"]["row"]
        async with (
            ProxyProcess(
                upstream=sim.base_url,
                config=config,
                extra_args=["--set", "chaos_key=DASHBOARD_QUOTA_KEY"],
                env={"DASHBOARD_QUOTA_KEY": QUOTA_KEY},
                start_timeout=30.0,
            ) as proxy,
            async_playwright() as pw,
        ):
            browser = await pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
            try:
                page = await browser.new_page()
                page.set_default_timeout(WAIT_MS)
                await page.goto(f"http://127.0.0.1:{proxy.web_port}/")
                await page.wait_for_function(
                    "() => document.getElementById('quota-windows').textContent.includes('1w')"
                )
                shown = await page.text_content("#quota-windows") or ""
                used = spent["currentValue"]
                assert shown.startswith("5h ") and f"({used} / 400 credits)" in shown, shown
                assert re.search(rf"1w [\d.]+% \({used} / 2,000 credits\), resets in 5 h \d+ min", shown), (
                    shown
                )
            finally:
                await browser.close()
