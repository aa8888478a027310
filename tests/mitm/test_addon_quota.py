"""The chaos_key option: the name of a variable holding the key, where the quota is read, and a poller
that runs only with a key, whose failures are shown, not fatal, and never show the key."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import taddons

from chaos_mode.forwarding.upstream import Destination
from chaos_mode.mitm.addon import ChaosMode
from chaos_mode.mitm.quota_source import parse_quota_option, quota_destination
from chaos_mode_tools.sim import SimServer, SimSettings
from support.sim_client import FAST

KEY = "0123456789abcdef0123456789abcdef.QuotaKeyForTests"
HOSTS = ("api.z.ai", "open.bigmodel.cn")


@pytest.mark.parametrize(
    ("modes", "destination"),
    [
        ([], Destination("https", "api.z.ai", 443)),
        (["regular"], Destination("https", "api.z.ai", 443)),
        (["reverse:http://127.0.0.1:8700"], Destination("http", "127.0.0.1", 8700)),
        (["regular", "reverse:https://api.z.ai"], Destination("https", "api.z.ai", 443)),
        (["upstream:http://[::1]:3128"], Destination("https", "api.z.ai", 443, "http://[::1]:3128")),
    ],
)
def test_the_quota_is_read_where_the_proxy_forwards(modes: list[str], destination: Destination) -> None:
    assert quota_destination([ProxyMode.parse(m) for m in modes], HOSTS) == destination


def test_the_option_is_a_name_never_echoed_when_it_is_not_one() -> None:
    assert parse_quota_option("") is None and parse_quota_option(" ZAI_QUOTA_KEY ") == "ZAI_QUOTA_KEY"
    with pytest.raises(ValueError, match="NAME of an environment variable") as info:
        parse_quota_option(KEY)
    assert KEY not in str(info.value)


def test_a_key_given_as_the_option_is_refused_without_repeating_it() -> None:
    addon = ChaosMode()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, chaos_web="", chaos_limits_file="off")
        with pytest.raises(exceptions.OptionsError, match=r"^chaos_key: must be the NAME") as info:
            tctx.configure(addon, chaos_key=KEY)
    assert KEY not in str(info.value)


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimSettings(**FAST, quota=10, quota_key=KEY)) as server:
        yield server


async def wait_until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


@contextlib.contextmanager
def running_addon(**options: Any) -> Iterator[tuple[ChaosMode, taddons.context]]:
    """The addon configured with `options` and running (its forwarder, its poller), stopped after."""
    addon = ChaosMode()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, chaos_web="", chaos_limits_file="off", chaos_key="ZAI_QUOTA_KEY", **options)
        addon.running()
        try:
            yield addon, tctx
        finally:
            addon.done()
        assert not addon.quota_poller.running


async def test_with_a_key_the_status_shows_zais_figures(
    sim: SimServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ZAI_QUOTA_KEY", KEY)
    sim.quota.charge("glm-4.5")
    with running_addon(mode=[f"reverse:http://127.0.0.1:{sim.port}"]) as (addon, _):
        await wait_until(lambda: addon.pool.quota.read_at is not None)
        quota = addon.chaos_stats()["quota"]
        assert quota["source"] == "zai" and quota["reader"] == "on" and quota["usedPercent"] == 10.0
        assert quota["resetsAt"] == round(sim.quota.resets_at()) and quota["error"] is None
        assert "10.0% used" in addon.status()
    assert KEY not in caplog.text and "ZAI_QUOTA_KEY" in caplog.text


async def test_a_variable_not_set_is_said_and_the_estimate_serves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ZAI_QUOTA_KEY", raising=False)
    with running_addon() as (addon, _):
        quota = addon.chaos_stats()["quota"]
        assert not addon.quota_poller.running
        assert quota["source"] == "estimate" and quota["reader"] == "off"
        assert quota["error"] == "chaos_key: the environment variable it names is not set"
    assert "names an environment variable that is not set" in caplog.text


async def test_a_refused_key_is_shown_not_fatal(sim: SimServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZAI_QUOTA_KEY", "another-key")
    with running_addon(mode=[f"reverse:http://127.0.0.1:{sim.port}"]) as (addon, tctx):
        await wait_until(lambda: addon.pool.quota.error is not None)
        quota = addon.chaos_stats()["quota"]
        assert "HTTP 401: the key was refused" in quota["error"] and quota["usedPercent"] is None
        assert addon.quota_poller.running  # it tries again, later
        tctx.configure(addon, chaos_key="")
        assert not addon.quota_poller.running and addon.chaos_stats()["quota"]["reader"] == "off"
