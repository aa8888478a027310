"""Whether a flow's client is still there: an adapter, it reads mitmproxy's flow.

The pool's queue knows nothing of connections: a routed request waits for its slot while this says its
client is there (`RoutedRequest.admit`), so a client that gives up keeps no place in line.
"""

from __future__ import annotations

from typing import Final

from mitmproxy import http
from mitmproxy.connection import ConnectionState

# mitmproxy's flow.error.msg when the client left: HTTP/1 closed its connection; HTTP/2 and HTTP/3 reset
# or closed the request's stream, keeping the connection (an SDK cancelling one request); a kill
LEFT: Final = ("Client disconnected.", "stream reset by client (", "stream closed by client (")


def client_alive(flow: http.HTTPFlow) -> bool:
    return flow.live and not _closed(flow) and flow.error is None


def client_left(flow: http.HTTPFlow) -> bool:
    """The flow ended because its client went away, not because the upstream broke it."""
    if _closed(flow):
        return True
    error = flow.error
    return error is not None and (error.msg == error.KILLED_MESSAGE or error.msg.startswith(LEFT))


def _closed(flow: http.HTTPFlow) -> bool:
    """The client's connection is closed; a replay (mitmweb's, `replay.client`) has none of its own: it
    carries the recorded flow's, closed since."""
    return flow.is_replay != "request" and flow.client_conn.state is ConnectionState.CLOSED
