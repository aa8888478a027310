"""The mitmproxy adapter (chaos_mode.mitm.addon) hook by hook, with mitmproxy's own test helpers."""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import logging
import socket
import weakref
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
from mitmproxy import exceptions, http
from mitmproxy import flow as mflow
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.net import encoding
from mitmproxy.test import taddons, tflow, tutils

from chaos_mode.config.schema import default_config
from chaos_mode.doors.error_bodies import TRIED_HEADER
from chaos_mode.mitm import addon as addon_module
from chaos_mode.mitm.addon import META, ChaosMode
from chaos_mode.mitm.client_watch import client_alive
from chaos_mode.mitm.flow_view import FlowView
from chaos_mode.request import routed as routed_module
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool_status import served
from support.design_catalog import FIXED_LIMITS
from support.hostile import REFUSAL_HEAD, bomb

CATALOG = default_config().models
HEAVY = {name for name, spec in CATALOG.items() if spec.tier == "HEAVY"}
MEDIUM_UP = HEAVY | {name for name, spec in CATALOG.items() if spec.tier == "MEDIUM"}
ALL = set(CATALOG)
MESSAGES = b"/api/anthropic/v1/messages?beta=true"
CHAT = b"/api/paas/v4/chat/completions"
CODING_CHAT = b"/api/coding/paas/v4/chat/completions"
WAIT = 3.0  # seconds any wait in this module may take before the test fails
ON: dict[str, Any] = {"chaosMode": {"enabled": True}, **FIXED_LIMITS}
TINY: dict[str, Any] = {
    **ON,
    "models": {"tiny": {"tier": "HEAVY", "maxConcurrency": 1, "inputPrice": 1.0, "outputPrice": 2.0}},
}
API_KEY = "sk-ant-api03-SecretValueForTests0123456789"
BEARER = "Bearer SecretBearerTokenForTests9876543210"


class Clock:
    """A monotonic and a wall clock that move only when told."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = 1_757_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


@dataclass
class Env:
    addon: ChaosMode
    tctx: taddons.context
    clock: Clock
    tmp: Path
    caplog: pytest.LogCaptureFixture
    expect_spurious: int = 0
    files: list[Path] = field(default_factory=list)

    def write(self, routing: dict[str, Any] | None, name: str | None = None) -> str:
        path = self.tmp / (name or f"chaos-{len(self.files)}.json")
        path.write_text(json.dumps({"modelRouting": routing or {}}), encoding="utf-8")
        self.files.append(path)
        return str(path)

    def configure(self, routing: dict[str, Any] | None = None, *, enabled: str = "auto") -> None:
        """Apply a config file holding `routing` (None: no file at all)."""
        path = "" if routing is None else self.write(routing)
        self.tctx.configure(self.addon, chaos_config=path, chaos_enabled=enabled, chaos_web="")

    async def request(self, f: http.HTTPFlow) -> None:
        async with asyncio.timeout(WAIT):
            await self.addon.request(f)

    async def response(self, f: http.HTTPFlow) -> None:
        async with asyncio.timeout(WAIT):
            await self.addon.response(f)

    def stats(self) -> dict[str, Any]:
        return self.addon.chaos_stats()

    def in_flight(self, model: str | None = None) -> int:
        return self.addon.pool.in_flight(model)

    def chaos_logs(self) -> list[str]:
        return [r.getMessage() for r in self.caplog.records if r.name.startswith("chaos_mode")]


@pytest.fixture
async def env(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Env]:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    addon = ChaosMode(clock=clock.monotonic, wall_clock=clock.time)
    # No `running()`: no forwarder, so flows go to z.ai directly (here: the test plays z.ai) and z.ai's
    # refusals are judged in the response hook. The forwarder has its own tests.
    with taddons.context(addon) as tctx:
        tctx.configure(addon, chaos_web="", chaos_limits_file=str(tmp_path / "limits.json"))
        environment = Env(addon, tctx, clock, tmp_path, caplog)
        yield environment
        # Every test ends with every slot back, nothing waiting, no release that held nothing,
        # and no internal error swallowed by the addon's safety nets.
        assert addon.pool.in_flight() == 0
        assert addon.pool.first_in_line()[0] == 0
        assert addon.pool.spurious_releases == environment.expect_spurious
        assert addon.forwarder.address is None
        assert not [m for m in environment.chaos_logs() if "internal error" in m]
        addon.done()


# -- flows ----------------------------------------------------------------------------------------------


def message_body(model: str = "claude-opus-4-5", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 256,
        "system": "You are a terse assistant.",
        "messages": [{"role": "user", "content": "héllo"}],
        **extra,
    }


def messages_flow(
    model: str = "claude-opus-4-5",
    *,
    body: dict[str, Any] | None = None,
    content: bytes | None = None,
    method: bytes = b"POST",
    host: str = "api.z.ai",
    path: bytes = MESSAGES,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> http.HTTPFlow:
    if content is None:
        content = json.dumps(body if body is not None else message_body(model)).encode()
    request = tutils.treq(
        method=method,
        host=host,
        port=443,
        scheme=b"https",
        path=path,
        content=content,
        headers=http.Headers(
            [
                (b"host", host.encode()),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode()),
                *headers,
            ]
        ),
    )
    return tflow.tflow(req=request)


def body_of(f: http.HTTPFlow) -> dict[str, Any]:
    data = json.loads(f.request.get_content() or b"")
    assert isinstance(data, dict)
    return data


def meta_of(f: http.HTTPFlow) -> dict[str, Any]:
    meta = f.metadata[META]
    assert isinstance(meta, dict)
    return meta


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> http.Response:
    return http.Response.make(
        status, json.dumps(payload).encode(), {"content-type": "application/json", **(headers or {})}
    )


def message_response(model: str, input_tokens: int = 100, output_tokens: int = 50) -> http.Response:
    return json_response(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        },
    )


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def sse_stream(model: str, input_tokens: int = 120, output_tokens: int = 42) -> bytes:
    start = {"type": "message", "model": model, "usage": {"input_tokens": input_tokens, "output_tokens": 1}}
    return b"".join(
        [
            sse("message_start", {"type": "message_start", "message": start}),
            sse("ping", {"type": "ping"}),
            sse("content_block_delta", {"type": "content_block_delta", "delta": {"text": "hello"}}),
            sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": output_tokens}}),
            sse("message_stop", {"type": "message_stop"}),
        ]
    )


async def serve(env: Env, f: http.HTTPFlow, response: http.Response | None = None) -> None:
    """Play mitmproxy's part after the request hook: the upstream answer arrives, whole."""
    model = f.metadata.get(META, {}).get("model") or "glm-4.6"
    f.response = response if response is not None else message_response(model)
    env.addon.responseheaders(f)
    await env.response(f)


async def until(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


# -- routing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "tier", "allowed"),
    [
        ("claude-opus-4-5", "heavy", HEAVY),
        ("claude-sonnet-4-5-20250929", "medium", MEDIUM_UP),
        ("claude-3-5-haiku-latest", "light", ALL),
    ],
)
async def test_request_is_rewritten_to_a_model_at_or_above_the_floor(
    env: Env, model: str, tier: str, allowed: set[str]
) -> None:
    env.configure(enabled="true")
    capacity = sum(CATALOG[name].max_concurrency for name in allowed)
    flows = [messages_flow(model) for _ in range(capacity)]
    for f in flows:
        await env.request(f)
        meta = meta_of(f)
        chosen = body_of(f)["model"]
        assert chosen in allowed
        assert meta["originalModel"] == model
        assert meta["tier"] == tier
        assert meta["held"] == chosen
        assert f.comment == f"{model} → {chosen} · least-loaded"
    # every eligible slot is taken, none beyond a model's capacity, nothing below the floor
    status = served(pool_status.status(env.addon.pool))["models"]
    assert {name for name, m in status.items() if m["inFlight"]} == allowed
    assert all(m["inFlight"] == (m["capacity"] if n in allowed else 0) for n, m in status.items())
    for f in flows:
        await serve(env, f)


