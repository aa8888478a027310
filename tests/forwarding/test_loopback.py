"""The loopback server alone, over real sockets: what happens to an answer's closing when the peer leaves."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

from chaos_mode.forwarding.loopback import Incoming, LoopbackServer, Outgoing

WAIT = 5.0
HUGE = b"x" * (8 << 20)  # more than the socket buffers hold: the server's write waits for the peer


async def test_a_peer_that_leaves_while_a_write_waits_does_not_cut_the_closing_short() -> None:
    """The peer's reset ends the server's pending read and its pending write in the same turn of the loop;
    the closing (z.ai's stream) must still run, not be cancelled."""
    closed = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield HUGE
        yield b"never"

    def close_upstream() -> None:
        closed.set()

    async def handler(_: Incoming) -> Outgoing:
        return Outgoing(200, [], body(), closing=[close_upstream])

    server = LoopbackServer(handler)
    host, port = server.listen()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        async with asyncio.timeout(WAIT):
            await reader.readuntil(b"\r\n\r\n")  # the answer began; its first chunk waits on our reading
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # a reset, as when mitmproxy drops the connection of a client that left
            await closed.wait()
    finally:
        server.close()


async def _ok(_: Incoming) -> Outgoing:
    return Outgoing(200, [], b"ok")


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sends before it closes the connection, which it must do within `seconds`."""
    async with asyncio.timeout(seconds):
        return await reader.read()


async def test_a_peer_that_begins_no_request_is_let_go() -> None:
    server = LoopbackServer(_ok, idle_seconds=0.2)
    host, port = server.listen()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")  # one request, then silence
        assert (await _closed_within(reader, WAIT)).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        server.close()


async def test_a_head_sent_slowly_or_a_body_that_stops_is_let_go() -> None:
    server = LoopbackServer(_ok, head_seconds=0.2, idle_seconds=WAIT * 2)
    host, port = server.listen()
    try:
        body_stops = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n12345"
        for partial in (b"POST / HTTP/1.1\r\nhost: x\r\n", body_stops):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(partial)
            assert await _closed_within(reader, WAIT) == b""
            writer.close()
    finally:
        server.close()


async def test_a_request_turned_away_by_the_screen_is_answered_before_its_body_is_read() -> None:
    handled: list[Incoming] = []

    async def handler(incoming: Incoming) -> Outgoing:
        handled.append(incoming)
        return Outgoing(200, [], b"ok")

    def screen(incoming: Incoming) -> Outgoing | None:
        return None if incoming.header(b"x-pass") else Outgoing(403, [], b"no")

    server = LoopbackServer(handler, screen=screen)
    host, port = server.listen()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 314572800\r\n\r\n" + b"x" * 65536)
        answer = await _closed_within(reader, WAIT)
        assert answer.startswith(b"HTTP/1.1 403 ") and answer.endswith(b"no")
        assert b"connection: close" in answer
        writer.close()
        assert handled == []
    finally:
        server.close()


async def test_two_requests_on_one_connection() -> None:
    server = LoopbackServer(_ok)
    host, port = server.listen()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        request = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
        async with asyncio.timeout(WAIT):
            for _ in range(2):
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200") and await reader.readexactly(2) == b"ok"
        writer.close()
    finally:
        server.close()


async def test_an_answer_without_a_reason_carries_its_status_s_standard_phrase() -> None:
    """Our own answers (a 429, a 403) name no reason: the status line carries the standard one, never `-`."""

    async def handler(incoming: Incoming) -> Outgoing:
        status = int(incoming.header(b"x-status") or b"200")
        reason = incoming.header(b"x-reason") or b""
        return Outgoing(status, [], b"ok", reason=reason)

    server = LoopbackServer(handler)
    host, port = server.listen()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        cases = [
            (b"429", b"", b"429 Too Many Requests"),
            (b"403", b"", b"403 Forbidden"),
            (b"299", b"", b"299 -"),
        ]
        cases.append((b"429", b"Slow Down", b"429 Slow Down"))  # z.ai's own phrase is kept
        async with asyncio.timeout(WAIT):
            for status, reason, line in cases:
                writer.write(
                    b"POST / HTTP/1.1\r\nhost: x\r\nx-status: %s\r\nx-reason: %s\r\ncontent-length: 0\r\n\r\n"
                    % (status, reason)
                )
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 " + line + b"\r\n"), head
                await reader.readexactly(2)
        writer.close()
    finally:
        server.close()
