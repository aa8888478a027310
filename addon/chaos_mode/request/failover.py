"""What to do when z.ai refuses an attempt: tell the pool, then fail over to another model or answer 429.

Pure: it works on the routed request's own parsed message (never parsing the body again) and the pool.
Failing over is only for an answer no byte of which has reached the client.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from chaos_mode.request.rate_limited import Reply, rate_limited
from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.pool import Slot
from chaos_mode.zai.errors import UNREACHED_REASON, Action, UpstreamError, classify_error, parse_retry_after

log = logging.getLogger("chaos_mode")

Headers = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Answer:
    """z.ai's answer to an attempt, as far as failover reads it (the body decoded)."""

    status: int
    headers: Headers
    body: bytes


def header(headers: Headers, name: str) -> str | None:
    """The first value of header `name` (lower-case)."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def unreached(why: str) -> UpstreamError:
    """The attempt got no answer from z.ai (refused, dropped, timed out): no verdict on the model."""
    return UpstreamError(502, None, Action.UNREACHED, f"{UNREACHED_REASON} ({why})")


def judge(request: RoutedRequest, error: UpstreamError, headers: Headers, *, now: float) -> None:
    """Feed z.ai's refusal of the current attempt to the pool and the stats."""
    if request.model is not None and request.slot is not None:
        judge_slot(request, request.slot, error, headers, now=now)


def judge_slot(
    request: RoutedRequest, slot: Slot, error: UpstreamError, headers: Headers, *, now: float
) -> None:
    """Feed z.ai's refusal of an attempt that was sent with `slot` to the pool and the stats."""
    retry_after = parse_retry_after(header(headers, "retry-after"), now=now)
    request.pool.report_error(slot.model, error, retry_after, slot)
    request.stats.upstream_error(slot.model, error.code, error.status)
    if error.action is Action.FATAL:
        log.error("z.ai refuses every request: %s", error.reason)


async def settle(
    request: RoutedRequest,
    answer: Answer | UpstreamError,
    *,
    now: float,
    retry: bool = True,
) -> Slot | Reply | None:
    """After z.ai refused (or never answered) the current attempt: a new slot to try again with (the
    refused one given back), our own 429, or None when z.ai's answer goes to the client as it is.

    `retry` False: the request cannot be sent again (no forwarder); what would fail over gets our 429.
    """
    if isinstance(answer, UpstreamError):
        error: UpstreamError | None = answer
        headers: Headers = ()
    else:
        error = classify_error(answer.status, answer.body, now=now)
        headers = answer.headers
    if error is None:
        return None
    judge(request, error, headers, now=now)
    if not error.fails_over:
        return None
    failed = request.model or ""
    # With learned limits, a full model is not a broken one: within its new limit it may serve.
    busy = error.action is Action.CONCURRENCY and request.pool.limits.enabled
    request.refused_by(error.code or error.reason, broken=not busy)
    if not retry or request.failovers >= request.pool.config.streams.max_failovers:
        return reject(request, headers, now=now, error=error)
    selection = await request.pool.admit(request.ticket(), since=request.arrived)
    if selection is None:
        request.stats.failover(failed, None, error.reason)
        return reject(request, headers, now=now, error=error)
    if not request.hold(selection):  # the request ended while it waited
        return None
    request.stats.failover(failed, selection.model, error.reason)
    return selection


def reject(
    request: RoutedRequest, upstream: Headers | None, *, now: float, error: UpstreamError | None = None
) -> Reply:
    """Our own 429 for `request`: nothing eligible could take it (in time); `error`: the last refusal."""
    reason = error.reason if error is not None else None
    reply, why = rate_limited(
        request.pool, request.tier, request.tried, upstream, now, reason, door=request.message.door
    )
    request.reject(why)
    return reply
