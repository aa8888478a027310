"""The addon's own HTTP server: status JSON (and later metrics and the dashboard), on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

log = logging.getLogger(__name__)

StatusSource = Callable[[], dict[str, Any]]
MetricsSource = Callable[[], tuple[bytes, str]]


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


class _StatusHandler(RequestHandler):
    def initialize(self, status: StatusSource) -> None:
        self._status = status

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(self._status()))


class WebServer:
    """Serves GET /api/status. Start it in the addon's `running()`, stop it in `done()`."""

    def __init__(self, status: StatusSource, metrics: MetricsSource) -> None:
        self._status = status
        self._metrics = metrics
        self._server: HTTPServer | None = None
        self.address: tuple[str, int] | None = None

    def start(self, host: str, port: int) -> tuple[str, int]:
        app = Application([(r"/api/status", _StatusHandler, {"status": self._status})])
        sockets = bind_sockets(port, address=host)
        self._server = HTTPServer(app)
        self._server.add_sockets(sockets)
        bound = sockets[0].getsockname()
        self.address = (host, int(bound[1]))
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
            self.address = None
