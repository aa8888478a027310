"""The forwarder: mitmproxy sends each routed request here (loopback), and it goes on to z.ai from here.

Because the forwarder, not mitmproxy, talks to z.ai, a refused attempt (1302, 1113, 1305...) is answered by
another attempt on another model before any byte reached the client, and the attempt that succeeds streams
to mitmproxy, which streams it to the client. A request is taken only with the one-time token the addon
gave its flow (the forwarder is no open relay); the token header never leaves the process. Pure asyncio:
it knows the routed request, never mitmproxy's flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

from chaos_mode.doors.formats import FORMATS
from chaos_mode.forwarding.decoding import CODINGS, coding_of, decode
from chaos_mode.forwarding.head_patience import HeadPatience
from chaos_mode.forwarding.loopback import Incoming, LoopbackServer, Outgoing
from chaos_mode.forwarding.upstream import (
    Destination,
    UpstreamClients,
    UpstreamFailed,
    UpstreamRefused,
    UpstreamResponse,
)
from chaos_mode.request.failover import Answer, judge, reject, settle, unreached
from chaos_mode.request.hedging import Patience, Written, fixed_patience, hedge, stop
from chaos_mode.request.rate_limited import Reply
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.lending import Lending
from chaos_mode.routing.pool import Slot
from chaos_mode.zai.errors import classify_error, cut_error_body
from chaos_mode.zai.timing import LEFT_VERDICT_SECONDS

log = logging.getLogger("chaos_mode")

TOKEN_HEADER: Final = "x-chaos-forward"  # the flow's one-time token; stripped before anything goes on
NOT_ROUTED: Final = b"chaos-mode forwarder: not a routed flow\n"
# How often a left attempt looks whether z.ai was seen to queue meanwhile (`Forwarder._unless_held`).
HELD_RECHECK_SECONDS: Final = 0.1
# An error answer larger than this is passed on, not read for a code; one that decodes to more is read as
# far as this for its code.
MAX_ERROR_BODY: Final = 1 << 20
# A routed body may grow a little past streams.maxBodyBytes on its way here (the model's name rewritten, the
# body encoded again, other addons): the loopback port's cap leaves it this much room.
BODY_SLACK: Final = 64 * 1024
# Hop-by-hop and framing headers, which each hop sets for itself; so are the headers a Connection header
# names (RFC 9110 7.6.1). Proxy credentials are mitmproxy's upstream_auth.
HOP_HEADERS: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
        "host",
        "content-length",
        TOKEN_HEADER,
    }
)
_HOP_BYTES: Final = frozenset(name.encode() for name in HOP_HEADERS)


@dataclass(slots=True)
class Pending:
    request: RoutedRequest
    destination: Destination


class Forwarder:
    """`forwarder.listen()`; `token = forwarder.expect(request, destination)` for each routed flow."""

    def __init__(
        self,
        clients: UpstreamClients,
        *,
        wall_clock: Callable[[], float] = time.time,
        host: str = "127.0.0.1",
        patience: HeadPatience | None = None,
    ) -> None:
        self.clients = clients
        self._wall_clock = wall_clock
        self.patience = patience or HeadPatience()
        self._host = host
        self._server = LoopbackServer(self._handle, screen=self._screen)
        self._pending: dict[str, Pending] = {}
        self._left: set[asyncio.Task[None]] = set()  # attempts left behind, awaiting z.ai's verdict

    @property
    def address(self) -> tuple[str, int] | None:
        """Where it listens; None when it does not (routed flows then go to z.ai directly)."""
        return self._server.address

    def listen(self) -> tuple[str, int]:
        """Listen on a free loopback port (synchronous: mitmproxy's `running` hook calls it)."""
        return self._server.listen(self._host, 0)

    def close(self) -> None:
        """Stop (synchronous: mitmproxy's `done` hook calls it); requests in flight are cut."""
        self._server.close()
        self._pending.clear()
        for task in self._left:
            task.cancel()  # each gives its slot back
        clients = self.clients
        with contextlib.suppress(RuntimeError):  # no loop left: the process is ending anyway
            asyncio.get_running_loop().create_task(clients.aclose())

    def limit_body(self, max_body_bytes: int) -> None:
        """The config's streams.maxBodyBytes: a larger body is refused (413) before the forwarder holds it."""
        self._server.max_body = max_body_bytes + BODY_SLACK

    def expect(self, request: RoutedRequest, destination: Destination) -> str:
        """Register a routed request; its flow carries the returned token in TOKEN_HEADER."""
        token = secrets.token_hex(16)
        self._pending[token] = Pending(request, destination)
        return token

    def forget(self, token: str) -> None:
        """The flow ended without reaching the forwarder (whatever ended it: an error, an answer set by
        another addon)."""
        self._pending.pop(token, None)

    def _screen(self, incoming: Incoming) -> Outgoing | None:
        """A request's head, before its body is read: turned away unless it carries a pending token."""
        return None if _token(incoming) in self._pending else _not_routed()

    async def _handle(self, incoming: Incoming) -> Outgoing:
        pending = self._pending.pop(_token(incoming), None)
        if pending is None:  # forgotten, or taken by another request, while this body was read
            return _not_routed()
        request = pending.request
        request.view.received()
        if request.finished:
            return Outgoing(502, [], b"")
        # The Host header goes first, as mitmproxy sent it (z.ai's name, not the loopback address).
        host = incoming.header(b"host")
        headers = [(b"host", host)] if host else []
        headers += _end_to_end(incoming.headers)
        body = incoming.body  # the first attempt goes out as mitmproxy sent it (other addons included)
        destination = pending.destination
        while True:
            outcome = await self._attempt(request, destination, incoming, headers, body)
            if isinstance(outcome, Outgoing):
                return outcome
            body = request.body_for(outcome.model)
            request.view.attempt(body)

    async def _attempt(
        self,
        request: RoutedRequest,
        destination: Destination,
        incoming: Incoming,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> Outgoing | Slot:
        """Send one attempt; the answer to stream back, or the slot of the next attempt."""
        request.sent = True
        try:
            sent = await self._send(request, destination, incoming, headers, body)
        except UpstreamRefused as exc:  # a setting to fix (z.ai's certificate), the same for every model
            return _gateway(request, exc)
        except UpstreamFailed as exc:  # refused, dropped, timed out: no verdict on the model
            log.info("chaos-mode: no answer for %s: %s", request.model, exc)
            return self._next(request, await settle(request, unreached(str(exc)), now=self._now()))
        if not isinstance(sent, UpstreamResponse):  # the attempt was left for a slot within the limits
            return self._next(request, sent)
        response = sent
        try:
            if response.status < 400:
                # z.ai seen to queue lately may have held it before serving it (`Ledger.success`;
                # zai.assumptions.MAY_QUEUE)
                request.answered(at_once=not self.patience.queues())
                return _streamed(response, ended=request.ended)
            raw, decoded, complete = await response.read_body(MAX_ERROR_BODY)
        except BaseException:
            response.close()
            raise
        if not complete:  # too large to be one of z.ai's refusals: it goes on as it is
            return _streamed(response, raw)
        response.close()
        answer_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers]
        verdict = await settle(
            request,
            Answer(
                response.status, answer_headers, refusal_body(decoded, response.header(b"content-encoding"))
            ),
            now=self._now(),
        )
        if verdict is None:  # z.ai's own answer goes to the client
            return Outgoing(response.status, _pass_headers(response), decoded, reason=response.reason)
        return self._next(request, verdict)

    async def _send(
        self,
        request: RoutedRequest,
        destination: Destination,
        incoming: Incoming,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> UpstreamResponse | Slot | None:
        """Send one attempt; its answer with the head read, or, when it was left unanswered for a slot
        within the limits (`hedging`), the next attempt's slot (None: the request ended meanwhile). Only a
        streamed request is hedged: an answer in one piece has its head when it is all written, so its
        time to head says nothing (and is not kept). Its patience, its stall and its time to head count
        from when it was written to z.ai, not from before a connection to z.ai was opened: a new
        connection's handshakes (TCP, TLS) take round trips that a distant z.ai makes long and that say
        nothing of its verdict. Counted from before, every new connection's head was late at 150 ms: each
        attempt was left for another, on another new connection, left in turn (a burst of 16 took 4 s)."""
        streamed, slot = request.message.stream, request.slot
        model = slot.model if slot is not None else None  # each model's heads its own (`head_baseline`)
        size = len(body)  # a larger prompt's head comes later (zai.assumptions.HEAD_GROWS_WITH_PROMPT)
        loop = asyncio.get_running_loop()
        wire = Written()
        stall: asyncio.TimerHandle | None = None

        def written() -> None:
            nonlocal stall
            wire()
            if slot is None:
                return
            request.written(slot)
            # A head held this long is a stall (z.ai queues the request: zai.assumptions.MAY_QUEUE): the pool
            # hears it at once; the request goes on (z.ai may be serving it). A verdict before then makes it a
            # no-op.
            if streamed:
                if stall is not None:
                    stall.cancel()
                stall = loop.call_later(self.patience.stall_after(size, model), self._stalled, request, slot)

        method, target = incoming.method, incoming.target
        send = self.clients.send(destination, method, target, headers, body, written=written)
        # z.ai queues: no attempt is left (zai.assumptions.MAY_QUEUE)
        queuing = streamed and self.patience.leaves_none()
        patience: Patience | None = (
            functools.partial(self.patience.seconds, size) if streamed and not queuing else None
        )
        if queuing and slot is not None and slot.probe is not None:
            # zai.assumptions.MAY_QUEUE, zai.assumptions.DROPS_ON_CLOSE: a probe z.ai holds past its stall
            # found no room above the limit, and z.ai would serve it only once a slot frees, keeping what
            # comes after it waiting. So it is given up then (`hedging`),
            # its request waiting for a slot. Until then, a slot of its limit that frees is the probe's:
            # z.ai serves it there, and would hold the next request instead.
            patience = fixed_patience(self.patience.stall_after(size, model))
            request.queued(slot)
        left = False
        try:
            if slot is None or patience is None:
                response = await send
            else:
                leave = functools.partial(self._leave, request, wire, size)
                hedged = await hedge(
                    request, asyncio.ensure_future(send), patience, leave, wire, queuing=queuing
                )
                if not isinstance(hedged, UpstreamResponse):
                    left = True  # its stall still counts, its head or refusal decides
                    return hedged
                response = hedged
        finally:
            if stall is not None and not left:
                stall.cancel()
        if response.status < 400 and streamed and wire.at is not None:
            level = slot.in_flight if slot is not None else 1
            self.patience.head(loop.time() - wire.at, size, model=model, level=level)
        return response

    def _stalled(self, request: RoutedRequest, slot: Slot) -> None:
        request.stalled(slot)

    async def _unless_held(
        self,
        sending: asyncio.Future[UpstreamResponse],
        wire: Written,
        size: int,
        model: str,
        lending: Lending,
    ) -> UpstreamResponse | None:
        """A left attempt's answer; None once z.ai holds what it has not answered and the attempt is held
        past its stall: z.ai is seen to queue (zai.assumptions.MAY_QUEUE), or the check of lending found it
        holding the slot of a request it refuses until its 1302 (`routing.lending`). Either way z.ai drops
        the request once it is closed (zai.assumptions.DROPS_ON_CLOSE). Left before z.ai was seen to queue
        (a swarm's first burst), a queued attempt would be served once a slot frees: its request, gone on
        elsewhere, served twice (the prompt paid twice, a slot of z.ai's taken for an answer nobody reads).
        A refusal held would keep a slot of z.ai's for seconds, and the requests sent meanwhile refused."""
        loop = asyncio.get_running_loop()
        while not sending.done():
            written_at = wire.at
            if (
                written_at is not None
                and (self.patience.leaves_none() or lending.refusals_hold)
                and loop.time() - written_at >= self.patience.stall_after(size, model)
            ):
                return None
            await asyncio.wait({sending}, timeout=HELD_RECHECK_SECONDS)
        return sending.result()

    def _next(self, request: RoutedRequest, verdict: Slot | Reply | None) -> Outgoing | Slot:
        if verdict is None:  # no verdict to pass on (the request ended while it waited): ours
            verdict = reject(request, None, now=self._now())
        if isinstance(verdict, Reply):
            headers = [(k.encode(), v.encode()) for k, v in verdict.headers]
            return Outgoing(verdict.status, headers, verdict.body)
        return verdict

    def _now(self) -> float:
        return self._wall_clock()

    def _leave(
        self,
        request: RoutedRequest,
        wire: Written,
        size: int,
        slot: Slot,
        sending: asyncio.Future[UpstreamResponse],
    ) -> None:
        task = asyncio.ensure_future(self._verdict_later(request, slot, sending, wire, size))
        self._left.add(task)
        task.add_done_callback(self._left.discard)

    async def _verdict_later(
        self,
        request: RoutedRequest,
        slot: Slot,
        sending: asyncio.Future[UpstreamResponse],
        wire: Written,
        size: int,
    ) -> None:
        """z.ai's verdict on an attempt its request left, awaited at most `LEFT_VERDICT_SECONDS`: a refusal
        is judged as if the request had waited, an answer accepted after all is closed unread (it confirms
        what it was sent with, and its head, held past its stall, says z.ai queues); then the slot goes
        back. Not once z.ai holds what it has not answered and the attempt is held past its stall
        (`_unless_held`): its stall counts, and it is closed."""
        lending = request.pool.ledger.lending
        deadline = asyncio.get_running_loop().time() + LEFT_VERDICT_SECONDS  # a refusal's body included
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    response = await self._unless_held(sending, wire, size, slot.model, lending)
            except BaseException as exc:
                sending.cancel()
                if isinstance(exc, UpstreamFailed | UpstreamRefused | TimeoutError):
                    return  # no verdict on the model
                raise
            # held: its stall counts (once), and it is closed (zai.assumptions.DROPS_ON_CLOSE)
            if response is None:
                request.stalled(slot)
                await stop(sending)
                return
            try:
                if response.status < 400:
                    # accepted after all, later than its patience
                    # (zai.assumptions.HEAD_MAY_WAIT_FOR_FIRST_TOKEN)
                    request.answered(slot, at_once=False)
                    if wire.at is not None:  # its head counts; held past its stall, it says z.ai queues
                        seconds = asyncio.get_running_loop().time() - wire.at
                        self.patience.head(seconds, size, model=slot.model, level=slot.in_flight)
                    return
                try:
                    async with asyncio.timeout_at(deadline):  # z.ai dripping its refusal keeps no slot
                        _, decoded, complete = await response.read_body(MAX_ERROR_BODY)
                except TimeoutError:
                    return
                body = refusal_body(decoded, response.header(b"content-encoding")) if complete else b""
                error = classify_error(response.status, body, now=self._now())
                if error is not None:
                    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers]
                    judge(request, error, headers, now=self._now(), slot=slot)
            finally:
                response.close()
        finally:
            request.release_left(slot)


def refusal_body(body: bytes, coding: bytes | str | None) -> bytes:
    """An error answer's body as z.ai meant it, for its business code: decoded as its content-encoding
    says, best effort (a body that is not what its coding says is read as it came); one that decodes to
    more than `MAX_ERROR_BODY` bytes, or breaks off, read as far as that (`cut_error_body`)."""
    name = coding_of(coding)
    if name not in CODINGS:
        return body
    decoded = decode(body, name, cap=MAX_ERROR_BODY)
    if decoded.whole:
        return decoded.body
    return cut_error_body(decoded.body) if decoded.body else body


def _gateway(request: RoutedRequest, exc: UpstreamRefused) -> Outgoing:
    """Our 502: no other model would fare better, so no failover (mitmproxy itself would answer 502)."""
    log.warning(
        "chaos-mode: %s (see ssl_verify_upstream_trusted_ca, ssl_insecure, upstream_auth, client_certs, "
        "tls_version_server_min/max, ciphers_server)",
        exc,
    )
    body, headers = FORMATS[request.message.door].gateway_error(f"z.ai not reached: {exc}")
    return Outgoing(502, [(k.encode(), v.encode()) for k, v in headers.items()], body)


def _streamed(
    response: UpstreamResponse, first: bytes = b"", ended: Callable[[], None] | None = None
) -> Outgoing:
    """z.ai's answer, its bytes relayed as they arrive with their own framing; closing it closes the
    upstream stream (or keeps the connection when the answer was read to its end). `ended`: called when
    z.ai's last byte came (z.ai serves it no more, however long the client takes to read it)."""
    return Outgoing(
        response.status,
        _pass_headers(response),
        _relay(response, first, ended),
        reason=response.reason,
        length=response.length,
        chunked=response.chunked,
        closing=[response.close],
    )


async def _relay(
    response: UpstreamResponse, first: bytes, ended: Callable[[], None] | None
) -> AsyncIterator[bytes]:
    if first:
        yield first
    try:
        async for chunk in response.chunks():
            yield chunk
    except UpstreamFailed as exc:
        # z.ai broke the stream: break ours the same way (mitmproxy reports the flow's error).
        raise ConnectionAbortedError(f"upstream stream broke: {exc}") from None
    if ended is not None:
        ended()


def _pass_headers(response: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    return _end_to_end(response.headers)


def _end_to_end(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers that go on to the next hop: neither HOP_HEADERS nor one a Connection header names."""
    hop = _HOP_BYTES
    for name, value in headers:
        if name.lower() == b"connection":
            hop = hop | {token.strip().lower() for token in value.split(b",")}
    return [(k, v) for k, v in headers if k.lower() not in hop]


def _token(incoming: Incoming) -> str:
    return (incoming.header(TOKEN_HEADER.encode()) or b"").decode("ascii", "replace")


def _not_routed() -> Outgoing:
    return Outgoing(403, [(b"content-type", b"text/plain")], NOT_ROUTED)
