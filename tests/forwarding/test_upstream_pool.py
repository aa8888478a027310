"""The forwarder's client against a hostile upstream (real sockets on loopback): each answer framed as h11
frames it or refused, never another request's bytes, and a kept-alive connection reused only when nothing
came on it since its answer; the pool goes on working with more than 1024 descriptors open."""

from __future__ import annotations

import asyncio
import json
import os
import resource
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import pytest

from chaos_mode.forwarding.upstream import (
    Destination,
    UpstreamClients,
    UpstreamFailed,
    UpstreamResponse,
    UpstreamSettings,
)
from support.bounded import within
from support.hostile import BAD_CHUNK_SIZES, CUT_SHORT_SENT, HEADER, STRAY_SETTLE, HostileUpstream

TIMEOUT = 5.0


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileUpstream]:
    with HostileUpstream() as upstream:
        yield upstream


@pytest.fixture
async def clients() -> AsyncIterator[UpstreamClients]:
    clients = UpstreamClients(UpstreamSettings(read_timeout=TIMEOUT))
    yield clients
    await clients.aclose()


@dataclass
class Got:
    status: int
    body: bytes
    complete: bool


async def ask(
    clients: UpstreamClients,
    upstream: HostileUpstream,
    mode: str,
    key: str,
    written: Callable[[], None] | None = None,
) -> Got:
    """One request in `mode`, its answer read whole (or as far as it goes)."""
    to = Destination("http", "127.0.0.1", upstream.port)
    body = json.dumps({"model": "glm-4.7"}).encode()
    headers = [(HEADER.encode(), mode.encode()), (b"x-api-key", key.encode())]
    async with asyncio.timeout(TIMEOUT):
        response: UpstreamResponse = await clients.send(
            to, b"POST", b"/v1/messages", headers, body, written=written
        )
        try:
            _, decoded, complete = await response.read_body(1 << 20)
        finally:
            response.close()
    return Got(response.status, decoded, complete)


def whose(got: Got) -> str | None:
    """The key an answer says it is for."""
    text = json.loads(got.body)["content"][0]["text"]
    assert isinstance(text, str) and text.startswith("answer for ")
    return text.removeprefix("answer for ")


READ_WHOLE = ["ok", "ok-chunked", "interim", "folded", "bare-lf", "http10", "connection-close"]
READ_WHOLE += ["trailing-bytes", "trailer"]


@pytest.mark.parametrize("mode", READ_WHOLE)
async def test_answers_h11_reads_are_read_whole(
    clients: UpstreamClients, hostile: HostileUpstream, mode: str
) -> None:
    got = await ask(clients, hostile, mode, f"key-{mode}")
    assert got.status == 200 and got.complete and whose(got) == f"key-{mode}"


async def test_a_trailer_is_not_relayed_and_its_connection_serves_again(
    clients: UpstreamClients, hostile: HostileUpstream
) -> None:
    """mitmproxy breaks the client's connection on a trailer it did not ask for: the relayed body ends with
    the blank line alone."""
    to = Destination("http", "127.0.0.1", hostile.port)
    headers = [(HEADER.encode(), b"trailer"), (b"x-api-key", b"key")]
    response = await clients.send(to, b"POST", b"/v1/messages", headers, b"{}")
    try:
        raw, _, complete = await response.read_body(1 << 20)
    finally:
        response.close()
    assert complete and raw.endswith(b"}\r\n0\r\n\r\n") and b"x-checksum" not in raw
    before = hostile.connections
    assert whose(await ask(clients, hostile, "ok", "key")) == "key"
    assert hostile.connections == before


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("conflicting-length", "conflicting Content-Length"),
        ("xchunked", "Only Transfer-Encoding: chunked"),
        ("bad-version", "illegal status line"),
        ("endless-interim", "more than 16 interim"),
    ],
)
async def test_heads_h11_refuses_fail_the_attempt(
    clients: UpstreamClients, hostile: HostileUpstream, mode: str, why: str
) -> None:
    with pytest.raises(UpstreamFailed, match=why):
        await ask(clients, hostile, mode, "key")


@pytest.mark.parametrize("mode", sorted(BAD_CHUNK_SIZES))
async def test_a_chunk_size_h11_refuses_breaks_the_answer_at_once(
    clients: UpstreamClients, hostile: HostileUpstream, mode: str
) -> None:
    """-6 once moved the scanner backwards for ever (the event loop stalled); 0x5, +5 and 5_0 were read as
    sizes. The answer breaks, and its connection is not kept."""
    before = hostile.connections
    with within(TIMEOUT):
        got = await ask(clients, hostile, mode, "key")
    assert got.status == 200 and not got.complete and got.body == b""
    after = await ask(clients, hostile, "ok", "next")
    assert after.complete and whose(after) == "next"
    assert hostile.connections == before + 2  # the broken answer's connection was not used again


