"""The 5-hour quota through a real mitmdump in front of the simulator, with a short window: read with a key
(the figures the simulator has), estimated without one (the scale learned from a 1308), every way the
quota endpoint can fail shown and not fatal, and the key in no output, status, metric or flow file."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy, MakeSim
from .support import CLIENT_TIMEOUT, Sim, poll, read_flows, routing, status

pytestmark = pytest.mark.e2e

KEY = "5f0c2d9e8b7a41c3a2e1d0f9c8b7a6e5.E2eQuotaKeyNeverShown"
VARIABLE = "CHAOS_E2E_QUOTA_KEY"
HEADERS = {"x-api-key": "sk-e2e-client-key", "anthropic-version": "2023-06-01"}


def quota_routing(window: float, **overrides: Any) -> dict[str, Any]:
    return routing(quota={"pollSeconds": 5, "windowSeconds": window}, **overrides)


def keyed_proxy(sim: Sim, config: dict[str, Any], key: str = KEY, **extra: Any) -> dict[str, Any]:
    return {
        "upstream": sim.base_url,
        "config": config,
        "extra_args": ["--set", f"chaos_key={VARIABLE}", *extra.pop("extra_args", [])],
        "env": {VARIABLE: key},
        **extra,
    }


async def ask(
    client: httpx.AsyncClient, proxy: ProxyProcess, model: str = "claude-haiku-4-5"
) -> httpx.Response:
    body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "quota"}]}
    return await client.post(proxy.url + "/api/anthropic/v1/messages", json=body, headers=HEADERS)


async def quota_of(http: httpx.AsyncClient, proxy: ProxyProcess) -> dict[str, Any]:
    document = await status(http, proxy)
    quota: dict[str, Any] = document["quota"]
    return quota


async def test_with_a_key_the_status_is_the_simulators_figures_and_the_key_shows_nowhere(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    sim = await make_sim(quota=20, quota_window_seconds=600, quota_key=KEY)
    saved = tmp_path / "flows.mitm"
    proxy = await make_proxy(**keyed_proxy(sim, quota_routing(600), extra_args=["-w", str(saved)]))
    first = await poll(lambda: quota_of(http, proxy), lambda q: q["readAt"] is not None, 10.0)
    assert (first["source"], first["reader"], first["usedPercent"], first["error"]) == (
        "zai",
        "on",
        0.0,
        None,
    )
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        for _ in range(5):
            assert (await ask(client, proxy)).status_code == 200
    truth = (await sim.stats())["quota"]
    assert truth["percentage"] == 25
    read = await poll(lambda: quota_of(http, proxy), lambda q: q["usedPercent"] == 25.0, 12.0)
    assert read["usedPercent"] == 25.0 and read["source"] == "zai"
    assert read["resetsAt"] == round(truth["resetsAt"])
    assert read["estimate"]["units"] == 5.0 and read["estimate"]["scale"] == 20.0  # calibrated by z.ai
    metrics = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
    assert 'chaos_quota_used_ratio{window="5h"} 0.25' in metrics
    assert 'chaos_quota_source_info{source="zai"} 1.0' in metrics
    raw_status = (await http.get(proxy.status_url)).text
    await asyncio.to_thread(proxy.stop)
    flows = read_flows(saved)
    assert len(flows) == 5  # the agents' requests; the quota's reading is no flow
    for text in (proxy.output(), raw_status, metrics, saved.read_bytes().decode("latin-1")):
        assert KEY not in text and KEY[-16:] not in text
    assert all(KEY not in (flow.comment or "") for flow in flows)
    assert VARIABLE in proxy.output()  # the start-up line names the variable, never the key


async def test_without_a_key_the_estimate_learns_the_scale_from_1308(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    window = 8.0
    sim = await make_sim(quota=10, quota_window_seconds=window, quota_weights={"glm-4.5-air": 2})
    config = quota_routing(window, chaosMode={"enabled": True, "qualityFloor": {"heavy": "MEDIUM"}})
    config["models"] = {
        "glm-4.5": {"tier": "MEDIUM", "maxConcurrency": 10},
        "glm-4.5-air": {"tier": "MEDIUM", "maxConcurrency": 5, "quotaWeight": 2},
    }
    proxy = await make_proxy(upstream=sim.base_url, config=config)
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        answered = 0
        while answered < 20:  # until the quota is spent: 1308, passed on as the proxy's 429
            response = await ask(client, proxy, "claude-sonnet-4-5")
            if response.status_code != 200:
                break
            answered += 1
        assert response.status_code == 429 and answered >= 5
        spent = await quota_of(http, proxy)
        assert spent["source"] == "estimate" and spent["usedPercent"] == 100.0
        assert spent["estimate"]["scale"] == pytest.approx((await sim.stats())["quota"]["used"])
        assert (await status(http, proxy))["accountPause"] is not None
        # The next window: the estimate, scaled by the 1308, follows the simulator's count.
        truth = (await sim.stats())["quota"]
        await asyncio.sleep(max(truth["resetsAt"] + 0.2 - time.time(), 0))  # the simulator's window ends
        await poll(lambda: status(http, proxy), lambda s: s["accountPause"] is None, 3.0)
        for _ in range(3):
            assert (await ask(client, proxy, "claude-sonnet-4-5")).status_code == 200
    truth = (await sim.stats())["quota"]
    estimate = await quota_of(http, proxy)
    true_percent = truth["used"] / 10 * 100
    assert estimate["usedPercent"] == pytest.approx(true_percent, rel=0.15)


@pytest.mark.parametrize(
    ("answer", "key", "error"),
    [
        ("ok", "a-key-the-simulator-refuses", "HTTP 401: the key was refused"),
        ("401", KEY, "HTTP 401: the key was refused"),
        ("500", KEY, "HTTP 500"),
        ("junk", KEY, "the quota answer is not JSON"),
        ("nested", KEY, "the quota answer is not JSON"),
        (
            "echo",
            KEY,
            "the quota answer says code 1001: the authorization token you sent is not valid: <key>",
        ),
        ("hang", KEY, "no answer within 5 s"),
        ("drop", KEY, "quota not read from 127.0.0.1:"),
    ],
    ids=["wrong-key", "401", "500", "junk", "nested", "echo", "nothing", "dropped"],
)
async def test_a_failing_quota_endpoint_is_shown_and_the_proxy_serves_on(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient, answer: str, key: str, error: str
) -> None:
    sim = await make_sim(quota=100, quota_window_seconds=600, quota_key=KEY)
    (await http.post(sim.base_url + "/sim/quota", json={"answer": answer})).raise_for_status()
    proxy = await make_proxy(**keyed_proxy(sim, quota_routing(600), key=key))
    shown = await poll(lambda: quota_of(http, proxy), lambda q: q["error"] is not None, 10.0)
    assert error in shown["error"], shown
    assert shown["source"] == "estimate" and shown["usedPercent"] is None
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        assert (await ask(client, proxy)).status_code == 200
    metrics = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
    assert "chaos_quota_read_failures_total 1.0" in metrics
    raw_status = (await http.get(proxy.status_url)).text
    assert key_runs(proxy.output()) == key_runs(raw_status) == key_runs(metrics) == []


def key_runs(text: str) -> list[str]:
    """The runs of 8 characters of KEY found in `text` (a cut copy of the key is still the key)."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


