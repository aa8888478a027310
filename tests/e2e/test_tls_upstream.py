"""z.ai over HTTPS, end to end: the simulator serves TLS with a certificate of a throwaway CA, and the
forwarder's TLS to it is checked as mitmproxy would check it (`ssl_verify_upstream_trusted_ca`,
`ssl_insecure`), in reverse, regular (CONNECT, HTTP/1.1 and HTTP/2 clients) and upstream-proxy mode. Every
request's first attempt is refused (1302), so the answer that streams comes after a failover.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import DataReceived

from chaos_mode.forwarding.forwarder import TOKEN_HEADER
from chaos_mode_tools.devtools.certs import TestCerts
from chaos_mode_tools.devtools.distance import DistantPort
from chaos_mode_tools.devtools.processes import ProxyProcess

from .conftest import MakeProxy
from .support import (
    CLIENT_TIMEOUT,
    OPUS,
    SLOW,
    SONNET,
    TOKENS,
    Result,
    Sim,
    assert_streamed,
    expected_text,
    fault,
    httpx_stream,
    idle,
    outcome_delta,
    poll,
    read_flows,
    routing,
    sdk_client,
    sdk_stream,
    sim_headers,
    status,
    trust,
    wait_status_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:The model .* is deprecated")]

TEST_TIMEOUT = 30.0
API_KEY = "sk-test-tls-secret"
# z.ai's name: the certificate is checked against it (and sent as SNI), not against an IP address.
ROUTING = routing(upstreamHosts=["localhost"])


def zai(sim: Sim) -> str:
    """The HTTPS simulator's root URL by name: https://localhost:PORT."""
    return f"https://localhost:{sim.process.port}"


def trusting(certs: TestCerts) -> list[str]:
    return ["--set", f"ssl_verify_upstream_trusted_ca={certs.ca}"]


def saved_flows_file(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"chaos-{prefix}-")) / "flows.mitm"


class OffersH2First(ssl.SSLContext):
    """A client context that offers h2 before http/1.1, as browsers and Node do (httpx offers http/1.1
    first, and mitmproxy follows the client's order)."""

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        super().set_alpn_protocols(sorted(alpn_protocols, key=lambda name: name != "h2"))


def trust_h2(proxy: ProxyProcess) -> ssl.SSLContext:
    context = OffersH2First(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(proxy.ca_cert))
    return context


async def raw_stream(url: str, **client: Any) -> Result:
    """One streamed POST /v1/messages with httpx (`client`: its proxy, verify, http2...)."""
    async with (
        httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT, **client) as c,
        asyncio.timeout(TEST_TIMEOUT),
    ):
        return await httpx_stream(c, url, OPUS, headers={**SLOW, "x-api-key": API_KEY})


async def assert_one_failover(http: httpx.AsyncClient, proxy: ProxyProcess, sim: Sim) -> None:
    """The first attempt was refused (1302) and the second served; nothing held, nothing logged amiss."""
    rejected = await sim.rejections()
    assert sum(codes.get("1302", 0) for codes in rejected.values()) == 1, rejected
    document = await wait_status_idle(http, proxy)
    assert document["failovers"] == 1 and document["requests"]["ok"] == 1, document
    output = proxy.output()
    assert "Traceback" not in output and API_KEY not in output


async def test_reverse_mode_to_https_checked_against_the_ca_setting_streams_a_failover(
    make_proxy: MakeProxy, tls_sim: Sim, test_certs: TestCerts, http: httpx.AsyncClient
) -> None:
    """`--mode reverse:https://...` with `ssl_verify_upstream_trusted_ca`: the SDK's answer streams, and
    the saved flow shows z.ai's https URL."""
    saved = saved_flows_file("tls-reverse")
    proxy = await make_proxy(
        upstream=zai(tls_sim), config=ROUTING, extra_args=[*trusting(test_certs), "-w", str(saved)]
    )
    await tls_sim.add_faults(fault("1302"))
    async with sdk_client(proxy.url, API_KEY) as client, asyncio.timeout(TEST_TIMEOUT):
        result = await sdk_stream(client, SONNET, headers=SLOW)
    assert_streamed(result)
    assert result.text == expected_text(TOKENS)
    await assert_one_failover(http, proxy, tls_sim)
    await asyncio.to_thread(proxy.stop)
    (flow,) = read_flows(saved)
    request = flow.request
    assert (request.scheme, request.host, request.port) == ("https", "localhost", tls_sim.process.port)
    assert request.pretty_url.startswith(zai(tls_sim) + "/api/anthropic/v1/messages")
    assert TOKEN_HEADER not in request.headers
    assert flow.response is not None and flow.response.status_code == 200
    assert flow.metadata["chaos"]["refusals"] == ["1302", None]


