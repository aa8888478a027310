"""What mitmproxy's flow shows of a routed request: an adapter (it writes mitmproxy's flow).

A flow sent to the forwarder is pointed at loopback only for mitmproxy's connection; as soon as the forwarder
has the request, the flow shows z.ai's URL again (mitmweb, saved flows), without the forwarder's token, and
its body is the one the last attempt sent. Its comment and a plain-values mirror of the routed request
(`flow.metadata["chaos"]`) follow each change.
"""

from __future__ import annotations

import weakref
from typing import Final

from mitmproxy import connection, http

from chaos_mode.forwarding.forwarder import TOKEN_HEADER, Forwarder
from chaos_mode.forwarding.upstream import Destination
from chaos_mode.mitm.flow_bodies import drop_header, put_header
from chaos_mode.request.routed import RoutedRequest

META: Final = "chaos"
_TOKEN: Final = TOKEN_HEADER.encode()


class FlowView:
    """The routed request's face in mitmproxy: one per routed flow.

    It holds its flow weakly: the addon keeps views (and routed requests, which hold their view) in weak maps
    keyed by the flow, and a value that held its key would keep every flow alive forever."""

    __slots__ = ("_flow", "_original", "cached", "forwarded", "sent", "token")

    def __init__(self, flow: http.HTTPFlow) -> None:
        self._flow = weakref.ref(flow)
        self.token: str | None = None  # while the flow is pointed at the forwarder
        self.forwarded = False  # the forwarder took the request (it, not mitmproxy, talks to z.ai)
        self.cached = 0  # the answer's cached input tokens (the routed request's usage: the rest)
        self.sent: bytes | None = None  # the body the addon set for the attempt going on
        self._original: tuple[bytes, str, int] | None = None

    @property
    def flow(self) -> http.HTTPFlow:
        flow = self._flow()
        if flow is None:  # mitmproxy keeps a flow alive while anything of it runs
            raise ReferenceError("the flow is gone")
        return flow

    def point_at(self, forwarder: Forwarder, request: RoutedRequest, address: tuple[str, int]) -> None:
        """Send the flow to the forwarder instead of z.ai (mitmproxy connects to loopback)."""
        flow, data = self.flow, self.flow.request.data
        via = flow.server_conn.via
        proxy = f"{via[0]}://{_authority(*via[1])}" if via is not None else None
        # mitmproxy's TLS name for a destination the client named by its address (SOCKS, transparent, a
        # CONNECT to an IP address): the server's set name (reverse mode's), else the client's own SNI
        server = flow.server_conn
        same = server.address is not None and tuple(server.address[:2]) == (data.host, data.port)
        sni = (server.sni or flow.client_conn.sni) if same else None
        sni = sni if sni != data.host else None
        destination = Destination(data.scheme.decode(), data.host, data.port, proxy, sni)
        self.token = forwarder.expect(request, destination)
        put_header(flow.request, _TOKEN, self.token.encode())
        self._original = (data.scheme, data.host, data.port)
        # `data`, not the properties: those would rewrite the Host header (z.ai's name must stay in it).
        data.scheme, data.host, data.port = b"http", address[0], address[1]
        if via is not None:
            # `--mode upstream:`: mitmproxy would reach loopback through the upstream proxy; the forwarder
            # goes through it instead. A new connection object, not the shared one: its `via` stays.
            flow.server_conn = connection.Server(address=address)

    def restore(self) -> None:
        """Show the real destination again; the token goes (it was only for the forwarder)."""
        if self._original is not None:
            request = self.flow.request
            data = request.data
            data.scheme, data.host, data.port = self._original
            self._original = None
            drop_header(request, _TOKEN)

    # -- RequestView --------------------------------------------------------------------------------------

    def received(self) -> None:
        self.forwarded = True
        self.restore()

    def attempt(self, body: bytes) -> None:
        request = self.flow.request
        request.raw_content = self.sent = body
        if "content-length" in request.headers:
            request.headers["content-length"] = str(len(body))

    def from_zai(self, request: http.Request) -> bool:
        """Whether the answer to `request` (the flow's) is z.ai's to the attempt as routed: not set by another
        addon (`map_local`...) in place of the forwarder's, nor to a body changed after routing (edited
        in mitmweb, `modify_body`): only such an answer says which model served."""
        return (self.forwarded or self.token is None) and request.raw_content == self.sent  # `is` mostly

    def changed(self, request: RoutedRequest) -> None:
        """The flow shows `request` as it stands; once the flow is gone, nothing (a left attempt's stall,
        heard after its request was answered elsewhere and its flow freed)."""
        if (flow := self._flow()) is None:
            return
        flow.metadata[META] = request.mirror()
        comment, mark = describe(request)
        if comment:
            flow.comment = comment
        if mark:
            flow.marked = mark


def describe(request: RoutedRequest) -> tuple[str, str]:
    """(comment, mark) of a routed request, as mitmweb lists it."""
    original = request.original_model
    if request.rejected is not None:
        return f"{original} → {request.rejected_status} from chaos-mode · {request.rejected}", ":no_entry:"
    attempts = request.attempts
    if not attempts:
        return "", ""
    last = attempts[-1]
    if request.own_refusal is not None:
        return (
            f"{original} → {last.model} · z.ai's refusal passed on, nothing cooled: refused for the request "
            f"itself ({request.own_refusal})",
            ":speech_balloon:",
        )
    comment = f"{original} → {last.model} · "
    if last.served is not None:
        comment = f"{original} → {last.served} (asked as {last.model}) · "
    refused = [f"{a.model} ({a.refusal})" for a in attempts[:-1] if a.refusal]
    if refused:
        comment += f"failover from {', '.join(refused)} · "
    comment += last.slot.reason
    if last.stalled:
        comment += " · z.ai held its head (queued), not cancelled"
    elif last.overdue:
        comment += " · no head within its patience: riding above the limits until z.ai's verdict"
    if request.waited >= 0.05:
        comment += f" · waited {request.waited:.1f} s"
    return comment, ":warning:" if refused or last.refusal else ""


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
