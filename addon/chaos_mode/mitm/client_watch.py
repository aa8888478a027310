"""Waiting for a slot while the client is still there: an adapter, it watches mitmproxy's flow.

The pool's queue knows nothing of connections. A client that gives up while its request waits must not
keep its place, nor a slot granted just as it left.
"""

from __future__ import annotations

import asyncio
from typing import Final

from mitmproxy import http
from mitmproxy.connection import ConnectionState

from chaos_mode.routing.pool import ChaosPool, Slot, Ticket

CLIENT_POLL_SECONDS: Final = 0.25  # how often a waiting request checks that its client is still there


class ClientGone:
    """The client left while its request waited."""


CLIENT_GONE: Final = ClientGone()


def client_alive(flow: http.HTTPFlow) -> bool:
    return flow.live and flow.client_conn.state is not ConnectionState.CLOSED and flow.error is None


async def acquire_while_connected(
    pool: ChaosPool, flow: http.HTTPFlow, ticket: Ticket, since: float | None = None
) -> Slot | ClientGone | None:
    """A slot for `ticket`, waiting in the queue while the client is still there.

    None when the queue gave up (timeout, nothing could ever serve it); CLIENT_GONE when the client left
    first, in which case no slot is held. The request hook tries `pool.admit_now` before, which needs no
    task; the queue's own fast path serves the rarer callers.
    """
    # a slot at once when one is free and nobody waits
    task = asyncio.ensure_future(pool.admit(ticket, since=since))
    delivered = False
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=CLIENT_POLL_SECONDS)
            if done:
                delivered = True
                return task.result()
            if not client_alive(flow):
                return CLIENT_GONE
    finally:
        if not delivered:
            if not task.done():
                task.cancel()  # the queue gives back a slot granted meanwhile
            elif not task.cancelled() and (granted := task.result()) is not None:
                pool.release_selection(granted)
