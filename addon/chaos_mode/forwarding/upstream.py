"""The forwarder's way to z.ai: a small HTTP/1.1 client on asyncio streams, with a keep-alive pool.

mitmproxy's options for its own TLS to z.ai make the same TLS here: the certificate check (certifi's bundle,
or `ssl_verify_upstream_trusted_ca` / `ssl_verify_upstream_trusted_confdir`, none with `ssl_insecure`),
`client_certs`, `tls_version_server_min` / `tls_version_server_max` and `ciphers_server`. A flow that came
through `--mode upstream:` goes out through that proxy (CONNECT for https, an absolute URL for http).
Answers are read as h11 reads them (`framing`); an answer's body is relayed as its bytes come, framing
included, read only as far as needed to know where it ends, so the connection can serve again.

The pool's rules: a kept-alive connection serves only requests of the credential it was opened for
(`PoolKey`: bytes an upstream sends unasked after an answer can reach no other key's client, whatever the
upstream does), and takes another request only when nothing came on it since the end of its last answer
(asyncio goes on reading idle connections: bytes z.ai sent meanwhile would be taken for the next answer) and
no close or byte waits in the kernel. When z.ai closes a reused connection as the request arrives, before any
byte of an answer, the request goes once more on a new connection (nothing was received, so nothing can be
received twice).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import select
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Final, SupportsIndex, cast

import certifi

from chaos_mode.forwarding.framing import MAX_HEAD, BadAnswer, ChunkScanner, Head, HeadParser, dechunk

CONNECT_TIMEOUT: Final = 30.0  # seconds to reach z.ai (or the upstream proxy)
READ_TIMEOUT: Final = 600.0  # seconds without an answer's head from z.ai before an attempt counts as failed
IDLE_TIMEOUT: Final = 120.0  # seconds without a byte of an answer's body before the answer counts as broken
IDLE_PER_KEY: Final = 64  # kept-alive connections per way out and credential; more are closed
IDLE_TOTAL: Final = 256  # kept-alive connections in all (a swarm of many keys keeps no more)
# The request headers that carry a client's credential: a connection serves one set of values of them.
CREDENTIAL_HEADERS: Final = frozenset({b"authorization", b"x-api-key", b"api-key", b"x-goog-api-key"})
_SALT: Final = os.urandom(16)  # the credential's digest means nothing outside this process
READ_SIZE: Final = 65536
# mitmproxy's names of TLS versions (its `tls_version_server_*` options); UNBOUNDED: whatever OpenSSL has.
TLS_VERSIONS: Final[dict[str, ssl.TLSVersion | None]] = {
    "UNBOUNDED": None,
    "SSL3": ssl.TLSVersion.SSLv3,
    "TLS1": ssl.TLSVersion.TLSv1,
    "TLS1_1": ssl.TLSVersion.TLSv1_1,
    "TLS1_2": ssl.TLSVersion.TLSv1_2,
    "TLS1_3": ssl.TLSVersion.TLSv1_3,
}
# Below TLS 1.2 OpenSSL's security level must be 0, as mitmproxy sets it when no ciphers are named.
_INSECURE_MINIMUMS: Final = frozenset({"UNBOUNDED", "SSL3", "TLS1", "TLS1_1"})


class UpstreamFailed(Exception):
    """z.ai (or the upstream proxy) was not reached, broke the connection, stayed silent, or did not speak
    HTTP/1.1 as h11 reads it."""


class UpstreamRefused(UpstreamFailed):
    """z.ai was not reached for a reason no other model changes, a setting to fix: its certificate failed
    verification, the TLS options cannot be used, or the upstream proxy refused its credentials (407)."""


class _Unanswered(UpstreamFailed):
    """The connection closed (or was reset) before any byte of an answer came."""


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """mitmproxy's upstream TLS options, and how long an attempt may stay silent."""

    insecure: bool = False
    ca_file: str | None = None
    ca_path: str | None = None
    proxy_auth: str | None = None  # user:pass for the upstream proxy (mitmproxy's upstream_auth)
    read_timeout: float = READ_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    client_certs: str | None = None  # a PEM file (key and certificate), or a folder of <server name>.pem
    tls_min: str = "TLS1_2"  # mitmproxy's defaults
    tls_max: str = "UNBOUNDED"
    ciphers: str | None = None  # OpenSSL's syntax (TLS 1.2 and below; TLS 1.3's suites stay OpenSSL's)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where the flow was going before it was pointed at the forwarder."""

    scheme: str
    host: str
    port: int
    proxy: str | None = None  # the upstream proxy's URL (`--mode upstream:`), else direct
    sni: str | None = None  # the TLS server name, where it is not `host` (a client that came by IP address)

    @property
    def server_name(self) -> str:
        return self.sni or self.host

    @property
    def authority(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def path(self, target: bytes) -> bytes:
        """The origin-form of a request target (an absolute-form one keeps its path and query only)."""
        if target.startswith(b"/"):
            return target
        after_scheme = target.split(b"://", 1)[-1]
        return b"/" + after_scheme.split(b"/", 1)[1] if b"/" in after_scheme else b"/"

    def url(self, target: bytes) -> str:
        return f"{self.scheme}://{self.authority}{self.path(target).decode('ascii', 'replace')}"


def tls_context(settings: UpstreamSettings, client_cert: str | None = None) -> ssl.SSLContext:
    """The TLS mitmproxy would speak to z.ai: its certificate check, versions, ciphers and client
    certificate. ValueError, or OSError (ssl.SSLError), when the options cannot be used."""
    if settings.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.options |= ssl.OP_LEGACY_SERVER_CONNECT  # as mitmproxy does with ssl_insecure
    elif settings.ca_file is None and settings.ca_path is None:
        context = ssl.create_default_context(cafile=certifi.where())
    else:
        context = ssl.create_default_context(cafile=settings.ca_file, capath=settings.ca_path)
    try:
        lowest, highest = TLS_VERSIONS[settings.tls_min], TLS_VERSIONS[settings.tls_max]
    except KeyError as exc:
        raise ValueError(f"not a TLS version: {exc.args[0]!r} (one of {', '.join(TLS_VERSIONS)})") from None
    context.minimum_version = lowest or ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = highest or ssl.TLSVersion.MAXIMUM_SUPPORTED
    if lowest is not None and highest is not None and lowest > highest:  # OpenSSL would offer no version
        raise ValueError(
            f"tls_version_server_min {settings.tls_min} is above tls_version_server_max {settings.tls_max}"
        )
    if settings.ciphers:
        context.set_ciphers(settings.ciphers)
    elif settings.tls_min in _INSECURE_MINIMUMS:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    if client_cert is not None:
        context.load_cert_chain(client_cert)
    return context


def client_cert(settings: UpstreamSettings, server_name: str) -> str | None:
    """mitmproxy's choice of a client certificate: `client_certs` when it is a file, else
    `<server name>.pem` in that folder when there is one."""
    if not settings.client_certs:
        return None
    where = os.path.expanduser(settings.client_certs)
    if os.path.isfile(where):
        return where
    named = os.path.join(where, f"{server_name}.pem")
    return named if os.path.isfile(named) else None


class _Reader(asyncio.StreamReader):
    """A StreamReader that counts the bytes it holds unread (`read` is the only way the client takes them;
    anything else would only keep a connection from being reused): a kept-alive connection with any is
    never reused."""

    unread = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        self.unread += len(cast(bytes, data))
        super().feed_data(data)

    async def read(self, n: int = -1) -> bytes:
        data = await super().read(n)
        if n >= 0:  # read(-1) takes its bytes through read(limit), counted there
            self.unread -= len(data)
        return data


Connection = tuple[_Reader, asyncio.StreamWriter]


@dataclass(frozen=True, slots=True)
class PoolKey:
    """Which kept-alive connections a request may use: its way out and a hash of its credential."""

    destination: Destination
    credential: bytes


def pool_key(to: Destination, headers: list[tuple[bytes, bytes]]) -> PoolKey:
    """The request's `PoolKey`: a digest of its credential headers' names and values, in their order (the
    key itself is kept nowhere else)."""
    digest = hashlib.blake2b(digest_size=16, key=_SALT)
    for name, value in headers:
        lowered = name.lower()
        if lowered in CREDENTIAL_HEADERS:
            digest.update(b"%d:%s=%d:%s;" % (len(lowered), lowered, len(value), value))
    return PoolKey(to, digest.digest())


class UpstreamResponse:
    """z.ai's answer: its head read, its body still (all but its first bytes) on the connection."""

    __slots__ = (
        "_clients",
        "_conn",
        "_failed",
        "_first",
        "_key",
        "_left",
        "_scan",
        "chunked",
        "headers",
        "length",
        "reason",
        "status",
    )

    def __init__(self, clients: UpstreamClients, key: PoolKey, conn: Connection | None, head: Head) -> None:
        self._clients, self._conn = clients, conn
        self.status, self.reason, self.headers = head.status, head.reason, head.headers
        framing = head.framing
        self.length, self.chunked = framing.length, framing.chunked
        self._key: PoolKey | None = key if framing.keep_alive else None  # None: never back to the pool
        self._left: int | None = framing.length  # body bytes still to come (None: chunked, or until EOF)
        self._scan: ChunkScanner | None = ChunkScanner() if framing.chunked else None
        self._first = head.rest  # body bytes that came with the head
        self._failed: UpstreamFailed | None = None  # how the body broke, raised again to any later reader

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @property
    def done(self) -> bool:
        return self._left == 0 or (self._scan is not None and self._scan.done)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come, framing included (chunked stays chunked), and nothing after its
        end; UpstreamFailed when the connection breaks, stays silent or frames the body as h11 would not."""
        if self._failed is not None:
            raise self._failed
        if self._conn is None:
            raise UpstreamFailed("the answer was closed")
        reader = self._conn[0]
        timeout = self._clients.settings.idle_timeout
        try:
            data, self._first = self._first, b""
            while True:
                if data and (data := self._frame(data)):
                    yield data
                if self.done:
                    return
                try:
                    async with asyncio.timeout(timeout):
                        data = await reader.read(READ_SIZE)
                except TimeoutError:
                    raise UpstreamFailed(f"the answer stalled: no byte for {timeout:g} s") from None
                except OSError as exc:
                    raise UpstreamFailed(f"the answer broke: {type(exc).__name__}") from None
                if not data:
                    if self._left is None and self._scan is None:
                        self._left = 0  # the body ran until the connection closed: that is its end
                        return
                    raise UpstreamFailed("the answer broke: the connection closed before its end")
        except UpstreamFailed as exc:
            self._failed = exc
            raise

    def _frame(self, data: bytes) -> bytes:
        """The part of `data` that belongs to the body; anything after the body's end is dropped, and the
        connection it came on never serves again. A chunked body's trailer fields are dropped too (nothing
        downstream asked for them: its end is the blank line alone)."""
        if (scan := self._scan) is not None:
            try:
                size = scan.feed(data)
            except BadAnswer as exc:
                raise UpstreamFailed(f"the answer broke: bad chunked framing: {exc}") from None
            if scan.trailer_at is not None:
                if size < len(data):
                    self._key = None
                return data[: scan.trailer_at] + (b"\r\n" if scan.done else b"")
        elif self._left is not None:
            size = min(self._left, len(data))
            self._left -= size
        else:
            return data
        if size < len(data):
            self._key = None
            return data[:size]
        return data

    async def read_body(self, limit: int) -> tuple[bytes, bytes, bool]:
        """(raw bytes, body with the chunked framing undone, complete) of up to about `limit` bytes. Not
        complete: larger than that (the rest still to come), or cut short (relayed, it breaks again where it
        broke: never a whole answer made of part of one)."""
        raw = bytearray()
        try:
            async for data in self.chunks():
                raw += data
                if len(raw) > limit:
                    return bytes(raw), b"", False
        except UpstreamFailed:
            return bytes(raw), b"", False
        return bytes(raw), dechunk(bytes(raw)) if self.chunked else bytes(raw), True

    def close(self) -> None:
        """Done with the answer: the connection serves again if the answer was read to its end (and nothing
        after it), else it is cut (z.ai stops counting the stream)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.done and not self._first and self._key is not None:
            self._clients.give_back(self._key, conn)
        else:
            conn[1].transport.abort()


