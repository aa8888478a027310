"""Record the `.mitm` flow files of `flows/`: real clients, a real mitmdump with the addon, the simulator.

How to record new flows:

    .venv/bin/python -m chaos_mode_tools.devtools.record --out flows            # every scenario
    .venv/bin/python -m chaos_mode_tools.devtools.record --out flows gzip_body  # only some

Each scenario starts a fresh `mitmdump -s addon/chaos_addon.py` in reverse mode in front of the z.ai
simulator (`python -m chaos_mode_tools.sim`), with chaos mode on and `upstreamHosts: ["127.0.0.1"]`, writing
its flows with `-w` (and `store_streamed_bodies`, so streamed answers are kept). Real clients (httpx, and
the anthropic SDK for the streamed case) send the requests; z.ai errors (1302, 1113) are injected with
`POST /sim/faults`. When mitmdump has stopped, the file is redacted: the values of `x-api-key`,
`authorization`, `proxy-authorization` and `cookie` request headers (and `set-cookie` response
headers) become `REDACTED`. The key the clients send is a made-up test key;
`tests/tools/devtools/test_flows.py` checks that no file holds it nor anything shaped like an API key. To
add a scenario: write a function `scenario(sim_url, proxy_url)` below, add it to `SCENARIOS`, record it,
and give it an expectation in `tests/tools/devtools/test_flows.py`. Recording needs only loopback ports and
takes about 20 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anthropic
from mitmproxy import http, io

from chaos_mode.zai.catalog import EARLY_2026_CATALOG, models_block
from chaos_mode_tools.devtools.client import httpx
from chaos_mode_tools.devtools.processes import ProxyProcess
from chaos_mode_tools.devtools.sim_process import SimProcess
from chaos_mode_tools.sim.settings import SimSettings

TEST_API_KEY = "sk-RecordTestKey0123456789abcdef"  # made up; never left in a file
REDACTED = "REDACTED"
SECRET_REQUEST_HEADERS = ("x-api-key", "authorization", "proxy-authorization", "cookie")
SECRET_RESPONSE_HEADERS = ("set-cookie",)
MESSAGES_PATH = "/api/anthropic/v1/messages"
TIMEOUT = httpx.Timeout(20.0)

# Quick answers keep the files small: a few tokens, little latency.
SIM_SETTINGS: dict[str, Any] = {
    "latency_ms": 30,
    "token_interval_ms": 5,
    "output_tokens": 6,
    "reject_delay_ms": 30,
    "abort_detect_ms": 100,
}


def proxy_config() -> dict[str, object]:
    """The `modelRouting` block of the recording proxy (and of the tests that replay the flows)."""
    return {
        "chaosMode": {"enabled": True},
        "upstreamHosts": ["127.0.0.1"],
        "streams": {"abortGraceSeconds": 0},
        "models": models_block(EARLY_2026_CATALOG),  # the simulator's default catalog
    }


def _body(model: str, *, stream: bool, text: str = "Say hello.") -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 64,
        "stream": stream,
        "system": "You are a terse assistant.",
        "messages": [{"role": "user", "content": text}],
    }


def _headers(**extra: str) -> dict[str, str]:
    return {"x-api-key": TEST_API_KEY, "anthropic-version": "2023-06-01", **extra}


def _fault(sim_url: str, **fault: object) -> None:
    response = httpx.post(sim_url + "/sim/faults", json=fault, timeout=TIMEOUT)
    response.raise_for_status()


def _check(response: httpx.Response, status: int = 200) -> None:
    if response.status_code != status:
        raise RuntimeError(f"expected HTTP {status}, got {response.status_code}: {response.text[:300]}")


# -- scenarios: each drives real clients through the proxy -------------------------------------------


def streamed_success(sim_url: str, proxy_url: str) -> None:
    """The anthropic SDK streams a sonnet request; the addon routes it and observes the SSE usage."""
    client = anthropic.Anthropic(
        base_url=proxy_url + "/api/anthropic",
        api_key=TEST_API_KEY,
        max_retries=0,
        timeout=20.0,
        default_headers={"x-claude-code-session-id": "record-session-1"},
    )
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=64,
        system="You are a terse assistant.",
        messages=[{"role": "user", "content": "Say hello."}],
    ) as stream:
        message = stream.get_final_message()
    if not message.model.startswith("glm-"):
        raise RuntimeError(f"the streamed request was not routed: {message.model}")


def non_streamed(sim_url: str, proxy_url: str) -> None:
    """A whole (non-streamed) haiku request with every kind of credential header."""
    response = httpx.post(
        proxy_url + MESSAGES_PATH + "?beta=true",
        json=_body("claude-haiku-4-5", stream=False),
        headers=_headers(authorization=f"Bearer {TEST_API_KEY}", cookie="session=RecordTestCookie"),
        timeout=TIMEOUT,
    )
    _check(response)


def failover_1302(sim_url: str, proxy_url: str) -> None:
    """z.ai answers the first try with 1302 (concurrency): the addon fails over to another model."""
    _fault(sim_url, model="*", code="1302", count=1, retryAfter=1)
    response = httpx.post(
        proxy_url + MESSAGES_PATH + "?beta=true",
        json=_body("claude-opus-4-5", stream=True),
        headers=_headers(),
        timeout=TIMEOUT,
    )
    _check(response)


def refused_1113(sim_url: str, proxy_url: str) -> None:
    """z.ai refuses the first model with 1113 (not in the plan): out of rotation, then failover."""
    _fault(sim_url, model="*", code="1113", count=1, type="1113")
    response = httpx.post(
        proxy_url + MESSAGES_PATH + "?beta=true",
        json=_body("claude-opus-4-5", stream=False),
        headers=_headers(),
        timeout=TIMEOUT,
    )
    _check(response)


def client_abort(sim_url: str, proxy_url: str) -> None:
    """The client reads the first bytes of a stream and hangs up."""
    headers = _headers(**{"x-sim-output-tokens": "40", "x-sim-token-interval-ms": "25"})
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        client.stream(
            "POST",
            proxy_url + MESSAGES_PATH + "?beta=true",
            json=_body("claude-sonnet-4-5", stream=True),
            headers=headers,
        ) as response,
    ):
        _check(response)
        for chunk in response.iter_raw():
            if b"content_block_delta" in chunk:
                break
    time.sleep(0.3)  # let the proxy see the disconnect before it stops


def gzip_body(sim_url: str, proxy_url: str) -> None:
    """A gzip-encoded request body: the addon decodes, rewrites and re-encodes it."""
    content = gzip.compress(json.dumps(_body("claude-sonnet-4-5", stream=False)).encode())
    headers = _headers(**{"content-type": "application/json", "content-encoding": "gzip"})
    response = httpx.post(
        proxy_url + MESSAGES_PATH + "?beta=true", content=content, headers=headers, timeout=TIMEOUT
    )
    if response.status_code >= 500:
        raise RuntimeError(f"gzip request failed: {response.status_code} {response.text[:300]}")


def not_zai(sim_url: str, proxy_url: str) -> None:
    """Requests the addon must leave alone: a GET of another path, and count_tokens."""
    _check(httpx.get(proxy_url + "/sim/stats", headers=_headers(), timeout=TIMEOUT))
    _check(
        httpx.post(
            proxy_url + MESSAGES_PATH + "/count_tokens",
            json={"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]},
            headers=_headers(),
            timeout=TIMEOUT,
        )
    )


Scenario = Callable[[str, str], None]
SCENARIOS: dict[str, Scenario] = {
    "streamed_success": streamed_success,
    "non_streamed": non_streamed,
    "failover_1302": failover_1302,
    "refused_1113": refused_1113,
    "client_abort": client_abort,
    "gzip_body": gzip_body,
    "not_zai": not_zai,
}


# -- redaction ---------------------------------------------------------------------------------------


def redact_headers(headers: http.Headers, names: Sequence[str]) -> int:
    """Replace the value of every header in `names` by REDACTED; returns how many were replaced."""
    replaced = 0
    for name in names:
        values = headers.get_all(name)
        if values:
            headers.set_all(name, [REDACTED] * len(values))
            replaced += len(values)
    return replaced


def redact_flow(flow: http.HTTPFlow) -> int:
    replaced = redact_headers(flow.request.headers, SECRET_REQUEST_HEADERS)
    if flow.response is not None:
        replaced += redact_headers(flow.response.headers, SECRET_RESPONSE_HEADERS)
    return replaced


def redact_file(source: Path, target: Path) -> int:
    """Copy the HTTP flows of `source` to `target` with credentials redacted; returns the flow count."""
    with source.open("rb") as handle:
        flows = [f for f in io.FlowReader(handle).stream() if isinstance(f, http.HTTPFlow)]
    for flow in flows:
        redact_flow(flow)
    with target.open("wb") as handle:
        writer = io.FlowWriter(handle)  # type: ignore[no-untyped-call]  # (not annotated upstream)
        for flow in flows:
            writer.add(flow)
    return len(flows)


# -- driver ------------------------------------------------------------------------------------------


def _wait_idle(proxy: ProxyProcess, timeout: float = 10.0) -> None:
    """Until the addon holds no slot: every flow has ended (and was written)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = httpx.get(proxy.status_url, timeout=2.0).json()
        except httpx.HTTPError:
            status = None
        if status is not None and status["usedCapacity"] == 0 and status["queue"]["waiting"] == 0:
            return
        time.sleep(0.05)
    raise RuntimeError("the proxy still holds slots")


