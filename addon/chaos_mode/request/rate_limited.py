"""Our own 429, for a request no eligible model could take, in the format of the door it came through (and
our own 403, `refused`, when waiting fixes nothing).

It says why (from the pool), when to retry (the account pause, else the quota's reset while pacing holds
everything until it, else the next cooldown to end, lengthened
by z.ai's own Retry-After when z.ai answered first), and keeps z.ai's rate-limit headers beside ours at the
Anthropic door. While the account is paused for a quota window (1308, 1310, 1316-1321) it tells the client
to stop until the reset rather than retry (`doors.error_bodies`), and so it does while pacing's hard stop
holds everything until a reset more than a minute away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from chaos_mode.doors.door import Door
from chaos_mode.doors.error_bodies import MAX_RETRY_AFTER
from chaos_mode.doors.formats import FORMATS
from chaos_mode.routing.pool import ChaosPool, Ticket
from chaos_mode.zai.catalog import RequestTier
from chaos_mode.zai.errors import QUOTA_WINDOW_REASONS, parse_retry_after

UPSTREAM_RETRY_HEADER: Final = "x-upstream-retry-after"  # z.ai's Retry-After, kept on our own 429
DEFAULT_RETRY_SECONDS: Final = 5.0  # when nothing is cooling down: the queue timed out


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer the addon makes itself."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def rate_limited(
    pool: ChaosPool,
    tier: RequestTier,
    tried: list[str],
    upstream: Sequence[tuple[str, str]] | None,
    now: float,
    last_error: str | None = None,
    door: Door = "anthropic",
) -> tuple[Reply, str]:
    """(our 429, why) for a request of `tier` that tried `tried`; `upstream`: z.ai's headers, if any;
    `last_error`: why the last attempt failed, if one was made; `door`: whose format the 429 speaks."""
    why = pool.unavailable(Ticket(tier, frozenset(tried)))
    if last_error is not None:
        why = f"{len(tried)} model(s) tried, the last: {last_error}" + (f"; {why}" if why else "")
    elif why is None:
        within = "within the queue timeout" if pool.config.queue.enabled else "(the queue is off)"
        why = f"no {tier}-tier model had a free slot {within}"
    pause = pool.cooldowns.account_pause()
    spent = pool.quota_spent_for()  # pacing's hard stop holds until the reset
    retry = pause[0] if pause else (spent or pool.cooldowns.next_expiry() or DEFAULT_RETRY_SECONDS)
    upstream = upstream or ()
    upstream_retry = next((v for k, v in upstream if k.lower() == "retry-after"), None)
    if upstream_retry is not None:
        # z.ai's own value is kept (verbatim, beside ours) and may lengthen ours (up to 60 s but for a
        # quota window's pause).
        retry = max(retry, parse_retry_after(upstream_retry, now=now) or 0.0)
    resets_at = now + pause[0] if pause and pause[1] in QUOTA_WINDOW_REASONS else None
    if not pause and spent is not None and spent > MAX_RETRY_AFTER:  # pacing's stop: a quota window's
        resets_at = now + spent
    body, ours = FORMATS[door].rate_limit_error(why, retry_after=retry, tried=tried, resets_at=resets_at)
    headers = list(ours.items())
    if door == "anthropic":
        kept = ((k, v) for k, v in upstream if k.lower().startswith("anthropic-ratelimit-"))
        headers += [(k, v) for k, v in kept if k.lower() not in ours]
    if upstream_retry is not None:
        headers.append((UPSTREAM_RETRY_HEADER, upstream_retry))
    return Reply(429, headers, body), why


def refused(why: str, tried: list[str], door: Door = "anthropic") -> Reply:
    """Our own 403 saying `why` nothing will serve the request however long the client waits: the clients
    show it at once instead of retrying (`doors.error_bodies`)."""
    body, headers = FORMATS[door].permission_error(why, tried)
    return Reply(403, list(headers.items()), body)