class UpstreamClients:
    """Kept-alive connections per way out (direct, or through each upstream proxy a flow names)."""

    def __init__(self, settings: UpstreamSettings | None = None) -> None:
        self._settings = settings or UpstreamSettings()
        self._contexts: dict[str | None, ssl.SSLContext] = {}  # by client certificate
        self._idle: dict[PoolKey, list[Connection]] = {}
        self._idle_count = 0

    @property
    def settings(self) -> UpstreamSettings:
        return self._settings

    def reconfigure(self, settings: UpstreamSettings) -> None:
        """New settings for new requests; requests in flight finish on the connections they started on."""
        if settings == self._settings:
            return
        self._settings = settings
        self._contexts = {}
        self._close_idle()

    async def send(
        self,
        to: Destination,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        written: Callable[[], None] | None = None,
    ) -> UpstreamResponse:
        """Send one request; the answer with its head read. UpstreamFailed when z.ai was not reached or
        did not answer: the request is sent twice only when a kept-alive connection closed before any byte
        of an answer (module docstring), and an attempt that got no answer fails over without a verdict
        on the model. `written` is called each time the request is handed to a connection (z.ai sees it
        from then on)."""
        through_proxy = to.proxy is not None and to.scheme == "http"
        form = to.url(target).encode() if through_proxy else to.path(target)
        lines = [b"%s %s HTTP/1.1\r\n" % (method, form)]
        lines += [b"%s: %s\r\n" % pair for pair in headers]
        if not any(name.lower() == b"host" for name, _ in headers):
            lines.append(b"host: %s\r\n" % to.authority.encode())
        if through_proxy and (auth := self._proxy_authorization()) is not None:
            lines.append(auth)
        lines.append(b"content-length: %d\r\n\r\n" % len(body))
        request = b"".join(lines) + body
        key = pool_key(to, headers)
        while (conn := self._take_idle(key)) is not None:
            if not _reusable(conn):
                conn[1].transport.abort()
                continue
            try:
                return await self._exchange(key, conn, method, request, written)
            except _Unanswered:
                break  # z.ai closed it as the request came: once more, on a new connection
        return await self._exchange(key, await self._connect(to), method, request, written)

    async def _exchange(
        self,
        to: PoolKey,
        conn: Connection,
        method: bytes,
        request: bytes,
        written: Callable[[], None] | None,
    ) -> UpstreamResponse:
        reader, writer = conn
        parser = HeadParser(method)
        try:
            writer.write(request)
            if written is not None:
                written()
            async with asyncio.timeout(self._settings.read_timeout):
                head = None
                while head is None:
                    head = parser.feed(await reader.read(READ_SIZE))
        except BadAnswer as exc:
            writer.transport.abort()
            if not parser.received:
                raise _Unanswered("the connection closed before an answer") from None
            raise UpstreamFailed(f"not an HTTP/1.1 answer: {exc}") from None
        except (OSError, TimeoutError) as exc:
            writer.transport.abort()
            if not parser.received and isinstance(exc, ConnectionError):
                raise _Unanswered(f"no answer: {type(exc).__name__}") from None
            raise UpstreamFailed(f"no answer: {type(exc).__name__}") from None
        except BaseException:
            writer.transport.abort()
            raise
        return UpstreamResponse(self, to, conn, head)

    async def _connect(self, to: Destination) -> Connection:
        loop_host, loop_port = to.host, to.port
        proxy = _proxy_address(to.proxy) if to.proxy is not None else None
        tls_name: str | None = to.server_name if to.scheme == "https" else None
        if proxy is not None:
            loop_host, loop_port = proxy
            tls_name = proxy[0] if to.proxy and to.proxy.startswith("https:") else None
        tls = self._tls(to, tls_name) if tls_name is not None else None
        loop = asyncio.get_running_loop()
        reader = _Reader(limit=MAX_HEAD, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                transport, _ = await loop.create_connection(
                    lambda: protocol, loop_host, loop_port, ssl=tls, server_hostname=tls_name
                )
                writer = asyncio.StreamWriter(transport, protocol, reader, loop)
                if proxy is not None and to.scheme == "https":
                    await self._tunnel(to, reader, writer)
        except (OSError, TimeoutError, BadAnswer) as exc:
            failed = UpstreamRefused if isinstance(exc, ssl.SSLCertVerificationError) else UpstreamFailed
            raise failed(f"{to.authority} not reached: {_connect_failure(exc)}") from None
        return reader, writer

    async def _tunnel(self, to: Destination, reader: _Reader, writer: asyncio.StreamWriter) -> None:
        """CONNECT through the upstream proxy, then TLS to z.ai inside the tunnel."""
        host = f"[{to.host}]" if ":" in to.host else to.host
        where = b"%s:%d" % (host.encode(), to.port)
        lines = [b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n" % (where, where)]
        if (auth := self._proxy_authorization()) is not None:
            lines.append(auth)
        writer.write(b"".join(lines) + b"\r\n")
        parser = HeadParser(b"CONNECT")
        head = None
        while head is None:
            head = parser.feed(await reader.read(READ_SIZE))
        if not 200 <= head.status < 300 or head.rest or reader.unread:
            writer.transport.abort()
            failed = UpstreamRefused if head.status == 407 else UpstreamFailed  # 407: upstream_auth is wrong
            raise failed(f"the upstream proxy refused the tunnel: HTTP {head.status}")
        await writer.start_tls(self._tls(to, to.server_name), server_hostname=to.server_name)

    def _tls(self, to: Destination, server_name: str) -> ssl.SSLContext:
        """The TLS context for a server name (its client certificate may be its own), made once."""
        try:
            cert = client_cert(self._settings, server_name)
            context = self._contexts.get(cert)
            if context is None:
                context = self._contexts[cert] = tls_context(self._settings, cert)
        except (OSError, ValueError) as exc:
            raise UpstreamRefused(
                f"{to.authority} not reached: the TLS options cannot be used: {exc}"
            ) from None
        return context

    def _proxy_authorization(self) -> bytes | None:
        auth = self._settings.proxy_auth
        if not auth or ":" not in auth:
            return None
        return b"proxy-authorization: Basic %s\r\n" % base64.b64encode(auth.encode())

    def _take_idle(self, key: PoolKey) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        conn = idle.pop()
        if not idle:
            del self._idle[key]
        self._idle_count -= 1
        return conn

    def give_back(self, key: PoolKey, conn: Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < IDLE_PER_KEY and self._idle_count < IDLE_TOTAL:
            idle.append(conn)
            self._idle_count += 1
        else:
            if not idle:
                del self._idle[key]
            conn[1].transport.abort()

    def _close_idle(self) -> None:
        idle, self._idle, self._idle_count = self._idle, {}, 0
        for conns in idle.values():
            for _, writer in conns:
                writer.transport.abort()

    async def aclose(self) -> None:
        self._close_idle()


def _reusable(conn: Connection) -> bool:
    """Whether a kept-alive connection can take a request (the pool's rule, module docstring)."""
    reader, writer = conn
    if reader.unread or reader.at_eof() or reader.exception() is not None or writer.is_closing():
        return False
    return not _waiting_in_kernel(writer)


def _waiting_in_kernel(writer: asyncio.StreamWriter) -> bool:
    """Whether a byte or a close waits on the socket that the loop has not read yet (poll, not select:
    select fails on descriptors above FD_SETSIZE, 1024, which a busy proxy reaches)."""
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(
        select, "poll"
    ):  # no poll (Windows): the retry on a new connection covers it
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def _connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in words a user can act on (a refused certificate says what was wrong)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or type(exc).__name__}"
    if isinstance(exc, BadAnswer):
        return f"the upstream proxy's answer: {exc}"
    return type(exc).__name__


def _proxy_address(url: str) -> tuple[str, int]:
    """host and port of an upstream proxy's URL (`http://host:port`)."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    return host, int(port) if port.isdigit() else (443 if url.startswith("https") else 80)
