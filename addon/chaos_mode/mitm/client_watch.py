"""Whether a flow's client is still there: an adapter, it reads mitmproxy's flow.

The pool's queue knows nothing of connections: a routed request waits for its slot while this says its
client is there (`RoutedRequest.admit`), so a client that gives up keeps no place in line.
"""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.connection import ConnectionState


def client_alive(flow: http.HTTPFlow) -> bool:
    return flow.live and flow.client_conn.state is not ConnectionState.CLOSED and flow.error is None