async def test_rewrite_changes_only_the_model_and_fixes_content_length(env: Env) -> None:
    env.configure(enabled="true")
    original = message_body("claude-opus-4-5", stream=True, metadata={"user_id": "u-1"})
    f = messages_flow(body=original)
    await env.request(f)
    body = body_of(f)
    assert body["model"] in HEAVY
    assert {**body, "model": original["model"]} == original
    assert list(body) == list(original)  # key order kept
    assert int(f.request.headers["content-length"]) == len(f.request.raw_content or b"")
    await serve(env, f)


@pytest.mark.parametrize("path", [b"/api/anthropic/v1/messages", b"/v1/messages?beta=true&x=1"])
async def test_messages_path_is_matched_with_or_without_a_query(env: Env, path: bytes) -> None:
    env.configure(enabled="true")
    f = messages_flow(path=path)
    await env.request(f)
    assert body_of(f)["model"] in HEAVY
    assert f.request.path == path.decode()
    await serve(env, f)


async def test_gzip_body_is_decoded_rewritten_and_encoded_again(env: Env) -> None:
    env.configure(enabled="true")
    content = gzip.compress(json.dumps(message_body("claude-opus-4-5")).encode())
    f = messages_flow(content=content, headers=[(b"content-encoding", b"gzip")])
    await env.request(f)
    raw = f.request.raw_content or b""
    assert f.request.headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(raw))["model"] in HEAVY
    assert int(f.request.headers["content-length"]) == len(raw)
    assert meta_of(f)["originalModel"] == "claude-opus-4-5"
    await serve(env, f)


