"""A network's distance on loopback: a TCP relay that puts a round-trip time between its clients and a port.

z.ai is tens to hundreds of milliseconds away from its users; the simulator is on loopback. What the
distance costs a proxy is its handshakes (TCP, then TLS) and every byte's trip, so the relay delays both:
a connection carries nothing before 1.5 round trips after it was accepted (the TCP handshake's round
trip, then the first bytes' half), and every chunk is passed on half a round trip after it came, in either
direction, in order, without waiting for the chunk before it (a stream keeps its pace, shifted). For
benchmarks; it counts the connections it accepted. It runs in the caller's event loop on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Self

CHUNK = 65536


class DistantPort:
    """127.0.0.1:`port` (once started), `rtt` seconds away from 127.0.0.1:`target`."""

    def __init__(self, target: int, rtt: float) -> None:
        self.target = target
        self.rtt = rtt
        self.port = 0
        self.connections = 0  # accepted so far
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.ensure_future(self._relay(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        first = loop.time() + 1.5 * self.rtt
        upstream: list[asyncio.StreamWriter] = []
        try:
            await asyncio.sleep(self.rtt)
            target_reader, target_writer = await asyncio.open_connection("127.0.0.1", self.target)
            upstream.append(target_writer)
            await asyncio.gather(
                self._pipe(client_reader, target_writer, first),
                self._pipe(target_reader, client_writer, first),
            )
        except OSError:
            pass
        finally:
            for writer in (client_writer, *upstream):
                writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: float) -> None:
        """Pass `reader`'s chunks to `writer`, each half a round trip later (none before `first`); at the end
        of `reader`, end `writer` as late."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(CHUNK):
                    queue.put_nowait((max(loop.time() + self.rtt / 2, first), data))
            queue.put_nowait((max(loop.time() + self.rtt / 2, first), b""))

        reading = asyncio.ensure_future(read())
        try:
            while True:
                when, data = await queue.get()
                await asyncio.sleep(max(0.0, when - loop.time()))
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        finally:
            reading.cancel()
