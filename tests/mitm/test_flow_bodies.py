"""mitmproxy messages read by the addon: a compressed body is decoded only as far as its limit (a client's
request) or cap (an answer read for its usage), never to what a bomb would decode to."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import tutils

from chaos_mode.doors.messages import BadRequest
from chaos_mode.forwarding.decoding import OverCap
from chaos_mode.mitm.flow_bodies import MAX_USAGE_BODY, read_message, request_headers, usage_of
from support.hostile import ANSWER_HEAD, bomb

LIMIT = 1 << 20
BOMB = 64 << 20
REQUEST_HEAD = b'{"model": "claude-opus-4-5", "max_tokens": 5, "messages": []}'
USAGE = b'{"input_tokens":7,"output_tokens":1}'
SSE_HEAD = b'event: message_start\ndata: {"type":"message_start","message":{"usage":%s}}\n\n' % USAGE


def peak_of(call: Callable[[], Any]) -> int:
    """The most memory Python held at once while `call` ran (its exception, if any, swallowed)."""
    tracemalloc.start()
    try:
        call()
    except (BadRequest, OverCap):
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def compressed_request(coding: str, raw: bytes) -> http.Request:
    request = tutils.treq(method=b"POST", path=b"/api/anthropic/v1/messages")
    request.headers["content-encoding"] = coding
    request.raw_content = raw
    return request


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_a_request_bomb_is_too_large_without_being_decoded_past_the_limit(coding: str) -> None:
    raw = bomb(coding, REQUEST_HEAD, size=BOMB)
    request = compressed_request(coding, raw)
    assert len(raw) < LIMIT
    with pytest.raises(BadRequest) as refused:
        read_message(request, request_headers(request), limit=LIMIT)
    assert refused.value.kind == "too-large" and "decodes to more than" in str(refused.value)
    assert peak_of(lambda: read_message(request, request_headers(request), limit=LIMIT)) < 4 * LIMIT
    assert request.raw_content is raw  # passed on as it came


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_a_compressed_request_within_the_limit_is_read(coding: str) -> None:
    request = compressed_request(coding, bomb(coding, REQUEST_HEAD, size=LIMIT))
    assert read_message(request, request_headers(request), limit=LIMIT).model == "claude-opus-4-5"


def whole_answer(coding: str, head: bytes, content_type: str, size: int) -> http.Response:
    response = tutils.tresp(status_code=200)
    response.headers["content-type"] = content_type
    response.headers["content-encoding"] = coding
    response.raw_content = bomb(coding, head, size=size)
    return response


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_the_usage_of_an_answer_past_the_cap_is_not_read(coding: str) -> None:
    response = whole_answer(coding, ANSWER_HEAD, "application/json", BOMB)
    with pytest.raises(OverCap):
        usage_of(response)
    assert peak_of(lambda: usage_of(response)) < 3 * MAX_USAGE_BODY


@pytest.mark.parametrize("coding", ["br", "gzip", "zstd"])
def test_a_whole_sse_answer_is_read_as_it_is_decoded(coding: str) -> None:
    """Within the cap its usage is read, a piece at a time: never the whole decoded body at once."""
    response = whole_answer(coding, SSE_HEAD, "text/event-stream", MAX_USAGE_BODY)
    assert peak_of(lambda: usage_of(response)) < MAX_USAGE_BODY // 4
    assert usage_of(response)[0] == [7, 0, 1]
    with pytest.raises(OverCap):
        usage_of(whole_answer(coding, SSE_HEAD, "text/event-stream", MAX_USAGE_BODY + 1))