async def test_a_chunked_body_is_rewritten_without_a_content_length(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow(headers=[(b"Transfer-Encoding", b"chunked")])
    del f.request.headers["content-length"]
    await env.request(f)
    assert body_of(f)["model"] in HEAVY
    assert "content-length" not in f.request.headers
    await serve(env, f)


@pytest.mark.parametrize("lengths", [0, 2], ids=["none", "two"])
async def test_a_body_without_one_content_length_gets_exactly_one(env: Env, lengths: int) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    size = str(len(f.request.raw_content or b"")).encode()
    f.request.headers.fields = (
        *((name, value) for name, value in f.request.headers.fields if name != b"content-length"),
        *[(b"Content-Length", size)] * lengths,
    )
    await env.request(f)
    assert f.request.headers.get_all("content-length") == [str(len(f.request.raw_content or b""))]
    await serve(env, f)


async def test_running_freezes_the_start_up_heap_and_done_thaws_it(env: Env) -> None:
    env.addon.running()
    assert gc.get_freeze_count() > 0
    env.addon.done()
    assert gc.get_freeze_count() == 0


async def test_the_session_header_is_read_whatever_its_case(env: Env) -> None:
    env.configure({"chaosMode": {"enabled": True, "stickyConversations": True}})
    flows = [messages_flow(headers=[(b"X-Claude-Code-Session-Id", b"abc-123")]) for _ in range(2)]
    for f in flows:
        await env.request(f)
    assert [meta_of(f)["sticky"] for f in flows] == ["session:abc-123"] * 2
    assert meta_of(flows[0])["model"] == meta_of(flows[1])["model"]
    for f in flows:
        await serve(env, f)


@pytest.mark.parametrize(("header", "session"), [(b" abc-123 ", "abc-123"), (b"  ", None)])
async def test_the_session_is_kept_for_the_queue_even_without_stickiness(
    env: Env, header: bytes, session: str | None
) -> None:
    env.configure(enabled="true")
    f = messages_flow(headers=[(b"x-claude-code-session-id", header)])
    await env.request(f)
    assert (meta_of(f)["session"], meta_of(f)["sticky"]) == (session, None)
    await serve(env, f)


@pytest.mark.parametrize(
    ("method", "host", "path"),
    [
        (b"POST", "api.z.ai", b"/api/anthropic/v1/messages/count_tokens?beta=true"),
        (b"GET", "api.z.ai", MESSAGES),
        (b"POST", "api.anthropic.com", b"/v1/messages?beta=true"),
        (b"POST", "api.openai.com", b"/v1/chat/completions"),
        (b"GET", "api.z.ai", CHAT),
        (b"POST", "api.z.ai", b"/api/paas/v4/embeddings"),
        (b"POST", "api.z.ai", b"/api/anthropic/v1/messages/batches"),
    ],
    ids=[
        "count_tokens",
        "GET",
        "other-host",
        "openai-other-host",
        "openai-GET",
        "openai-other-path",
        "batches",
    ],
)
async def test_other_requests_are_untouched(env: Env, method: bytes, host: str, path: bytes) -> None:
    env.configure(enabled="true")
    f = messages_flow(method=method, host=host, path=path)
    before = f.request.raw_content
    await env.request(f)
    assert f.request.raw_content == before
    assert META not in f.metadata
    assert f.comment == ""
    assert f.response is None
    assert env.in_flight() == 0
    f.response = message_response("claude-opus-4-5")
    env.addon.responseheaders(f)
    await env.response(f)
    assert sum(env.stats()["requests"].values()) == 0


@pytest.mark.parametrize(
    ("file_enabled", "option", "routed"),
    [
        (None, "auto", False),  # the defaults: chaos mode off
        (True, "false", False),  # the option overrides a file that turns it on
        (False, "true", True),  # and one that turns it off
        (True, "auto", True),
    ],
)
async def test_chaos_enabled_option_overrides_the_file(
    env: Env, file_enabled: bool | None, option: str, routed: bool
) -> None:
    routing = None if file_enabled is None else {"chaosMode": {"enabled": file_enabled}}
    env.configure(routing, enabled=option)
    assert env.addon.config.chaos_mode.enabled is routed
    f = messages_flow("claude-opus-4-5")
    before = f.request.raw_content
    await env.request(f)
    assert (f.request.raw_content != before) is routed
    assert env.in_flight() == (1 if routed else 0)
    await serve(env, f)
    requests = env.stats()["requests"]
    assert requests["ok" if routed else "passthrough"] == 1
    assert sum(requests.values()) == 1


BIG = json.dumps(message_body("claude-opus-4-5", padding="x" * 2000)).encode()
PLAIN = json.dumps({"model": "claude-opus-4-5", "max_tokens": 5}).encode()
DEEP = b'{"model": "claude-opus-4-5", "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"


def coded(coding: str) -> tuple[bytes, str] | None:
    return (b"content-encoding", coding.encode()) if coding else None


@pytest.mark.parametrize(
    ("content", "coding", "kind"),
    [
        (b"{not json", "", "not-json"),
        (b"\xff\xfe{}", "", "not-utf8"),
        (b'[{"model": "claude-opus-4-5"}]', "", "not-object"),
        (b'{"messages": []}', "", "no-model"),
        (b'{"model": "  "}', "", "no-model"),
        (BIG, "", "too-large"),
        (b'{"metadata":{"model":"claude-opus-4-5"},"mod\\u0065l":"claude-opus-4"}', "", "escaped-model-key"),
        (b'{"model": "claude-haiku", "model": "claude-opus-4-5"}', "", "duplicate-model"),
        ('{"model":"claude-opus-ü","a":"\\ud800"}'.encode(), "", "lone-surrogate"),
        (DEEP, "", "too-deep"),
        (PLAIN, "utf-8", "bad-encoding"),
        (PLAIN, "x-foo", "bad-encoding"),
        (PLAIN, "gzip, br", "bad-encoding"),
        (PLAIN, "gzip", "bad-encoding"),  # plain JSON labelled as compressed: not ours to fix
        (PLAIN, "deflate", "bad-encoding"),
        (PLAIN, "br", "bad-encoding"),
        (PLAIN, "zstd", "bad-encoding"),
        (gzip.compress(PLAIN)[:-4], "gzip", "bad-encoding"),  # truncated
        (gzip.compress(PLAIN) + b"junk", "gzip", "bad-encoding"),
        (zlib.compress(PLAIN) + b"junk", "deflate", "bad-encoding"),
    ],
    ids=[
        *("not-json", "not-utf8", "array", "no-model", "blank-model", "too-large", "escaped-key"),
        *("duplicate-key", "lone-surrogate", "deep", "utf-8", "x-foo", "two-codings"),
        *("plain-as-gzip", "plain-as-deflate", "plain-as-br", "plain-as-zstd", "truncated-gzip"),
        *("gzip-then-junk", "deflate-then-junk"),
    ],
)
async def test_bad_input_passes_through_untouched_logged_once_and_counted(
    env: Env, content: bytes, coding: str, kind: str
) -> None:
    env.configure({**ON, "streams": {"maxBodyBytes": 1024 if content is BIG else 1 << 20}})
    for round_ in (1, 2):
        f = messages_flow(content=content, headers=filter(None, [coded(coding)]))
        headers = f.request.headers.fields
        await env.request(f)
        assert f.request.raw_content == content
        assert f.request.headers.fields == headers
        assert META not in f.metadata
        assert env.in_flight() == 0
        assert env.stats()["badRequests"] == {kind: round_}
        warnings = [m for m in env.chaos_logs() if "passed through untouched" in m]
        assert len(warnings) == 1, warnings  # the second identical request logs nothing new
        assert f"{kind}: " in warnings[0]
        assert not [r for r in env.caplog.records if r.exc_info]  # a line, not a traceback
        await serve(env, f, message_response("x"))
    assert sum(env.stats()["requests"].values()) == 0


@pytest.mark.parametrize("coding", ["", "identity", "gzip", "GZip ", "deflate", "br", "zstd"])
async def test_an_encoded_body_is_decoded_rewritten_exactly_and_encoded_again(env: Env, coding: str) -> None:
    env.configure(enabled="true")
    plain = '{ "max_tokens" : 5, "model":"claude-opus-4-5" ,"x":"ü\\u00e9"}'.encode()
    name = coding.strip().lower()
    content = plain if name in ("", "identity") else encoding.encode(plain, name)
    f = messages_flow(content=content, headers=filter(None, [coded(coding)]))
    await env.request(f)
    raw = f.request.raw_content or b""
    if coding:
        assert f.request.headers["content-encoding"] == coding
    decoded = raw if name in ("", "identity") else encoding.decode(raw, name)
    model = meta_of(f)["held"]
    assert decoded == plain.replace(b'"claude-opus-4-5"', f'"{model}"'.encode())
    assert int(f.request.headers["content-length"]) == len(raw)
    await serve(env, f)


async def test_each_unknown_model_gets_the_default_tier_and_is_named_once(env: Env) -> None:
    env.configure(enabled="true")
    for name in ("glm-9", "mystery-model-2", "glm-9"):
        f = messages_flow(name)
        await env.request(f)
        assert meta_of(f)["tier"] == "medium"
        assert body_of(f)["model"] in MEDIUM_UP
        await serve(env, f)
    lines = [m for m in env.chaos_logs() if "not in the catalog" in m]
    assert lines == [
        "chaos-mode: model 'glm-9' is not in the catalog: routed as a medium request (tierRules.default)",
        "chaos-mode: model 'mystery-model-2' is not in the catalog: routed as a medium request"
        " (tierRules.default)",
    ]
    assert env.stats()["requests"]["ok"] == 3


# -- exactly-once release ----------------------------------------------------------------------------------


async def test_response_releases_the_slot(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["held"]
    assert env.in_flight(model) == 1
    await serve(env, f)
    assert env.in_flight() == 0
    assert meta_of(f)["held"] is None
    assert meta_of(f)["outcome"] == "ok"


async def test_a_finished_flow_is_not_kept_alive_by_the_addon(env: Env) -> None:
    """The addon's maps are weak: a routed request (or its view) that held its flow strongly kept every
    flow alive forever, about 9 KB a request in the soak."""
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["held"]
    stream = http.Response.make(200, sse_stream(model), {"content-type": "text/event-stream"})
    await serve(env, f, stream)
    assert env.in_flight() == 0 and meta_of(f)["outcome"] == "ok"
    gone = weakref.ref(f)
    del f
    gc.collect()
    assert gone() is None


def test_a_change_heard_once_the_flow_is_gone_shows_nowhere() -> None:
    """A left attempt's stall timer may fire after its request was answered elsewhere and its flow freed:
    that raised ReferenceError in a task, a traceback in the log."""
    f = messages_flow()
    view = FlowView(f)
    del f
    gc.collect()
    view.changed(cast(Any, None))  # nothing to show it on, nothing read of it


async def test_error_before_the_response_releases_at_once(env: Env) -> None:
    env.configure({**ON, "streams": {"abortGraceSeconds": 30}})
    f = messages_flow()
    await env.request(f)
    f.error = mflow.Error("Client disconnected.")
    env.addon.error(f)
    assert env.in_flight() == 0  # no grace: nothing was streamed yet
    assert env.stats()["requests"]["aborted"] == 1


@pytest.mark.parametrize(
    "left",
    [
        "Client disconnected.",
        "stream reset by client (CANCEL)",
        "stream closed by client (H3_REQUEST_CANCELLED)",
    ],
    ids=["http1", "http2-reset", "http3-closed"],
)
async def test_error_mid_stream_releases_after_the_grace(env: Env, left: str) -> None:
    """The client left: its connection closed, or (HTTP/2 and 3) its request's stream reset, the connection
    kept (an SDK cancelling one request)."""
    env.configure({**ON, "streams": {"abortGraceSeconds": 0.05}})
    f = messages_flow()
    await env.request(f)
    f.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    env.addon.responseheaders(f)
    f.error = mflow.Error(left)
    env.addon.error(f)
    assert env.in_flight() == 1  # z.ai may still count the stream for a moment
    assert meta_of(f)["held"] is None  # but the flow no longer holds it: no second release
    await until(lambda: env.in_flight() == 0, timeout=0.5)
    assert env.stats()["requests"]["aborted"] == 1


async def test_error_mid_stream_with_no_grace_releases_at_once(env: Env) -> None:
    env.configure({**ON, "streams": {"abortGraceSeconds": 0}})
    f = messages_flow()
    await env.request(f)
    f.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    env.addon.responseheaders(f)
    f.error = mflow.Error("Server disconnected.")
    env.addon.error(f)
    assert env.in_flight() == 0


async def test_error_after_response_and_a_second_response_release_nothing_more(env: Env) -> None:
    env.configure(enabled="true")
    other = messages_flow()
    await env.request(other)  # another flow holds a slot: a double release would show
    f = messages_flow()
    await env.request(f)
    await serve(env, f)
    f.error = mflow.Error("late")
    env.addon.error(f)
    await env.response(f)
    assert env.in_flight() == 1
    assert env.addon.pool.spurious_releases == 0
    assert env.stats()["requests"]["ok"] == 1
    assert env.stats()["requests"]["aborted"] == 0
    await serve(env, other)


async def test_a_second_response_does_not_count_usage_twice(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    await serve(env, f, message_response(model, 100, 50))
    await env.response(f)
    assert env.stats()["modelDistribution"][model]["tokensOut"] == 50


async def test_flows_the_addon_does_not_hold_release_nothing(env: Env) -> None:
    env.configure(enabled="true")
    held = messages_flow()
    await env.request(held)
    never = messages_flow()  # never reached the request hook
    never.error = mflow.Error("connection refused")
    env.addon.error(never)
    foreign = messages_flow()  # a flow from a previous script instance (or a loaded file)
    foreign.metadata[META] = {"owner": "someone-else", "held": meta_of(held)["held"], "tier": "heavy"}
    foreign.error = mflow.Error("Client disconnected.")
    env.addon.error(foreign)
    foreign.response = message_response("glm-4.6")
    await env.response(foreign)
    assert env.in_flight() == 1
    assert env.addon.pool.spurious_releases == 0
    await serve(env, held)


# -- the queue ------------------------------------------------------------------------------------------


async def test_a_request_waits_for_a_slot_and_proceeds_when_one_is_released(env: Env) -> None:
    env.configure({**TINY, "queue": {"timeoutSeconds": 30}})
    first, second = messages_flow(), messages_flow()
    await env.request(first)
    waiting = asyncio.create_task(env.request(second))
    await until(lambda: env.addon.pool.first_in_line()[0] == 1)
    await asyncio.sleep(0.02)
    assert not waiting.done()
    assert body_of(second)["model"] == "claude-opus-4-5"  # not rewritten while it waits
    env.clock.advance(2.0)
    await serve(env, first)
    async with asyncio.timeout(WAIT):
        await waiting
    assert body_of(second)["model"] == "tiny"
    assert meta_of(second)["waited"] == 2.0
    assert second.comment == "claude-opus-4-5 → tiny · least-loaded · waited 2.0 s"
    assert env.in_flight("tiny") == 1
    await serve(env, second)


async def test_queue_timeout_answers_with_our_own_429(env: Env) -> None:
    env.configure({**TINY, "queue": {"timeoutSeconds": 0.05}})
    first, second = messages_flow(), messages_flow()
    await env.request(first)
    async with asyncio.timeout(WAIT):
        await env.request(second)
    response = second.response
    assert response is not None and response.status_code == 429
    payload = json.loads(response.content or b"")
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "rate_limit_error"
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.headers["content-type"] == "application/json"
    assert "429 from chaos-mode" in second.comment
    assert env.in_flight("tiny") == 1  # still only the first one's
    await env.response(second)
    await serve(env, first)
    assert env.stats()["requests"]["rejected"] == 1
    assert env.stats()["queue"]["timeouts"] == 1


async def one_holding_one_waiting(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> tuple[http.HTTPFlow, http.HTTPFlow, asyncio.Task[None]]:
    """The only slot held by a first flow, a second flow waiting for it in the queue."""
    monkeypatch.setattr(routed_module, "CLIENT_POLL_SECONDS", 0.01)
    env.configure({**TINY, "queue": {"timeoutSeconds": 30}})
    first, second = messages_flow(), messages_flow()
    await env.request(first)
    waiting = asyncio.create_task(env.request(second))
    await until(lambda: env.addon.pool.first_in_line()[0] == 1)
    return first, second, waiting


async def test_a_waiting_request_whose_client_left_is_killed_and_holds_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, waiting = await one_holding_one_waiting(env, monkeypatch)
    second.client_conn.state = ConnectionState.CLOSED
    async with asyncio.timeout(WAIT):
        await waiting
    assert second.error is not None and second.error.msg == mflow.Error.KILLED_MESSAGE
    assert meta_of(second)["held"] is None
    assert meta_of(second)["outcome"] == "aborted"
    assert env.addon.pool.first_in_line()[0] == 0
    env.addon.error(second)
    await serve(env, first)
    assert served(pool_status.status(env.addon.pool))["models"]["tiny"]["dispatched"] == 1
    assert env.stats()["requests"]["aborted"] == 1


async def test_a_replay_waits_for_its_slot_though_its_recorded_client_is_gone(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mitmweb's replay (`replay.client`) runs a copy of a recorded flow, whose client connection closed long
    ago: it is not a client that left, and waits in line like any other."""
    monkeypatch.setattr(routed_module, "CLIENT_POLL_SECONDS", 0.01)
    looks: list[bool] = []
    monkeypatch.setattr(addon_module, "client_alive", lambda f: looks.append(client_alive(f)) or looks[-1])
    env.configure({**TINY, "queue": {"timeoutSeconds": 30}})
    first, replay = messages_flow(), messages_flow()
    replay.is_replay = "request"
    replay.client_conn.state = ConnectionState.CLOSED
    await env.request(first)
    waiting = asyncio.create_task(env.request(replay))
    await until(lambda: len(looks) >= 3)  # the queue looked at the client a few times
    assert looks == [True] * len(looks) and not waiting.done() and replay.error is None
    await serve(env, first)
    async with asyncio.timeout(WAIT):
        await waiting
    assert meta_of(replay)["held"] == "tiny"
    await serve(env, replay)
    assert env.stats()["requests"]["ok"] == 2


async def test_a_waiting_flow_killed_by_the_user_leaves_quietly(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, waiting = await one_holding_one_waiting(env, monkeypatch)
    second.kill()  # what mitmweb's "kill" button does to a live flow
    async with asyncio.timeout(WAIT):
        await waiting
    assert meta_of(second)["held"] is None
    assert meta_of(second)["outcome"] == "aborted"
    env.addon.error(second)
    await serve(env, first)
    assert served(pool_status.status(env.addon.pool))["models"]["tiny"]["dispatched"] == 1


# -- streams and usage ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "content_type", "streamed"),
    [
        (200, "text/event-stream", True),
        (200, "text/event-stream; charset=utf-8", True),
        (200, "application/json", False),
        (429, "text/event-stream", False),
        (529, "application/json", False),
    ],
)
async def test_responseheaders_streams_only_successful_sse(
    env: Env, status: int, content_type: str, streamed: bool
) -> None:
    env.configure({**ON, "streams": {"maxFailovers": 0}})
    f = messages_flow()
    await env.request(f)
    f.response = http.Response.make(status, b"", {"content-type": content_type})
    env.addon.responseheaders(f)
    assert callable(f.response.stream) is streamed
    await env.response(f)


async def test_responseheaders_leaves_flows_it_did_not_route_alone(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow(host="api.anthropic.com")
    await env.request(f)
    f.response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    env.addon.responseheaders(f)
    assert f.response.stream is False


def sse_headers_arrive(env: Env, f: http.HTTPFlow, coding: str | None = None) -> Callable[[bytes], bytes]:
    """Play mitmproxy's part when a 200 SSE answer's headers arrive: the stream callable the addon set."""
    headers = {"content-type": "text/event-stream", **({"content-encoding": coding} if coding else {})}
    f.response = http.Response.make(200, b"", headers)
    env.addon.responseheaders(f)
    stream = f.response.stream
    assert callable(stream)
    return stream


async def test_the_stream_callable_passes_every_chunk_unchanged_and_records_usage(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    stream = sse_headers_arrive(env, f)
    data = sse_stream(model, input_tokens=1_000_000, output_tokens=500_000)
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)] + [b""]
    out = [stream(chunk) for chunk in chunks]
    assert out == chunks
    assert meta_of(f)["usage"] == [1_000_000, 500_000]
    assert meta_of(f)["stopped"] is True
    await env.response(f)
    row = env.stats()["modelDistribution"][model]
    spec = CATALOG[model]
    assert (row["tokensIn"], row["tokensOut"]) == (1_000_000, 500_000)
    assert row["estimatedSpend"] == pytest.approx(spec.input_price + spec.output_price / 2)


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
async def test_a_compressed_stream_passes_unchanged_and_its_usage_is_read_decoded(
    env: Env, coding: str
) -> None:
    """z.ai (or what fronts it) may compress an event stream for a client that accepts it: the client gets
    the bytes as they came, the observer reads them decoded (usage, the model that served, the end)."""
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    stream = sse_headers_arrive(env, f, coding)
    data = encoding.encode(sse_stream(model, input_tokens=300, output_tokens=20), coding)
    chunks = [data[i : i + 5] for i in range(0, len(data), 5)] + [b""]
    assert [stream(chunk) for chunk in chunks] == chunks
    assert meta_of(f)["usage"] == [300, 20] and meta_of(f)["stopped"] is True
    await env.response(f)
    row = env.stats()["modelDistribution"][model]
    assert (row["tokensIn"], row["tokensOut"]) == (300, 20)


async def test_usage_of_a_whole_json_answer_is_recorded(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow("claude-haiku-4-5")
    await env.request(f)
    model = meta_of(f)["model"]
    await serve(env, f, message_response(model, input_tokens=321, output_tokens=45))
    row = env.stats()["modelDistribution"][model]
    assert (row["tokensIn"], row["tokensOut"]) == (321, 45)


async def test_usage_of_a_gzipped_json_answer_is_recorded(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow("claude-haiku-4-5")
    await env.request(f)
    model = meta_of(f)["model"]
    response = message_response(model, input_tokens=77, output_tokens=8)
    response.raw_content = gzip.compress(response.raw_content or b"")
    response.headers["Content-Encoding"] = "gzip"
    await serve(env, f, response)
    row = env.stats()["modelDistribution"][model]
    assert (row["tokensIn"], row["tokensOut"]) == (77, 8)


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
async def test_a_whole_answer_that_decodes_past_the_cap_counts_no_usage_and_says_so(
    env: Env, coding: str
) -> None:
    """Its usage, were it read whole, is 77 and 8: past MAX_USAGE_BODY it is not read, and it goes to the
    client as it came."""
    env.configure(enabled="true")
    f = messages_flow("claude-haiku-4-5")
    await env.request(f)
    model = meta_of(f)["model"]
    response = message_response(model, input_tokens=77, output_tokens=8)
    raw = bomb(coding, response.raw_content or b"", size=64 << 20)
    response.raw_content = raw
    response.headers["Content-Encoding"] = coding
    await serve(env, f, response)
    row = env.stats()["modelDistribution"][model]
    assert (row["tokensIn"], row["tokensOut"]) == (0, 0)
    assert f.response is not None and f.response.raw_content is raw
    assert len([m for m in env.chaos_logs() if "no usage counted" in m]) == 1


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
async def test_a_bombed_refusal_is_read_as_far_as_the_cap_for_its_code(env: Env, coding: str) -> None:
    """A 1302 followed by 64 MiB of NULs once decoded (no forwarder: judged in the response hook)."""
    env.configure({**ON, "streams": {"maxFailovers": 0}})
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    response = json_response(429, {})
    response.raw_content = bomb(coding, REFUSAL_HEAD, b"\0", 64 << 20)
    response.headers["Content-Encoding"] = coding
    await serve(env, f, response)
    assert env.stats()["modelDistribution"][model]["upstreamErrors"] == {"1302": 1}


async def test_usage_of_a_whole_sse_answer_is_recorded(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    f.response = http.Response.make(200, sse_stream(model, 11, 22), {"content-type": "text/event-stream"})
    f.response.stream = False  # as after a failover: the answer arrived whole
    await env.response(f)
    row = env.stats()["modelDistribution"][model]
    assert (row["tokensIn"], row["tokensOut"]) == (11, 22)


# -- the OpenAI door (chat completions) -------------------------------------------------------------------


def chat_body(model: str = "glm-4.7", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 256,
        "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "héllo"}],
        **extra,
    }


def chat_flow(model: str = "glm-4.7", *, path: bytes = CHAT, **extra: Any) -> http.HTTPFlow:
    return messages_flow(body=chat_body(model, **extra), path=path)


def chat_chunk(model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chat_stream(model: str, prompt_tokens: int = 120, completion_tokens: int = 42) -> bytes:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return b"".join(
        [
            chat_chunk(model, {"role": "assistant", "content": ""}),
            chat_chunk(model, {"content": "hello"}),
            chat_chunk(model, {}, "stop"),
            b"data: "
            + json.dumps({"object": "chat.completion.chunk", "choices": [], "usage": usage}).encode(),
            b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )


def chat_response(model: str, prompt_tokens: int, completion_tokens: int) -> http.Response:
    return json_response(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        },
    )


@pytest.mark.parametrize("path", [CHAT, CODING_CHAT, CHAT + b"?x=1"], ids=["paas", "coding", "query"])
async def test_chat_completions_are_routed_by_the_same_pool(env: Env, path: bytes) -> None:
    env.configure(enabled="true")
    f = chat_flow("glm-5.3", path=path)
    raw = f.request.raw_content or b""
    await env.request(f)
    meta = meta_of(f)
    chosen = body_of(f)["model"]
    assert (meta["door"], meta["tier"], meta["held"]) == ("openai", "heavy", chosen)
    assert chosen in HEAVY  # a catalog model's own tier is its floor
    # only the model's bytes changed
    assert f.request.raw_content == raw.replace(b'"glm-5.3"', json.dumps(chosen).encode(), 1)
    assert f.request.headers["content-length"] == str(len(f.request.raw_content or b""))
    await serve(env, f, chat_response(chosen, 3, 4))
    assert env.stats()["requestsByDoor"]["openai"]["ok"] == 1
    assert env.stats()["requestsByDoor"]["anthropic"]["ok"] == 0


async def test_both_doors_share_one_pool_and_its_caps(env: Env) -> None:
    env.configure({**ON, "queue": {"timeoutSeconds": 0.05}})
    capacity = sum(CATALOG[name].max_concurrency for name in HEAVY)
    flows = [chat_flow("glm-5.3") if i % 2 else messages_flow("claude-opus-4-5") for i in range(capacity)]
    for f in flows:
        await env.request(f)
    assert env.in_flight() == capacity
    assert all(env.in_flight(name) == CATALOG[name].max_concurrency for name in HEAVY)
    late = chat_flow("glm-5.4")
    async with asyncio.timeout(WAIT):
        await env.request(late)
    response = late.response
    assert response is not None and response.status_code == 429
    # our 429, in OpenAI's shape
    payload = json.loads(response.content or b"")
    assert set(payload) == {"error"}
    assert payload["error"]["type"] == "rate_limit_error"
    assert payload["error"]["code"] == "rate_limit_exceeded"
    assert payload["error"]["message"].startswith("chaos-mode: no heavy-tier model")
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.headers["content-type"] == "application/json"
    await env.response(late)
    for f in flows:
        await serve(env, f)
    doors = env.stats()["requestsByDoor"]
    assert (doors["openai"]["rejected"], doors["openai"]["ok"]) == (1, capacity // 2)
    assert doors["anthropic"]["ok"] == capacity - capacity // 2
    metrics = env.addon.metrics.render()[0].decode()
    assert (
        'chaos_requests_total{door="openai",model="glm-5.4",outcome="rejected",tier="heavy"} 1.0' in metrics
    )


async def test_a_streamed_chat_answer_holds_its_slot_to_the_end_and_records_usage(env: Env) -> None:
    env.configure(enabled="true")
    f = chat_flow("glm-4.5-flash", stream=True, stream_options={"include_usage": True})
    await env.request(f)
    model = meta_of(f)["model"]
    stream = sse_headers_arrive(env, f)
    data = chat_stream(model, 1_000_000, 500_000)
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    assert [stream(chunk) for chunk in chunks] == chunks
    assert meta_of(f)["usage"] == [1_000_000, 500_000]
    assert meta_of(f)["stopped"] is True  # data: [DONE]
    assert env.in_flight(model) == 1  # held until the flow ends
    assert stream(b"") == b""
    await env.response(f)
    assert env.in_flight(model) == 0
    row = env.stats()["modelDistribution"][model]
    spec = CATALOG[model]
    assert (row["tokensIn"], row["tokensOut"]) == (1_000_000, 500_000)
    assert row["estimatedSpend"] == pytest.approx(spec.input_price + spec.output_price / 2)


@pytest.mark.parametrize("whole", ["json", "sse"])
async def test_usage_of_a_whole_chat_answer_is_recorded(env: Env, whole: str) -> None:
    env.configure(enabled="true")
    f = chat_flow("glm-4.5-air")
    await env.request(f)
    model = meta_of(f)["model"]
    if whole == "json":
        response = chat_response(model, 321, 45)
    else:
        response = http.Response.make(200, chat_stream(model, 321, 45), {"content-type": "text/event-stream"})
        response.stream = False  # as after a failover: the answer arrived whole
    f.response = response
    await env.response(f)
    row = env.stats()["modelDistribution"][model]
    assert (row["tokensIn"], row["tokensOut"]) == (321, 45)


@pytest.mark.parametrize(
    ("body", "code", "out"),
    [
        ({"error": {"code": "1302", "message": "High concurrency usage of this API"}}, "1302", False),
        ({"error": {"code": 1113, "message": "Insufficient balance"}}, "1113", True),
        ({"error": {"code": "1305", "type": "rate_limit_error", "message": "overloaded"}}, "1305", False),
    ],
    ids=["1302", "1113-number", "1305-typed"],
)
async def test_zai_refusals_at_the_openai_door_classify_as_at_the_anthropic_one(
    env: Env, body: dict[str, Any], code: str, out: bool
) -> None:
    env.configure({**ON, "streams": {"maxFailovers": 0}})
    f = chat_flow("glm-4.5")
    await env.request(f)
    model = meta_of(f)["model"]
    await serve(env, f, json_response(429, body, {"retry-after": "7"}))
    row = served(pool_status.status(env.addon.pool))["models"][model]
    assert (row["outOfRotation"] is not None) is out
    assert env.stats()["modelDistribution"][model]["upstreamErrors"] == {code: 1}
    response = f.response
    assert response is not None and response.status_code == 429
    assert response.headers[TRIED_HEADER] == model
    assert response.headers["retry-after"] == "7"
    payload = json.loads(response.content or b"")
    assert set(payload) == {"error"} and payload["error"]["code"] == "rate_limit_exceeded"
    assert env.stats()["requestsByDoor"]["openai"]["rejected"] == 1


async def test_a_bad_chat_body_passes_untouched_with_no_slot(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow(content=b'{"messages": []}', path=CHAT)
    await env.request(f)
    assert f.request.raw_content == b'{"messages": []}'
    assert META not in f.metadata
    assert env.stats()["badRequests"] == {"no-model": 1}
    assert env.in_flight() == 0


# -- z.ai errors, without a failover -----------------------------------------------------------------------


def reset_message(clock: Clock, hours: float) -> str:
    beijing = timezone(timedelta(hours=8))
    reset = datetime.fromtimestamp(clock.wall + hours * 3600, beijing).strftime("%Y-%m-%d %H:%M:%S")
    return f"[1308][Usage limit reached for 5 hour. Your limit will reset at {reset}]"


async def test_1308_pauses_the_account_passes_through_and_later_requests_get_our_429(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    body = {
        "type": "error",
        "error": {"type": "rate_limit_error", "code": "1308", "message": reset_message(env.clock, 3)},
        "request_id": "r-1",
    }
    upstream = json_response(429, body, {"anthropic-ratelimit-requests-remaining": "0"})
    await serve(env, f, upstream)
    assert f.response is upstream  # z.ai's own answer, untouched
    assert meta_of(f)["failovers"] == 0
    pause = served(pool_status.status(env.addon.pool))["accountPause"]
    assert pause is not None and "1308" in pause["reason"]
    assert pause["remaining"] == pytest.approx(3 * 3600, abs=1)
    later = messages_flow("claude-haiku-4-5")
    await env.request(later)
    assert later.response is not None and later.response.status_code == 429
    assert later.response.headers["retry-after"] == "10800"  # to the reset: stop, do not retry
    assert later.response.headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert "account paused" in json.loads(later.response.content or b"")["error"]["message"]
    await env.response(later)
    assert env.stats()["requests"]["rejected"] == 1


@pytest.mark.parametrize(
    ("status", "body", "code", "check"),
    [
        (
            429,
            {"error": {"code": "1302", "message": "High concurrency usage of this API"}},
            "1302",
            "cooldown",
        ),
        (
            429,
            {"type": "error", "error": {"type": "1113", "message": "Insufficient balance."}},
            "1113",
            "out",
        ),
        (
            429,
            {"type": "error", "error": {"type": "rate_limit_error", "message": "[1305][overloaded]"}},
            "1305",
            "cooldown",
        ),
        (529, None, "http-529", "cooldown"),
    ],
    ids=["openai-1302", "old-1113", "code-in-message-1305", "bare-529"],
)
async def test_zai_errors_reach_the_pool_in_every_body_shape(
    env: Env, status: int, body: dict[str, Any] | None, code: str, check: str
) -> None:
    env.configure({**ON, "streams": {"maxFailovers": 0}})
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    content = b"" if body is None else json.dumps(body).encode()
    upstream = http.Response.make(status, content, {"content-type": "application/json", "retry-after": "7"})
    await serve(env, f, upstream)
    row = served(pool_status.status(env.addon.pool))["models"][model]
    if check == "cooldown":
        assert row["cooldownRemaining"] == pytest.approx(7.0)
        assert row["outOfRotation"] is None
    else:
        assert row["outOfRotation"] is not None and "1113" in row["outOfRotation"]
    assert env.stats()["modelDistribution"][model]["upstreamErrors"] == {code: 1}
    # no failover allowed: our 429 names the model tried and keeps z.ai's Retry-After
    assert f.response is not None and f.response.status_code == 429
    assert f.response.headers[TRIED_HEADER] == model
    assert f.response.headers["retry-after"] == "7"
    assert json.loads(f.response.content or b"")["error"]["type"] == "rate_limit_error"
    assert f.marked == ":no_entry:"


async def test_without_a_forwarder_a_refusal_that_would_fail_over_ends_in_our_429(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    first = meta_of(f)["model"]
    await serve(env, f, json_response(429, {"error": {"code": "1302", "message": "busy"}}))
    meta = meta_of(f)
    assert meta["attempted"] == [first]
    assert f.response is not None and f.response.status_code == 429
    assert f.response.headers[TRIED_HEADER] == first
    assert env.stats()["modelDistribution"][first]["upstreamErrors"] == {"1302": 1}
    assert env.stats()["requests"]["rejected"] == 1


async def test_a_client_error_is_not_a_routing_matter(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    model = meta_of(f)["model"]
    upstream = json_response(400, {"type": "error", "error": {"type": "invalid_request_error"}})
    await serve(env, f, upstream)
    assert f.response is upstream
    assert served(pool_status.status(env.addon.pool))["models"][model]["cooldownRemaining"] == 0
    assert env.stats()["requests"]["error"] == 1


async def test_an_infinite_retry_after_does_not_break_routing(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    body = {"type": "error", "error": {"type": "rate_limit_error", "code": "1313", "message": "[1313]"}}
    await serve(env, f, json_response(429, body, {"retry-after": "inf"}))
    later = messages_flow()
    await env.request(later)
    try:
        assert later.response is not None and later.response.status_code == 429
        assert 1 <= int(later.response.headers["retry-after"]) <= 60
    finally:
        if later.response is None:
            later.response = message_response("x")
        await env.response(later)
        env.caplog.clear()


# -- configuration and commands ---------------------------------------------------------------------------


async def test_a_bad_config_file_names_the_option_and_the_key(env: Env) -> None:
    path = env.write({"chaosMode": {"enabled": True, "strategy": "fastest"}})
    with pytest.raises(exceptions.OptionsError, match=r"chaos_config.*chaosMode\.strategy"):
        env.tctx.configure(env.addon, chaos_config=path)


@pytest.mark.parametrize("running", [False, True])
def test_a_bad_config_as_the_script_loads_exits_only_before_the_proxy_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, running: bool
) -> None:
    """At start-up: out with the one line, before mitmproxy's servers say they listen. The script reloaded
    under a running proxy: the line is logged and chaos mode keeps its safe defaults."""
    path = tmp_path / "chaos.yaml"
    path.write_text("modelRouting: {chaosMode: {enabled: true, strategy: fastest}}\n", encoding="utf-8")
    proxy, addon = Proxyserver(), ChaosMode()
    options = {"chaos_config": str(path), "chaos_web": "", "chaos_limits_file": "off"}
    with taddons.context(proxy, addon) as tctx:
        if running:
            proxy.running()
            tctx.configure(addon, **options)
        else:
            with pytest.raises(SystemExit, match=r"^chaos-mode: chaos_config: .*chaosMode\.strategy"):
                tctx.configure(addon, **options)
    assert addon.config == default_config()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    if running:
        assert len(errors) == 1 and errors[0].startswith("chaos-mode: chaos_config: "), errors
        assert "chaosMode.strategy" in errors[0]
    else:
        assert errors == []  # the exit's message is the one line


async def test_a_bad_config_after_a_good_one_keeps_the_good_one(env: Env) -> None:
    env.configure({**ON, "chaosMode": {"enabled": True, "strategy": "round-robin"}})
    good = env.addon.config
    assert good.chaos_mode.strategy == "round-robin"
    for broken in ({"models": {}}, {"queue": {"timeoutSeconds": -1}}, {"nonsense": 1}):
        with pytest.raises(exceptions.OptionsError, match="chaos_config"):
            env.tctx.configure(env.addon, chaos_config=env.write(broken))
        assert env.addon.config == good  # (mitmproxy's rollback reads the good file again)
        assert env.addon.pool.config == good
        assert served(pool_status.status(env.addon.pool))["strategy"] == "round-robin"
    with pytest.raises(exceptions.OptionsError, match="chaos_config"):
        env.tctx.configure(env.addon, chaos_config=str(env.tmp / "missing.yaml"))
    assert env.addon.config == good


async def test_reloading_the_config_keeps_in_flight_counts(env: Env) -> None:
    env.configure(enabled="true")
    flows = [messages_flow() for _ in range(3)]
    for f in flows:
        await env.request(f)
    before = {n: m["inFlight"] for n, m in served(pool_status.status(env.addon.pool))["models"].items()}
    env.configure({"chaosMode": {"strategy": "round-robin"}}, enabled="true")
    assert env.addon.config.chaos_mode.strategy == "round-robin"
    after = {n: m["inFlight"] for n, m in served(pool_status.status(env.addon.pool))["models"].items()}
    assert after == before
    assert env.in_flight() == 3
    for f in flows:
        await serve(env, f)


async def test_chaos_web_rejects_nonsense(env: Env) -> None:
    for value in ("nonsense", "127.0.0.1:99999", "127.0.0.1:http"):
        with pytest.raises(exceptions.OptionsError, match="chaos_web"):
            env.tctx.configure(env.addon, chaos_web=value)


async def test_the_reload_command_keeps_the_config_when_the_file_broke(env: Env) -> None:
    path = Path(env.write({"chaosMode": {"enabled": True, "strategy": "round-robin"}}, "live.json"))
    env.tctx.configure(env.addon, chaos_config=str(path), chaos_enabled="auto")
    good = env.addon.config
    path.write_text("{ this is not json", encoding="utf-8")
    env.addon.reload()
    assert env.addon.config is good
    errors = [r for r in env.caplog.records if r.name == "chaos_mode" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and "not reloaded" in errors[0].getMessage()
    path.write_text(json.dumps({"modelRouting": {"chaosMode": {"strategy": "weighted-random"}}}))
    env.addon.reload()
    assert env.addon.config.chaos_mode.strategy == "weighted-random"
    assert env.addon.config.chaos_mode.enabled is False


async def test_an_edited_config_file_is_read_again_once_it_holds_still(env: Env) -> None:
    """The watch's looks, called here rather than waited for: a broken edit keeps the config and says why
    in one line; a good one is applied and said in one line."""
    path = Path(env.write({"chaosMode": {"enabled": True, "strategy": "round-robin"}}, "live.json"))
    env.tctx.configure(env.addon, chaos_config=str(path), chaos_enabled="auto")
    good = env.addon.config
    env.addon.running()
    env.caplog.clear()
    path.write_text(json.dumps({"modelRouting": {"upstreamHosts": ["https://api.z.ai"]}}), encoding="utf-8")
    env.addon._watch_config()  # the edit seen: it may still be written
    assert env.addon.config is good and env.chaos_logs() == []
    env.addon._watch_config()  # held still: read
    env.addon._watch_config()  # read already
    assert env.addon.config is good
    assert env.chaos_logs() == [
        f"chaos-mode: config not reloaded, the old one stays in force: {path}: modelRouting.upstreamHosts: "
        "'https://api.z.ai' is a URL; write the host name alone: api.z.ai"
    ]
    env.caplog.clear()
    path.write_text(json.dumps({"modelRouting": {"chaosMode": {"strategy": "weighted-random"}}}))
    for _ in range(3):
        env.addon._watch_config()
    assert env.addon.config.chaos_mode.strategy == "weighted-random"
    assert [line for line in env.chaos_logs() if "reloaded" in line] == [
        f"chaos-mode: {path} changed: config reloaded"
    ]
    env.addon.done()


async def test_the_status_command_shows_every_model(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow()
    await env.request(f)
    text = env.tctx.command(env.addon.status)
    assert text == env.addon.status()
    for name in CATALOG:
        assert name in text
    assert "least-loaded" in text and "1/12" in text  # the built-in catalog's 12 slots
    await serve(env, f)


# -- secrets ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
async def test_an_answer_naming_the_requests_key_as_its_model_is_not_learned(
    env: Env, header: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An upstream that echoes the client's key as the model that served: learned, it would be a catalog
    model, in the status, the metrics, the log, the state file and every flow's comment."""
    env.configure(ON)
    value = API_KEY if header == "x-api-key" else BEARER
    key = value.rpartition(" ")[2]
    f = messages_flow(headers=[(header.encode(), value.encode())])
    await env.request(f)
    await serve(env, f, message_response(f"glm-{key}"))
    assert key not in f.comment and key not in json.dumps(env.stats())
    assert key not in json.dumps(env.addon.pool.learned.dump())
    assert "names the request's key as its model: not learned" in caplog.text and key not in caplog.text


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
async def test_a_request_naming_its_own_key_as_the_model_passes_untouched_and_the_key_is_shown_nowhere(
    env: Env, header: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key pasted into the model field: as an unknown name it reached the log, the comment and the flow's
    metadata; it passes through as bad input instead, z.ai's answer its own."""
    env.configure(ON)
    value = API_KEY if header == "x-api-key" else BEARER
    key = value.rpartition(" ")[2]
    f = messages_flow(key, headers=[(header.encode(), value.encode())])
    content = f.request.raw_content
    await env.request(f)
    assert f.request.raw_content == content and META not in f.metadata and env.in_flight() == 0
    assert env.stats()["badRequests"] == {"key-as-model": 1}
    assert "key-as-model" in f.comment and key not in f.comment and key not in json.dumps(env.stats())
    assert "key-as-model" in caplog.text and key not in caplog.text


async def test_usage_is_counted_by_a_served_name_only_while_the_catalog_holds_it(env: Env) -> None:
    """A name z.ai gives that is not learned (here one no alias may take, "*"; past the 256 names learned,
    any) counts by the name asked: one entry per name would grow the quota's estimate without end."""
    env.configure({**ON, "quota": {"unit": "credits"}})
    f = messages_flow("claude-haiku-4-5")
    await env.request(f)
    model = meta_of(f)["model"]
    await serve(env, f, message_response("*never-a-catalog-model", input_tokens=10, output_tokens=5))
    estimate = env.addon.pool.quota.status()["estimate"]
    assert list(estimate["byModel"]) == [model] and estimate["assumedWeights"] in ([], [model])
    assert "*never-a-catalog-model" not in env.stats()["modelDistribution"]


async def test_a_long_session_header_is_kept_as_its_digest(env: Env) -> None:
    """Claude Code's session id is a UUID; a header of a megabyte was kept whole, up to 10,000 of them."""
    env.configure(ON)
    for session in (b"s" * (1 << 20), b"0b8c7d1e-uuid"):
        f = messages_flow(headers=[(b"x-claude-code-session-id", session)])
        await env.request(f)
        await serve(env, f)
    kept = list(env.addon.pool.shares._served)
    assert len(kept) == 2 and kept[1] == "0b8c7d1e-uuid" and len(kept[0]) == len("sha256:") + 32


async def test_credentials_never_leak_into_logs_comments_stats_metrics_or_the_panel(env: Env) -> None:
    env.configure({**ON, "streams": {"maxFailovers": 0}, "queue": {"timeoutSeconds": 0.01}})
    secret_headers = [(b"x-api-key", API_KEY.encode()), (b"authorization", BEARER.encode())]
    comments = []
    # routed, answered
    f = messages_flow(headers=secret_headers)
    await env.request(f)
    await serve(env, f)
    comments.append(f.comment)
    # routed, refused by z.ai, turned into our 429
    f = messages_flow(headers=secret_headers)
    await env.request(f)
    await serve(env, f, json_response(429, {"error": {"code": "1302", "message": "busy"}}))
    comments.append(f.comment)
    # bad input holding the key in its body
    f = messages_flow(content=b"not json " + API_KEY.encode(), headers=secret_headers)
    await env.request(f)
    comments.append(f.comment)
    # aborted mid-way
    f = messages_flow(headers=secret_headers)
    await env.request(f)
    f.error = mflow.Error("Client disconnected.")
    env.addon.error(f)
    comments.append(f.comment)
    places = {
        "logs": env.caplog.text,
        "comments": "\n".join(comments),
        "stats": json.dumps(env.stats()),
        "metrics": env.addon.metrics.render()[0].decode(),
        "panel": env.addon.status(),
    }
    for where, text in places.items():
        for secret in (API_KEY, BEARER, BEARER.split()[1], "SecretValue"):
            assert secret not in text, f"{secret!r} leaked into the {where}"


@pytest.mark.parametrize("value", ["maybe", "on", "yes", "1", "True", ""])
async def test_chaos_enabled_refuses_what_it_does_not_know(env: Env, value: str) -> None:
    env.configure(enabled="true")
    with pytest.raises(
        exceptions.OptionsError, match=r"^chaos_enabled: must be one of auto, true, false, not"
    ):
        env.tctx.configure(env.addon, chaos_enabled=value)
    assert env.addon.config.chaos_mode.enabled is True  # the value in force stays


async def test_the_start_up_line_says_when_the_config_replaces_the_catalog(env: Env) -> None:
    env.configure(ON)
    assert not [m for m in env.chaos_logs() if "replace the built-in catalog" in m]
    env.configure(TINY)
    lines = [m for m in env.chaos_logs() if m.startswith("chaos mode on")]
    assert lines[-1] == (
        "chaos mode on: least-loaded over 1 models (the config's models replace the built-in catalog), "
        "1 slots (fixed)"
    )


@pytest.mark.parametrize(
    ("listen_host", "mode", "exposed"),
    [
        ("", "regular", ["all interfaces"]),  # mitmproxy's default
        ("0.0.0.0", "regular", ["0.0.0.0"]),
        ("192.0.2.7", "reverse:https://api.z.ai", ["192.0.2.7"]),
        ("127.0.0.1", "regular", []),
        ("localhost", "regular", []),
        ("::1", "regular", []),
        ("127.0.0.1", "regular@0.0.0.0:8081", ["0.0.0.0"]),  # a mode's own listen address wins
    ],
)
async def test_a_proxy_listening_beyond_loopback_says_so_once(
    env: Env, listen_host: str, mode: str, exposed: list[str]
) -> None:
    env.tctx.configure(env.addon, listen_host=listen_host, mode=[mode])
    env.addon.running()
    warnings = [m for m in env.chaos_logs() if "not only loopback" in m]
    assert env.stats()["exposedListen"] == exposed
    if exposed:
        assert warnings == [
            f"chaos-mode: the proxy listens on {exposed[0]}, not only loopback: anyone who can reach this "
            "machine can send requests through it; add --listen-host 127.0.0.1 unless that is meant"
        ]
    else:
        assert warnings == []
    env.addon.done()


async def test_a_dashboard_port_in_use_is_one_warning_naming_the_option(env: Env) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env.tctx.configure(env.addon, chaos_web=f"127.0.0.1:{port}")
        env.addon.running()
        lines = [m for m in env.chaos_logs() if "dashboard" in m]
        assert len(lines) == 1
        assert lines[0].startswith(f"chaos-mode: dashboard not started, cannot listen on 127.0.0.1:{port} (")
        assert lines[0].endswith(
            f"the proxy runs without it. Choose another address with --set chaos_web=127.0.0.1:{port + 1}, "
            "or --set chaos_web= for none"
        )
        assert not [r for r in env.caplog.records if r.levelno >= logging.ERROR]  # no exit at start-up
        env.addon.done()


# -- the model that served -------------------------------------------------------------------------------


async def test_an_answer_naming_another_model_folds_the_name_and_counts_on_the_served_one(env: Env) -> None:
    env.configure(enabled="true")
    f = messages_flow("claude-haiku-4-5")
    await env.request(f)
    asked = meta_of(f)["model"]
    await serve(env, f, message_response("glm-9-served", input_tokens=11, output_tokens=2))
    status = env.stats()["modelDistribution"]
    assert asked not in status and asked in status["glm-9-served"]["aliases"]
    assert (status["glm-9-served"]["tokensIn"], status["glm-9-served"]["tokensOut"]) == (11, 2)
    assert f.comment.startswith(f"claude-haiku-4-5 → glm-9-served (asked as {asked}) · ")


async def test_an_answer_to_a_body_changed_after_routing_teaches_no_alias(env: Env) -> None:
    """The user edited the intercepted request's model in mitmweb (or `modify_body` did): z.ai's answer
    names the model the edit asked for, not one serving under the name routed, which stays in rotation."""
    env.configure(enabled="true")
    f = messages_flow("claude-haiku-4-5")
    await env.request(f)
    asked = meta_of(f)["model"]
    edited = body_of(f) | {"model": "glm-4.6v-edited"}
    f.request.content = json.dumps(edited).encode()
    await serve(env, f, message_response("glm-4.6v-edited"))
    status = env.stats()["modelDistribution"]
    assert asked in status and "glm-4.6v-edited" not in status
    assert env.addon.pool.learned.version[1] == 0  # no alias learned


@pytest.mark.parametrize("named", [None, 7, "", "two words"])
async def test_an_answer_naming_no_readable_model_counts_by_the_name_asked_with_one_warning(
    env: Env, named: object
) -> None:
    env.configure(enabled="true")
    for _ in range(2):
        f = messages_flow("claude-haiku-4-5")
        await env.request(f)
        model = meta_of(f)["model"]
        response = message_response(model, input_tokens=5, output_tokens=1)
        body = json.loads(response.raw_content or b"")
        body["model"] = named
        response.raw_content = json.dumps(body).encode()
        await serve(env, f, response)
        assert model in env.stats()["modelDistribution"]  # not folded
    assert len([m for m in env.chaos_logs() if "names no readable model" in m]) == 1


@pytest.mark.parametrize("door", ["anthropic", "openai"])
@pytest.mark.parametrize("streamed", [True, False])
async def test_on_a_credit_plan_each_answer_counts_its_credits_cached_input_included(
    env: Env, door: str, streamed: bool
) -> None:
    """No key, `quota.unit: credits`: the answer's fresh, cached and output tokens by the served model's
    weights (the built-in catalog's: GLM-5.3's, the heaviest, for every model)."""
    env.configure({**ON, "quota": {"unit": "credits"}})
    f = messages_flow("claude-haiku-4-5") if door == "anthropic" else chat_flow("glm-5.3-flash")
    await env.request(f)
    model = meta_of(f)["model"]
    if door == "anthropic":
        usage = {"input_tokens": 300, "cache_read_input_tokens": 1700, "output_tokens": 50}
        if streamed:
            body = sse(
                "message_start", {"type": "message_start", "message": {"model": model, "usage": usage}}
            )
            body += sse("message_stop", {"type": "message_stop"})
        else:
            body = json.dumps({"type": "message", "model": model, "usage": usage}).encode()
    else:
        usage = {
            "prompt_tokens": 2000,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 1700},
        }
        chunk = {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
        whole = {"object": "chat.completion", "model": model, "choices": [], "usage": usage}
        body = (
            f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
            if streamed
            else json.dumps(whole).encode()
        )
    if streamed:
        stream = sse_headers_arrive(env, f)
        stream(body)
        stream(b"")
    else:
        f.response = http.Response.make(200, body, {"content-type": "application/json"})
    await env.response(f)
    estimate = env.addon.pool.quota.status()["estimate"]
    assert estimate["unit"] == "credits"
    assert estimate["units"] == pytest.approx(0.3 * 6.9 + 1.7 * 1.7 + 0.05 * 24, abs=0.01)
    assert estimate["assumedWeights"] == ([] if model == "glm-5.3" else [model])
