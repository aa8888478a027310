"""What to do when z.ai refuses an attempt: judge it, then fail over to another model or answer 429 (403
when waiting fixes nothing: the plan expired, every model the request may use out of rotation).

Pure: it works on the routed request (which alone speaks to the pool about its slots) and its own parsed
message (never parsing the body again). Failing over is only for an answer no byte of which has reached
the client. A refusal that is the request's own (see `refusals`) is not judged and not failed over: z.ai's
answer goes to the client; one whose owner is not known yet fails over with its model's cooldown owed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from chaos_mode.request.rate_limited import Reply, rate_limited, refused
from chaos_mode.request.refusals import Whose
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


def judge(
    request: RoutedRequest, error: UpstreamError, headers: Headers, *, now: float, slot: Slot | None = None
) -> None:
    """Feed z.ai's refusal of the attempt sent with `slot` (default: the current one) to the pool and the
    stats; one that is the request's own is only counted."""
    if slot is not None and request.whose(error, may_fail_over=False, slot=slot) is Whose.REQUEST:
        request.excuse(error, slot)
        return
    retry_after = parse_retry_after(header(headers, "retry-after"), now=now)
    request.judge(error, retry_after, slot)
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
    may_fail_over = retry and error.fails_over and request.may_fail_over
    match request.whose(error, may_fail_over=may_fail_over):
        case Whose.REQUEST:  # z.ai's answer goes to the client, nothing cooled
            request.excuse(error)
            return None
        case Whose.UNDECIDED:
            request.owe(error, parse_retry_after(header(headers, "retry-after"), now=now))
        case Whose.MODEL:
            judge(request, error, headers, now=now)
    if error.action is Action.FATAL:
        return _refuse(request, f"z.ai refuses every request: {error.reason}")
    if not error.fails_over:
        return None
    # A full model is not a broken one: once a slot frees, it may serve (`RoutedRequest.fail_over`).
    request.refused_by(error.code or error.reason, broken=error.action is not Action.CONCURRENCY)
    if not retry or not request.may_fail_over:
        return reject(request, headers, now=now, error=error)
    slot = await request.fail_over(error.reason)
    if slot is None:
        return None if request.finished else reject(request, headers, now=now, error=error)
    return slot


def reject(
    request: RoutedRequest, upstream: Headers | None, *, now: float, error: UpstreamError | None = None
) -> Reply:
    """Our own 429 for `request`: nothing eligible could take it (in time); `error`: the last refusal. Our
    403 instead when every model it may use is out of rotation for good."""
    dead_end = request.pool.dead_end(request.tier)
    if dead_end is not None:
        return _refuse(request, dead_end)
    reason = error.reason if error is not None else None
    request.pay()  # nothing else will serve it: the refusals were their models' (and the 429 says so)
    reply, why = rate_limited(
        request.pool, request.tier, request.tried, upstream, now, reason, door=request.message.door
    )
    request.reject(why)
    return reply


def _refuse(request: RoutedRequest, why: str) -> Reply:
    """Our own 403 for `request`: nothing will serve it however long it waits."""
    request.pay()
    request.reject(why, status=403)
    return refused(why, request.tried, door=request.message.door)
