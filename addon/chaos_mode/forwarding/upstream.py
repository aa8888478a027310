"""The forwarder's way to z.ai: a small HTTP/1.1 client on asyncio streams, with a keep-alive pool.

mitmproxy checks z.ai's certificate against certifi's bundle, or against `ssl_verify_upstream_trusted_ca`
/ `ssl_verify_upstream_trusted_confdir` when set, and not at all with `ssl_insecure`; the same settings
make the same check here. A flow that came through `--mode upstream:` goes out through that proxy
(CONNECT for https, an absolute URL for http). An answer's body is relayed as its bytes come, framing
included: it is read only as far as needed to know where it ends, so the connection can serve again.
"""

from __future__ import annotations

import asyncio
import base64
import select
import ssl
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import certifi

CONNECT_TIMEOUT: Final = 30.0  # seconds to reach z.ai (or the upstream proxy)
READ_TIMEOUT: Final = 600.0  # seconds without a byte from z.ai before an attempt counts as failed
IDLE_PER_ORIGIN: Final = 64  # kept-alive connections per way out; more are closed when they come back
MAX_HEAD: Final = 256 * 1024
READ_SIZE: Final = 65536


class UpstreamFailed(Exception):
    """z.ai (or the upstream proxy) was not reached, broke the connection, stayed silent, or did not speak
    HTTP/1.1."""


class UpstreamRefused(UpstreamFailed):
    """z.ai was not reached for a reason no other model changes, a setting to fix: its certificate failed
    verification, or the upstream proxy refused its credentials (407)."""


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """mitmproxy's upstream TLS options, and how long an attempt may stay silent."""

    insecure: bool = False
    ca_file: str | None = None
    ca_path: str | None = None
    proxy_auth: str | None = None  # user:pass for the upstream proxy (mitmproxy's upstream_auth)
    read_timeout: float = READ_TIMEOUT


@dataclass(frozen=True, slots=True)
class Destination:
    """Where the flow was going before it was pointed at the forwarder."""

    scheme: str
    host: str
    port: int
    proxy: str | None = None  # the upstream proxy's URL (`--mode upstream:`), else direct

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