async def test_reverse_mode_without_the_ca_refuses_the_certificate_with_a_clear_answer(
    make_proxy: MakeProxy, tls_sim: Sim, http: httpx.AsyncClient
) -> None:
    """The simulator's certificate is not in certifi's bundle: no byte reaches it, and no other model is
    tried (every model is behind the same certificate): the client gets our 502 naming the certificate
    problem at once, as mitmproxy itself would answer; no slot is kept, the log says why and what to set."""
    proxy = await make_proxy(upstream=zai(tls_sim), config=ROUTING)
    before = await status(http, proxy)
    result = await raw_stream(proxy.url + "/api/anthropic/v1/messages")
    assert result.status == 502, result
    assert result.body["error"]["type"] == "api_error", result.body
    message = result.body["error"]["message"]
    assert "certificate verify failed: unable to get local issuer certificate" in message, message
    assert (await tls_sim.stats())["requests"] == 0  # nothing went over an unverified connection
    after = await wait_status_idle(http, proxy)
    assert after["usedCapacity"] == 0 and after["failovers"] == before["failovers"], after
    assert outcome_delta(before, after)["error"] == 1, after["requests"]
    output = proxy.output()
    assert "certificate verify failed: unable to get local issuer certificate" in output, output
    assert "ssl_verify_upstream_trusted_ca" in output, output
    assert "Traceback" not in output and API_KEY not in output


@pytest.mark.parametrize(
    ("options", "answer", "named"),
    [
        # Options it cannot use: a setting to fix, our 502 naming it (mitmproxy alone fails the same way).
        (["ciphers_server=NO-SUCH-CIPHER"], 502, "TLS options cannot be used: ('No cipher can be selected"),
        # A range of no version (the minimum is TLS1_2 by default): once our 429, retried for ever.
        (
            ["tls_version_server_max=TLS1_1"],
            502,
            "tls_version_server_min TLS1_2 is above tls_version_server_max",
        ),
        # No version both sides speak: no attempt is answered, our 429 says z.ai was not reached.
        (["tls_version_server_min=TLS1", "tls_version_server_max=TLS1_1"], 429, "TLS handshake failed"),
    ],
    ids=["cipher", "no-range", "no-common-version"],
)
async def test_mitmproxys_tls_options_make_the_forwarders_tls(
    make_proxy: MakeProxy,
    tls_sim: Sim,
    test_certs: TestCerts,
    http: httpx.AsyncClient,
    options: list[str],
    answer: int,
    named: str,
) -> None:
    """The forwarder speaks the TLS mitmproxy's options ask for (once they were ignored, and these requests
    were served). Lazy: mitmproxy's own connection to z.ai, made at once by default, would fail first."""
    sets = [arg for option in options for arg in ("--set", option)]
    extra = [*trusting(test_certs), *sets, "--set", "connection_strategy=lazy"]
    proxy = await make_proxy(upstream=zai(tls_sim), config=ROUTING, extra_args=extra)
    result = await raw_stream(proxy.url + "/api/anthropic/v1/messages")
    assert result.status == answer, result
    assert named in result.body["error"]["message"], result.body
    assert (await tls_sim.stats())["requests"] == 0
    await wait_status_idle(http, proxy)


async def test_ssl_insecure_without_the_ca_streams_a_failover(
    make_proxy: MakeProxy, tls_sim: Sim, http: httpx.AsyncClient
) -> None:
    proxy = await make_proxy(upstream=zai(tls_sim), config=ROUTING, extra_args=["--set", "ssl_insecure=true"])
    await tls_sim.add_faults(fault("1302"))
    result = await raw_stream(proxy.url + "/api/anthropic/v1/messages")
    assert_streamed(result)
    await assert_one_failover(http, proxy, tls_sim)


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "http2"])
async def test_regular_mode_connect_to_https_streams_a_failover(
    http2: bool, make_proxy: MakeProxy, tls_sim: Sim, test_certs: TestCerts, http: httpx.AsyncClient
) -> None:
    """HTTPS_PROXY=<proxy>: the client tunnels with CONNECT and trusts the proxy's CA; the addon routes
    inside the interception and the forwarder goes on over TLS, checked against the CA setting.

    HTTP/2: connecting eagerly, mitmproxy offers the client only what the server chose, and the simulator
    (tornado) speaks HTTP/1.1 only; connecting lazily lets the client have h2, as a z.ai offering h2 would.
    """
    lazy = ["--set", "connection_strategy=lazy"] if http2 else []
    proxy = await make_proxy(config=ROUTING, own_ca=True, extra_args=[*trusting(test_certs), *lazy])
    await tls_sim.add_faults(fault("1302"))
    url = zai(tls_sim) + "/api/anthropic/v1/messages"
    verify = trust_h2(proxy) if http2 else trust(proxy)
    result = await raw_stream(url, proxy=proxy.url, verify=verify, http2=http2)
    assert_streamed(result)
    assert result.http_version == ("HTTP/2" if http2 else "HTTP/1.1"), result.http_version
    await assert_one_failover(http, proxy, tls_sim)


