"""The forwarder over real loopback HTTP: a scripted upstream plays z.ai, httpx plays mitmproxy."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from chaos_mode.config.schema import parse_config
from chaos_mode.doors.messages import parse_message
from chaos_mode.forwarding import forwarder as forwarder_module
from chaos_mode.forwarding.forwarder import TOKEN_HEADER, Forwarder
from chaos_mode.forwarding.head_baseline import STALL_FLOOR_SECONDS
from chaos_mode.forwarding.head_patience import HeadPatience
from chaos_mode.forwarding.upstream import Destination, UpstreamClients, UpstreamSettings
from chaos_mode.observe.stats import Stats
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing import pool_status
from chaos_mode.routing.pool import ChaosPool, Slot, Ticket
from chaos_mode.routing.pool_status import served
from support.fakes import FakeClock
from support.hostile import bomb

BODY = json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "stream": True, "messages": []}).encode()
REFUSAL = json.dumps(
    {"type": "error", "error": {"type": "rate_limit_error", "code": "1302", "message": "busy"}}
)
WAIT = 5.0

Script = Callable[[int, bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Upstream:
    """A scripted z.ai on loopback: `script(n, request head and body, reader, writer)` per request."""

    script: Script
    requests: list[bytes] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            request = head + await reader.readexactly(length)
            self.requests.append(request)
            await self.script(len(self.requests), request, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


async def answer(writer: asyncio.StreamWriter, status: int, body: bytes, *headers: bytes) -> None:
    head = b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n%s\r\n" % (
        status,
        len(body),
        b"".join(h + b"\r\n" for h in headers),
    )
    writer.write(head + body)
    await writer.drain()


@dataclass
class Rig:
    forwarder: Forwarder
    upstream: Upstream
    pool: ChaosPool
    stats: Stats
    client: httpx.AsyncClient

    def routed(self, body: bytes = BODY) -> RoutedRequest:
        request = self.unrouted(body)
        selection = self.pool.admit_now(request.ticket())
        assert selection is not None and request.hold(selection)
        return request

    def unrouted(self, body: bytes = BODY) -> RoutedRequest:
        """A request not admitted yet."""
        return RoutedRequest(
            parse_message(body, limit=1 << 20),
            "heavy",
            pool=self.pool,
            stats=self.stats,
            later=lambda delay, callback: asyncio.get_running_loop().call_later(delay, callback),
        )

    def send(
        self, request: RoutedRequest, token: str | None = None, **extra: str
    ) -> Awaitable[httpx.Response]:
        """What mitmproxy does with a flow pointed at the forwarder (`extra`: headers, "_" for "-")."""
        destination = Destination("http", "127.0.0.1", self.upstream.port)
        token = token if token is not None else self.forwarder.expect(request, destination)
        host, port = self.forwarder.address or ("", 0)
        headers = {
            "host": "api.z.ai",
            TOKEN_HEADER: token,
            "x-api-key": "sk-secret",
            "connection": "keep-alive",
            **{name.replace("_", "-"): value for name, value in extra.items()},
        }
        body = request.body_for(request.model or "")
        url = f"http://{host}:{port}/api/anthropic/v1/messages?beta=true"
        return self.client.post(url, content=body, headers=headers)

    async def sent(self, request: RoutedRequest) -> asyncio.Future[httpx.Response]:
        """`send` started, and returned once z.ai has the request."""
        sending = asyncio.ensure_future(self.send(request))
        while not self.upstream.requests:
            await asyncio.sleep(0.01)
        return sending


@pytest.fixture
async def make_rig(caplog: pytest.LogCaptureFixture) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    caplog.set_level(logging.INFO)
    rigs: list[Rig] = []

    async def factory(
        script: Script,
        routing: dict[str, Any] | None = None,
        patience: float | None = None,
        **settings: float,
    ) -> Rig:
        upstream = Upstream(script)
        upstream.server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        routing = routing or {"chaosMode": {"enabled": True}, "learning": {"enabled": False}}
        config = parse_config({"modelRouting": routing})
        clock = FakeClock()
        pool = ChaosPool(config, clock=clock, wall_clock=clock)
        forwarder = Forwarder(
            UpstreamClients(UpstreamSettings(**settings)), wall_clock=clock, patience=HeadPatience(patience)
        )
        forwarder.listen()
        rig = Rig(
            forwarder, upstream, pool, Stats(config, clock), httpx.AsyncClient(trust_env=False, timeout=WAIT)
        )
        rigs.append(rig)
        return rig

    yield factory
    for rig in rigs:
        await rig.client.aclose()
        rig.forwarder.close()
        assert rig.upstream.server is not None
        rig.upstream.server.close()
        await asyncio.sleep(0)
        assert rig.pool.spurious_releases == 0
    assert "Traceback" not in caplog.text and "internal error" not in caplog.text


async def sse_answer(
    n: int, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    if n == 1:
        await answer(writer, 429, REFUSAL.encode(), b"content-type: application/json", b"retry-after: 3")
        return
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: zai-1\r\n\r\n")
    for i in range(3):
        writer.write(b'event: ping\ndata: {"n": %d}\n\n' % i)
        await writer.drain()
        await asyncio.sleep(0.01)


def first_refused_when(told: asyncio.Event) -> Script:
    """z.ai's first request gets no head, then a 1302 once `told` is set; the others stream."""

    async def script(n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            await told.wait()
            await answer(writer, 429, REFUSAL.encode(), b"content-type: application/json")
            return
        await sse_answer(2, raw, reader, writer)

    return script


async def test_a_refused_attempt_is_sent_again_to_another_model_and_streams(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make_rig(sse_answer)
    request = rig.routed()
    first = request.model
    async with asyncio.timeout(WAIT):
        response = await rig.send(request)
    assert response.status_code == 200 and response.headers["request-id"] == "zai-1"
    assert response.text.count("event: ping") == 3
    assert response.headers.get("transfer-encoding") == "chunked"
    second = request.model
    assert first != second and request.tried == [first, second]
    sent = [json.loads(r.split(b"\r\n\r\n", 1)[1])["model"] for r in rig.upstream.requests]
    assert sent == [first, second]
    # The private token never went on; the Host header did, and so did the client's own headers.
    for raw in rig.upstream.requests:
        head = raw.split(b"\r\n\r\n", 1)[0].lower()
        assert (
            TOKEN_HEADER.encode() not in head
            and b"host: api.z.ai" in head
            and b"x-api-key: sk-secret" in head
        )
    assert rig.stats.failovers == 1
    request.finish("ok")
    assert rig.pool.in_flight() == 0


async def test_a_request_without_a_known_token_is_not_forwarded(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make_rig(sse_answer)
    request = rig.routed()
    response = await rig.send(request, token="not-a-token")
    assert response.status_code == 403
    assert rig.upstream.requests == []
    request.finish("error")


async def hang_second(
    n: int, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    if n == 1:
        await answer(writer, 429, REFUSAL.encode(), b"content-type: application/json")
        return
    await reader.read()  # never answers


async def test_a_second_attempt_that_hangs_ends_in_our_429(make_rig: Callable[..., Awaitable[Rig]]) -> None:
    rig = await make_rig(hang_second, read_timeout=0.3)
    request = rig.routed()
    rig.pool.reconfigure(
        rig.pool.config.model_copy(
            update={"streams": rig.pool.config.streams.model_copy(update={"max_failovers": 1})}
        )
    )
    async with asyncio.timeout(WAIT):
        response = await rig.send(request)
    assert response.status_code == 429
    payload = response.json()
    assert (
        payload["error"]["type"] == "rate_limit_error"
        and "not reached (no answer: TimeoutError)" in payload["error"]["message"]
    )
    assert request.rejected is not None and rig.pool.in_flight() == 0
    assert sum(n for (_, code), n in rig.stats.upstream_errors.items() if code == "http-502") == 1
    request.finish("rejected")


async def test_when_the_peer_leaves_mid_stream_the_upstream_stream_is_closed_at_once(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    upstream_closed = asyncio.Event()

    async def never_ends(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nevent: ping\ndata: {}\n\n")
        await writer.drain()
        await reader.read()  # z.ai thinks for a long time; returns when the forwarder closes the stream
        upstream_closed.set()

    rig = await make_rig(never_ends)
    request = rig.routed()
    host, port = rig.forwarder.address or ("", 0)
    token = rig.forwarder.expect(request, Destination("http", "127.0.0.1", rig.upstream.port))
    reader, writer = await asyncio.open_connection(host, port)
    body = request.body_for(request.model or "")
    writer.write(
        b"POST /v1/messages HTTP/1.1\r\nhost: api.z.ai\r\n%s: %s\r\ncontent-length: %d\r\n\r\n%s"
        % (TOKEN_HEADER.encode(), token.encode(), len(body), body)
    )
    await writer.drain()
    async with asyncio.timeout(WAIT):
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert b"ping" in await reader.readuntil(b"\n\n")
        writer.close()  # mitmproxy closes its connection when the client leaves
        await upstream_closed.wait()
    request.finish("aborted")


async def test_answers_on_a_kept_alive_connection_are_not_held_back(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """Small writes go out at once (TCP_NODELAY): without it, every answer after the first on a connection
    waited about 40 ms for the peer's delayed ACK."""

    async def ok(n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
        for i in range(3):
            writer.write(b'event: ping\ndata: {"n": %d}\n\n' % i)
            await writer.drain()

    rig = await make_rig(ok)
    started = asyncio.get_running_loop().time()
    for _ in range(10):
        request = rig.routed()
        response = await rig.send(request)
        assert response.status_code == 200
        request.finish("ok")
    assert asyncio.get_running_loop().time() - started < 0.3


ONE_HEAVY = {"chaosMode": {"enabled": True}, "models": {"h": {"tier": "HEAVY", "maxConcurrency": 1}}}
TWO_HEAVY = {
    "chaosMode": {"enabled": True},
    "models": {"h1": {"tier": "HEAVY", "maxConcurrency": 1}, "h2": {"tier": "HEAVY", "maxConcurrency": 1}},
}


async def test_an_unanswered_probe_is_given_up_for_a_slot_within_the_limits(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """z.ai sends an accepted stream's head at once and a 1302 only seconds later: a probe with no head yet
    when a slot within the limits comes for its request is abandoned, its upstream request closed."""
    probe_closed = asyncio.Event()

    async def refuse_slowly(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if n == 1:
            await reader.read()  # the probe: no head, as z.ai before its 1302; returns once it is closed
            probe_closed.set()
            return
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(refuse_slowly, routing=TWO_HEAVY, patience=0.0)
    occupants = [rig.pool.try_acquire(Ticket("heavy")) for _ in range(2)]
    for occupant in occupants:
        assert occupant is not None
        rig.pool.ledger.success(occupant)  # 1 of 1 answered cleanly on each: the next request may probe
    request = rig.routed()
    probe = request.slot
    assert probe is not None and probe.probe == "model" and probe.model == "h1"
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        assert not sending.done()
        other = next(o for o in occupants if o is not None and o.model == "h2")
        rig.pool.release(other)  # a slot within the limits frees: the probe is given up for it
        response = await sending
        await probe_closed.wait()
    assert response.status_code == 200 and response.text.count("event: ping") == 3
    assert len(rig.upstream.requests) == 2 and request.tried == ["h1", "h2"]
    assert request.slot is not None and request.slot.probe is None
    assert [a.refusal for a in request.attempts] == ["probe given up", None]
    assert rig.stats.failovers == 0 and not rig.stats.recent_failovers  # a probe given up is no failover
    # Neither a refusal nor a clean answer: the limit stays, nothing counted against the model.
    assert rig.pool.limits.limit("h1") == 1 and dict(rig.stats.upstream_errors) == {}
    request.finish("ok")
    assert rig.pool.in_flight() == 1  # the occupant of h1
    regular = rig.pool.try_acquire(Ticket("heavy", may_probe=False))
    assert regular is not None  # no probe left counted
    assert regular.model == "h2" and rig.pool.release(regular)
    occupant = next(o for o in occupants if o is not None and o.model == "h1")
    assert rig.pool.release(occupant)
    assert rig.pool.in_flight() == 0 and rig.pool.spurious_releases == 0


def probe_beside_an_occupant(rig: Rig) -> tuple[Slot, RoutedRequest]:
    """A heavy request answered cleanly (the limit of one ran full), and a routed request probing above."""
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None
    rig.pool.ledger.success(occupant)
    request = rig.routed()
    assert request.slot is not None and request.slot.probe == "model"
    return occupant, request


def seen_to_queue(rig: Rig, heads: float) -> HeadPatience:
    """The forwarder's patience after 8 heads of `heads` seconds from each model and one z.ai held, then
    served: it queues."""
    patience = rig.forwarder.patience
    for model in ("h1", "h2"):
        for _ in range(8):
            patience.head(heads, model=model)
    patience.head(5.0, model="h1")
    assert patience.queues()
    return patience


async def test_while_z_ai_queues_a_probe_it_holds_is_given_up_at_its_stall(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """A z.ai that queues serves a held probe only once a slot frees, and what comes after it waits behind
    it: the probe is closed at its stall, its request waiting for a slot within the limits (a regular
    attempt would be left alone: z.ai may be about to serve it)."""
    probe_closed = asyncio.Event()

    async def hold_the_probe(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if n == 1:
            await reader.read()  # held: no head until it is closed
            probe_closed.set()
            return
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(hold_the_probe, routing=TWO_HEAVY)
    patience = seen_to_queue(rig, heads=0.01)
    assert patience.seconds() is None and patience.stall_after(None, "h1") == 0.25
    occupants = [rig.pool.try_acquire(Ticket("heavy")) for _ in range(2)]
    for occupant in occupants:
        assert occupant is not None
        rig.pool.ledger.success(occupant)
    request = rig.routed()
    assert request.slot is not None and request.slot.probe == "model"
    async with asyncio.timeout(WAIT):
        sending = asyncio.ensure_future(rig.send(request))
        await probe_closed.wait()  # closed at its stall, with no slot within the limits free yet
        assert not sending.done() and request.slot is None
        other = next(o for o in occupants if o is not None and o.model == "h2")
        rig.pool.release(other)
        response = await sending
    assert response.status_code == 200 and request.tried == ["h1", "h2"]
    assert [a.refusal for a in request.attempts] == ["probe given up", None]
    assert not rig.pool.limits.can_probe("h1")  # its stall paced the next probe as a refusal would
    request.finish("ok")
    for occupant in occupants:
        if occupant is not None and occupant.model == "h1":
            rig.pool.release(occupant)
    assert rig.pool.in_flight() == 0


async def test_while_z_ai_queues_the_slot_a_stream_frees_is_the_held_probes_not_the_next_requests(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """z.ai holds the probe until the model's stream ends, then serves it in that slot: were the slot
    given to the next request, z.ai would hold that one in turn until the probe ended."""
    freed = asyncio.Event()

    async def hold_until_freed(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await freed.wait()
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(hold_until_freed, routing=ONE_HEAVY)
    assert seen_to_queue(rig, heads=0.5).stall_after(None, "h1") == 2.0  # no stall within this test
    occupant, request = probe_beside_an_occupant(rig)
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        rig.pool.ledger.ended(occupant)
        assert rig.pool.release(occupant)  # the stream ends: z.ai serves the probe in its slot
        assert rig.pool.try_acquire(Ticket("heavy", may_probe=False)) is None
        freed.set()
        response = await sending
    assert response.status_code == 200 and request.tried == ["h"]
    assert rig.pool.limits.limit("h") == 1  # served in the slot that freed: no room above was shown
    request.finish("ok")
    assert rig.pool.in_flight() == 0


async def test_a_probe_answered_first_keeps_its_slot_and_raises_the_limit(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make_rig(sse_answer_at_once, routing=ONE_HEAVY, patience=0.0)
    occupant, request = probe_beside_an_occupant(rig)
    async with asyncio.timeout(WAIT):
        response = await rig.send(request)
    assert response.status_code == 200 and len(rig.upstream.requests) == 1
    assert rig.pool.limits.limit("h") == 2 and rig.pool.first_in_line()[0] == 0
    request.finish("ok")
    rig.pool.release(occupant)
    assert rig.pool.in_flight() == 0


async def sse_answer_at_once(
    n: int, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await sse_answer(2, request, reader, writer)


async def test_an_unanswered_attempt_moves_on_and_its_late_1302_still_teaches_the_limits(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """A regular attempt with no head when a slot within the limits comes is left for that slot; its
    upstream request stays open and keeps its slot until z.ai's verdict, which the limits hear as if the
    request had waited for it."""
    refuse_now = asyncio.Event()
    refuse_when_told = first_refused_when(refuse_now)
    rig = await make_rig(refuse_when_told, routing=TWO_HEAVY, patience=0.0)
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None and occupant.model == "h2"
    request = rig.routed()
    first = request.slot
    assert first is not None and first.probe is None and first.model == "h1"
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        rig.pool.release(occupant)  # a slot within the limits: the request moves on to it
        response = await sending
        assert response.status_code == 200 and request.tried == ["h1", "h2"]
        assert [a.refusal for a in request.attempts] == ["no answer yet", None]
        assert rig.stats.recent_failovers[-1]["reason"] == "no answer yet"
        request.finish("ok")
        assert rig.pool.in_flight("h1") == 1  # the left attempt keeps its slot: z.ai may still count it
        refuse_now.set()
        while rig.pool.in_flight("h1"):
            await asyncio.sleep(0.01)
    evidence = rig.pool.limits.view("h1").evidence  # judged as if it had waited: a refusal at 1 in flight
    assert evidence.refusal_estimate(1, 0.0) > evidence.refusal_estimate(2, 0.0)
    assert rig.stats.upstream_errors[("h1", "1302")] == 1
    assert rig.pool.in_flight() == 0


async def test_an_overdue_attempt_leaves_its_place_to_the_next_request_while_z_ai_refuses_it(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """An attempt with no head within its patience is most likely being refused, and z.ai holds no slot for
    it: the next request takes its place on its model at once, while it awaits its verdict and then fails
    over."""
    refuse_now = asyncio.Event()
    rig = await make_rig(first_refused_when(refuse_now), routing=TWO_HEAVY, patience=0.0)
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None and occupant.model == "h2"
    request = rig.routed()
    assert request.slot is not None and request.slot.model == "h1"
    assert rig.pool.admit_now(Ticket("heavy")) is None  # 1 of 1 on each, none answered: no probe either
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        while not request.attempts[0].overdue:
            await asyncio.sleep(0.01)
        assert request.mirror()["overdue"] == ["h1"]
        assert served(pool_status.status(rig.pool))["models"]["h1"]["overdue"] == 1
        after = rig.unrouted()
        assert await after.admit(lambda: True)  # its place, lent (its own spare waits for h2 meanwhile)
        assert after.slot is not None and after.slot.model == "h1" and after.slot.probe is None
        served_after = await rig.send(after)
        assert served_after.status_code == 200
        refuse_now.set()  # the 1302: the request fails over, and waits for a slot
        while rig.pool.ledger.unanswered("h1"):
            await asyncio.sleep(0.01)
        assert not request.attempts[0].slot.rides
        rig.pool.release(occupant)
        response = await sending
    assert response.status_code == 200 and request.tried == ["h1", "h2"]
    for each in (after, request):
        each.finish("ok")
    assert rig.pool.in_flight() == 0 and rig.stats.upstream_errors[("h1", "1302")] == 1


async def test_an_attempt_sent_before_any_head_was_seen_is_left_once_the_patience_is_known(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """The first attempts go before z.ai's pace is known (no patience yet): each asks again as it waits, so
    one z.ai is slow to refuse is left as soon as heads say how long an accepted one takes."""
    refuse_now = asyncio.Event()
    refuse_when_told = first_refused_when(refuse_now)
    rig = await make_rig(refuse_when_told, routing=TWO_HEAVY)
    assert rig.forwarder.patience.seconds() is None  # no head seen yet
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None
    request = rig.routed()
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        rig.pool.release(occupant)  # a slot within the limits is free from now on
        for _ in range(8):  # other streams' heads come at once: the patience is known now
            rig.forwarder.patience.head(0.001)
        response = await sending
        assert response.status_code == 200 and request.tried == ["h1", "h2"]
        assert [a.refusal for a in request.attempts] == ["no answer yet", None]
        request.finish("ok")
        refuse_now.set()
        while rig.pool.in_flight("h1"):
            await asyncio.sleep(0.01)
    assert rig.pool.in_flight() == 0


async def test_the_patience_counts_from_when_z_ai_has_the_request_not_while_a_connection_opens(
    make_rig: Callable[..., Awaitable[Rig]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new connection to a distant z.ai takes round trips (TCP, TLS) before the request is written, and z.ai
    judges nothing meanwhile. Counted from before it opened, every new connection's head was late: the attempt
    was left for another slot, on another new connection, left in turn (a burst of 16 took 4 s at 150 ms)."""

    async def streams(n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(streams, routing=TWO_HEAVY, patience=0.05)
    clients = rig.forwarder.clients
    connect = clients._connect

    async def far(to: Destination) -> Any:
        await asyncio.sleep(0.3)  # the handshakes of a new connection, 0.1 s away
        return await connect(to)

    monkeypatch.setattr(clients, "_connect", far)
    request = rig.routed()  # the other model's slot is free all along: a request left would go on there
    async with asyncio.timeout(WAIT):
        response = await rig.send(request)
    assert response.status_code == 200 and len(request.tried) == 1
    assert not request.attempts[0].overdue
    # Its head counts from the writing too: the handshakes would make z.ai's quickest heads look slow.
    assert rig.forwarder.patience.stall_after(None, request.tried[0]) == STALL_FLOOR_SECONDS
    request.finish("ok")
    assert rig.pool.in_flight() == 0


async def test_a_large_prompt_is_waited_for_as_long_as_its_head_takes_for_its_size(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """z.ai sends each head after reading the prompt: 10 ms and 20 us per byte. Heads of prompts of 1-8 KB
    make the patience 0.25 s; a prompt of 40 KB, whose head comes after 0.8 s, is still waited for (the other
    model's slot is free all along: read against the small prompts' heads, it would have been left there)."""

    async def reads_the_prompt(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await asyncio.sleep(0.01 + 2e-5 * len(raw))
        await sse_answer(2, raw, reader, writer)

    def prompt(size: int) -> bytes:
        message = {"role": "user", "content": "x" * size}
        return json.dumps(
            {"model": "claude-opus-4-5", "max_tokens": 64, "stream": True, "messages": [message]}
        ).encode()

    rig = await make_rig(reads_the_prompt, routing=TWO_HEAVY)
    async with asyncio.timeout(4 * WAIT):
        for size in range(1000, 9000, 1000):
            small = rig.routed(prompt(size))
            assert (await rig.send(small)).status_code == 200
            small.finish("ok")
        assert rig.forwarder.patience.seconds() == pytest.approx(0.25)
        large = rig.routed(prompt(40_000))
        response = await rig.send(large)
    assert response.status_code == 200 and len(large.tried) == 1
    large.finish("ok")
    assert rig.pool.in_flight() == 0


async def left_on_h1(rig: Rig) -> RoutedRequest:
    """Heads come at once (the patience and the stall are 0.25 s) and h2's slot is held: a request sent to
    h1, where z.ai holds it, moves on to h2 when h2's slot frees, its attempt on h1 left. Returned once
    answered there and finished."""
    for model in ("h1", "h2"):
        for _ in range(8):
            rig.forwarder.patience.head(0.01, model=model)
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None and occupant.model == "h2"
    request = rig.routed()
    assert request.slot is not None and request.slot.model == "h1" and request.slot.probe is None
    sending = await rig.sent(request)
    rig.pool.release(occupant)  # a slot within the limits: the request moves on to it
    assert (await sending).status_code == 200 and request.tried == ["h1", "h2"]
    request.finish("ok")
    return request


async def test_a_left_attempt_served_after_its_stall_says_z_ai_queues(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """A left attempt whose head z.ai sends long after its stall was held, then served: z.ai queues, and
    from then on no attempt is left (each would be served twice). Heard only from attempts not left, a
    swarm's first burst, whose held attempts are all left, went on being served twice for seconds."""
    serve_now = asyncio.Event()

    async def hold_first(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if n == 1:
            await serve_now.wait()
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(hold_first, routing=TWO_HEAVY)
    patience = rig.forwarder.patience
    async with asyncio.timeout(WAIT):
        await left_on_h1(rig)
        await asyncio.sleep(0.3)
        assert not patience.queues()
        serve_now.set()  # z.ai serves the held attempt 0.6 s after it came, past its stall
        while rig.pool.in_flight("h1"):
            await asyncio.sleep(0.01)
    assert patience.queues() and patience.seconds() is None
    assert rig.stats.unread_answers == {"h1": 1}  # served twice: counted (`chaos_unread_answers_total`)
    assert rig.pool.in_flight() == 0


@pytest.mark.parametrize("holds", ["queues", "refusals hold"])
async def test_an_attempt_left_before_z_ai_was_seen_to_hold_it_is_closed_then(
    make_rig: Callable[..., Awaitable[Rig]], holds: str
) -> None:
    """A regular attempt left while nobody knew z.ai holds what it has not answered (a swarm's first burst)
    is one z.ai holds: a z.ai that queues would serve it once a slot frees (its request, gone on elsewhere,
    served twice); one that holds the slot of a request it refuses (as the check of lending finds) keeps
    that slot until its 1302, and refuses the requests sent meanwhile. Once z.ai is seen to do either, it is
    closed: its stall counts, and its slot goes back long before its verdict would have come."""
    held_closed = asyncio.Event()

    async def hold_first(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if n == 1:
            await reader.read()  # held: no head until it is closed (a z.ai that queues drops it then)
            held_closed.set()
            return
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(hold_first, routing=TWO_HEAVY)
    patience = rig.forwarder.patience
    async with asyncio.timeout(WAIT):
        request = await left_on_h1(rig)
        await asyncio.sleep(0.3)
        assert not held_closed.is_set() and rig.pool.in_flight("h1") == 1  # a 1302 may still come: waited
        if holds == "queues":
            patience.head(5.0)  # another request z.ai held was served after all: it queues
        else:
            rig.pool.ledger.lending_off("off: lent places refused")
        await held_closed.wait()
        while rig.pool.in_flight("h1"):
            await asyncio.sleep(0.01)
    assert request.attempts[0].stalled and not rig.stats.unread_answers  # closed unanswered: not served
    assert rig.pool.in_flight() == 0 and dict(rig.stats.upstream_errors) == {}


@pytest.mark.parametrize("first", ["hangs", "drips its refusal"])
async def test_an_attempt_left_without_a_verdict_gives_its_slot_back_in_bounded_time(
    make_rig: Callable[..., Awaitable[Rig]], monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """An attempt its request left is awaited `LEFT_VERDICT_SECONDS` at most: with no head ever, or a
    refusal's head and then its body a byte at a time (each read within the idle timeout)."""
    monkeypatch.setattr(forwarder_module, "LEFT_VERDICT_SECONDS", 0.4)
    left = asyncio.Event()

    async def misbehave_first(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if n != 1:
            await sse_answer(2, raw, reader, writer)
            return
        if first == "hangs":
            left.set()
            await reader.read()  # never answers; returns once the forwarder closes the connection
            return
        await asyncio.sleep(0.1)  # past its patience: its request went on elsewhere
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n")
        writer.write(b"content-length: 1000\r\n\r\n{")
        left.set()
        with contextlib.suppress(ConnectionError):
            for _ in range(999):  # 50 s of it
                await asyncio.sleep(0.05)
                writer.write(b" ")
                await writer.drain()

    rig = await make_rig(misbehave_first, routing=TWO_HEAVY, patience=0.0)
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None
    request = rig.routed()
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        rig.pool.release(occupant)
        assert (await sending).status_code == 200
        request.finish("ok")
        await left.wait()
        since = asyncio.get_running_loop().time()
        while rig.pool.in_flight():
            await asyncio.sleep(0.01)
    assert asyncio.get_running_loop().time() - since < 1.0
    assert rig.pool.limits.view("h1").reason == "catalog" and dict(rig.stats.upstream_errors) == {}


async def test_an_answer_in_one_piece_is_waited_for_however_long_it_takes(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """A request that is not streamed gets its head only when the whole answer is written: no head after
    the patience says nothing, so it is never left for another slot, and its time to head is not kept."""
    answer_now = asyncio.Event()

    async def answer_when_told(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await answer_now.wait()
        body = json.dumps(
            {"type": "message", "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}
        )
        await answer(writer, 200, body.encode(), b"content-type: application/json")

    rig = await make_rig(answer_when_told, routing=TWO_HEAVY, patience=0.0)
    occupant = rig.pool.try_acquire(Ticket("heavy"))
    assert occupant is not None
    whole = json.dumps({"model": "claude-opus-4-5", "max_tokens": 64, "messages": []}).encode()
    request = rig.routed(whole)
    async with asyncio.timeout(WAIT):
        sending = await rig.sent(request)
        rig.pool.release(occupant)  # a slot within the limits: a streamed request would move on
        await asyncio.sleep(0.2)
        assert not sending.done() and len(rig.upstream.requests) == 1
        answer_now.set()
        response = await sending
    assert response.status_code == 200 and request.tried == ["h1"] and len(rig.upstream.requests) == 1
    request.finish("ok")
    assert rig.pool.in_flight() == 0


async def raw_exchange(rig: Rig, data: bytes) -> bytes:
    """Send raw bytes to the forwarder's port; all it answers before it closes the connection."""
    host, port = rig.forwarder.address or ("", 0)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        async with asyncio.timeout(WAIT):
            return await reader.read()
    finally:
        writer.close()


async def test_the_token_is_checked_before_the_body_is_read(make_rig: Callable[..., Awaitable[Rig]]) -> None:
    """300 MiB announced without a token: 403 at once, none of it read (nor held)."""
    rig = await make_rig(sse_answer)
    head = b"POST /v1/messages HTTP/1.1\r\nhost: api.z.ai\r\ncontent-length: 314572800\r\n\r\n"
    answer = await raw_exchange(rig, head + b"{" * 4096)
    assert answer.startswith(b"HTTP/1.1 403 ") and rig.upstream.requests == []


async def test_a_body_over_the_limit_is_refused_before_it_is_read(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    rig = await make_rig(sse_answer)
    rig.forwarder.limit_body(2048)
    request = rig.routed()
    token = rig.forwarder.expect(request, Destination("http", "127.0.0.1", rig.upstream.port))
    head = b"POST /v1/messages HTTP/1.1\r\nhost: api.z.ai\r\n%s: %s\r\ncontent-length: %d\r\n\r\n" % (
        TOKEN_HEADER.encode(),
        token.encode(),
        2048 + forwarder_module.BODY_SLACK + 1,
    )
    answer = await raw_exchange(rig, head)
    assert answer.startswith(b"HTTP/1.1 413 ") and rig.upstream.requests == []
    request.finish("error")


@pytest.mark.parametrize(
    "data",
    [
        b"GARBAGE\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nhost: x\r\nx-chaos-forward: TOKEN\r\ntransfer-encoding: chunked\r\n\r\n"
        b"-6\r\nhello!\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: xchunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nhost: x\r\nx-api-key sk-ant-secret-in-a-bad-line\r\n\r\n",
        b"POST / HTTP/1.1\r\ncontent-length: 0\r\n\r\n",  # HTTP/1.1 without a Host
    ],
)
async def test_a_malformed_request_is_answered_400_in_one_log_line(
    make_rig: Callable[..., Awaitable[Rig]], caplog: pytest.LogCaptureFixture, data: bytes
) -> None:
    """Any local process can send these: a plain 400, one line in the log (no traceback, no secret)."""
    rig = await make_rig(sse_answer)
    request = rig.routed()
    token = rig.forwarder.expect(request, Destination("http", "127.0.0.1", rig.upstream.port))
    caplog.clear()
    answer = await raw_exchange(rig, data.replace(b"TOKEN", token.encode()))  # a body h11 refuses: its token
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    lines = [r for r in caplog.records if r.name.startswith("chaos_mode")]
    assert len(lines) == 1 and lines[0].exc_info is None, caplog.text
    assert "secret" not in caplog.text and "secret" not in answer.decode("latin-1")
    assert rig.upstream.requests == []
    request.finish("error")


async def test_headers_a_connection_header_names_do_not_go_on(
    make_rig: Callable[..., Awaitable[Rig]],
) -> None:
    """RFC 9110 7.6.1: each side drops the headers its peer's Connection header names."""

    async def answer_with_hop_headers(
        n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await answer(writer, 200, b"{}", b"connection: x-upstream-hop", b"x-upstream-hop: 1", b"x-kept: 2")

    rig = await make_rig(answer_with_hop_headers)
    request = rig.routed()
    response = await rig.send(request, connection="keep-alive, X-Client-Hop", x_client_hop="for-the-proxy")
    assert response.status_code == 200
    assert "x-upstream-hop" not in response.headers and response.headers["x-kept"] == "2"
    (sent,) = rig.upstream.requests
    head = sent.split(b"\r\n\r\n", 1)[0].lower()
    assert b"x-client-hop" not in head and b"x-api-key: sk-secret" in head
    request.finish("ok")


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
async def test_a_bombed_refusal_is_read_for_its_code_and_fails_over(
    make_rig: Callable[..., Awaitable[Rig]], coding: str
) -> None:
    """A 1302 followed by 64 MiB of NULs once decoded: read as far as MAX_ERROR_BODY, where its code is."""
    refusal = bomb(coding, REFUSAL.encode(), b"\0", 64 << 20)

    async def script(n: int, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if n == 1:
            await answer(writer, 429, refusal, b"content-encoding: %s" % coding.encode())
            return
        await sse_answer(2, raw, reader, writer)

    rig = await make_rig(script)
    request = rig.routed()
    async with asyncio.timeout(WAIT):
        response = await rig.send(request)
    assert response.status_code == 200 and rig.stats.failovers == 1
    assert [code for (_, code) in rig.stats.upstream_errors.elements()] == ["1302"]
    request.finish("ok")
