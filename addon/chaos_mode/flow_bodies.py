"""Headers and bodies of mitmproxy messages, read and written on the hot path without extra passes.

An adapter module (it knows mitmproxy's `Message`): every routed request reads several of its headers
and rewrites its body; `Headers.get` would walk the headers once per name, and `Message.content` would
read the content-encoding and content-length headers again.
"""

from __future__ import annotations

from typing import Final

from mitmproxy import http

from .message_request import STICKY_HEADER
from .sse import SseObserver, message_usage

CONTENT_ENCODING: Final = b"content-encoding"
TRANSFER_ENCODING: Final = b"transfer-encoding"
CONTENT_LENGTH: Final = b"content-length"
CONTENT_TYPE: Final = b"content-type"
EVENT_STREAM: Final = b"text/event-stream"
SESSION: Final = STICKY_HEADER.encode()
_REQUEST_HEADERS: Final = frozenset({CONTENT_ENCODING, TRANSFER_ENCODING, SESSION})
_RESPONSE_HEADERS: Final = frozenset({CONTENT_ENCODING, CONTENT_TYPE})


def find_headers(message: http.Message, names: frozenset[bytes]) -> dict[bytes, bytes]:
    """The first value of each header in `names` (lower-case), in one pass over the headers.

    The hot path reads several headers of one message; `Headers.get` would walk them once per name.
    """
    found: dict[bytes, bytes] = {}
    for name, value in message.headers.fields:
        key = name.lower()
        if key in names and key not in found:
            found[key] = value
    return found


def decoded_body(message: http.Message, headers: dict[bytes, bytes]) -> bytes:
    """The decoded body (as `get_content(strict=False)`); no copy when it has no content-encoding."""
    if headers.get(CONTENT_ENCODING):
        return message.get_content(strict=False) or b""
    return message.raw_content or b""


def set_body(message: http.Message, body: bytes, headers: dict[bytes, bytes]) -> None:
    """`message.content = body`, without reading the headers again when the body is not encoded."""
    if headers.get(CONTENT_ENCODING):
        message.content = body
        return
    message.raw_content = body
    if TRANSFER_ENCODING in headers:
        return
    fields = message.headers.fields
    at = [i for i, (name, _) in enumerate(fields) if name.lower() == CONTENT_LENGTH]
    if len(at) == 1:  # the usual case: its value replaced in place, the other headers untouched
        i = at[0]
        message.headers.fields = (*fields[:i], (fields[i][0], str(len(body)).encode()), *fields[i + 1 :])
    else:
        message.headers["content-length"] = str(len(body))


def request_headers(request: http.Request) -> dict[bytes, bytes]:
    """The headers routing needs: content-encoding, transfer-encoding and the session id."""
    return find_headers(request, _REQUEST_HEADERS)


def is_event_stream(response: http.Response) -> bool:
    return EVENT_STREAM in find_headers(response, _RESPONSE_HEADERS).get(CONTENT_TYPE, b"")


def usage_of(response: http.Response) -> list[int] | None:
    """[input_tokens, output_tokens] of an answer that arrived whole (JSON, or SSE read at once)."""
    headers = find_headers(response, _RESPONSE_HEADERS)
    content = decoded_body(response, headers)
    if EVENT_STREAM in headers.get(CONTENT_TYPE, b""):
        observer = SseObserver()
        observer.feed(content + b"\n\n")
        return [observer.input_tokens, observer.output_tokens]
    return message_usage(content)
