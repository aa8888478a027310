"""The forwarder's client over TLS, against a small HTTPS server on loopback with a throwaway CA: the check
mitmproxy's options ask for, the name sent (SNI, Host), keep-alive over TLS, CONNECT through an upstream
proxy with its credentials."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from chaos_mode.forwarding.upstream import (
    Destination,
    UpstreamClients,
    UpstreamFailed,
    UpstreamRefused,
    UpstreamSettings,
)
from support.certs import TestCerts, make_certs

TIMEOUT = 10.0
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_certs(tmp_path_factory.mktemp("certs"))


@dataclass
class TlsServer:
    """Answers every request with ANSWER; remembers the names asked for and the heads it read."""

    port: int = 0
    connections: int = 0
    server_names: list[str | None] = field(default_factory=list)
    heads: list[bytes] = field(default_factory=list)


async def _serve_tls(state: TlsServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    state.connections += 1
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
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def tls_server(certs: TestCerts) -> AsyncIterator[TlsServer]:
    state = TlsServer()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)

    def sni(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
        state.server_names.append(name)

    context.sni_callback = sni
    server = await asyncio.start_server(lambda r, w: _serve_tls(state, r, w), "127.0.0.1", 0, ssl=context)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
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
