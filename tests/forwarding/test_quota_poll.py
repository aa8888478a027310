"""Reading z.ai's quota from the simulator with the forwarder's client: the figures, every failure shown
(never raised), the key in none of them, and the backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from chaos_mode.forwarding import quota_poll
from chaos_mode.forwarding.quota_poll import PollPlan, QuotaPoller, next_delay
from chaos_mode.forwarding.upstream import Destination, UpstreamClients
from chaos_mode.quota.reading import KEY_RUN
from chaos_mode.quota.tracker import QuotaTracker
from chaos_mode_tools.sim import SimServer, SimSettings
from support.sim_client import FAST, post

KEY = "zai-quota-key-0123456789abcdef"


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimSettings(**FAST, quota=8, quota_key=KEY)) as server:
        yield server


def destination(sim: SimServer) -> Destination:
    return Destination("http", "127.0.0.1", sim.port)


async def test_a_reading_matches_the_simulators_figures(sim: SimServer) -> None:
    tracker = QuotaTracker(lambda _: 1.0)
    poller = QuotaPoller(UpstreamClients(), tracker)
    async with httpx.AsyncClient() as http:
        for _ in range(2):
            assert (await post(http, sim, "glm-4.5")).status_code == 200
    assert not await poller.read_once(destination(sim), KEY)
    status = tracker.status()
    assert status["source"] == "zai" and status["error"] is None
    assert status["usedPercent"] == 25.0 == sim.quota.percentage()
    assert status["resetsAt"] == round(sim.quota.resets_at())
    assert status["level"] == "sim"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ("401", "HTTP 401: the key was refused"),
        ("500", "HTTP 500"),
        ("junk", "not JSON"),
        ("nested", "not JSON"),
        ("drop", "quota not read from 127.0.0.1:"),
        ("hang", "no answer within 0.3 s"),
    ],
)
async def test_a_failure_is_shown_not_raised_and_never_holds_the_key(
    sim: SimServer, answer: str, error: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if answer == "hang":  # only the hang waits out the timeout; the others keep the default's margin
        monkeypatch.setattr(quota_poll, "READ_SECONDS", 0.3)
    sim.quota.answer = answer
    tracker = QuotaTracker(lambda _: 1.0)
    caplog.set_level(logging.DEBUG)
    assert await QuotaPoller(UpstreamClients(), tracker).read_once(destination(sim), KEY)
    status = tracker.status()
    assert error in status["error"] and status["usedPercent"] is None and status["source"] == "estimate"
    assert KEY not in repr(status) and KEY not in caplog.text


async def test_a_wrong_key_is_refused(sim: SimServer) -> None:
    tracker = QuotaTracker(lambda _: 1.0)
    assert await QuotaPoller(UpstreamClients(), tracker).read_once(destination(sim), "not-the-key")
    assert tracker.error is not None and "HTTP 401" in tracker.error


async def test_nobody_listening_is_a_failure_too() -> None:
    tracker = QuotaTracker(lambda _: 1.0)
    assert await QuotaPoller(UpstreamClients(), tracker).read_once(Destination("http", "127.0.0.1", 9), KEY)
    assert tracker.error is not None and tracker.error.startswith("quota not read from 127.0.0.1:9: ")


async def test_started_it_reads_at_once_and_stops(sim: SimServer) -> None:
    tracker = QuotaTracker(lambda _: 1.0)
    poller = QuotaPoller(UpstreamClients(), tracker)
    poller.start(PollPlan(destination(sim), every=3600, backoff_max=3600), lambda: KEY)
    async with asyncio.timeout(5):
        while tracker.read_at is None:
            await asyncio.sleep(0.01)
    assert poller.running and poller.failures == 0
    poller.stop()
    assert not poller.running


def test_failures_back_off_to_the_maximum() -> None:
    plan = PollPlan(Destination("https", "api.z.ai", 443), every=60, backoff_max=900)
    assert [next_delay(plan, n) for n in range(6)] == [60, 120, 240, 480, 900, 900]
    assert next_delay(plan, 10_000) == 900


async def test_a_reading_carries_the_count_as_it_was_asked_for(
    sim: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer counted while the reading is on its way may be in z.ai's figure or not: the reading's
    lower bound is the count when it was asked for."""
    tracker = QuotaTracker(lambda _: 1.0)
    poller = QuotaPoller(UpstreamClients(), tracker)
    tracker.sent(1, "glm-4.5")
    fetch, seen = poller._fetch, []

    async def answered_meanwhile(
        to: Destination, path: str, key: str, timeout: float
    ) -> tuple[int, bytes, str | None]:
        tracker.answered("glm-4.5", 1)
        return await fetch(to, path, key, timeout)

    monkeypatch.setattr(poller, "_fetch", answered_meanwhile)
    monkeypatch.setattr(tracker, "read", lambda reading, asked=None: seen.append(asked))
    assert not await poller.read_once(destination(sim), KEY)
    assert [(a.lo, a.changes) for a in seen] == [(0.0, 1)]  # before the answer: sent, not answered


