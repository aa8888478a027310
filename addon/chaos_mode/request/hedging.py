"""Hedging: an attempt z.ai has not answered within its patience is left for a slot within the limits.

z.ai sends an accepted stream's head at once and takes seconds to refuse (`zai.timing`), so an attempt
still without a head after `patience` seconds is most likely being refused. When a slot within the limits
comes for its request meanwhile, the request goes on there: a probe is given up (closed: it tested
nothing), a regular attempt is handed to `leave` with its slot, to await z.ai's verdict without its
request (the limits still learn from it). A refusal then costs the request no more than the wait it would
have had anyway. Generic over the answer: the transport's, never read here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.pool import Slot

type Leave[A] = Callable[[Slot, asyncio.Future[A]], None]


async def hedge[A](
    request: RoutedRequest, sending: asyncio.Future[A], patience: float, leave: Leave[A]
) -> A | Slot | None:
    """The attempt's answer, or the slot within the limits that came first (now held), or None when the
    request ended meanwhile."""
    waiting = asyncio.ensure_future(_spare_after(request, patience))
    either: set[asyncio.Future[Any]] = {sending, waiting}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        sending.cancel()
        _drop(request, waiting)
        raise
    granted = None if sending.done() or not waiting.done() else waiting.result()
    if granted is None:  # z.ai answered first (or the queue gave up): the attempt's answer decides
        _drop(request, waiting)
        return await sending
    slot = request.slot
    if slot is not None and slot.probe is None:
        leave(slot, sending)
    else:
        sending.cancel()
        await asyncio.wait({sending})  # the upstream connection is closed before the probe is given up
    if not request.switch_to(granted):  # the request ended meanwhile: the slot went back
        return None
    return granted


async def _spare_after(request: RoutedRequest, patience: float) -> Slot | None:
    await asyncio.sleep(patience)
    return await request.spare_slot()


def _drop(request: RoutedRequest, waiting: asyncio.Future[Slot | None]) -> None:
    """Stop waiting for a slot; one granted meanwhile goes back."""
    if not waiting.done():
        waiting.cancel()  # the queue gives back a slot granted as it is cancelled
    elif not waiting.cancelled() and waiting.exception() is None and (slot := waiting.result()) is not None:
        request.drop(slot)
