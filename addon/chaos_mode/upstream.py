"""The HTTP clients the forwarder reaches z.ai with: keep-alive pools, TLS verified as mitmproxy verifies.

mitmproxy checks z.ai's certificate against certifi's bundle, or against `ssl_verify_upstream_trusted_ca`
/ `ssl_verify_upstream_trusted_confdir` when set, and not at all with `ssl_insecure`; the same settings
make the same check here. A flow that came through `--mode upstream:` goes out through that proxy.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Final

import certifi
import httpx

# httpx logs every request at INFO: in mitmdump's event log that would be one line per attempt.
logging.getLogger("httpx").setLevel(logging.WARNING)

CONNECT_TIMEOUT: Final = 30.0  # seconds to reach z.ai (or the upstream proxy)
READ_TIMEOUT: Final = 600.0  # seconds without a byte from z.ai before an attempt counts as failed
POOL_SIZE: Final = 512  # connections per way out; a swarm holds one per stream


@dataclass(frozen=True, slots=True)
class UpstreamSettings:
    """mitmproxy's upstream TLS options, and how long an attempt may stay silent."""

    insecure: bool = False
    ca_file: str | None = None
    ca_path: str | None = None
    proxy_auth: str | None = None  # user:pass for the upstream proxy (mitmproxy's upstream_auth)
    read_timeout: float = READ_TIMEOUT


def tls_context(settings: UpstreamSettings) -> ssl.SSLContext:
    """The certificate check mitmproxy would make on z.ai."""
    if settings.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if settings.ca_file is None and settings.ca_path is None:
        return ssl.create_default_context(cafile=certifi.where())
    return ssl.create_default_context(cafile=settings.ca_file, capath=settings.ca_path)


class UpstreamClients:
    """One keep-alive client per way out: direct, or through each upstream proxy a flow names."""

    def __init__(self, settings: UpstreamSettings | None = None) -> None:
        self._settings = settings or UpstreamSettings()
        self._clients: dict[str | None, httpx.AsyncClient] = {}
        self._retired: list[httpx.AsyncClient] = []

    @property
    def settings(self) -> UpstreamSettings:
        return self._settings

    def reconfigure(self, settings: UpstreamSettings) -> None:
        """New settings for new requests; requests in flight finish on the clients they started on."""
        if settings == self._settings:
            return
        self._settings = settings
        self._retired += self._clients.values()
        self._clients = {}

    def client(self, proxy: str | None = None) -> httpx.AsyncClient:
        """The client for requests going out directly (None) or through the proxy at URL `proxy`."""
        client = self._clients.get(proxy)
        if client is None:
            settings = self._settings
            client = httpx.AsyncClient(
                verify=tls_context(settings),
                proxy=None if proxy is None else httpx.Proxy(proxy, auth=_auth(settings.proxy_auth)),
                timeout=httpx.Timeout(settings.read_timeout, connect=CONNECT_TIMEOUT),
                limits=httpx.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE),
                follow_redirects=False,
                trust_env=False,  # the way out is mitmproxy's to say, not the environment's
            )
            self._clients[proxy] = client
        return client

    async def aclose(self) -> None:
        clients = [*self._clients.values(), *self._retired]
        self._clients, self._retired = {}, []
        for client in clients:
            await client.aclose()


def _auth(value: str | None) -> tuple[str, str] | None:
    if not value or ":" not in value:
        return None
    user, _, password = value.partition(":")
    return user, password
