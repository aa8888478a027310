"""The z.ai simulator (chaos_mode_tools.sim) against real clients on loopback: the anthropic SDK and httpx."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import ssl
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode_tools.devtools.certs import make_certs
from chaos_mode_tools.devtools.sim_process import SimProcess, sim_subprocess
from chaos_mode_tools.sim import Fault, SimServer, SimSettings, SimState
from chaos_mode_tools.sim.__main__ import settings_from_args
from chaos_mode_tools.sim.limits import LimitChange, ScheduledChange
from support.design_catalog import CAPS
from support.sim_client import FAST, MSGS, TIMEOUT, MakeSim, assert_zai_error, post, sdk, stats, wait_for


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


# -- success: the SDK accepts what we send --------------------------------------------------------------


async def test_sdk_stream_helper_gets_served_model_and_usage(sim: SimServer) -> None:
    seen: list[str] = []
    async with sdk(sim).messages.stream(model="glm-4.6", max_tokens=64, messages=MSGS) as stream:
        async for event in stream:
            seen.append(event.type)
            if event.type == "message_start":
                assert event.message.model == "glm-4.6"
                assert event.message.usage.input_tokens > 0
        final = await stream.get_final_message()
    assert final.model == "glm-4.6"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5
    assert final.usage.input_tokens > 0
    assert final.content[0].type == "text"
    assert final.content[0].text == "Chaos mode spreads every request"
    assert seen[0] == "message_start"
    assert "message_stop" in seen


async def test_sdk_create_stream_true_yields_full_event_sequence(sim: SimServer) -> None:
    client = sdk(sim)
    stream = await client.messages.create(model="glm-4.5-air", max_tokens=64, messages=MSGS, stream=True)
    kinds = [event.type async for event in stream]
    assert kinds == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_raw_sse_is_event_then_data_with_ping(sim: SimServer, http: httpx.AsyncClient) -> None:
    response = await post(http, sim, "glm-4.7", stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["x-sim-served-model"] == "glm-4.7"
    names = [name for name, _ in sse_events(response.text)]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in sse_events(response.text))


async def test_sdk_non_streaming_message_after_latency_plus_tokens(sim: SimServer) -> None:
    started = time.monotonic()
    raw = await sdk(sim).messages.with_raw_response.create(
        model="glm-4.5", max_tokens=64, messages=MSGS, extra_headers={"x-sim-token-interval-ms": "30"}
    )
    elapsed = time.monotonic() - started
    message = await raw.parse()
    assert raw.headers["x-sim-served-model"] == "glm-4.5"
    assert message.type == "message"
    assert message.model == "glm-4.5"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 5
    assert message.usage.input_tokens > 0
    assert elapsed >= (20 + 5 * 30) / 1000 - 0.01


async def test_events_arrive_incrementally(sim: SimServer, http: httpx.AsyncClient) -> None:
    body = {"model": "glm-4.7", "max_tokens": 64, "messages": MSGS, "stream": True}
    headers = {"x-sim-latency-ms": "10", "x-sim-token-interval-ms": "80", "x-sim-output-tokens": "6"}
    arrivals: list[float] = []
    url = sim.anthropic_base_url + "/v1/messages"
    async with http.stream("POST", url, json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            if '"text_delta"' in line:
                arrivals.append(time.monotonic())
    assert len(arrivals) == 6
    assert arrivals[-1] - arrivals[0] >= 5 * 0.080 - 0.04
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert min(gaps) >= 0.04  # each token flushed on its own, not buffered into one write


async def test_per_request_header_overrides(sim: SimServer, http: httpx.AsyncClient) -> None:
    message = await sdk(sim).messages.create(
        model="glm-4.7", max_tokens=64, messages=MSGS, extra_headers={"x-sim-output-tokens": "3"}
    )
    assert message.usage.output_tokens == 3
    response = await post(http, sim, "glm-4.7", headers={"x-sim-latency-ms": "soon"})
    assert_zai_error(response, 400, "invalid_request_error", None)
    response = await post(http, sim, "glm-4.7", headers={"x-sim-output-tokens": "2.5"})
    assert_zai_error(response, 400, "invalid_request_error", None)


async def test_sequential_reuse_of_a_single_slot_is_never_rejected(sim: SimServer) -> None:
    client = sdk(sim)
    for i in range(6):
        if i % 2:
            message = await client.messages.create(model="glm-4.7-flash", max_tokens=8, messages=MSGS)
            assert message.model == "glm-4.7-flash"
        else:
            async with client.messages.stream(model="glm-4.7-flash", max_tokens=8, messages=MSGS) as s:
                assert (await s.get_final_message()).model == "glm-4.7-flash"


# -- concurrency ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "limit"), [("glm-4.5-x", 2), ("glm-4.7-flash", 1)])
async def test_model_limit_rejects_exactly_the_extra_requests(
    sim: SimServer, http: httpx.AsyncClient, model: str, limit: int
) -> None:
    assert sim.settings.limits[model] == limit
    headers = {"x-sim-latency-ms": "250"}
    started = time.monotonic()
    task = asyncio.gather(*(post(http, sim, model, stream=True, headers=headers) for _ in range(limit + 2)))

    async def all_decided() -> bool:
        s = await stats(http, sim)
        return bool(s["models"][model]["rejected"].get("1302") == 2)

    await wait_for(all_decided)
    during = await stats(http, sim)
    # Rejected requests wait out the reject delay without holding a slot.
    assert during["models"][model]["inFlight"] == limit
    assert during["account"]["inFlight"] == limit
    responses = await task
    ok = [r for r in responses if r.status_code == 200]
    rejected = [r for r in responses if r.status_code == 429]
    assert len(ok) == limit
    assert len(rejected) == 2
    for response in rejected:
        body = assert_zai_error(response, 429, "rate_limit_error", "1302")
        assert body["error"]["message"] == (
            "[1302][High concurrency usage of this API, please reduce concurrency or contact customer "
            "service to increase limits]"
        )
        assert "retry-after" not in response.headers
    for response in ok:
        assert sse_events(response.text)[-1][0] == "message_stop"
    assert time.monotonic() - started >= 0.06
    after = await stats(http, sim)
    counters = after["models"][model]
    assert counters == {
        "inFlight": 0,
        "peakInFlight": limit,
        "served": limit,
        "rejected": {"1302": 2},
        "limit": limit,
        "band": 0,
        "hold": 0,
    }
    assert after["requests"] == limit + 2


async def test_rejection_waits_reject_delay(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(reject_delay_ms=200, latency_ms=400)
    holder = asyncio.create_task(post(http, server, "glm-4.7-flash"))
    await wait_for(lambda: _in_flight(http, server, "glm-4.7-flash", 1))
    started = time.monotonic()
    response = await post(http, server, "glm-4.7-flash")
    assert_zai_error(response, 429, "rate_limit_error", "1302")
    assert time.monotonic() - started >= 0.19
    assert (await holder).status_code == 200


async def test_account_limit(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(account_limit=2)
    headers = {"x-sim-latency-ms": "300"}
    responses = await asyncio.gather(
        *(post(http, server, model, headers=headers) for model in ("glm-4.5", "glm-4.5", "glm-4.6"))
    )
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 200, 429]
    rejected = next(r for r in responses if r.status_code == 429)
    assert_zai_error(rejected, 429, "rate_limit_error", "1302")
    s = await stats(http, server)
    assert s["account"] == {"inFlight": 0, "peakInFlight": 2, "limit": 2, "band": 0, "hold": 0, "rejected": 1}
    total_rejected = sum(m["rejected"].get("1302", 0) for m in s["models"].values())
    assert total_rejected == 1


async def test_default_limits_come_from_catalog(sim: SimServer, http: httpx.AsyncClient) -> None:
    s = await stats(http, sim)
    assert {name: m["limit"] for name, m in s["models"].items()} == CAPS  # the early-2026 catalog
    assert s["account"]["limit"] == sum(CAPS.values())


# -- errors --------------------------------------------------------------------------------------------


async def test_refused_model_is_1113_with_retry_after(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(refuse=["glm-4.5-x"], retry_after=7)
    response = await post(http, server, "glm-4.5-x")
    body = assert_zai_error(response, 429, "rate_limit_error", "1113")
    assert body["error"]["message"] == "Insufficient balance or no resource package. Please recharge."
    assert response.headers["retry-after"] == "7"
    with pytest.raises(anthropic.RateLimitError) as info:
        await sdk(server).messages.create(model="glm-4.5-x", max_tokens=8, messages=MSGS)
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["code"] == "1113"
    assert (await stats(http, server))["models"]["glm-4.5-x"]["rejected"] == {"1113": 2}


async def test_unknown_model_is_1211(sim: SimServer, http: httpx.AsyncClient) -> None:
    response = await post(http, sim, "glm-9000")
    body = assert_zai_error(response, 400, "invalid_request_error", "1211")
    assert body["error"]["message"] == "Unknown Model, please check the model code."
    assert (await stats(http, sim))["unknownModels"] == {"glm-9000": 1}


async def test_bad_bodies_are_400(sim: SimServer, http: httpx.AsyncClient) -> None:
    url = sim.anthropic_base_url + "/v1/messages"
    assert_zai_error(await http.post(url, content=b"{nope"), 400, "invalid_request_error", None)
    assert_zai_error(await http.post(url, json={"messages": MSGS}), 400, "invalid_request_error", None)
    assert_zai_error(await http.post(url, json=["glm-4.7"]), 400, "invalid_request_error", None)
    assert_zai_error(await http.get(url), 405, "invalid_request_error", None)
    assert_zai_error(await http.get(sim.base_url + "/nowhere"), 404, "not_found_error", None)


async def test_api_key_is_never_echoed_and_nothing_logged_by_default(
    sim: SimServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="chaos_mode_tools.sim")
    client = anthropic.AsyncAnthropic(
        base_url=sim.anthropic_base_url, api_key="sk-secret-123", max_retries=0, timeout=5.0
    )
    raw = await client.messages.with_raw_response.create(model="glm-4.7", max_tokens=8, messages=MSGS)
    assert raw.status_code == 200
    assert "sk-secret-123" not in raw.http_response.text
    assert not any("sk-secret" in f"{k}: {v}" for k, v in raw.headers.items())
    assert not [r for r in caplog.records if r.name.startswith("chaos_mode_tools.sim")]


async def test_verbose_logs_requests_without_secrets(
    make_sim: MakeSim, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chaos_mode_tools.sim")
    server = await make_sim(verbose=True)
    headers = {"x-api-key": "sk-secret-123", "authorization": "Bearer sk-secret-456"}
    assert (await post(http, server, "glm-4.7", headers=headers)).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "chaos_mode_tools.sim"]
    assert len(lines) == 1
    assert "/api/anthropic/v1/messages" in lines[0] and "glm-4.7" in lines[0] and "200" in lines[0]
    assert "sk-secret" not in lines[0]


# -- faults, count_tokens, stats, reset -----------------------------------------------------------------


async def test_fault_injection(sim: SimServer, http: httpx.AsyncClient) -> None:
    fault = {"model": "glm-4.7", "code": "1308", "status": 429, "count": 2, "retryAfter": 3}
    assert (await http.post(sim.base_url + "/sim/faults", json=fault)).status_code == 200
    assert (await post(http, sim, "glm-4.6")).status_code == 200  # other models unaffected
    for _ in range(2):
        started = time.monotonic()
        response = await post(http, sim, "glm-4.7", stream=True)
        assert time.monotonic() - started < 0.5  # immediately, not after the reject delay
        body = assert_zai_error(response, 429, "rate_limit_error", "1308")
        assert body["error"]["message"].startswith("[1308][Usage limit reached for 5 hour.")
        assert response.headers["retry-after"] == "3"
    assert (await post(http, sim, "glm-4.7")).status_code == 200

    wildcard = {"model": "*", "code": 1312, "status": 529, "message": "[1312][busy]"}
    assert (await http.post(sim.base_url + "/sim/faults", json=wildcard)).status_code == 200
    response = await post(http, sim, "glm-4.5-air")
    body = assert_zai_error(response, 529, "overloaded_error", "1312")
    assert body["error"]["message"] == "[1312][busy]"
    assert "retry-after" not in response.headers
    assert (await post(http, sim, "glm-4.5-air")).status_code == 200

    s = await stats(http, sim)
    assert s["models"]["glm-4.7"]["rejected"] == {"1308": 2}
    assert s["models"]["glm-4.5-air"]["rejected"] == {"1312": 1}
    assert s["pendingFaults"] == []


async def test_bad_fault_is_400(sim: SimServer, http: httpx.AsyncClient) -> None:
    for bad in ({"model": "glm-4.7"}, {"code": "1302", "count": 0}, {"code": "1", "colour": "red"}, "x"):
        response = await http.post(sim.base_url + "/sim/faults", json=bad)
        assert_zai_error(response, 400, "invalid_request_error", None)
    assert sim.state.faults == []


async def test_count_tokens_is_counted_nowhere(sim: SimServer, http: httpx.AsyncClient) -> None:
    body = json.dumps({"model": "glm-4.7", "messages": MSGS * 20}).encode()
    url = sim.anthropic_base_url + "/v1/messages/count_tokens?beta=true"
    response = await http.post(url, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert response.json() == {"input_tokens": len(body) // 4}
    counted = await sdk(sim).messages.count_tokens(model="glm-4.7", messages=MSGS)
    assert counted.input_tokens > 0
    s = await stats(http, sim)
    assert s["requests"] == 0
    assert s["account"]["peakInFlight"] == 0


async def test_stats_and_reset(sim: SimServer, http: httpx.AsyncClient) -> None:
    assert (await post(http, sim, "glm-4.7")).status_code == 200
    await http.post(sim.base_url + "/sim/faults", json={"model": "glm-4.6", "code": "1302"})
    await post(http, sim, "nope")
    s = await stats(http, sim)
    assert s["requests"] == 2
    assert s["models"]["glm-4.7"]["served"] == 1
    assert s["models"]["glm-4.7"]["peakInFlight"] == 1
    assert len(s["pendingFaults"]) == 1

    assert (await http.post(sim.base_url + "/sim/reset")).json() == {"ok": True}
    s = await stats(http, sim)
    assert s["requests"] == 0
    assert s["aborted"] == 0
    assert s["pendingFaults"] == []
    assert s["unknownModels"] == {}
    assert all(
        m["served"] == 0 and m["peakInFlight"] == 0 and m["rejected"] == {} for m in s["models"].values()
    )
    assert (await post(http, sim, "glm-4.6")).status_code == 200  # the fault is gone


# -- robustness ----------------------------------------------------------------------------------------


async def _in_flight(http: httpx.AsyncClient, server: SimServer, model: str, n: int) -> bool:
    s = await stats(http, server)
    return bool(s["models"][model]["inFlight"] == n)


async def test_client_abort_mid_stream_holds_slot_until_abort_detect(
    sim: SimServer, http: httpx.AsyncClient
) -> None:
    body = {"model": "glm-4.7", "max_tokens": 64, "messages": MSGS, "stream": True}
    headers = {"x-sim-output-tokens": "500", "x-sim-token-interval-ms": "10"}
    async with http.stream("POST", sim.anthropic_base_url + "/v1/messages", json=body, headers=headers) as r:
        async for line in r.aiter_lines():
            if '"text_delta"' in line:
                break
    closed = time.monotonic()
    # The upstream has not noticed yet: the dead stream still counts.
    s = await stats(http, sim)
    assert s["models"]["glm-4.7"]["inFlight"] == 1
    assert s["account"]["inFlight"] == 1
    await wait_for(lambda: _in_flight(http, sim, "glm-4.7", 0))
    assert time.monotonic() - closed >= 0.2
    s = await stats(http, sim)
    assert s["account"]["inFlight"] == 0
    assert s["aborted"] == 1
    assert not sim._active


async def test_client_timeout_on_whole_message_releases_slot(sim: SimServer, http: httpx.AsyncClient) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await http.post(
            sim.anthropic_base_url + "/v1/messages",
            json={"model": "glm-4.5-x", "max_tokens": 8, "messages": MSGS},
            headers={"x-sim-latency-ms": "3000"},
            timeout=0.1,
        )
    await wait_for(lambda: _in_flight(http, sim, "glm-4.5-x", 0))
    assert (await stats(http, sim))["aborted"] == 1
    assert not sim._active


async def test_stop_with_stream_in_flight_is_clean(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim()
    body = {"model": "glm-4.7", "max_tokens": 64, "messages": MSGS, "stream": True}
    headers = {"x-sim-output-tokens": "1000", "x-sim-token-interval-ms": "10"}
    waiting = asyncio.create_task(post(http, server, "glm-4.7", headers={"x-sim-latency-ms": "5000"}))
    url = server.anthropic_base_url + "/v1/messages"
    with pytest.raises(httpx.HTTPError):
        async with http.stream("POST", url, json=body, headers=headers) as r:
            async for line in r.aiter_lines():
                if '"text_delta"' in line:
                    started = time.monotonic()
                    await server.stop()
                    assert time.monotonic() - started < 2.0
    with pytest.raises(httpx.HTTPError):
        await waiting
    assert server.state.in_flight == 0
    assert not server._active


# -- the subprocess helper and the CLI ------------------------------------------------------------------


async def test_subprocess_helper_with_cli_options(http: httpx.AsyncClient) -> None:
    settings = SimSettings(**FAST, limits={"glm-4.7": 1, "glm-4.6": 3, "glm-4.5": 10})
    extra = ["--refuse", "glm-4.6", "--retry-after", "2", "--limit", "glm-4.5=4", "--latency-ms", "10"]
    proc = SimProcess(settings, extra_args=extra)
    async with proc:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", proc.base_url)
        async with sdk(proc).messages.stream(model="glm-4.7", max_tokens=8, messages=MSGS) as stream:
            final = await stream.get_final_message()
        assert final.model == "glm-4.7"
        assert final.usage.output_tokens == 5
        response = await http.post(
            proc.anthropic_base_url + "/v1/messages", json={"model": "glm-4.6", "messages": MSGS}
        )
        assert_zai_error(response, 429, "rate_limit_error", "1113")
        assert response.headers["retry-after"] == "2"
        s = (await http.get(proc.base_url + "/sim/stats")).json()
        assert {n: m["limit"] for n, m in s["models"].items()} == {"glm-4.7": 1, "glm-4.6": 3, "glm-4.5": 4}
        assert s["account"]["limit"] == 8
    assert proc.returncode == 0  # stopped by SIGTERM, cleanly
    assert proc.stderr_text() == ""  # nothing logged per request


def test_sim_subprocess_context_manager_sync() -> None:
    with sim_subprocess(SimSettings(**FAST)) as base_url:
        response = httpx.post(
            base_url + "/v1/messages", json={"model": "glm-4.5", "messages": MSGS}, timeout=TIMEOUT
        )
        assert response.status_code == 200
        assert response.json()["model"] == "glm-4.5"
    with pytest.raises(httpx.ConnectError):
        httpx.get(base_url + "/sim/stats", timeout=TIMEOUT)


def test_subprocess_start_failure_is_reported_quickly() -> None:
    proc = SimProcess(extra_args=["--port", "not-a-port"], start_timeout=10)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="not-a-port"):
        proc.start()
    assert time.monotonic() - started < 10
    assert proc.proc is None


def test_cli_settings() -> None:
    settings = settings_from_args(
        ["--port", "0", "--limit", "glm-4.7=1", "--limit", "glm-5=2", "--refuse", "glm-4.6",
         "--refuse", "glm-4.5", "--account-limit", "4", "--reject-delay-ms", "3000"]
    )  # fmt: skip
    assert settings.limits["glm-4.7"] == 1
    assert settings.limits["glm-5"] == 2
    assert settings.limits["glm-4.5-air"] == 5
    assert settings.refuse == ["glm-4.6", "glm-4.5"]
    assert settings.effective_account_limit == 4
    assert settings.reject_delay_ms == 3000 and settings.error_encoding is None
    assert settings_from_args(["--error-encoding", "zstd"]).error_encoding == "zstd"
    assert settings_from_args([]).effective_account_limit == sum(CAPS.values())
    with pytest.raises(SystemExit):
        settings_from_args(["--limit", "glm-4.7"])
    with pytest.raises(SystemExit):
        settings_from_args(["--latency-ms", "-5"])


async def test_the_simulator_serves_https_with_a_certificate(tmp_path: Path) -> None:
    """`--tls-cert` / `--tls-key` (z.ai's TLS for the HTTPS tests): the child says https, a client that
    trusts the CA streams an answer, one that does not is refused."""
    certs = make_certs(tmp_path)
    extra = ["--tls-cert", str(certs.cert), "--tls-key", str(certs.key)]
    assert settings_from_args(extra).scheme == "https" and settings_from_args([]).scheme == "http"
    async with SimProcess(SimSettings(**FAST), extra_args=extra) as proc:
        assert proc.base_url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(certs.ca))
        url = proc.anthropic_base_url.replace("127.0.0.1", "localhost")
        client = anthropic.AsyncAnthropic(
            base_url=url, api_key="test-key", max_retries=0, timeout=5.0,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=trusted, trust_env=False),
        )  # fmt: skip
        async with client, asyncio.timeout(10):
            message = await client.messages.create(model="glm-4.7", max_tokens=10, messages=MSGS)
        assert message.model == "glm-4.7"
        async with httpx.AsyncClient(trust_env=False, timeout=TIMEOUT) as untrusting:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.get(proc.base_url + "/sim/stats")
    with pytest.raises(ValueError, match="tls_key"):
        SimSettings.from_mapping({"tlsKey": str(certs.key)})


def test_settings_from_mapping_accepts_camel_case_and_rejects_unknown_keys() -> None:
    settings = SimSettings.from_mapping({"latencyMs": 5, "abort-detect-ms": 7, "limits": {"glm-4.7": "2"}})
    assert (settings.latency_ms, settings.abort_detect_ms, settings.limits) == (5, 7, {"glm-4.7": 2})
    with pytest.raises(ValueError, match="unknown setting 'latency'"):
        SimSettings.from_mapping({"latency": 5})


# -- the bookkeeping alone -----------------------------------------------------------------------------


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c"])), max_size=200))
def test_state_never_exceeds_limits_and_peak_is_exact(ops: list[tuple[bool, str]]) -> None:
    limits = {"a": 1, "b": 2, "c": 3}
    state = SimState(limits, account_limit=4)
    held = {m: 0 for m in limits}
    peak = {m: 0 for m in limits}
    for acquire, model in ops:
        if acquire:
            expected_ok = held[model] < limits[model] and sum(held.values()) < 4
            assert (state.try_acquire(model) == "ok") == expected_ok
            if expected_ok:
                held[model] += 1
                peak[model] = max(peak[model], held[model])
        elif held[model]:
            state.release(model)
            held[model] -= 1
        snap = state.snapshot()
        assert {m: c["inFlight"] for m, c in snap["models"].items()} == held
        assert {m: c["peakInFlight"] for m, c in snap["models"].items()} == peak
        assert snap["account"]["inFlight"] == sum(held.values()) <= 4


def test_faults_are_consumed_in_order() -> None:
    state = SimState({"m": 1, "n": 1}, 2)
    state.add_fault(Fault.from_json({"model": "m", "code": "1302", "count": 2}))
    state.add_fault(Fault.from_json({"model": "*", "code": "1305"}))
    assert state.take_fault("n") is not None and not any(f.code == "1305" for f in state.faults)
    codes = [f.code if (f := state.take_fault("m")) else None for _ in range(3)]
    assert codes == ["1302", "1302", None]


# -- true limits: held slots, changes on request and on a schedule, random faults -----------------------


def test_held_slots_count_against_the_model_and_the_account() -> None:
    state = SimState({"a": 3, "b": 2}, account_limit=4, hold={"a": 2})
    assert state.try_acquire("a") == "ok"
    assert state.try_acquire("a") == "model"  # 1 ours + 2 held = 3
    assert state.try_acquire("b") == "ok"
    assert state.try_acquire("b") == "account"  # 2 ours + 2 held = 4
    snap = state.snapshot()
    assert (snap["models"]["a"]["hold"], snap["models"]["b"]["hold"]) == (2, 0)
    assert snap["account"] == {
        "inFlight": 2,
        "peakInFlight": 2,
        "limit": 4,
        "band": 0,
        "hold": 2,
        "rejected": 0,
    }
    # Without an account limit of its own the account allows the sum of the model limits, as they change.
    free = SimState({"a": 1, "b": 1}, None)
    assert free.account_limit == 2
    free.apply(LimitChange(limits={"b": 4}), at=1.0)
    assert free.account_limit == 5


def test_without_a_limit_of_its_own_the_account_refuses_nothing_the_models_would_not() -> None:
    # Limits halved while a model runs full: its requests of before run on over its new limit, and another
    # model within its own is served, though the account holds more than the models' new limits add up to.
    state = SimState({"a": 4, "b": 2}, None)
    assert [state.try_acquire("a") for _ in range(4)] == ["ok"] * 4
    state.apply(LimitChange(limits={"a": 2, "b": 1}), at=1.0)
    assert state.account_limit == 3 and state.account_in_flight == 4
    assert state.try_acquire("a") == "model"
    assert state.try_acquire("b") == "ok"
    assert state.try_acquire("b") == "model"
    # With a limit of its own, the account refuses at it whatever the models allow.
    capped = SimState({"a": 4, "b": 2}, 4)
    assert [capped.try_acquire("a") for _ in range(4)] == ["ok"] * 4
    assert capped.try_acquire("b") == "account"


def test_a_limit_change_names_known_models_only_and_keeps_requests_in_flight() -> None:
    state = SimState({"a": 2, "b": 1}, None)
    assert state.try_acquire("a") == state.try_acquire("a") == "ok"
    with pytest.raises(ValueError, match="unknown model"):
        state.apply(LimitChange(limits={"a": 1, "zz": 3}), at=0.5)
    assert state.models["a"].limit == 2 and len(state.limit_changes) == 1  # nothing changed
    state.apply(LimitChange(limits={"a": 1}, account_limit=7, sets_account_limit=True), at=0.5)
    assert state.try_acquire("a") == "model"
    state.release("a")
    state.release("a")  # the two above the new limit end normally
    assert state.try_acquire("a") == "ok"
    assert state.limit_changes == [
        {"at": 0.0, "limits": {"a": 2, "b": 1}, "accountLimit": 3, "hold": {}},
        {"at": 0.5, "limits": {"a": 1, "b": 1}, "accountLimit": 7, "hold": {}},
    ]
    state.reset()
    assert state.limits_doc() == {"limits": {"a": 2, "b": 1}, "accountLimit": 3, "hold": {}}
    assert len(state.limit_changes) == 1


def test_random_faults_follow_their_rates_and_the_seed() -> None:
    rates = {"1302": 0.25, "1305": 0.25}
    state = SimState({"a": 1}, None, fault_rates=rates, fault_seed=5)
    draws = [state.random_fault() for _ in range(4000)]
    assert 0.22 < draws.count("1302") / 4000 < 0.28
    assert 0.22 < draws.count("1305") / 4000 < 0.28
    state.reset()
    assert [state.random_fault() for _ in range(4000)] == draws  # reset draws the same sequence again
    assert SimState({"a": 1}, None).random_fault() is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"hold": {"glm-9": 1}}, "unknown model 'glm-9'"),
        ({"hold": {"glm-4.7": -1}}, "hold.glm-4.7: must be >= 0"),
        ({"hold": {"glm-4.7": "two"}}, "hold.glm-4.7: expected an integer"),
        ({"schedule": [{"limits": {"glm-4.7": 1}}]}, r"schedule\[0\]: expected an object with atSeconds"),
        ({"schedule": [{"atSeconds": -1}]}, r"schedule\[0\]: atSeconds: expected a number >= 0"),
        ({"schedule": [{"atSeconds": 1, "limit": {}}]}, r"schedule\[0\]: unknown keys limit"),
        ({"schedule": [{"atSeconds": 1, "limits": {"glm-9": 1}}]}, "unknown model 'glm-9'"),
        ({"schedule": [{"atSeconds": 1, "accountLimit": 1.5}]}, "accountLimit: expected an integer"),
        ({"schedule": {"atSeconds": 1}}, "schedule: expected a list"),
        ({"faultRates": {"1302": 1.5}}, "fault_rates.1302"),
        ({"faultRates": {"busy": 0.1}}, "fault_rates.busy"),
        ({"faultRates": {"1302": 0.6, "1305": 0.6}}, "add up to more than 1"),
        ({"errorEncoding": "lzma"}, "error_encoding: one of gzip, br, zstd"),
    ],
)
def test_settings_of_true_limits_are_validated(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimSettings.from_mapping(settings)


def test_settings_of_true_limits_round_trip_and_come_from_the_cli() -> None:
    schedule = [{"atSeconds": 2, "limits": {"glm-4.7": 6}}, {"atSeconds": 1, "accountLimit": None}]
    settings = SimSettings.from_mapping({"hold": {"glm-4.6": 1}, "schedule": schedule, "faultSeed": 3})
    assert [c.at_seconds for c in settings.schedule] == [1.0, 2.0]  # in time order
    assert settings.schedule[0].change == LimitChange(account_limit=None, sets_account_limit=True)
    again = SimSettings.from_mapping(json.loads(json.dumps(settings.to_mapping())))
    assert again == settings
    cli = settings_from_args(
        ["--hold", "glm-4.6=1", "--hold", "glm-4.7=2", "--fault-rate", "1305=0.02", "--fault-seed", "9"]
    )
    assert (cli.hold, cli.fault_rates, cli.fault_seed) == ({"glm-4.6": 1, "glm-4.7": 2}, {"1305": 0.02}, 9)
    with pytest.raises(SystemExit):
        settings_from_args(["--hold", "glm-4.6=-1"])
    with pytest.raises(SystemExit):
        settings_from_args(["--fault-rate", "1305=often"])


async def test_held_slots_on_the_wire(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(hold={"glm-4.7-flash": 1, "glm-4.5": 3})
    assert_zai_error(await post(http, server, "glm-4.7-flash"), 429, "rate_limit_error", "1302")
    assert (await post(http, server, "glm-4.5")).status_code == 200
    s = await stats(http, server)
    assert (s["models"]["glm-4.7-flash"]["hold"], s["models"]["glm-4.5"]["hold"]) == (1, 3)
    assert s["models"]["glm-4.7-flash"]["rejected"] == {"1302": 1}
    assert (s["account"]["hold"], s["account"]["peakInFlight"]) == (4, 1)


async def test_post_limits_changes_only_what_it_names(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim()
    url = server.base_url + "/sim/limits"
    change = {"limits": {"glm-4.7": 9}, "accountLimit": 12, "hold": {"glm-4.6": 2}}
    response = await http.post(url, json=change)
    assert response.status_code == 200, response.text
    s = await stats(http, server)
    assert s["models"]["glm-4.7"]["limit"] == 9 and s["models"]["glm-4.6"]["limit"] == 3
    assert s["models"]["glm-4.6"]["hold"] == 2 and s["account"] == {**s["account"], "limit": 12, "hold": 2}
    changes = s["limitChanges"]
    assert [c["accountLimit"] for c in changes] == [28, 12]
    assert changes[1]["limits"]["glm-4.7"] == 9 and changes[1]["hold"] == {"glm-4.6": 2}
    assert 0 <= changes[1]["at"] <= s["elapsedSeconds"]
    # null: no account limit of its own any more (the sum of the model limits).
    assert (await http.post(url, json={"accountLimit": None})).json()["accountLimit"] == 34
    assert (await http.get(url)).json()["limitChanges"] == (await stats(http, server))["limitChanges"]
    for bad, message in (
        ({"limits": {"glm-9": 1}}, "unknown model(s) glm-9"),
        ({"limits": {"glm-4.7": -1}}, "limits.glm-4.7: must be >= 0"),
        ({"limits": {"glm-4.7": True}}, "limits.glm-4.7: expected an integer"),
        ({"hold": ["glm-4.7"]}, "hold: expected an object"),
        ({"accountLimit": "x"}, "accountLimit: expected an integer"),
        ({"limitz": {}}, "unknown keys limitz"),
        ([1], "expected a JSON object"),
    ):
        response = await http.post(url, json=bad)
        assert message in assert_zai_error(response, 400, "invalid_request_error", None)["error"]["message"]
    assert len((await stats(http, server))["limitChanges"]) == 3  # no bad change was applied
    assert (await http.post(url, content=b"{")).status_code == 400


async def test_lowering_a_limit_refuses_new_requests_and_keeps_running_ones(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(latency_ms=400)
    running = asyncio.gather(*(post(http, server, "glm-4.5-x", stream=True) for _ in range(2)))
    await wait_for(lambda: _in_flight(http, server, "glm-4.5-x", 2))
    response = await http.post(server.base_url + "/sim/limits", json={"limits": {"glm-4.5-x": 1}})
    assert response.status_code == 200
    assert_zai_error(await post(http, server, "glm-4.5-x"), 429, "rate_limit_error", "1302")
    assert [r.status_code for r in await running] == [200, 200]
    assert (await post(http, server, "glm-4.5-x", headers={"x-sim-latency-ms": "0"})).status_code == 200


async def test_a_full_account_and_a_full_model_look_the_same(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    # The first request must still run when the account's is sent, after three round trips and two polls:
    # 2 s, not 0.4 s (a hiccup of the machine once let it end first, and the account was not full).
    server = await make_sim(latency_ms=2000, account_limit=2)
    first = asyncio.create_task(post(http, server, "glm-4.7-flash"))
    await wait_for(lambda: _in_flight(http, server, "glm-4.7-flash", 1))
    model_full = await post(http, server, "glm-4.7-flash")
    second = asyncio.create_task(post(http, server, "glm-4.5"))
    await wait_for(lambda: _in_flight(http, server, "glm-4.5", 1))
    account_full = await post(http, server, "glm-4.6")
    assert (await first).status_code == (await second).status_code == 200
    s = await stats(http, server)
    assert s["account"]["rejected"] == 1 and s["models"]["glm-4.7-flash"]["rejected"] == {"1302": 1}

    def wire(response: httpx.Response) -> tuple[int, dict[str, str], dict[str, Any]]:
        headers = {
            k: v for k, v in response.headers.items() if k not in ("date", "request-id", "x-sim-served-model")
        }
        body = response.json()
        del body["request_id"]
        return response.status_code, headers, body

    assert wire(model_full) == wire(account_full)


async def test_random_faults_on_the_wire(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    server = await make_sim(fault_rates={"1305": 1.0})
    started = time.monotonic()
    body = assert_zai_error(await post(http, server, "glm-4.5"), 429, "rate_limit_error", "1305")
    assert "temporarily overloaded" in body["error"]["message"]
    assert time.monotonic() - started >= 0.06  # after the reject delay, like a 1302
    s = await stats(http, server)
    assert s["models"]["glm-4.5"]["rejected"] == {"1305": 1} and s["models"]["glm-4.5"]["served"] == 0
    assert s["faultRates"] == {"1305": 1.0}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_schedule_applies_changes_in_order_on_the_servers_clock(http: httpx.AsyncClient) -> None:
    schedule = [
        {"atSeconds": 2.0, "limits": {"glm-4.7": 3}, "accountLimit": None, "hold": {"glm-4.6": 1}},
        {"atSeconds": 0.0, "hold": {"glm-4.5": 2}},
        {"atSeconds": 1.0, "limits": {"glm-4.7": 6}, "accountLimit": 10},
    ]
    clock = FakeClock()
    server = SimServer(SimSettings.from_mapping({**FAST, "schedule": schedule}), clock=clock)
    await server.start()
    try:

        async def limits() -> tuple[int, int, dict[str, int]]:
            s = await stats(http, server)
            hold = {m: c["hold"] for m, c in s["models"].items() if c["hold"]}
            return s["models"]["glm-4.7"]["limit"], s["account"]["limit"], hold

        assert await limits() == (3, 28, {"glm-4.5": 2})  # the change at 0 s came with the start
        clock.now += 0.999
        server.apply_due_changes()
        assert await limits() == (3, 28, {"glm-4.5": 2})
        clock.now += 0.001
        server.apply_due_changes()
        assert await limits() == (6, 10, {"glm-4.5": 2})
        clock.now += 5.0
        server.apply_due_changes()
        assert await limits() == (3, 28, {"glm-4.5": 2, "glm-4.6": 1})
        s = await stats(http, server)
        assert [c["at"] for c in s["limitChanges"]] == [0.0, 0.0, 1.0, 6.0]
        assert s["elapsedSeconds"] == 6.0
        # A reset restores the first limits and starts the schedule again from now.
        await http.post(server.base_url + "/sim/reset")
        assert await limits() == (3, 28, {"glm-4.5": 2})
        assert [c["at"] for c in (await stats(http, server))["limitChanges"]] == [0.0, 0.0]
    finally:
        await server.stop()
    assert server._timer is None  # stop() cancelled the timer of the next change


async def test_schedule_runs_on_the_event_loop(make_sim: MakeSim, http: httpx.AsyncClient) -> None:
    schedule = [
        ScheduledChange(0.05, LimitChange(limits={"glm-4.7": 5})),
        ScheduledChange(0.1, LimitChange(limits={"glm-4.7": 7})),
    ]
    server = await make_sim(schedule=schedule)

    async def applied() -> bool:
        return len((await stats(http, server))["limitChanges"]) == 3

    await wait_for(applied)
    changes = (await stats(http, server))["limitChanges"]
    assert [c["limits"]["glm-4.7"] for c in changes] == [3, 5, 7]
    assert 0.05 <= changes[1]["at"] <= changes[2]["at"]


async def test_a_cut_answer_breaks_off_mid_way_and_frees_its_slot(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim(fault_rates={"cut": 1.0})
    for stream in (True, False):
        body = {"model": "glm-4.5", "max_tokens": 5, "messages": MSGS, "stream": stream}
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("POST", server.anthropic_base_url + "/v1/messages", json=body) as response:
                assert response.status_code == 200
                await response.aread()
    s = await stats(http, server)
    assert s["brokenAnswers"] == {"cut": 2}
    assert s["models"]["glm-4.5"]["served"] == 2 and s["account"]["inFlight"] == 0


async def test_a_hung_request_is_never_answered_and_ends_when_the_client_leaves(
    make_sim: MakeSim, http: httpx.AsyncClient
) -> None:
    server = await make_sim()
    server.add_fault(Fault(model="glm-4.5", code="hang"))
    with pytest.raises(httpx.ReadTimeout):
        body = {"model": "glm-4.5", "max_tokens": 5, "messages": MSGS}
        await http.post(
            server.anthropic_base_url + "/v1/messages", json=body, timeout=httpx.Timeout(5.0, read=0.3)
        )
    s = await stats(http, server)
    assert s["brokenAnswers"] == {"hang": 1} and s["account"]["inFlight"] == 0
    assert (await post(http, server, "glm-4.5")).status_code == 200  # the next one is answered
    async with asyncio.timeout(5):
        await server.stop()  # nothing left hanging
