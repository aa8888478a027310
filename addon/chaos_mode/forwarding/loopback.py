"""A small asyncio HTTP/1.1 server on loopback: what mitmproxy connects to for the flows the addon forwards.

It reads one request at a time per connection (mitmproxy never pipelines), hands it to a handler and writes
the handler's answer, streamed (chunked) when its length is unknown. When the peer goes away while the
handler runs, the handler is cancelled at once; a body that breaks mid-way breaks the connection, so
mitmproxy sees the upstream fail as it would have seen z.ai fail. Knows nothing of mitmproxy or z.ai.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

log = logging.getLogger(__name__)

BACKLOG: Final = 1024
MAX_HEAD: Final = 256 * 1024  # bytes of request line and headers
MAX_BODY: Final = 1 << 30  # mitmproxy has the body whole; the addon's own limit applies before this
FRAMING: Final = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive"})


class BadMessage(ValueError):
    """The peer sent something that is not an HTTP/1.1 request this server reads."""


@dataclass(slots=True)
class Incoming:
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


@dataclass(slots=True)
class Outgoing:
    """An answer: `body` bytes (sent with a Content-Length) or chunks (sent as they come)."""

    status: int
    headers: list[tuple[bytes, bytes]]  # framing headers are the server's business and dropped
    body: bytes | AsyncIterator[bytes] = b""
    reason: bytes = b""
    length: int | None = None  # the length of streamed chunks when known: no chunked framing then
    chunked: bool = False  # the streamed chunks carry their own chunked framing: relayed as they are
    closing: list[Callable[[], None]] = field(default_factory=list)  # run when done, always


Handler = Callable[[Incoming], Awaitable[Outgoing]]


class LoopbackServer:
    """`server.listen()` -> (host, port), at once (it serves as soon as the loop runs); `server.close()`.

    Both are synchronous, as mitmproxy's `running` and `done` hooks must be."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._socket: socket.socket | None = None
        self._server: asyncio.Server | None = None
        self._starting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> tuple[str, int] | None:
        if self._socket is None:
            return None
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        self.close()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it each
        # small write of a streamed answer waits for the peer's delayed ACK (about 40 ms a request).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.bind((host, port))
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._socket = sock
        self._starting = asyncio.get_running_loop().create_task(self._start(sock))
        address = self.address
        assert address is not None
        return address

    async def _start(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._serve, sock=sock, limit=MAX_HEAD)

    def close(self) -> None:
        """Stop listening and drop every connection (their handlers are cancelled)."""
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        self._starting = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        for task in list(self._connections):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        carry: bytes | None = b""
        try:
            while carry is not None:
                carry = await self._exchange(reader, writer, carry)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except BadMessage as exc:
            log.debug("loopback: bad request: %s", exc)
        except Exception:
            log.exception("chaos-mode: internal error in the loopback server")
        finally:
            self._connections.discard(task)
            writer.transport.abort()  # never a half-written answer that looks complete

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, carry: bytes
    ) -> bytes | None:
        """Serve one request (`carry`: its first bytes, already read); returns the first bytes of the
        next one, or None when the connection ends."""
        try:
            head = carry + await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial or carry:
                raise BadMessage("connection closed inside a request head") from None
            return None
        except asyncio.LimitOverrunError:
            raise BadMessage("request head too large") from None
        incoming = await _read_request(head, reader)
        handling = asyncio.ensure_future(self._handler(incoming))
        # The peer sends nothing more until it has its answer: a read that ends means it left.
        gone = asyncio.ensure_future(reader.read(1))
        try:
            done, _ = await asyncio.wait({handling, gone}, return_when=asyncio.FIRST_COMPLETED)
            if handling not in done:  # the peer left (or broke the protocol) while the handler ran
                handling.cancel()
                with contextlib.suppress(BaseException):
                    await handling
                return None
            outgoing = handling.result()
            # While the answer streams, the peer leaving cancels this task at once, whatever the body
            # waits for (z.ai may be silent for long): the body's closing then runs (no task per chunk).
            this = asyncio.current_task()
            assert this is not None
            writing = True

            def leave(_: object) -> None:
                # A callback already scheduled when the writing ended (the peer's close broke a write and
                # ended the read in the same turn of the loop) must not cancel the closing below.
                if writing:
                    this.cancel()

            gone.add_done_callback(leave)
            try:
                complete = await _write(outgoing, writer, gone)
            finally:
                writing = False
                gone.remove_done_callback(leave)
                for close in outgoing.closing:  # synchronous: nothing can cut it short
                    try:
                        close()
                    except Exception:
                        log.exception("chaos-mode: internal error while closing an answer")
            if not complete:
                return None
            if not gone.done():
                gone.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gone
            # The next request may have begun meanwhile: its first byte is the read's result.
            if gone.cancelled():
                return b""
            first = gone.result()
            return first or None
        finally:
            if not handling.done():
                handling.cancel()
            gone.cancel()


async def _read_request(head: bytes, reader: asyncio.StreamReader) -> Incoming:
    lines = head[:-4].split(b"\r\n")
    try:
        method, target, version = lines[0].split(b" ", 2)
    except ValueError:
        raise BadMessage("bad request line") from None
    if not version.startswith(b"HTTP/1."):
        raise BadMessage("not HTTP/1.x")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise BadMessage("bad header line")
        headers.append((name, value.strip()))
    incoming = Incoming(method, target, headers, b"")
    if (incoming.header(b"transfer-encoding") or b"").lower().endswith(b"chunked"):
        incoming.body = await _read_chunked(reader)
    else:
        length = incoming.header(b"content-length")
        try:
            size = int(length) if length is not None else 0
        except ValueError:
            raise BadMessage("bad content-length") from None
        if not 0 <= size <= MAX_BODY:
            raise BadMessage("bad content-length")
        incoming.body = await reader.readexactly(size) if size else b""
    return incoming


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadMessage("bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers: read and dropped
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise BadMessage("body too large")
        body += await reader.readexactly(size)
        await reader.readexactly(2)


async def _write(outgoing: Outgoing, writer: asyncio.StreamWriter, gone: asyncio.Future[bytes]) -> bool:
    """Write the answer; False when the connection cannot be used for another request."""
    body = outgoing.body
    head = [b"HTTP/1.1 %d %s\r\n" % (outgoing.status, outgoing.reason or b"-")]
    head += [b"%s: %s\r\n" % (k, v) for k, v in outgoing.headers if k.lower() not in FRAMING]
    if isinstance(body, bytes):
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        writer.write(b"".join(head) + body)
        await writer.drain()
        return True
    length = outgoing.length
    frame = length is None and not outgoing.chunked  # chunks of unknown length: framed here
    if length is None:
        head.append(b"transfer-encoding: chunked\r\n\r\n")
    else:
        head.append(b"content-length: %d\r\n\r\n" % length)
    writer.write(b"".join(head))
    async for chunk in body:  # an exception here breaks the connection: the answer is incomplete
        if gone.done():  # the peer left mid-answer
            return False
        if chunk:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if frame else chunk)
            await writer.drain()
    if frame:
        writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True
