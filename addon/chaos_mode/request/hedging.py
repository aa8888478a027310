"""Hedging: an attempt z.ai has not answered within its patience is left for a slot within the limits.

z.ai sends an accepted stream's head at once and takes seconds to refuse (`zai.timing`), so an attempt still
without a head after `patience` seconds is most likely being refused. When a slot within the limits comes for
its request meanwhile, the request goes on there: a probe is given up (closed: it tested nothing), a regular
attempt is handed to `leave` with its slot, to await z.ai's verdict without its request (the limits still
learn from it). A refusal then costs the request no more than the wait it would have had anyway. From its
patience on, a regular attempt is overdue (`RoutedRequest.overdue`): z.ai holds no slot for a request it
refuses (`zai.assumptions.REFUSED_HOLDS_NO_SLOT`), so it rides above the limits until its verdict, and its
place goes to the next request at once. While z.ai queues (`zai.assumptions.MAY_QUEUE`), only probes are
hedged, with their stall as the patience, and given up (closed: `zai.assumptions.DROPS_ON_CLOSE`) at once
then: z.ai would serve a held probe only once a slot frees, keeping the requests after it waiting; its request
waits for a slot within the limits. The patience is asked as the attempt waits, not once when it is sent: the
first attempts go before any head was seen, when nobody knows it yet. It counts from when the attempt was
written to z.ai (`Written`), not while a connection to z.ai is being opened: z.ai judges nothing before it has
the request. Generic over the answer: the transport's, never read here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from chaos_mode.request.routed import RoutedRequest
from chaos_mode.routing.pool import Slot

type Leave[A] = Callable[[Slot, asyncio.Future[A]], None]
# Seconds from writing; None: not known (yet). The forwarder's learned head patience, asked as the attempt
# waits (`request` calling back up into `forwarding`).
type Patience = Callable[[], float | None]

# While the patience is not known (no head seen yet, or z.ai queues), it is asked again this often.
UNKNOWN_PATIENCE_RECHECK_SECONDS: Final = 0.1


class Written:
    """When an attempt was last written to z.ai (the loop's time; None: not yet). Written again when a kept
    connection closed as the request came, on a new one: the patience is read against the last writing at
    each wake, so a patience that runs out during the new connection's handshakes still ends the wait (a
    rare case: z.ai closing a kept connection just as a request came); its stall and head time count from
    the last writing."""

    def __init__(self) -> None:
        self.at: float | None = None
        self._event = asyncio.Event()

    def __call__(self) -> None:
        self.at = asyncio.get_running_loop().time()
        self._event.set()

    async def wait(self) -> float:
        """The time it was last written, once it was."""
        await self._event.wait()
        assert self.at is not None
        return self.at


def fixed_patience(seconds: float) -> Patience:
    """A patience that is `seconds`, whatever is learned meanwhile."""
    return lambda: seconds


async def hedge[A](
    request: RoutedRequest,
    sending: asyncio.Future[A],
    patience: Patience,
    leave: Leave[A],
    written: Written,
    *,
    queuing: bool = False,
) -> A | Slot | None:
    """The attempt's answer, or the slot within the limits that came first (now held), or None when the
    request ended meanwhile. `written`: when the attempt was written to z.ai. `queuing`: z.ai queues (a
    probe is given up at its patience)."""
    if written.at is not None and (seconds := patience()) is not None:  # the usual case: no task for a slot
        try:  # an answer within the patience known now decides, as below
            await _within(sending, seconds - (asyncio.get_running_loop().time() - written.at))
        except BaseException:
            sending.cancel()
            raise
        if sending.done() and not sending.cancelled():
            return await sending
    waiting = asyncio.ensure_future(_spare_after(request, sending, patience, written, queuing))
    either: set[asyncio.Future[Any]] = {sending, waiting}
    try:
        while True:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if waiting.done() or not sending.cancelled():
                break
            either = {waiting}  # a probe given up (closed) at its patience: its request waits for a slot
    except BaseException:
        sending.cancel()
        _drop(request, waiting)
        raise
    answered = sending.done() and not sending.cancelled()  # z.ai answered (a probe given up was cancelled)
    granted = waiting.result() if waiting.done() and not answered else None
    if granted is None:  # z.ai answered first (or the queue gave up): the attempt's answer decides
        _drop(request, waiting)
        return None if sending.cancelled() else await sending
    slot = request.slot
    if slot is not None and slot.probe is None:
        leave(slot, sending)
    else:
        await stop(sending)
    if not request.switch_to(granted):  # the request ended meanwhile: the slot went back
        return None
    return granted


async def _within(future: asyncio.Future[Any], seconds: float) -> None:
    """Return once `future` is done or `seconds` have passed: `asyncio.wait({future}, timeout=seconds)`
    without its sets (it runs for every streamed attempt)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(seconds, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)


async def _spare_after[A](
    request: RoutedRequest,
    sending: asyncio.Future[A],
    patience: Patience,
    written: Written,
    queuing: bool,
) -> Slot | None:
    await _outwaited(patience, written)
    # zai.assumptions.MAY_QUEUE, zai.assumptions.DROPS_ON_CLOSE: a probe z.ai holds is closed at its stall
    if queuing and request.slot is not None and request.slot.probe is not None and not sending.done():
        await stop(sending)
        if not sending.cancelled():
            return None  # answered just then: its answer decides
        request.give_up_probe()
    elif not sending.done():
        request.overdue()  # most likely refused: its place goes on (zai.assumptions.REFUSED_HOLDS_NO_SLOT)
    return await request.spare_slot()


async def _outwaited(patience: Patience, written: Written) -> None:
    """Return once the attempt has waited its patience since it was (last) written, as known at each
    moment."""
    loop = asyncio.get_running_loop()
    while True:
        seconds, waited = patience(), loop.time() - await written.wait()
        if seconds is not None and waited >= seconds:
            return
        await asyncio.sleep(UNKNOWN_PATIENCE_RECHECK_SECONDS if seconds is None else seconds - waited)


async def stop(sending: asyncio.Future[Any]) -> None:
    """Stop an attempt, and return once it stopped: its upstream connection is closed (before a probe is
    given up, or a left attempt z.ai holds is let go)."""
    if not sending.done():
        sending.cancel()
        await asyncio.wait({sending})


def _drop(request: RoutedRequest, waiting: asyncio.Future[Slot | None]) -> None:
    """Stop waiting for a slot; one granted meanwhile goes back."""
    if not waiting.done():
        waiting.cancel()  # the queue gives back a slot granted as it is cancelled
    elif not waiting.cancelled() and waiting.exception() is None and (slot := waiting.result()) is not None:
        request.drop(slot)
