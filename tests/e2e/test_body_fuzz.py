"""Fuzzing request bodies through a real mitmdump (issue 13): a valid request reaches the upstream with
the bytes of its top-level `model` value changed and no other byte; anything else reaches it byte for
byte, takes no slot and is counted by kind; nothing logs a traceback.

The upstream is an echo server on loopback that answers every request with exactly the bytes it received,
so the client sees what the upstream got. One proxy serves every example.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chaos_mode_tools.devtools.processes import ProxyProcess
from support.design_catalog import DESIGN_MODELS

from .support import HAIKU, OPUS, SONNET, routing

pytestmark = pytest.mark.e2e


class _Echo(BaseHTTPRequestHandler):
    """200 with the request's body exactly as received (any content-encoding left as it was)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.send_header("content-length", str(len(body)))
        self.send_header("x-echo-content-encoding", self.headers.get("content-encoding", ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def proxy(echo_url: str) -> Iterator[ProxyProcess]:
    with ProxyProcess(upstream=echo_url, config=routing(), start_timeout=30) as proxy:
        yield proxy
        output = proxy.output()
    assert "Traceback" not in output, output[-4000:]
    assert "internal error" not in output, output[-4000:]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=httpx.Timeout(20.0)) as client:
        yield client


@dataclass
class Case:
    """A request body and what must happen to it: `span` (bytes of the model value in the decoded body)
    when it is routed, else the `kind` of bad request it is counted as."""

    body: bytes
    span: tuple[int, int] | None = None
    kind: str | None = None
    encoding: str | None = None  # the Content-Encoding header


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
whitespace = st.sampled_from(["", " ", "\n", "\t", "  \r\n "])
names = st.one_of(
    st.sampled_from([OPUS, SONNET, HAIKU, "glm-4.7", "claude-opus-ü"]),
    st.text(min_size=1).filter(lambda s: s.strip() != ""),
)
members = st.lists(
    st.tuples(st.text(max_size=8).filter(lambda k: k != "model"), json_values),
    max_size=4,
    unique_by=lambda m: m[0],
)
MUTATIONS = [
    "none", "gzip", "duplicate-model", "escaped-model-key", "lone-surrogate", "no-model", "not-object",
    "truncated", "nan", "not-utf8", "encoding-label", "too-deep",
]  # fmt: skip


def _string(text: str, ascii_only: bool) -> str:
    return json.dumps(text, ensure_ascii=ascii_only)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    ascii_only = draw(st.booleans())
    ws = draw(whitespace)
    others = [(_string(k, ascii_only), json.dumps(v, ensure_ascii=ascii_only)) for k, v in draw(members)]
    if draw(st.booleans()):  # a model name nested in metadata: never the one rewritten
        others.append(('"metadata"', '{"model":"claude-opus-4-5"}'))
    model_value = _string(draw(names), ascii_only)
    mutation = draw(st.sampled_from(MUTATIONS))
    model_key = '"mod\\u0065l"' if mutation == "escaped-model-key" else '"model"'
    if mutation == "no-model":
        model_value = draw(st.sampled_from(["null", "3", "[]", '"  "', '""']))
    model = (model_key, model_value)
    at = draw(st.integers(0, len(others)))
    listed = [*others[:at], model, *others[at:]]
    if mutation == "duplicate-model":
        listed.append(('"model"', '"claude-3-5-haiku-latest"'))
    elif mutation == "lone-surrogate":
        listed.append(('"x"', '"\\ud800"'))
    elif mutation == "nan":
        listed.append(('"t"', draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))))
    elif mutation == "too-deep":
        listed.append(('"deep"', "[" * 100_000 + "]" * 100_000))
    text, span = "{" + ws, (0, 0)
    for index, (key, value) in enumerate(listed):
        text += ("," + ws if index else "") + key + ws + ":" + ws
        if (key, value) == model:
            start = len(text.encode())
            span = (start, start + len(value.encode()))
        text += value
    body = (text + ws + "}").encode()
    expected = {"none": None, "gzip": None, "nan": "not-json", "encoding-label": "bad-encoding"}
    kind = expected.get(mutation, mutation)
    if mutation == "gzip":
        return Case(body, span=span, encoding="gzip")
    if mutation == "none":
        return Case(body, span=span)
    if mutation == "not-object":
        return Case(b"[" + body + b"]", kind=kind)
    if mutation == "truncated":
        cut = body[: draw(st.integers(0, len(body) - 1))]
        try:
            cut.decode()
        except UnicodeDecodeError:  # cut inside a character: that is found first
            return Case(cut, kind="not-utf8")
        return Case(cut, kind="not-json")
    if mutation == "not-utf8":
        cut = draw(st.integers(0, len(body)))
        return Case(body[:cut] + b"\xff" + body[cut:], kind=kind)
    if mutation == "encoding-label":
        return Case(body, kind=kind, encoding=draw(st.sampled_from(["gzip", "br", "x-foo", "utf-8"])))
    return Case(body, kind=kind)


def _status(client: httpx.Client, proxy: ProxyProcess) -> dict[str, Any]:
    document = client.get(proxy.status_url).json()
    assert isinstance(document, dict)
    return document


def _dispatched(status: dict[str, Any]) -> int:
    return sum(model["dispatched"] for model in status["modelDistribution"].values())


def _json_string_of_a_catalog_model(value: bytes) -> bool:
    """Exactly `"glm-…"`: a catalog name as a JSON string, not one byte more."""
    return any(value == json.dumps(name).encode() for name in DESIGN_MODELS)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(case=cases())
def test_a_body_is_rewritten_exactly_or_passes_untouched_with_no_slot(
    case: Case, proxy: ProxyProcess, client: httpx.Client
) -> None:
    event(case.kind or f"routed, {case.encoding or 'identity'}")
    before = _status(client, proxy)
    headers = {"content-type": "application/json", "x-api-key": "sk-fuzz"}
    sent = case.body
    if case.encoding is not None:
        headers["content-encoding"] = case.encoding
        if case.span is not None:
            sent = gzip.compress(case.body)
    answer = client.post(proxy.url + "/v1/messages", content=sent, headers=headers)
    after = _status(client, proxy)
    assert answer.status_code == 200, answer.text[:500]
    assert answer.headers["x-echo-content-encoding"] == (case.encoding or "")
    assert after["usedCapacity"] == 0 and after["queue"]["waiting"] == 0, after
    received = answer.content
    if case.span is None:
        assert received == sent  # byte for byte
        assert _dispatched(after) == _dispatched(before)  # no slot was taken
        bad, was = after["badRequests"], before["badRequests"]
        assert bad.get(case.kind, 0) == was.get(case.kind, 0) + 1, (case.kind, bad, was)
        return
    if case.encoding == "gzip":
        received = gzip.decompress(received)
    start, end = case.span
    body = case.body
    assert received.startswith(body[:start]) and received.endswith(body[end:])
    assert _json_string_of_a_catalog_model(received[start : len(received) - (len(body) - end)])
    assert _dispatched(after) == _dispatched(before) + 1
    assert after["badRequests"] == before["badRequests"]