async def test_an_answer_cut_short_is_not_complete(
    clients: UpstreamClients, hostile: HostileUpstream
) -> None:
    to = Destination("http", "127.0.0.1", hostile.port)
    headers = [(HEADER.encode(), b"cut-short"), (b"x-api-key", b"key")]
    response = await clients.send(to, b"POST", b"/v1/messages", headers, b"{}")
    try:
        raw, decoded, complete = await response.read_body(1 << 20)
        assert (response.status, response.length, complete) == (400, 100, False)
        assert len(raw) == CUT_SHORT_SENT and decoded == b""
        with pytest.raises(UpstreamFailed, match="closed before its end"):  # relayed, it breaks again
            async for _ in response.chunks():
                pass
    finally:
        response.close()


@pytest.mark.parametrize(
    "mode", ["idle-bytes", "trailing-bytes", "late-interim", "http10", "connection-close", *BAD_CHUNK_SIZES]
)
async def test_a_connection_that_got_more_than_its_answer_never_serves_again(
    clients: UpstreamClients, hostile: HostileUpstream, mode: str
) -> None:
    """What came after an answer (on its way or while idle) would be taken for the next one's: the next
    request goes on a new connection and gets its own answer."""
    with within(TIMEOUT):
        await ask(clients, hostile, mode, "first")
    await asyncio.sleep(STRAY_SETTLE)  # the stray bytes arrive while the connection is idle
    before = hostile.connections
    got = await ask(clients, hostile, "ok", "second")
    assert got.complete and whose(got) == "second"
    assert hostile.connections == before + 1


async def test_a_clean_answer_leaves_its_connection_for_the_next_request(
    clients: UpstreamClients, hostile: HostileUpstream
) -> None:
    first = await ask(clients, hostile, "ok", "a")
    before = hostile.connections
    for mode in ["ok-chunked", "interim", "ok"]:
        got = await ask(clients, hostile, mode, "a")
        assert got.complete and whose(got) == "a"
    assert first.complete and hostile.connections == before  # all on the first one's connection


async def test_a_kept_connection_serves_only_the_credential_it_was_opened_for(
    clients: UpstreamClients, hostile: HostileUpstream
) -> None:
    """An upstream that sends bytes nobody asked for, after the next request went out on a reused connection,
    can hand them only to a request of the same key."""
    for key in ("a", "b", "a", "b"):
        got = await ask(clients, hostile, "ok", key)
        assert got.complete and whose(got) == key
    by_key: dict[str, set[int]] = {}
    for seen in hostile.seen[-4:]:
        by_key.setdefault(seen.key, set()).add(seen.connection)
    assert len(by_key["a"]) == len(by_key["b"]) == 1  # each key's second request reused its own connection
    assert not by_key["a"] & by_key["b"]


async def test_a_kept_connection_closed_as_the_request_came_is_tried_once_more_on_a_new_one(
    clients: UpstreamClients, hostile: HostileUpstream
) -> None:
    """No byte of an answer came: sending it again cannot receive anything twice (and costs no failover)."""
    writes: list[int] = []
    await ask(clients, hostile, "close-on-reuse", "key", lambda: writes.append(1))  # new: answered, kept
    assert writes == [1]
    before, seen = hostile.connections, len(hostile.seen)
    got = await ask(  # reused: closed, then a new one
        clients, hostile, "close-on-reuse", "key", lambda: writes.append(2)
    )
    assert got.complete and whose(got) == "key"
    assert hostile.connections == before + 1
    assert len(hostile.seen) == seen + 2
    assert writes == [1, 2, 2]  # told at each writing: z.ai judges the request by the last


async def test_a_new_connection_closed_before_an_answer_fails_the_attempt(
    clients: UpstreamClients, hostile: HostileUpstream
) -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    to = Destination("http", "127.0.0.1", server.sockets[0].getsockname()[1])
    async with server, asyncio.timeout(TIMEOUT):
        with pytest.raises(UpstreamFailed, match="closed before an answer"):
            await clients.send(to, b"POST", b"/", [], b"{}")


@pytest.fixture
def many_descriptors() -> Iterator[int]:
    """More than FD_SETSIZE (1024) descriptors open, so the pool's sockets get numbers above it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1400
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield max(opened)
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_the_pool_reuses_connections_with_more_than_1024_descriptors_open(
    many_descriptors: int, hostile: HostileUpstream
) -> None:
    assert many_descriptors > 1024
    clients = UpstreamClients(UpstreamSettings(read_timeout=TIMEOUT))
    try:
        before = hostile.connections
        for _ in range(4):
            got = await ask(clients, hostile, "ok", "a")
            assert got.complete and whose(got) == "a"
        assert hostile.connections == before + 1  # one connection, reused three times
    finally:
        await clients.aclose()
