"""The relay that puts a round trip between a client and a port (`devtools.distance`): bytes pass whole and in
order both ways, the end of a stream follows, and nothing comes back sooner than the distance allows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from chaos_mode_tools.devtools.distance import DistantPort

RTT = 0.1


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    """A loopback server that sends back what it reads and ends its side when the client ends its own."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield int(server.sockets[0].getsockname()[1])


async def test_bytes_cross_in_order_both_ways_and_the_end_follows(echo: int) -> None:
    async with DistantPort(echo, rtt=0.01) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
        sent = [bytes([n]) * 1000 for n in range(20)]
        for chunk in sent:
            writer.write(chunk)
        writer.write_eof()
        async with asyncio.timeout(5):
            received = await reader.read()  # to the end: the server closed after the client's end came
        writer.close()
    assert received == b"".join(sent)
    assert port.connections == 1


async def test_nothing_comes_back_sooner_than_the_handshake_and_a_round_trip(echo: int) -> None:
    """The first bytes reach the server 1.5 round trips after the connection (TCP's handshake, then half a
    trip) and their answer takes half a trip back: two round trips at least, however fast the machine."""
    async with DistantPort(echo, rtt=RTT) as port:
        start = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
        writer.write(b"ping")
        async with asyncio.timeout(5):
            assert await reader.readexactly(4) == b"ping"
        first = time.monotonic() - start
        start = time.monotonic()
        writer.write(b"pong")
        async with asyncio.timeout(5):
            assert await reader.readexactly(4) == b"pong"
        again = time.monotonic() - start
        writer.close()
    assert first >= 2 * RTT
    assert again >= RTT


async def test_a_target_that_is_not_there_closes_the_client(echo: int) -> None:
    async with DistantPort(echo, rtt=0.0) as port:
        port.target = 1  # nothing listens on port 1 of loopback
        reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        writer.close()
