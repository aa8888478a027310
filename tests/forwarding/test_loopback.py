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
