"""The forwarder's client over TLS, against a small HTTPS server on loopback with a throwaway CA: the check
mitmproxy's options ask for, the name sent (SNI, Host), keep-alive over TLS, CONNECT through an upstream
proxy with its credentials, and mitmproxy's other TLS options (client certificates, versions, ciphers)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaos_mode.forwarding.upstream import (
    Destination,
    UpstreamClients,
    UpstreamFailed,
    UpstreamRefused,
    UpstreamSettings,
)
from chaos_mode_tools.devtools.certs import CLIENT_NAME, TestCerts, make_certs

TIMEOUT = 10.0
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_certs(tmp_path_factory.mktemp("certs"))


@dataclass
class TlsServer:
    """Answers every request with ANSWER; remembers the names asked for, the heads it read, and what each
    connection's TLS was (version, cipher, the client's certificate)."""

    port: int = 0
    connections: int = 0
    server_names: list[str | None] = field(default_factory=list)
    heads: list[bytes] = field(default_factory=list)
    versions: list[str | None] = field(default_factory=list)
    ciphers: list[str] = field(default_factory=list)
    client_names: list[str | None] = field(default_factory=list)


async def _serve_tls(state: TlsServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    state.connections += 1
    tls: ssl.SSLObject = writer.get_extra_info("ssl_object")
    state.versions.append(tls.version())
    state.ciphers.append((tls.cipher() or ("",))[0])
    peer = tls.getpeercert()
    state.client_names.append(dict(x[0] for x in peer["subject"])["commonName"] if peer else None)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            state.heads.append(head)
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


Tweak = Callable[[ssl.SSLContext], None]


@contextlib.asynccontextmanager
async def serving_tls(certs: TestCerts, tweak: Tweak | None = None) -> AsyncIterator[TlsServer]:
    """The HTTPS server with the test CA's certificate; `tweak` changes its TLS context first."""
    state = TlsServer()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)
    if tweak is not None:
        tweak(context)

    def sni(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
        state.server_names.append(name)

    context.sni_callback = sni
    server = await asyncio.start_server(lambda r, w: _serve_tls(state, r, w), "127.0.0.1", 0, ssl=context)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state


@pytest.fixture
async def tls_server(certs: TestCerts) -> AsyncIterator[TlsServer]:
    async with serving_tls(certs) as state:
        yield state


def trusting(certs: TestCerts, proxy_auth: str | None = None) -> UpstreamClients:
    return UpstreamClients(UpstreamSettings(ca_file=str(certs.ca), proxy_auth=proxy_auth))


async def get(clients: UpstreamClients, to: Destination) -> bytes:
    async with asyncio.timeout(TIMEOUT):
        response = await clients.send(to, b"POST", b"/v1/messages", [], b"{}")
        raw, _, complete = await response.read_body(1 << 16)
        response.close()
    assert response.status == 200 and complete
    return raw


async def test_the_ca_setting_verifies_the_name_is_sent_and_the_connection_is_kept(
    certs: TestCerts, tls_server: TlsServer
) -> None:
    clients = trusting(certs)
    to = Destination("https", "localhost", tls_server.port)
    try:
        assert await get(clients, to) == b"ok"
        assert await get(clients, to) == b"ok"
    finally:
        await clients.aclose()
    assert tls_server.server_names == ["localhost"]  # SNI: z.ai's name, once (one TLS connection)
    assert tls_server.connections == 1  # keep-alive over TLS
    assert all(b"\r\nhost: localhost:%d\r\n" % tls_server.port in h for h in tls_server.heads)


async def test_an_ip_address_is_checked_against_the_certificates_ip_names(
    certs: TestCerts, tls_server: TlsServer
) -> None:
    clients = trusting(certs)
    try:
        assert await get(clients, Destination("https", "127.0.0.1", tls_server.port)) == b"ok"
    finally:
        await clients.aclose()


async def test_without_the_ca_the_certificate_is_refused_and_the_reason_named(
    certs: TestCerts, tls_server: TlsServer
) -> None:
    clients = UpstreamClients()  # certifi's bundle, as mitmproxy by default
    to = Destination("https", "localhost", tls_server.port)
    with pytest.raises(UpstreamRefused) as failed:  # a setting to fix: no other model would fare better
        await get(clients, to)
    message = str(failed.value)
    assert message.startswith(f"localhost:{tls_server.port} not reached: certificate verify failed: "), (
        message
    )
    assert "issuer" in message, message  # OpenSSL's own words: unable to get local issuer certificate
    assert tls_server.heads == []  # nothing was sent


async def test_ssl_insecure_skips_the_check(tls_server: TlsServer) -> None:
    clients = UpstreamClients(UpstreamSettings(insecure=True))
    try:
        assert await get(clients, Destination("https", "localhost", tls_server.port)) == b"ok"
    finally:
        await clients.aclose()


Proxy = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _start_proxy(handler: Proxy) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def test_https_through_an_upstream_proxy_is_a_tunnel_with_the_proxys_credentials(
    certs: TestCerts, tls_server: TlsServer
) -> None:
    connects: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connects.append(await reader.readuntil(b"\r\n\r\n"))
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", tls_server.port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server, port = await _start_proxy(proxy)
    clients = trusting(certs, proxy_auth="user:secret")
    to = Destination("https", "localhost", tls_server.port, proxy=f"http://127.0.0.1:{port}")
    async with asyncio.timeout(TIMEOUT), server:
        try:
            assert await get(clients, to) == b"ok"
            assert await get(clients, to) == b"ok"
        finally:
            await clients.aclose()  # before the server waits for its connections to end
    (connect,) = connects  # one tunnel, kept alive
    assert connect.startswith(b"CONNECT localhost:%d HTTP/1.1\r\n" % tls_server.port), connect
    assert b"proxy-authorization: Basic " + base64.b64encode(b"user:secret") in connect
    assert tls_server.server_names == ["localhost"]  # TLS inside the tunnel, to z.ai's name
    assert all(b"proxy-authorization" not in h.lower() for h in tls_server.heads)  # never to z.ai


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"", "closed before an answer"),  # the proxy closes instead of answering the CONNECT
        (b"HTTP/1.1 200 OK\r\nx: " + b"a" * 300_000, "Receive buffer too long"),  # a head with no end
        (b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", "refused the tunnel: HTTP 407"),
    ],
)
async def test_a_proxy_that_does_not_tunnel_fails_the_attempt(
    certs: TestCerts, answer: bytes, why: str
) -> None:
    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        writer.write_eof()
        await reader.read()  # until the client leaves
        writer.close()

    server, port = await _start_proxy(proxy)
    clients = trusting(certs)
    to = Destination("https", "localhost", 9, proxy=f"http://127.0.0.1:{port}")
    async with asyncio.timeout(TIMEOUT), server:
        with pytest.raises(UpstreamFailed, match=why) as failed:
            await get(clients, to)
        refused = failed.type is UpstreamRefused
        del failed  # its traceback holds the connection open, and the server waits for it to close
    assert refused == ("407" in why)  # a wrong upstream_auth is a setting to fix