def post_through_connect_by_address(proxy: ProxyProcess, port: int, body: bytes) -> bytes:
    """CONNECT 127.0.0.1:`port` (a client that resolved z.ai itself, as with SOCKS or a transparent proxy),
    then TLS naming z.ai ("localhost") in SNI and Host; one whole POST. Returns the answer's bytes."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=TEST_TIMEOUT) as raw:
        raw.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n\r\n" % (port, port))
        head = b""
        while b"\r\n\r\n" not in head:
            head += raw.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
        with trust(proxy).wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(
                b"POST /api/anthropic/v1/messages HTTP/1.1\r\nhost: localhost:%d\r\nx-api-key: %s\r\n"
                b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                % (port, API_KEY.encode(), len(body), body)
            )
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    return answer


async def test_a_client_that_connects_by_address_has_z_ai_named_by_its_sni(
    make_proxy: MakeProxy, test_certs: TestCerts
) -> None:
    """The client tunnels to z.ai's address and names z.ai only in its SNI and Host (SOCKS, a transparent
    proxy): mitmproxy sends z.ai that SNI and checks the certificate against it, and so does the forwarder
    (it sent none, and checked the address: a certificate naming no address failed every attempt)."""
    names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(test_certs.cert, test_certs.key)

    def heard(_socket: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = heard

    async def zai(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        asked = json.loads(await reader.readexactly(int(length.group(1)) if length else 0))
        answer = json.dumps({"type": "message", "model": asked["model"], "content": [], "usage": {}}).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(answer)
        )
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(zai, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        proxy = await make_proxy(config=ROUTING, own_ca=True, extra_args=trusting(test_certs))
        body = json.dumps({"model": SONNET, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
        answer = await asyncio.to_thread(post_through_connect_by_address, proxy, port, body.encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b'"model": "glm-' in answer  # routed
    assert names == ["localhost"], names


def h2_cancel_midstream(proxy: ProxyProcess, authority: str, headers: dict[str, str]) -> socket.socket:
    """Through `proxy` (CONNECT, then TLS with h2 trusting its CA), one streamed POST /v1/messages to
    `authority`, reset (CANCEL) once three pieces of its answer came; the connection, kept open, returned."""
    tunnel = socket.create_connection(("127.0.0.1", proxy.port), timeout=TEST_TIMEOUT)
    tunnel.sendall(f"CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n\r\n".encode())
    assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
    context = trust_h2(proxy)
    context.set_alpn_protocols(["h2"])
    tls = context.wrap_socket(tunnel, server_hostname=authority.partition(":")[0])
    assert tls.selected_alpn_protocol() == "h2"
    h2 = H2Connection(H2Configuration(client_side=True))
    h2.initiate_connection()
    stream = h2.get_next_available_stream_id()
    head = [(":method", "POST"), (":path", "/api/anthropic/v1/messages"), (":authority", authority)]
    h2.send_headers(
        stream, [*head, (":scheme", "https"), ("content-type", "application/json"), *headers.items()]
    )
    body = {"model": OPUS, "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    h2.send_data(stream, json.dumps(body).encode(), end_stream=True)
    tls.sendall(h2.data_to_send())
    pieces = 0
    while pieces < 3:
        for event in h2.receive_data(tls.recv(65536)):
            if isinstance(event, DataReceived):
                pieces += 1
                h2.acknowledge_received_data(event.flow_controlled_length, stream)
        tls.sendall(h2.data_to_send())
    h2.reset_stream(stream, ErrorCodes.CANCEL)
    tls.sendall(h2.data_to_send())
    return tls


async def test_an_http2_client_cancelling_its_stream_has_left_the_connection_kept(
    make_proxy: MakeProxy, tls_sim: Sim, test_certs: TestCerts, http: httpx.AsyncClient
) -> None:
    """An HTTP/2 client (an SDK) that stops reading one answer resets its stream and keeps the connection:
    mitmproxy says "stream reset by client (CANCEL)". That request left, as an HTTP/1.1 client closing its
    connection does: `aborted`, its slot back after `streams.abortGraceSeconds`, not a broken upstream."""
    config = routing(upstreamHosts=["localhost"], streams={"abortGraceSeconds": 0.3})
    lazy = ["--set", "connection_strategy=lazy"]
    proxy = await make_proxy(config=config, own_ca=True, extra_args=[*trusting(test_certs), *lazy])
    before = await status(http, proxy)
    headers = {**sim_headers(latency_ms=20, tokens=200, interval_ms=50), "x-api-key": API_KEY}
    authority = f"localhost:{tls_sim.process.port}"
    async with asyncio.timeout(TEST_TIMEOUT):
        kept = await asyncio.to_thread(h2_cancel_midstream, proxy, authority, headers)
        try:
            document = await poll(lambda: status(http, proxy), lambda d: idle(d) and d != before, 5.0)
        finally:
            kept.close()
    assert outcome_delta(before, document) == {
        "ok": 0,
        "error": 0,
        "rejected": 0,
        "aborted": 1,
        "passthrough": 0,
    }
    assert "Traceback" not in proxy.output()


async def test_upstream_mode_tunnels_every_attempt_through_the_upstream_proxy(
    make_proxy: MakeProxy, tls_sim: Sim, test_certs: TestCerts, http: httpx.AsyncClient
) -> None:
    """`--mode upstream:http://outer`: the forwarder CONNECTs through the outer proxy and speaks TLS inside
    the tunnel. The outer mitmdump intercepts that TLS with its own CA (which the inner one trusts through
    `ssl_verify_upstream_trusted_ca`) and checks the simulator against the test CA; it sees both attempts,
    never the forwarder's token."""
    saved = saved_flows_file("tls-upstream")
    outer = await make_proxy(
        addon=False,
        own_ca=True,
        extra_args=[*trusting(test_certs), "--set", "stream_large_bodies=1", "-w", str(saved)],
    )
    proxy = await make_proxy(
        config=ROUTING,
        own_ca=True,
        extra_args=[
            "--mode",
            f"upstream:{outer.url}",
            "--set",
            f"ssl_verify_upstream_trusted_ca={outer.ca_cert}",
        ],
    )
    await tls_sim.add_faults(fault("1302"))
    url = zai(tls_sim) + "/api/anthropic/v1/messages"
    result = await raw_stream(url, proxy=proxy.url, verify=trust(proxy))
    assert_streamed(result)
    await assert_one_failover(http, proxy, tls_sim)
    await asyncio.to_thread(outer.stop)
    through = [f for f in read_flows(saved) if f.request.method == "POST"]
    assert [f.response.status_code for f in through if f.response] == [429, 200]
    assert all(f.request.pretty_url.startswith(zai(tls_sim) + "/api/anthropic/") for f in through)
    assert all(TOKEN_HEADER not in f.request.headers for f in through)


