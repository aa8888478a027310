"""The addon's own HTTP server: the dashboard page, status JSON, its SSE feed and Prometheus metrics.

GET only, nothing else served; binds where it is told (the addon's default is 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import json
import logging
import re
from collections.abc import Callable
from importlib import resources
from typing import Any, Final

from tornado.httpserver import HTTPServer
from tornado.iostream import StreamClosedError
from tornado.netutil import bind_sockets
from tornado.web import Application, HTTPError, RequestHandler

log = logging.getLogger(__name__)

StatusSource = Callable[[], dict[str, Any]]
MetricsSource = Callable[[], tuple[bytes, str]]

EVENT_INTERVAL: Final = 1.0  # seconds between two status events of /api/events
LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.S)


def parse_listen(value: str) -> tuple[str, int] | None:
    """`host:port` -> (host, port); '' -> None (off). `ValueError` for anything else."""
    value = value.strip()
    if not value:
        return None
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port must be a number, got {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range: {port}")
    return host, port


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposed_hosts(hosts: list[str]) -> list[str]:
    """The listen hosts that are not loopback ('' is every interface, as mitmproxy's default)."""
    return sorted({host or "all interfaces" for host in hosts if not host or not is_loopback(host)})


def _host_of(header: str) -> str:
    """The host part of a Host header (`name`, `name:port`, `[v6]:port`)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def dashboard_page() -> bytes:
    """The dashboard: one self-contained HTML file shipped in the package (`static/dashboard.html`)."""
    return resources.files("chaos_mode.observe").joinpath("static/dashboard.html").read_bytes()


def content_security_policy(page: bytes) -> str:
    """A CSP allowing exactly the page's inline scripts (by hash), inline styles and same-origin fetches."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() + "'"
        for m in _SCRIPT.finditer(page)
    )
    return (
        f"default-src 'none'; script-src {hashes or "'none'"}; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


class _Handler(RequestHandler):
    """GET only; no caching; on a loopback server, only loopback Host names (no DNS rebinding)."""

    SUPPORTED_METHODS: tuple[str, ...] = ("GET",)

    def initialize(self, server: WebServer) -> None:
        self.server = server

    def set_default_headers(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.clear_header("Server")

    def prepare(self) -> None:
        if self.server.loopback_only and not is_loopback(_host_of(self.request.host)):
            raise HTTPError(403)

    def compute_etag(self) -> str | None:
        return None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"{status_code} {self._reason}\n")


class _NotFoundHandler(_Handler):
    SUPPORTED_METHODS = RequestHandler.SUPPORTED_METHODS  # answer 404, not 405, whatever the method

    def prepare(self) -> None:
        raise HTTPError(404)


class _PageHandler(_Handler):
    def get(self) -> None:
        page, policy = self.server.page()
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", policy)
        self.set_header("Referrer-Policy", "no-referrer")
        self.finish(page)


class _StatusHandler(_Handler):
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(self.server.status()))


class _MetricsHandler(_Handler):
    def get(self) -> None:
        body, content_type = self.server.metrics()
        self.set_header("Content-Type", content_type)
        self.finish(body)


class _EventsHandler(_Handler):
    """Server-sent events: the status JSON once a second until the client leaves or the server stops."""

    async def get(self) -> None:
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("X-Accel-Buffering", "no")
        stopping = self.server.stopping
        self.write(f"retry: {int(EVENT_INTERVAL * 1000)}\n\n")
        while not stopping.is_set():
            self.write(f"event: status\ndata: {json.dumps(self.server.status())}\n\n")
            try:
                await self.flush()
            except StreamClosedError:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), EVENT_INTERVAL)


class WebServer:
    """Serves GET /, /api/status, /api/events and /metrics. Start it in `running()`, stop it in `done()`."""

    def __init__(self, status: StatusSource, metrics: MetricsSource) -> None:
        self._status = status
        self._metrics = metrics
        self._server: HTTPServer | None = None
        self._page: tuple[bytes, str] | None = None
        self.stopping = asyncio.Event()
        self.loopback_only = True
        self.address: tuple[str, int] | None = None

    def status(self) -> dict[str, Any]:
        return self._status()

    def metrics(self) -> tuple[bytes, str]:
        return self._metrics()

    def page(self) -> tuple[bytes, str]:
        """(the dashboard page, its Content-Security-Policy), read once."""
        if self._page is None:
            page = dashboard_page()
            self._page = (page, content_security_policy(page))
        return self._page

    def start(self, host: str, port: int) -> tuple[str, int]:
        args = {"server": self}
        app = Application(
            [
                (r"/", _PageHandler, args),
                (r"/api/status", _StatusHandler, args),
                (r"/api/events", _EventsHandler, args),
                (r"/metrics", _MetricsHandler, args),
            ],
            default_handler_class=_NotFoundHandler,
            default_handler_args=args,
            log_function=lambda handler: None,
            compress_response=False,
        )
        sockets = bind_sockets(port, address=host)
        self.stopping = asyncio.Event()
        self.loopback_only = is_loopback(host)
        # No keep-alive: after a stop (a script reload) no open connection keeps serving an old addon.
        self._server = HTTPServer(app, no_keep_alive=True)
        self._server.add_sockets(sockets)
        bound = sockets[0].getsockname()
        self.address = (host, int(bound[1]))
        return self.address

    def stop(self) -> None:
        self.stopping.set()  # ends the event streams
        if self._server is not None:
            self._server.stop()
            self._server = None
            self.address = None
