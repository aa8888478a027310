"""Our own 429, for a request no eligible model could take: an adapter, it builds mitmproxy's response.

It says why (from the pool), when to retry (the account pause, else the next cooldown to end, lengthened
by z.ai's own Retry-After when z.ai answered first), and keeps z.ai's rate-limit headers beside ours.
"""

from __future__ import annotations

from typing import Final

from mitmproxy import http

from .catalog import RequestTier
from .pool import ChaosPool, Ticket
from .replies import rate_limit_error
from .zai_errors import parse_retry_after

UPSTREAM_RETRY_HEADER: Final = "x-upstream-retry-after"  # z.ai's Retry-After, kept on our own 429
DEFAULT_RETRY_SECONDS: Final = 5.0  # when nothing is cooling down: the queue timed out


def rate_limited(
    pool: ChaosPool, tier: RequestTier, tried: list[str], upstream: http.Response | None, now: float
) -> tuple[http.Response, str]:
    """(our 429, why) for a request of `tier` that tried `tried`; `upstream` is z.ai's answer, if any."""
    why = pool.unavailable(Ticket(tier, frozenset(tried)))
    if why is None:
        why = f"no {tier}-tier model had a free slot within the queue timeout"
    pause = pool.cooldowns.account_pause()
    retry = pause[0] if pause else (pool.cooldowns.next_expiry() or DEFAULT_RETRY_SECONDS)
    upstream_retry = upstream.headers.get("retry-after") if upstream is not None else None
    if upstream_retry is not None:
        # z.ai's own value is kept (verbatim, beside ours) and may lengthen ours, up to 60 s.
        retry = max(retry, parse_retry_after(upstream_retry, now=now) or 0.0)
    body, headers = rate_limit_error(why, retry_after=retry, tried=tried)
    response = http.Response.make(429, body, headers)
    if upstream is not None:
        for name, value in upstream.headers.items(multi=True):
            if name.lower().startswith("anthropic-ratelimit-"):
                response.headers[name] = value
        if upstream_retry is not None:
            response.headers[UPSTREAM_RETRY_HEADER] = upstream_retry
    return response, why