async def test_new_connections_to_a_distant_zai_are_not_taken_for_refusals(
    make_proxy: MakeProxy, tls_sim: Sim, test_certs: TestCerts, http: httpx.AsyncClient
) -> None:
    """z.ai 0.1 s away (`devtools.distance`). Once its heads are known (the patience is then 0.25 s), a burst
    needs new connections to it, whose handshakes (TCP, TLS) take 0.25 s before a request is written: every
    request is served where it was sent. Counted from before the handshakes, each attempt on a new
    connection was left for another: a failover per new connection. One failover is allowed: a head comes
    0.1 s after its request is written and the patience is 0.25 s, so a pause of the shared machine in the
    full suite leaves an attempt now and then (seen once in a CI run: 1 failover)."""
    async with DistantPort(tls_sim.process.port, rtt=0.1) as far:
        proxy = await make_proxy(
            upstream=f"https://localhost:{far.port}", config=ROUTING, extra_args=trusting(test_certs)
        )
        url = proxy.url + "/api/anthropic/v1/messages"
        headers = {**sim_headers(latency_ms=0, tokens=2, interval_ms=0), "x-api-key": API_KEY}
        limits = httpx.Limits(max_connections=6)
        async with (
            httpx.AsyncClient(trust_env=False, timeout=CLIENT_TIMEOUT, limits=limits) as client,
            asyncio.timeout(TEST_TIMEOUT),
        ):
            for _ in range(8):  # on one kept connection: z.ai's heads, and so the patience, are known
                assert (await httpx_stream(client, url, SONNET, headers=headers)).status == 200
            before = far.connections
            sent = (httpx_stream(client, url, SONNET, headers=headers) for _ in range(6))
            burst = await asyncio.gather(*sent)
        assert [result.status for result in burst] == [200] * 6
        opened = far.connections - before
        assert opened >= 3  # the burst did open new connections to z.ai
        document = await wait_status_idle(http, proxy)
    assert document["failovers"] <= 1 < opened and document["requests"]["ok"] == 14, document
