"""Send a request again (to another model, after a 429) with tornado's client, as mitmproxy would have."""

from __future__ import annotations

from mitmproxy import http
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.httputil import HTTPHeaders

# Hop-by-hop and framing headers: the client sets its own; never copied between hops.
_SKIP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
REQUEST_TIMEOUT = 600.0


class ResendFailed(Exception):
    """The upstream could not be reached again (the message never holds headers or the body)."""


class Resender:
    """Re-sends a flow's request to its upstream; the answer arrives whole (not streamed)."""

    def __init__(self) -> None:
        self._client: AsyncHTTPClient | None = None

    async def send(self, request: http.Request, *, insecure: bool = False) -> http.Response:
        if self._client is None:
            self._client = AsyncHTTPClient(force_instance=True, max_clients=64)
        headers = HTTPHeaders()
        for name, value in request.headers.items(multi=True):
            if name.lower() not in _SKIP:
                headers.add(name, value)
        outgoing = HTTPRequest(
            request.url,
            method=request.method,
            headers=headers,
            body=request.raw_content or b"",
            decompress_response=False,
            follow_redirects=False,
            connect_timeout=30.0,
            request_timeout=REQUEST_TIMEOUT,
            validate_cert=not insecure,
            allow_nonstandard_methods=True,
        )
        answer = await self._client.fetch(outgoing, raise_error=False)
        if answer.code == 599:
            error = answer.error
            raise ResendFailed(f"{request.pretty_host}: {type(error).__name__ if error else 'no answer'}")
        response = http.Response.make(
            answer.code,
            b"",
            [(k.encode(), v.encode()) for k, v in answer.headers.get_all() if k.lower() not in _SKIP],
        )
        response.raw_content = answer.body or b""
        response.headers["content-length"] = str(len(response.raw_content))
        return response

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