def clients_with(certs: TestCerts, **settings: str) -> UpstreamClients:
    return UpstreamClients(UpstreamSettings(ca_file=str(certs.ca), **settings))


def require_client_certs(certs: TestCerts) -> Tweak:
    def tweak(context: ssl.SSLContext) -> None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs.ca)

    return tweak


async def test_client_certs_a_file_is_the_certificate_for_every_server(certs: TestCerts) -> None:
    async with serving_tls(certs, require_client_certs(certs)) as server:
        clients = clients_with(certs, client_certs=str(certs.client))
        try:
            assert await get(clients, Destination("https", "localhost", server.port)) == b"ok"
        finally:
            await clients.aclose()
        with pytest.raises(UpstreamFailed):  # without one, the server refuses the connection
            await get(trusting(certs), Destination("https", "localhost", server.port))
    assert server.client_names[0] == CLIENT_NAME


async def test_client_certs_a_folder_has_one_per_server_name(certs: TestCerts, tmp_path: Path) -> None:
    shutil.copy(certs.client, tmp_path / "localhost.pem")
    async with serving_tls(certs, require_client_certs(certs)) as server:
        clients = clients_with(certs, client_certs=str(tmp_path))
        try:
            assert await get(clients, Destination("https", "localhost", server.port)) == b"ok"
            with pytest.raises(UpstreamFailed):  # no 127.0.0.1.pem: no certificate for that name
                await get(clients, Destination("https", "127.0.0.1", server.port))
        finally:
            await clients.aclose()
    assert server.client_names[0] == CLIENT_NAME


def at_most_tls_1_2(context: ssl.SSLContext) -> None:
    context.maximum_version = ssl.TLSVersion.TLSv1_2


async def test_tls_versions_bound_what_is_spoken(certs: TestCerts) -> None:
    async with serving_tls(certs) as server:
        clients = clients_with(certs, tls_max="TLS1_2")
        try:
            assert await get(clients, Destination("https", "localhost", server.port)) == b"ok"
        finally:
            await clients.aclose()
    assert server.versions == ["TLSv1.2"]
    async with serving_tls(certs, at_most_tls_1_2) as server:
        with pytest.raises(UpstreamFailed, match="not reached"):  # no version both speak
            await get(clients_with(certs, tls_min="TLS1_3"), Destination("https", "localhost", server.port))


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"])
async def test_ciphers_server_names_the_ciphers(certs: TestCerts, cipher: str) -> None:
    async with serving_tls(certs, at_most_tls_1_2) as server:
        clients = clients_with(certs, ciphers=cipher)
        try:
            assert await get(clients, Destination("https", "localhost", server.port)) == b"ok"
        finally:
            await clients.aclose()
    assert server.ciphers == [cipher]


@pytest.mark.parametrize(
    "settings",
    [
        {"tls_min": "TLS9"},
        {"tls_min": "TLS1_3", "tls_max": "TLS1_2"},
        {"ciphers": "NO-SUCH-CIPHER"},
        {"client_certs": "CA"},
    ],
)
async def test_tls_options_that_cannot_be_used_are_a_setting_to_fix(
    certs: TestCerts, tls_server: TlsServer, settings: dict[str, str]
) -> None:
    """No other model would fare better: refused (a 502 naming the cause), not failed over. (A certificate
    without its key cannot be a client certificate.)"""
    to = Destination("https", "localhost", tls_server.port)
    settings = {k: str(certs.ca) if v == "CA" else v for k, v in settings.items()}
    with pytest.raises(UpstreamRefused, match="the TLS options cannot be used"):
        await get(clients_with(certs, **settings), to)
    assert tls_server.heads == []
