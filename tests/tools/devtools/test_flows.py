"""The recorded flows of flows/ (chaos_mode_tools.devtools.record): redacted, replayed offline, replayed
live."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mitmproxy import flow as mflow
from mitmproxy import http, io
from mitmproxy.test import taddons, tflow, tutils

from chaos_mode.config.schema import parse_config
from chaos_mode.mitm.addon import META, ChaosMode
from chaos_mode_tools.devtools.processes import ADDON_DIR
from chaos_mode_tools.devtools.record import (
    REDACTED,
    SCENARIOS,
    SECRET_REQUEST_HEADERS,
    TEST_API_KEY,
    proxy_config,
    redact_file,
)
from chaos_mode_tools.sim import SimServer, SimSettings

FLOWS = Path(__file__).resolve().parents[3] / "flows"
KEY_SHAPE = re.compile(rb"sk-[A-Za-z0-9]{12,}")
CATALOG = parse_config({"modelRouting": proxy_config()}).models  # the design's, as recorded
HEAVY = {name for name, spec in CATALOG.items() if spec.tier == "HEAVY"}
MEDIUM_UP = HEAVY | {name for name, spec in CATALOG.items() if spec.tier == "MEDIUM"}
REPLAY_TIMEOUT = 30.0


def load(name: str) -> list[http.HTTPFlow]:
    with (FLOWS / f"{name}.mitm").open("rb") as handle:
        flows = list(io.FlowReader(handle).stream())
    assert flows and all(isinstance(f, http.HTTPFlow) for f in flows)
    return [f for f in flows if isinstance(f, http.HTTPFlow)]


def recorded_meta(f: http.HTTPFlow) -> dict[str, Any]:
    meta = f.metadata[META]
    assert isinstance(meta, dict)
    return meta


def request_json(request: http.Request) -> dict[str, Any]:
    data = json.loads(request.get_content() or b"")
    assert isinstance(data, dict)
    return data


def as_the_client_sent_it(f: http.HTTPFlow) -> http.HTTPFlow:
    """A copy of a recorded flow with the request as the client sent it: its own model, no metadata."""
    copy = f.copy()
    meta = copy.metadata.pop(META, None)
    if isinstance(meta, dict):
        body = request_json(copy.request)
        body["model"] = meta["originalModel"]
        copy.request.set_content(json.dumps(body).encode())  # encoded again (gzip) as it came
    copy.metadata.clear()
    copy.comment = ""
    copy.marked = ""
    return copy


# -- (a) no credentials in any file -------------------------------------------------------------------------


def test_every_scenario_has_a_file_and_every_file_a_scenario() -> None:
    assert {p.stem for p in FLOWS.glob("*.mitm")} == set(SCENARIOS)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_file_holds_a_credential(name: str) -> None:
    data = (FLOWS / f"{name}.mitm").read_bytes()
    assert TEST_API_KEY.encode() not in data
    assert KEY_SHAPE.search(data) is None
    assert len(data) < 20_000  # small files
    for f in load(name):
        for header in SECRET_REQUEST_HEADERS:
            assert all(value == REDACTED for value in f.request.headers.get_all(header))
        if f.response is not None:
            assert all(value == REDACTED for value in f.response.headers.get_all("set-cookie"))


def test_credential_headers_were_sent_and_then_redacted() -> None:
    (f,) = load("non_streamed")
    for header in ("x-api-key", "authorization", "cookie"):
        assert f.request.headers.get_all(header) == [REDACTED]
    (streamed,) = load("streamed_success")  # the anthropic SDK sends its key as Authorization
    assert streamed.request.headers.get_all("authorization") == [REDACTED]


def test_redact_file_replaces_every_credential_value(tmp_path: Path) -> None:
    request = tutils.treq(
        headers=http.Headers(
            [
                (b"x-api-key", TEST_API_KEY.encode()),
                (b"Authorization", b"Bearer " + TEST_API_KEY.encode()),
                (b"proxy-authorization", b"Basic dXNlcjpwYXNz"),
                (b"cookie", b"a=1"),
                (b"cookie", b"b=2"),
                (b"x-claude-code-session-id", b"kept"),
            ]
        )
    )
    response = tutils.tresp(headers=http.Headers([(b"set-cookie", b"s=secret"), (b"server", b"kept")]))
    source, target = tmp_path / "raw.mitm", tmp_path / "clean.mitm"
    with source.open("wb") as handle:
        io.FlowWriter(handle).add(tflow.tflow(req=request, resp=response))
    assert redact_file(source, target) == 1
    data = target.read_bytes()
    for secret in (TEST_API_KEY.encode(), b"dXNlcjpwYXNz", b"a=1", b"b=2", b"s=secret"):
        assert secret not in data
    with target.open("rb") as handle:
        (f,) = list(io.FlowReader(handle).stream())
    assert isinstance(f, http.HTTPFlow) and f.response is not None
    assert f.request.headers.get_all("cookie") == [REDACTED, REDACTED]
    assert f.request.headers["x-claude-code-session-id"] == "kept"
    assert f.response.headers["set-cookie"] == REDACTED
    assert f.response.headers["server"] == "kept"


# -- what was recorded ---------------------------------------------------------------------------------------


def test_the_recorded_failover_flows_say_so() -> None:
    for name, code in (("failover_1302", "1302"), ("refused_1113", "1113")):
        (f,) = load(name)
        meta = recorded_meta(f)
        failed, served = meta["attempted"]
        assert meta["failovers"] == 1
        assert {failed, served} <= HEAVY and failed != served
        assert meta["model"] == served
        assert f"failover from {failed} ({code})" in f.comment
        assert f.response is not None and f.response.status_code == 200
        assert f.response.headers["x-sim-served-model"] == served
        assert request_json(f.request)["model"] == served


def test_the_recorded_streamed_flow_kept_its_body_and_usage() -> None:
    (f,) = load("streamed_success")
    meta = recorded_meta(f)
    assert meta["originalModel"].startswith("claude-sonnet")
    assert meta["stopped"] is True and meta["usage"][1] > 0
    assert f.response is not None and b"message_stop" in (f.response.raw_content or b"")


def test_the_recorded_abort_flow_ended_in_an_error() -> None:
    (f,) = load("client_abort")
    assert f.error is not None and f.response is not None
    assert recorded_meta(f)["outcome"] == "aborted"


# -- (b) every flow replayed offline through the hooks ------------------------------------------------------


@pytest.fixture
async def addon(tmp_path: Path) -> AsyncIterator[ChaosMode]:
    chaos = ChaosMode()
    path = tmp_path / "chaos.json"
    path.write_text(json.dumps({"modelRouting": proxy_config()}), encoding="utf-8")
    with taddons.context(chaos) as tctx:
        tctx.configure(chaos, chaos_config=str(path), chaos_web="", chaos_limits_file="off")
        yield chaos
        assert chaos.pool.in_flight() == 0
        assert chaos.pool.spurious_releases == 0
        chaos.done()


async def replay_offline(addon: ChaosMode, recorded: http.HTTPFlow) -> http.HTTPFlow:
    """Run the hooks mitmproxy would have run for this flow, in the order its recorded state implies."""
    f = as_the_client_sent_it(recorded)
    response, error = f.response, f.error
    f.response, f.error, f.live = None, None, True
    await addon.request(f)
    if response is not None and f.response is None:
        body = response.raw_content or b""
        # The recording's answer, as the model chosen now would give it: z.ai names the model that served.
        routed = META in f.metadata
        asked = request_json(recorded.request).get("model") if routed else None
        chosen = request_json(f.request).get("model") if routed else None
        if asked != chosen and not response.headers.get("content-encoding"):
            body = body.replace(f'"model":"{asked}"'.encode(), f'"model":"{chosen}"'.encode())
            body = body.replace(f'"model": "{asked}"'.encode(), f'"model": "{chosen}"'.encode())
            response.set_content(None)
            response.raw_content = body
        f.response = response
        addon.responseheaders(f)
        stream = f.response.stream
        if callable(stream):
            for i in range(0, len(body), 97):  # network reads never line up with events
                assert stream(body[i : i + 97]) == body[i : i + 97]
            if error is None:
                stream(b"")
    if error is not None:
        f.error = mflow.Error(error.msg)
        addon.error(f)
    else:
        await addon.response(f)
    return f


def routed_to(tier: set[str], original: str) -> Callable[[http.HTTPFlow, ChaosMode], None]:
    def check(f: http.HTTPFlow, addon: ChaosMode) -> None:
        meta = f.metadata[META]
        assert meta["originalModel"] == original
        assert meta["model"] in tier
        assert request_json(f.request)["model"] == meta["model"]
        assert f.comment.startswith(f"{original} → {meta['model']} · ")
        assert meta["held"] is None

    return check


def check_streamed(f: http.HTTPFlow, addon: ChaosMode) -> None:
    routed_to(MEDIUM_UP, "claude-sonnet-4-5")(f, addon)
    meta = f.metadata[META]
    assert meta["stopped"] is True
    assert meta["usage"] == recorded_meta(load("streamed_success")[0])["usage"]
    assert meta["outcome"] == "ok"
    row = addon.chaos_stats()["modelDistribution"][meta["model"]]
    assert (row["tokensIn"], row["tokensOut"]) == tuple(meta["usage"])


def check_non_streamed(f: http.HTTPFlow, addon: ChaosMode) -> None:
    routed_to(set(CATALOG), "claude-haiku-4-5")(f, addon)
    meta = f.metadata[META]
    assert meta["outcome"] == "ok"
    assert addon.chaos_stats()["modelDistribution"][meta["model"]]["tokensOut"] > 0


def check_heavy_ok(f: http.HTTPFlow, addon: ChaosMode) -> None:
    routed_to(HEAVY, "claude-opus-4-5")(f, addon)
    assert f.metadata[META]["outcome"] == "ok"
    assert f.metadata[META]["failovers"] == 0  # offline, the answer is the recorded 200


def check_abort(f: http.HTTPFlow, addon: ChaosMode) -> None:
    routed_to(MEDIUM_UP, "claude-sonnet-4-5")(f, addon)
    assert f.metadata[META]["outcome"] == "aborted"
    assert addon.chaos_stats()["requests"]["aborted"] == 1


def check_gzip(f: http.HTTPFlow, addon: ChaosMode) -> None:
    routed_to(MEDIUM_UP, "claude-sonnet-4-5")(f, addon)
    assert f.request.headers["content-encoding"] == "gzip"
    raw = f.request.raw_content or b""
    assert json.loads(gzip.decompress(raw))["model"] == f.metadata[META]["model"]
    assert int(f.request.headers["content-length"]) == len(raw)


def check_untouched(f: http.HTTPFlow, addon: ChaosMode) -> None:
    assert META not in f.metadata
    assert f.comment == ""
    assert sum(addon.chaos_stats()["requests"].values()) == 0


OFFLINE: dict[str, Callable[[http.HTTPFlow, ChaosMode], None]] = {
    "streamed_success": check_streamed,
    "non_streamed": check_non_streamed,
    "failover_1302": check_heavy_ok,
    "refused_1113": check_heavy_ok,
    "client_abort": check_abort,
    "gzip_body": check_gzip,
    "not_zai": check_untouched,
}


def test_every_scenario_has_an_offline_expectation() -> None:
    assert set(OFFLINE) == set(SCENARIOS)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_offline_replay_through_the_hooks(addon: ChaosMode, name: str) -> None:
    for recorded in load(name):
        before = recorded.request.raw_content
        f = await replay_offline(addon, recorded)
        OFFLINE[name](f, addon)
        if name == "not_zai":
            assert f.request.raw_content == before


# -- (c) mitmdump -n -C: the recorded requests sent again, through the addon, to a fresh simulator ----------


def _mitmdump() -> str:
    candidate = Path(sys.executable).with_name("mitmdump")
    return str(candidate) if candidate.exists() else "mitmdump"


async def test_client_replay_with_mitmdump_against_a_fresh_simulator(tmp_path: Path) -> None:
    sim = SimServer(SimSettings(latency_ms=5, token_interval_ms=1, output_tokens=4, reject_delay_ms=0))
    await sim.start()
    try:
        flows = [as_the_client_sent_it(f) for name in SCENARIOS for f in load(name)]
        for f in flows:
            f.request.port = sim.port  # the recording's simulator had another port
            f.request.headers.pop("x-sim-token-interval-ms", None)
        messages = [f for f in flows if f.request.path.split("?")[0].endswith("/v1/messages")]
        assert len(messages) == 6
        assert any(request_json(f.request)["model"].startswith("claude-") for f in messages)
        replay = tmp_path / "replay.mitm"
        with replay.open("wb") as handle:
            writer = io.FlowWriter(handle)
            for f in flows:
                writer.add(f)
        config = tmp_path / "chaos.json"
        config.write_text(json.dumps({"modelRouting": proxy_config()}), encoding="utf-8")
        proc = await asyncio.create_subprocess_exec(
            _mitmdump(),
            "-n",
            "-C",
            str(replay),
            "-s",
            str(Path(ADDON_DIR) / "chaos_addon.py"),
            "--set",
            f"chaos_config={config}",
            "--set",
            "chaos_web=",
            "--set",
            "flow_detail=0",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(REPLAY_TIMEOUT):
                output, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        text = output.decode(errors="replace")
        assert proc.returncode == 0, text
        assert "Traceback" not in text and "internal error" not in text, text
        async with httpx.AsyncClient(timeout=5.0) as client:
            stats = (await client.get(sim.base_url + "/sim/stats")).json()
        assert stats["requests"] == len(messages)
        assert stats["unknownModels"] == {}  # every claude-* name was rewritten to a glm model
        served = sum(model["served"] for model in stats["models"].values())
        assert served >= len(messages) - 1  # (the simulator may refuse the gzip body: it does not inflate)
        assert stats["account"]["inFlight"] == 0
    finally:
        await sim.stop(timeout=2.0)
