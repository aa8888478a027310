"""A small asyncio HTTP/1.1 server on loopback: what mitmproxy connects to for the flows the addon forwards.

Requests are read by h11's readers (the ones mitmproxy's HTTP/1 layer uses, on h11's receive buffer), one
at a time per connection (mitmproxy never pipelines). Its head
first: `screen` sees it before any byte of the body is read, and a request it turns away gets that answer
and the end of its connection. Then the body, at most `max_body` bytes. A peer that begins no request for
`idle_seconds`, or takes longer than `head_seconds` for a head (or pauses that long inside a body), is
closed on; a request h11 refuses, or one too large, is answered (400, 413) in one log line, never a
traceback, and its connection closed. The handler's answer is written streamed (chunked) when its length is
unknown. When the peer goes away while the handler runs, the handler is cancelled at once; a body that
breaks mid-way breaks the connection, so mitmproxy sees the upstream fail as it would have seen z.ai fail.
Knows nothing of mitmproxy or z.ai.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final

import h11
from h11._readers import ChunkedReader, ContentLengthReader
from h11._receivebuffer import ReceiveBuffer

from chaos_mode.forwarding.framing import MAX_HEAD, plain, read_request_head

log = logging.getLogger(__name__)

BACKLOG: Final = 1024
MAX_BODY: Final = 1 << 30  # the default cap; the forwarder sets the config's
HEAD_SECONDS: Final = (
    10.0  # for a whole head, and for any pause inside a body (mitmproxy writes them at once)
)
IDLE_SECONDS: Final = 60.0  # with no request begun (mitmproxy opens a new connection when it needs one)
READ_SIZE: Final = 65536
LINGER_SECONDS: Final = 1.0  # after a refusal, what the peer still sends is dropped this long, at most
FRAMING: Final = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive"})


class BadMessage(ValueError):
    """The peer sent something that is not an HTTP/1.1 request this server reads: answered `status`."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


class _Left(Exception):
    """The peer closed its connection inside a request."""


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
    reason: bytes = b""  # none: the status's standard phrase
    length: int | None = None  # the length of streamed chunks when known: no chunked framing then
    chunked: bool = False  # the streamed chunks carry their own chunked framing: relayed as they are
    closing: list[Callable[[], None]] = field(default_factory=list)  # run when done, always


Handler = Callable[[Incoming], Awaitable[Outgoing]]
Screen = Callable[[Incoming], Outgoing | None]  # a request's head (no body yet): an answer turns it away


