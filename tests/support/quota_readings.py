"""Readings of z.ai's quota as tests make them."""

from __future__ import annotations

from chaos_mode.quota.reading import QuotaReading, WindowReading
from chaos_mode.zai.quota import FIVE_HOURS, WINDOW_SECONDS


def five_hours(used_percent: float, resets_at: float | None, level: str | None = None) -> QuotaReading:
    """A reading of the 5-hour window alone, in percent (a prompt plan's)."""
    return QuotaReading((WindowReading(FIVE_HOURS, WINDOW_SECONDS, used_percent, resets_at),), level)