def tls_context(settings: UpstreamSettings) -> ssl.SSLContext:
    """The certificate check mitmproxy would make on z.ai."""
    if settings.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if settings.ca_file is None and settings.ca_path is None:
        return ssl.create_default_context(cafile=certifi.where())
    return ssl.create_default_context(cafile=settings.ca_file, capath=settings.ca_path)


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class UpstreamResponse:
    """z.ai's answer: status and headers read, the body still on the connection."""

    __slots__ = (
        "_clients",
        "_conn",
        "_key",
        "_left",
        "_scan",
        "chunked",
        "headers",
        "length",
        "reason",
        "status",
    )

    def __init__(
        self,
        clients: UpstreamClients,
        key: Destination,
        conn: Connection | None,
        status: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        self._clients, self._conn = clients, conn
        self._key: Destination | None = key
        self.status, self.reason, self.headers = status, reason, headers
        self.length: int | None = None
        self.chunked = False
        keep = True
        for name, value in headers:
            low = name.lower()
            if low == b"content-length" and value.strip().isdigit():
                self.length = int(value)
            elif low == b"transfer-encoding" and value.lower().rstrip().endswith(b"chunked"):
                self.chunked = True
            elif low == b"connection" and b"close" in value.lower():
                keep = False
        if self.chunked:
            self.length = None
        elif status in (204, 304) or 100 <= status < 200:
            self.length = 0
        self._left: int | None = self.length  # body bytes still to come (None: until EOF or the last chunk)
        self._scan: ChunkScanner | None = ChunkScanner() if self.chunked else None
        if not keep or (self.length is None and not self.chunked):
            self._key = None  # never back to the pool

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @property
    def done(self) -> bool:
        return self._left == 0 or (self._scan is not None and self._scan.done)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come, framing included (chunked stays chunked); UpstreamFailed when the
        connection breaks or stays silent first."""
        if self._conn is None:
            raise UpstreamFailed("the answer was closed")
        reader = self._conn[0]
        timeout = self._clients.settings.read_timeout
        while not self.done:
            try:
                async with asyncio.timeout(timeout):
                    data = await reader.read(READ_SIZE if self._left is None else min(self._left, READ_SIZE))
            except (OSError, TimeoutError) as exc:
                raise UpstreamFailed(f"the answer broke: {type(exc).__name__}") from None
            if not data:
                if self._left is None and self._scan is None:
                    self._left = 0  # the body ran until the connection closed: that is its end
                    return
                raise UpstreamFailed("the answer broke: the connection closed before its end")
            if self._scan is not None:
                self._scan.feed(data)
            elif self._left is not None:
                self._left -= len(data)
            yield data

    async def read_body(self, limit: int) -> tuple[bytes, bytes, bool]:
        """(raw bytes, body with the chunked framing undone, complete) of up to about `limit` bytes."""
        raw = bytearray()
        try:
            async for data in self.chunks():
                raw += data
                if len(raw) > limit:
                    return bytes(raw), b"", False
        except UpstreamFailed:
            pass  # a refusal cut short is still read for what it says
        return bytes(raw), dechunk(bytes(raw)) if self.chunked else bytes(raw), True

    def close(self) -> None:
        """Done with the answer: the connection serves again if the answer was read to its end, else it is
        cut (z.ai stops counting the stream)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.done and self._key is not None and not conn[0].at_eof():
            self._clients.give_back(self._key, conn)
        else:
            conn[1].transport.abort()


class ChunkScanner:
    """Follows a chunked body's framing over raw bytes to find its end, without copying the data."""

    __slots__ = ("_line", "_skip", "_trailer", "done")

    def __init__(self) -> None:
        self._skip = 0  # data (and its CRLF) still to pass over
        self._line = b""  # a size or trailer line begun in the previous read
        self._trailer = False
        self.done = False

    def feed(self, data: bytes) -> None:
        at, end = 0, len(data)
        while at < end and not self.done:
            if self._skip:
                step = min(self._skip, end - at)
                self._skip -= step
                at += step
                continue
            eol = data.find(b"\n", at)
            if eol < 0:
                self._line += data[at:]
                if len(self._line) > MAX_HEAD:
                    raise UpstreamFailed("bad chunked framing")
                return
            line, self._line = self._line + data[at:eol], b""
            at = eol + 1
            if self._trailer:
                self.done = line.rstrip(b"\r") == b""
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise UpstreamFailed("bad chunked framing") from None
            if size == 0:
                self._trailer = True
            else:
                self._skip = size + 2


def dechunk(raw: bytes) -> bytes:
    """The data of a complete (or cut) chunked body."""
    body = bytearray()
    at = 0
    while True:
        eol = raw.find(b"\n", at)
        if eol < 0:
            return bytes(body)
        try:
            size = int(raw[at:eol].split(b";", 1)[0].strip(), 16)
        except ValueError:
            return bytes(body)
        if size == 0:
            return bytes(body)
        body += raw[eol + 1 : eol + 1 + size]
        at = eol + 1 + size + 2


def decode(body: bytes, coding: bytes | None) -> bytes:
    """The body as z.ai meant it (gzip, deflate, br or zstd undone, best effort), for reading a business
    code."""
    name = (coding or b"").strip().lower()
    try:
        if name in (b"gzip", b"x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if name == b"deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
        if name == b"br":
            import brotli  # type: ignore[import-untyped]  # mitmproxy's dependency

            return bytes(brotli.decompress(body))
        if name == b"zstd":
            from chaos_mode.zai.zstd import zstd

            return bytes(zstd.decompress(body))
    except Exception:
        return body
    return body


class UpstreamClients:
    """Kept-alive connections per way out (direct, or through each upstream proxy a flow names)."""

    def __init__(self, settings: UpstreamSettings | None = None) -> None:
        self._settings = settings or UpstreamSettings()
        self._context: ssl.SSLContext | None = None
        self._idle: dict[Destination, list[Connection]] = {}

    @property
    def settings(self) -> UpstreamSettings:
        return self._settings

    def reconfigure(self, settings: UpstreamSettings) -> None:
        """New settings for new requests; requests in flight finish on the connections they started on."""
        if settings == self._settings:
            return
        self._settings = settings
        self._context = None
        self._close_idle()

    async def send(
        self, to: Destination, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send one request; the answer with its head read. UpstreamFailed when z.ai was not reached or
        did not answer (also on a kept-alive connection: the request is never sent twice, and an attempt
        that got no answer fails over without a verdict on the model)."""
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
        idle = self._idle.get(to)
        while idle:
            conn = idle.pop()
            if _idle_and_open(conn):
                return await self._exchange(to, conn, request)
            conn[1].transport.abort()  # z.ai closed it while it was idle
        return await self._exchange(to, await self._connect(to), request)

    async def _exchange(self, to: Destination, conn: Connection, request: bytes) -> UpstreamResponse:
        reader, writer = conn
        try:
            writer.write(request)
            async with asyncio.timeout(self._settings.read_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
            status, reason, headers = _parse_head(head)
        except asyncio.IncompleteReadError:
            writer.transport.abort()
            raise UpstreamFailed("the connection closed before an answer") from None
        except (OSError, TimeoutError, asyncio.LimitOverrunError) as exc:
            writer.transport.abort()
            raise UpstreamFailed(f"no answer: {type(exc).__name__}") from None
        except BaseException:
            writer.transport.abort()
            raise
        return UpstreamResponse(self, to, conn, status, reason, headers)

    async def _connect(self, to: Destination) -> Connection:
        loop_host, loop_port = to.host, to.port
        proxy = _proxy_address(to.proxy) if to.proxy is not None else None
        tls_name: str | None = to.host if to.scheme == "https" else None
        if proxy is not None:
            loop_host, loop_port = proxy
            tls_name = proxy[0] if to.proxy and to.proxy.startswith("https:") else None
        tls = self._tls() if tls_name is not None else None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                reader, writer = await asyncio.open_connection(
                    loop_host, loop_port, ssl=tls, server_hostname=tls_name, limit=MAX_HEAD
                )
                if proxy is not None and to.scheme == "https":
                    await self._tunnel(to, reader, writer)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            failed = UpstreamRefused if isinstance(exc, ssl.SSLCertVerificationError) else UpstreamFailed
            raise failed(f"{to.authority} not reached: {_connect_failure(exc)}") from None
        return reader, writer

    async def _tunnel(
        self, to: Destination, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """CONNECT through the upstream proxy, then TLS to z.ai inside the tunnel."""
        host = f"[{to.host}]" if ":" in to.host else to.host
        where = b"%s:%d" % (host.encode(), to.port)
        lines = [b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n" % (where, where)]
        if (auth := self._proxy_authorization()) is not None:
            lines.append(auth)
        writer.write(b"".join(lines) + b"\r\n")
        status, _, _ = _parse_head(await reader.readuntil(b"\r\n\r\n"))
        if status != 200:
            writer.transport.abort()
            failed = UpstreamRefused if status == 407 else UpstreamFailed  # 407: upstream_auth is wrong
            raise failed(f"the upstream proxy refused the tunnel: HTTP {status}")
        await writer.start_tls(self._tls(), server_hostname=to.host)

    def _tls(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = tls_context(self._settings)
        return self._context

    def _proxy_authorization(self) -> bytes | None:
        auth = self._settings.proxy_auth
        if not auth or ":" not in auth:
            return None
        return b"proxy-authorization: Basic %s\r\n" % base64.b64encode(auth.encode())

    def give_back(self, to: Destination, conn: Connection) -> None:
        idle = self._idle.setdefault(to, [])
        if len(idle) < IDLE_PER_ORIGIN:
            idle.append(conn)
        else:
            conn[1].transport.abort()

    def _close_idle(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for _, writer in conns:
                writer.transport.abort()

    async def aclose(self) -> None:
        self._close_idle()


def _idle_and_open(conn: Connection) -> bool:
    """Whether a kept-alive connection can take a request: nothing has come on it since its last answer
    (its socket not readable: no close from z.ai on its way, even one the loop has not seen yet)."""
    reader, writer = conn
    if reader.at_eof() or writer.is_closing():
        return False
    sock = writer.get_extra_info("socket")
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in words a user can act on (a refused certificate says what was wrong)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or type(exc).__name__}"
    return type(exc).__name__


def _parse_head(head: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise UpstreamFailed("not an HTTP/1.x answer")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return int(parts[1]), parts[2] if len(parts) > 2 else b"", headers


def _proxy_address(url: str) -> tuple[str, int]:
    """host and port of an upstream proxy's URL (`http://host:port`)."""
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    return host, int(port) if port.isdigit() else (443 if url.startswith("https") else 80)
