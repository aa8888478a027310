"""Prometheus metrics read from the pool and the stats at scrape time, in a registry owned by the addon."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from .pool import ChaosPool
from .stats import Stats


class ChaosMetrics:
    """Owns a `CollectorRegistry` (mitmproxy re-imports `-s` scripts: never the global one)."""

    def __init__(self, pool: ChaosPool, stats: Stats) -> None:
        self.pool = pool
        self.stats = stats
        self.registry = CollectorRegistry(auto_describe=True)

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of a scrape."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