async def test_a_quota_answer_nested_too_deeply_is_shown_and_the_poller_reads_on(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """It ended the poller for good, nothing logged, while the status said it was on."""
    sim = await make_sim(quota=100, quota_window_seconds=600, quota_key=KEY)
    (await http.post(sim.base_url + "/sim/quota", json={"answer": "nested"})).raise_for_status()
    config = routing(quota={"pollSeconds": 1, "pollBackoffMaxSeconds": 5, "windowSeconds": 600})
    proxy = await make_proxy(**keyed_proxy(sim, config))
    shown = await poll(lambda: quota_of(http, proxy), lambda q: q["error"] is not None, 10.0)
    assert "not JSON" in (shown["error"] or ""), shown
    await poll(sim.stats, lambda s: s["quota"]["reads"] >= 2, 10.0)  # read again, 2 s later
    (await http.post(sim.base_url + "/sim/quota", json={"answer": "ok"})).raise_for_status()
    read = await poll(lambda: quota_of(http, proxy), lambda q: q["error"] is None, 10.0)  # 4 s later
    assert (read["error"], read["source"], read["reader"]) == (None, "zai", "on"), read
    assert "not JSON" in proxy.output()


async def test_the_forecast_after_a_tenth_of_the_window_is_within_a_tenth_of_the_exhaustion(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """A steady swarm that spends the quota in half the window (the issue's target: after 10% of the
    window, the forecast within 10% of when the simulator actually runs out)."""
    window, prompts, every = 20.0, 40, 0.25  # 4 prompts a second: spent 10 s into a 20-s window
    sim = await make_sim(quota=prompts, quota_window_seconds=window, quota_key=KEY)
    proxy = await make_proxy(**keyed_proxy(sim, routing(quota={"pollSeconds": 1, "windowSeconds": window})))
    await poll(lambda: quota_of(http, proxy), lambda q: q["readAt"] is not None, 10.0)
    forecasts: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client,
        asyncio.timeout(window + 10),
    ):
        started = time.monotonic()
        for i in range(2 * prompts):
            if (await ask(client, proxy)).status_code != 200:
                break
            forecasts.append(await quota_of(http, proxy))
            await asyncio.sleep(max(started + (i + 1) * every - time.monotonic(), 0))
    truth = (await sim.stats())["quota"]
    assert truth["spentAt"] is not None
    window_start, spent_at = truth["windowStart"], truth["spentAt"]
    tenth = next(
        f
        for f in forecasts
        if f["readAt"] is not None and f["readAt"] >= window_start + window / 10 and f["usedPercent"]
    )
    assert tenth["runsOutAt"] is not None
    error = abs(tenth["runsOutAt"] - spent_at) / (spent_at - window_start)
    at, runs_out = tenth["readAt"] - window_start, tenth["runsOutAt"] - window_start
    said = f"read at {at:.1f} s: runs out at {runs_out:.1f} s, spent at {spent_at - window_start:.1f} s"
    assert error <= 0.10, said


async def _swarm(proxy: ProxyProcess, agents: int, until: float) -> tuple[int, list[int], float]:
    """`agents` agents, each asking again as soon as it is answered, until `until` (monotonic) or the
    first refusal: (answers, the statuses that were no 200, the longest a request took)."""
    answers, refused, longest = 0, [], 0.0

    async def agent(client: httpx.AsyncClient) -> None:
        nonlocal answers, longest
        while time.monotonic() < until:
            started = time.monotonic()
            response = await ask(client, proxy)
            longest = max(longest, time.monotonic() - started)
            if response.status_code != 200:
                refused.append(response.status_code)
                return
            answers += 1

    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        await asyncio.gather(*(agent(client) for _ in range(agents)))
    return answers, refused, longest


async def test_pacing_spreads_the_quota_over_the_window_without_a_1308(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """6 agents that would spend the quota in under half of a 20-s window: unpaced they meet 1308 and stop;
    paced (quota.pace, with a key) they are served all window long, with no 1308 and no 429, at least as
    many answers (the hard stop lets go what the readings say is left; a request it holds at the end
    waits for the reset, within the queue's timeout)."""
    window, prompts, agents = 20.0, 100, 6
    settings = {"quota": prompts, "quota_window_seconds": window, "quota_key": KEY, "latency_ms": 400}
    quota = {"pollSeconds": 1, "windowSeconds": window}
    unpaced_sim = await make_sim(**settings)
    unpaced = await make_proxy(**keyed_proxy(unpaced_sim, routing(quota=quota)))
    answered, refused, _ = await _swarm(unpaced, agents, time.monotonic() + window - 2)
    assert refused and (await unpaced_sim.stats())["quota"]["refused"] >= 1  # 1308 met
    paced_sim = await make_sim(**settings)
    paced = await make_proxy(**keyed_proxy(paced_sim, routing(quota={**quota, "pace": True})))
    await poll(lambda: quota_of(http, paced), lambda q: q["readAt"] is not None, 10.0)
    paced_answers, paced_refused, longest = await _swarm(paced, agents, time.monotonic() + window - 2)
    truth = (await paced_sim.stats())["quota"]
    shown = await quota_of(http, paced)
    said = f"paced {paced_answers} answers (longest {longest:.1f} s), unpaced {answered}; {shown['pacing']}"
    print(said, f"; the quota used paced: {truth['used']:g} of {prompts}")  # shown with -s
    assert paced_refused == [] and truth["refused"] == 0, said
    assert shown["pacing"]["pacedWaits"] > 0, said
    assert paced_answers >= answered, said
    assert longest < 60, said  # the queue's timeout: nobody got its 429


async def test_a_credit_plans_two_windows_read_are_the_simulators_figures(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """CREDIT_LIMIT rows of a 5-hour window (not started until the first answer) and a week: the status
    shows both as the simulator counts them, in credits, and the metrics too."""
    caps = {"5h": 400.0, "1w": 2000.0}
    sim = await make_sim(
        credit_caps=caps, credit_window_seconds={"5h": 600}, quota_key=KEY, output_tokens=100
    )
    proxy = await make_proxy(**keyed_proxy(sim, quota_routing(600)))
    first = await poll(lambda: quota_of(http, proxy), lambda q: q["readAt"] is not None, 10.0)
    windows = {w["name"]: w for w in first["windows"]}
    assert not windows["5h"]["started"] and windows["5h"]["resetsAt"] is None
    assert (windows["5h"]["cap"], windows["1w"]["cap"], windows["1w"]["used"]) == (400.0, 2000.0, 0.0)
    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        for _ in range(5):
            assert (await ask(client, proxy)).status_code == 200
    truth = (await sim.stats())["credits"]["windows"]
    spent = truth["5h"]["row"]["currentValue"]
    assert spent >= 5 * 2.4  # 100 output tokens at 24 per thousand, each answer

    def caught_up(quota: dict[str, Any]) -> bool:
        return all(w["used"] == spent for w in quota["windows"])

    read = await poll(lambda: quota_of(http, proxy), caught_up, 12.0)
    shown = {w["name"]: w for w in read["windows"]}
    for name in ("5h", "1w"):
        row = truth[name]["row"]
        assert shown[name]["source"] == "zai" and shown[name]["started"]
        assert (shown[name]["used"], shown[name]["cap"], shown[name]["left"]) == (
            row["currentValue"], row["usage"], row["remaining"],
        )  # fmt: skip
        assert shown[name]["usedPercent"] == round(row["currentValue"] * 100 / row["usage"], 1)
        assert shown[name]["resetsAt"] == round(truth[name]["resetsAt"])
    assert read["usedPercent"] == shown["5h"]["usedPercent"] and read["resetsAt"] == shown["5h"]["resetsAt"]
    metrics = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
    assert f'chaos_quota_credits{{figure="used",window="1w"}} {float(spent)}' in metrics


async def test_without_a_key_a_credit_plans_estimate_counts_credits_and_learns_its_scale_from_1308(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """Lite's credit plan with a short, small 5-hour window; answers of very different sizes, on models
    of different weights: the estimate counts each answer's credits by the served model's weights, so
    after the 1308 that taught its scale it follows the simulator's credits (a count of prompts would
    not: the next window's answers are all large)."""
    window, cap = 8.0, 200.0
    weights = {"glm-4.5": [2.0, 0.5, 8.0], "glm-4.5-air": [6.9, 1.7, 24.0]}
    sim = await make_sim(
        credit_plan="lite",
        credit_caps={"5h": cap},
        credit_window_seconds={"5h": window},
        credit_weights=weights,
        latency_ms=10,
        token_interval_ms=0,
    )
    config = quota_routing(window, chaosMode={"enabled": True, "qualityFloor": {"heavy": "MEDIUM"}})
    config["quota"]["unit"] = "credits"
    config["models"] = {
        name: {
            "tier": "MEDIUM",
            "maxConcurrency": 5,
            "creditWeights": {"input": w[0], "cachedInput": w[1], "output": w[2]},
        }
        for name, w in weights.items()
    }
    proxy = await make_proxy(upstream=sim.base_url, config=config)

    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        await spend_until_refused(client, proxy.url)  # the window spent: 1308, passed on as our 429
        truth = (await sim.stats())["credits"]["windows"]["5h"]
        spent = await quota_of(http, proxy)
        assert spent["estimate"]["unit"] == "credits" and spent["usedPercent"] == 100.0
        assert spent["estimate"]["scale"] == pytest.approx(truth["used"], rel=0.01)
        # The next window: only large answers (a count of prompts would say a few percent).
        await asyncio.sleep(max(truth["resetsAt"] + 0.2 - time.time(), 0))
        await poll(lambda: status(http, proxy), lambda s: s["accountPause"] is None, 3.0)
        for _ in range(4):
            assert (await credit_answer(client, proxy.url, big=True)).status_code == 200
    truth = (await sim.stats())["credits"]["windows"]["5h"]
    estimate = await quota_of(http, proxy)
    five = next(w for w in estimate["windows"] if w["name"] == "5h")
    said = f"{estimate} vs {truth}"
    assert five["source"] == "estimate" and estimate["estimate"]["assumedWeights"] == [], said
    assert five["used"] == pytest.approx(truth["used"], rel=0.15), said  # the target
    assert five["usedPercent"] == pytest.approx(truth["used"] / cap * 100, rel=0.15), said
    metrics = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
    assert f'chaos_quota_credits{{figure="used",window="5h"}} {five["used"]}' in metrics


async def test_without_a_key_a_1310_teaches_the_weeks_scale(
    make_sim: MakeSim, make_proxy: MakeProxy, http: httpx.AsyncClient
) -> None:
    """A weekly row alone (the 5-hour window of 1 s scales the week to 33.6 s): answers of very different
    sizes until the week's 1310, whose count is the week's scale; in the next week the estimate follows
    the simulator's credits (a count of prompts would not: its answers are all large)."""
    window, cap = 1.0, 200.0
    week = window * 7 * 24 / 5
    sim = await make_sim(
        credit_caps={"1w": cap},
        credit_window_seconds={"1w": week},
        latency_ms=10,
        token_interval_ms=0,
    )
    config = quota_routing(window, chaosMode={"enabled": True, "qualityFloor": {"heavy": "MEDIUM"}})
    config["quota"]["unit"] = "credits"
    config["models"] = {
        name: {
            "tier": "MEDIUM",
            "maxConcurrency": 5,
            "creditWeights": {"input": 6.9, "cachedInput": 1.7, "output": 24},
        }
        for name in ("glm-4.5", "glm-4.5-air")
    }
    proxy = await make_proxy(upstream=sim.base_url, config=config)

    async with httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT) as client:
        await spend_until_refused(client, proxy.url)  # the week spent: 1310, passed on as our 429
        truth = (await sim.stats())["credits"]
        assert truth["refused"] == {"1310": 1}
        spent = await quota_of(http, proxy)
        weekly = next(w for w in spent["windows"] if w["name"] == "1w")
        assert weekly["source"] == "estimate" and weekly["usedPercent"] == 100.0
        assert weekly["cap"] == pytest.approx(truth["windows"]["1w"]["used"], rel=0.01)
        # The next week: only large answers (a count of prompts would say a few percent).
        await asyncio.sleep(max(truth["windows"]["1w"]["resetsAt"] + 0.2 - time.time(), 0))
        await poll(lambda: status(http, proxy), lambda s: s["accountPause"] is None, 3.0)
        for _ in range(4):
            assert (await credit_answer(client, proxy.url, big=True)).status_code == 200
    truth = (await sim.stats())["credits"]["windows"]["1w"]
    estimate = await quota_of(http, proxy)
    weekly = next(w for w in estimate["windows"] if w["name"] == "1w")
    said = f"{estimate} vs {truth}"
    assert weekly["source"] == "estimate" and weekly["used"] == pytest.approx(truth["used"], rel=0.15), said
    assert weekly["usedPercent"] == pytest.approx(truth["used"] / cap * 100, rel=0.15), said
    assert weekly["resetsAt"] == pytest.approx(truth["resetsAt"], abs=2), said
    metrics = (await http.get(f"http://127.0.0.1:{proxy.web_port}/metrics")).text
    assert f'chaos_quota_credits{{figure="used",window="1w"}} {weekly["used"]}' in metrics


async def credit_answer(client: httpx.AsyncClient, url: str, *, big: bool) -> httpx.Response:
    """One answer whose credits depend on its size: a large one about 2,000 input tokens as the simulator
    counts them and 400 output tokens, a small one a few and 20."""
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "quota " * (1300 if big else 5)}],
    }
    headers = {**HEADERS, "x-sim-output-tokens": "400" if big else "20"}
    return await client.post(url + "/api/anthropic/v1/messages", json=body, headers=headers)


async def spend_until_refused(client: httpx.AsyncClient, url: str) -> None:
    """Answers of very different sizes (one large in four) until the proxy passes z.ai's refusal on."""
    for answered in range(200):
        response = await credit_answer(client, url, big=answered % 4 == 0)
        if response.status_code != 200:
            break
    assert response.status_code == 429