def record(out: Path, names: Sequence[str]) -> dict[str, int]:
    """Record the scenarios `names` into `out/<name>.mitm`; returns the flow count of each file."""
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    with SimProcess(SimSettings(**SIM_SETTINGS)) as sim:
        for name in names:
            raw = out / f".{name}.raw.mitm"
            proxy = ProxyProcess(
                upstream=sim.base_url,
                config=proxy_config(),
                extra_args=["-w", str(raw), "--set", "store_streamed_bodies=true"],
            )
            try:
                with proxy:
                    SCENARIOS[name](sim.base_url, proxy.url)
                    _wait_idle(proxy)
                httpx.delete(sim.base_url + "/sim/faults", timeout=TIMEOUT).raise_for_status()
                counts[name] = redact_file(raw, out / f"{name}.mitm")
            finally:
                raw.unlink(missing_ok=True)
            if counts[name] == 0:
                raise RuntimeError(f"{name}: mitmdump wrote no flow; its output:\n{proxy.output()[-3000:]}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos_mode_tools.devtools.record",
        description="Record (and redact) the flows of flows/.",
    )
    parser.add_argument("--out", default="flows", help="folder of the .mitm files (default: flows)")
    parser.add_argument("scenarios", nargs="*", help=f"default: all of {', '.join(SCENARIOS)}")
    args = parser.parse_args(argv)
    names: list[str] = list(args.scenarios) or list(SCENARIOS)
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    counts = record(Path(args.out), names)
    for name, count in counts.items():
        print(f"{Path(args.out) / (name + '.mitm')}: {count} flow(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