class LoopbackServer:
    """`server.listen()` -> (host, port), at once (it serves as soon as the loop runs); `server.close()`.

    Both are synchronous, as mitmproxy's `running` and `done` hooks must be."""

    def __init__(
        self,
        handler: Handler,
        *,
        screen: Screen | None = None,
        max_body: int = MAX_BODY,
        head_seconds: float = HEAD_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        self._handler = handler
        self._screen = screen
        self.max_body = max_body
        self.head_seconds = head_seconds
        self.idle_seconds = idle_seconds
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
        except (ConnectionError, TimeoutError, _Left, asyncio.CancelledError):
            pass
        except BadMessage as exc:
            log.info("chaos-mode: the forwarder refused a request on loopback (%d): %s", exc.status, exc)
            text = f"chaos-mode forwarder: {exc}\n".encode()
            refusal = Outgoing(exc.status, [(b"content-type", b"text/plain")], text)
            with contextlib.suppress(OSError, TimeoutError):  # the peer left: nobody to tell
                await self._refuse(refusal, reader, writer)
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
        buffer = ReceiveBuffer()
        buffer += carry
        head = await self._head(buffer, reader, begun=bool(carry))
        if head is None:
            return None
        incoming = Incoming(head.method, head.target, head.headers.raw_items(), b"")
        if self._screen is not None and (refusal := self._screen(incoming)) is not None:
            await self._refuse(refusal, reader, writer)  # the body stays unread: the connection ends
            return None
        incoming.body = await self._body(buffer, reader, incoming.headers)
        if buffer:
            raise BadMessage("a request sent before the answer to the one before it")
        # The peer sends nothing more until it has its answer: a read that ends means it left (or broke
        # the protocol). While the handler runs and the answer streams, that cancels this task at once,
        # whatever they wait for (z.ai may be silent for long): no task for the handler, none per chunk.
        gone = asyncio.ensure_future(reader.read(1))
        this = asyncio.current_task()
        assert this is not None
        serving = True

        def leave(_: object) -> None:
            # A callback already scheduled when the writing ended (the peer's close broke a write and
            # ended the read in the same turn of the loop) must not cancel the closing below.
            if serving:
                this.cancel()

        gone.add_done_callback(leave)
        outgoing: Outgoing | None = None
        try:
            try:
                outgoing = await self._handler(incoming)
                complete = await _write(outgoing, writer, gone)
            finally:
                serving = False
                gone.remove_done_callback(leave)
                closing = outgoing.closing if outgoing is not None else []
                for close in closing:  # synchronous: nothing can cut it short
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
            gone.cancel()

    async def _head(
        self, buffer: ReceiveBuffer, reader: asyncio.StreamReader, begun: bool
    ) -> h11.Request | None:
        """The next request's head; None when the peer closed the connection before beginning one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.head_seconds if begun else self.idle_seconds)
        while (head := _read(read_request_head, buffer)) is None:
            async with asyncio.timeout_at(deadline):
                data = await reader.read(READ_SIZE)
            if not data:
                if begun:
                    raise _Left
                return None
            if not begun:
                begun, deadline = True, loop.time() + self.head_seconds
            buffer += data
        return head

    async def _body(
        self, buffer: ReceiveBuffer, reader: asyncio.StreamReader, headers: list[tuple[bytes, bytes]]
    ) -> bytes:
        """The body h11's framing rules give the request whose head had `headers` (as they came, which h11
        checked); a Content-Length over the cap refused at once."""
        body_reader: ChunkedReader | ContentLengthReader
        names = [name.lower() for name, _ in headers]
        if b"transfer-encoding" in names:  # h11 took nothing but chunked
            body_reader = ChunkedReader()
        else:
            at = names.index(b"content-length") if b"content-length" in names else -1
            length = int(headers[at][1]) if at >= 0 else 0
            if length > self.max_body:
                raise BadMessage(f"a body over {self.max_body} bytes", 413)
            body_reader = ContentLengthReader(length)
        body = bytearray()
        while True:
            event = _read(body_reader, buffer)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body:
                    raise BadMessage(f"a body over {self.max_body} bytes", 413)
            elif isinstance(event, h11.EndOfMessage):
                return bytes(body)
            else:
                async with asyncio.timeout(self.head_seconds):
                    data = await reader.read(READ_SIZE)
                if not data:
                    raise _Left
                buffer += data

    async def _refuse(
        self, outgoing: Outgoing, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Answer and end the connection. What the request still had to send is not kept: for a moment
        after the answer it is read and dropped, so that the peer gets the answer before the connection's
        end (a close with bytes unread would reset the connection, and the answer with it)."""
        assert isinstance(outgoing.body, bytes)
        head = _head_lines(outgoing)
        head.append(b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(outgoing.body))
        writer.write(b"".join(head) + outgoing.body)
        async with asyncio.timeout(self.head_seconds):
            await writer.drain()
        if writer.can_write_eof():
            # the peer may have reset the connection since the drain: shutdown() then fails with ENOTCONN,
            # an OSError that is no ConnectionError (seen in the soak); there is nothing left to tell it
            with contextlib.suppress(OSError):
                writer.write_eof()
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(LINGER_SECONDS):
                while await reader.read(READ_SIZE):
                    pass


def _read[Event](read: Callable[[ReceiveBuffer], Event | None], buffer: ReceiveBuffer) -> Event | None:
    """One of h11's readers on the buffer: its event, None when it needs more bytes; BadMessage (answered 400)
    for what h11 refuses, and for an incomplete head or chunk line over MAX_HEAD (h11's limit)."""
    try:
        event = read(buffer)
    except h11.LocalProtocolError as exc:
        raise BadMessage(plain(exc)) from None
    if event is None and len(buffer) > MAX_HEAD:
        raise BadMessage("Receive buffer too long", 431)
    return event


async def _write(outgoing: Outgoing, writer: asyncio.StreamWriter, gone: asyncio.Future[bytes]) -> bool:
    """Write the answer; False when the connection cannot be used for another request."""
    body = outgoing.body
    head = _head_lines(outgoing)
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


def _phrase(status: int) -> bytes:
    """The standard reason phrase of `status` (`-` for a status that has none)."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"-"


def _head_lines(outgoing: Outgoing) -> list[bytes]:
    """The status line and the answer's own headers (the framing ones are the caller's)."""
    head = [b"HTTP/1.1 %d %s\r\n" % (outgoing.status, outgoing.reason or _phrase(outgoing.status))]
    head += [b"%s: %s\r\n" % (k, v) for k, v in outgoing.headers if k.lower() not in FRAMING]
    return head