async def test_asked_for_a_reading_before_the_next_poll_it_reads_at_once(sim: SimServer) -> None:
    tracker = QuotaTracker(lambda _: 1.0)
    poller = QuotaPoller(UpstreamClients(), tracker)
    read = asyncio.Event()
    tracker.changed = read.set
    poller.start(PollPlan(destination(sim), every=600.0, backoff_max=600.0), lambda: KEY)
    try:
        await asyncio.wait_for(read.wait(), 5.0)  # the first reading, at the start
        read.clear()
        tracker.ask_soon()
        assert not read.is_set() and sim.quota.reads == 1  # nothing changed since it was asked for
        tracker.sent(1, "glm-4.5")
        tracker.answered("glm-4.5", 1)
        tracker.ask_soon()
        await asyncio.wait_for(read.wait(), 5.0)  # not 600 s later
        assert sim.quota.reads == 2
    finally:
        poller.stop()
    assert tracker.read_soon is None


LONG_KEY = "5f0c2d9e8b7a41c3a2e1d0f9c8b7a6e5.UnitQuotaKeyNeverShown"  # a z.ai key's length


def key_runs(text: str, key: str = LONG_KEY) -> list[str]:
    """The runs of `KEY_RUN` characters of `key` found in `text`."""
    return [key[i : i + KEY_RUN] for i in range(len(key) - KEY_RUN + 1) if key[i : i + KEY_RUN] in text]


async def test_a_key_the_answer_echoes_is_masked_before_any_cut(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with SimServer(SimSettings(**FAST, quota=8, quota_key=LONG_KEY)) as sim:
        sim.quota.answer = "echo"
        tracker = QuotaTracker(lambda _: 1.0)
        assert await QuotaPoller(UpstreamClients(), tracker).read_once(destination(sim), LONG_KEY)
    status = tracker.status()
    assert "says code 1001: the authorization token you sent is not valid: <key>" in status["error"]
    assert key_runs(repr(status)) == [] and key_runs(caplog.text) == []
    assert "<key>" in caplog.text


async def test_whatever_a_reading_raises_is_shown_logged_once_and_retried_with_backoff(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not only the failures expected: the poller never dies silently (a quota answer nested too deeply
    once ended it for good, nothing logged, while the status said it was on)."""
    caplog.set_level(logging.DEBUG)
    tracker = QuotaTracker(lambda _: 1.0)
    poller = QuotaPoller(UpstreamClients(), tracker)
    delays: list[int] = []
    monkeypatch.setattr(quota_poll, "next_delay", lambda plan, n: delays.append(n) or next_delay(plan, n))
    read = asyncio.Event()

    async def raising(to: Destination, key: str, *, timeout: float | None = None) -> bool:
        if len(delays) >= 4:
            read.set()
        raise RecursionError(f"maximum recursion depth exceeded near {key[:40]}")

    monkeypatch.setattr(poller, "read_once", raising)
    plan = PollPlan(Destination("http", "127.0.0.1", 9), every=0.001, backoff_max=0.004)
    poller.start(plan, lambda: LONG_KEY)
    try:
        await asyncio.wait_for(read.wait(), 5.0)
        assert poller.running
    finally:
        poller.stop()
    assert delays[:4] == [1, 2, 3, 4]  # one failure more each time: the backoff's delay
    assert tracker.error == "quota not read from 127.0.0.1:9: RecursionError: maximum recursion depth " + (
        "exceeded near <key>"
    )
    assert tracker.read_failures >= 4
    logged = [r.getMessage() for r in caplog.records if "RecursionError" in r.getMessage()]
    assert logged == [f"chaos-mode: {tracker.error}"]  # once
    assert key_runs(repr(tracker.status())) == [] and key_runs(caplog.text) == []
