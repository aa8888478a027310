"""The forwarder: mitmproxy sends each routed request here (loopback), and it goes on to z.ai from here.

Because the forwarder, not mitmproxy, talks to z.ai, a refused attempt (1302, 1113, 1305...) is answered by
another attempt on another model before any byte reached the client, and the attempt that succeeds streams
to mitmproxy, which streams it to the client. A request is taken only with the one-time token the addon
gave its flow (the forwarder is no open relay); the token header never leaves the process. Pure asyncio and
httpx: it knows the routed request, never mitmproxy's flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

import httpx

from .failover import Answer, reject, settle, unreached
from .loopback import Incoming, LoopbackServer, Outgoing
from .pool import Selection
from .rejection import Reply
from .routed_request import RoutedRequest
from .upstream import UpstreamClients

log = logging.getLogger("chaos_mode")

TOKEN_HEADER: Final = "x-chaos-forward"  # the flow's one-time token; stripped before anything goes on
NOT_ROUTED: Final = b"chaos-mode forwarder: not a routed flow\n"
MAX_ERROR_BODY: Final = 1 << 20  # an error answer larger than this is passed on, not read for a code
# Hop-by-hop and framing headers: each hop sets its own. Proxy credentials are mitmproxy's upstream_auth.
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
        "content-length",
        TOKEN_HEADER,
    }
)
_HOP_BYTES: Final = frozenset(name.encode() for name in HOP_HEADERS)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where the flow was going before it was pointed at the forwarder."""

    scheme: str
    host: str
    port: int
    proxy: str | None = None  # the upstream proxy's URL (`--mode upstream:`), else direct

    def url(self, target: bytes) -> str:
        path = target.decode("ascii", "replace")
        if not path.startswith("/"):  # absolute-form: keep the path and query only
            after_scheme = path.split("://", 1)[-1]
            path = "/" + after_scheme.split("/", 1)[1] if "/" in after_scheme else "/"
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        authority = host if self.port == default else f"{host}:{self.port}"
        return f"{self.scheme}://{authority}{path}"


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
    ) -> None:
        self.clients = clients
        self._wall_clock = wall_clock
        self._host = host
        self._server = LoopbackServer(self._handle)
        self._pending: dict[str, Pending] = {}

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
        clients = self.clients
        with contextlib.suppress(RuntimeError):  # no loop left: the process is ending anyway
            asyncio.get_running_loop().create_task(clients.aclose())

    def expect(self, request: RoutedRequest, destination: Destination) -> str:
        """Register a routed request; its flow carries the returned token in TOKEN_HEADER."""
        token = secrets.token_hex(16)
        self._pending[token] = Pending(request, destination)
        return token

    def forget(self, token: str) -> None:
        """The flow ended before it reached the forwarder."""
        self._pending.pop(token, None)

    async def _handle(self, incoming: Incoming) -> Outgoing:
        token = incoming.header(TOKEN_HEADER.encode())
        pending = self._pending.pop(token.decode("ascii", "replace"), None) if token else None
        if pending is None:
            return Outgoing(403, [(b"content-type", b"text/plain")], NOT_ROUTED)
        request = pending.request
        request.view.received()
        if request.finished:
            return Outgoing(502, [], b"")
        headers = [(k, v) for k, v in incoming.headers if k.lower() not in _HOP_BYTES]
        body = incoming.body  # the first attempt goes out as mitmproxy sent it (other addons included)
        url = pending.destination.url(incoming.target)
        client = self.clients.client(pending.destination.proxy)
        while True:
            outcome = await self._attempt(request, client, incoming.method, url, headers, body)
            if isinstance(outcome, Outgoing):
                return outcome
            body = request.body_for(outcome.model)
            request.view.attempt(body)

    async def _attempt(
        self,
        request: RoutedRequest,
        client: httpx.AsyncClient,
        method: bytes,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> Outgoing | Selection:
        """Send one attempt; the answer to stream back, or the slot of the next attempt."""
        outgoing = httpx.Request(method.decode("ascii", "replace"), url, headers=headers, content=body)
        request.sent = True
        try:
            response = await client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:  # refused, dropped, timed out: no verdict on the model
            log.info("chaos-mode: %s not reached on %s: %s", url, request.model, type(exc).__name__)
            return self._next(request, await settle(request, unreached(type(exc).__name__), now=self._now()))
        if response.status_code < 400:
            request.answered()
            return _streamed(response, response.aiter_raw())
        chunks = response.aiter_raw()
        raw, complete = await _read_some(chunks, MAX_ERROR_BODY)
        if not complete:  # too large to be one of z.ai's refusals: it goes on as it is
            return _streamed(response, chunks, raw)
        await response.aclose()
        answer_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]
        decoded = _decoded(response, raw)
        verdict = await settle(
            request, Answer(response.status_code, answer_headers, decoded), now=self._now()
        )
        if verdict is None:  # z.ai's own answer goes to the client
            return Outgoing(response.status_code, _pass_headers(response), raw, reason=_reason(response))
        return self._next(request, verdict)

    def _next(self, request: RoutedRequest, verdict: Selection | Reply | None) -> Outgoing | Selection:
        if verdict is None:  # no verdict to pass on (the request ended while it waited): ours
            verdict = reject(request, None, now=self._now())
        if isinstance(verdict, Reply):
            headers = [(k.encode(), v.encode()) for k, v in verdict.headers]
            return Outgoing(verdict.status, headers, verdict.body)
        return verdict

    def _now(self) -> float:
        return self._wall_clock()


def _streamed(response: httpx.Response, chunks: AsyncIterator[bytes], first: bytes = b"") -> Outgoing:
    """z.ai's answer, streamed as it arrives; closing it closes the upstream stream."""
    length = response.headers.get("content-length")
    return Outgoing(
        response.status_code,
        _pass_headers(response),
        _relay(chunks, first),
        reason=_reason(response),
        length=int(length) if length and length.isdigit() else None,
        closing=[response.aclose],
    )


async def _relay(chunks: AsyncIterator[bytes], first: bytes) -> AsyncIterator[bytes]:
    if first:
        yield first
    try:
        async for chunk in chunks:
            yield chunk
    except httpx.HTTPError as exc:
        # z.ai broke the stream: break ours the same way (mitmproxy reports the flow's error).
        raise ConnectionAbortedError(f"upstream stream broke: {type(exc).__name__}") from None


async def _read_some(chunks: AsyncIterator[bytes], limit: int) -> tuple[bytes, bool]:
    """Up to about `limit` raw bytes of the body; (bytes, True) when that was all of it."""
    data = bytearray()
    try:
        async for chunk in chunks:
            data += chunk
            if len(data) > limit:
                return bytes(data), False
    except httpx.HTTPError:
        pass  # a refusal cut short is still read for what it says
    return bytes(data), True


def _decoded(response: httpx.Response, raw: bytes) -> bytes:
    """The body as z.ai meant it (content-encoding undone), for reading the business code."""
    try:
        return httpx.Response(response.status_code, headers=response.headers, content=raw).content
    except httpx.DecodingError:
        return raw


def _pass_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BYTES]


def _reason(response: httpx.Response) -> bytes:
    phrase = response.extensions.get("reason_phrase")
    return phrase if isinstance(phrase, bytes) and phrase else b"-"
