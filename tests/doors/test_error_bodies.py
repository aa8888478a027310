"""Our own answers (chaos_mode.doors.error_bodies): 429s in each door's shape, with a sane Retry-After."""

from __future__ import annotations

import json
import math

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.doors.error_bodies import (
    MAX_RETRY_AFTER,
    TRIED_HEADER,
    chat_rate_limit_error,
    rate_limit_error,
    retry_after_seconds,
)
from chaos_mode.zai.errors import Action, classify_error


@pytest.mark.parametrize(
    ("seconds", "header"),
    [
        (None, 1),
        (math.nan, 1),
        (-5.0, 1),
        (0.0, 1),
        (0.001, 1),
        (1.0, 1),
        (1.01, 2),
        (2.5, 3),
        (59.0, 59),
        (59.2, 60),
        (60.0, 60),
        (61.0, 60),
        (18_000.0, 60),
        (1e300, 60),
    ],
)
def test_retry_after_is_whole_seconds_rounded_up_between_1_and_60(seconds: float | None, header: int) -> None:
    assert retry_after_seconds(seconds) == header


def test_retry_after_of_an_endless_wait_is_the_maximum() -> None:
    assert retry_after_seconds(math.inf) == MAX_RETRY_AFTER
    assert retry_after_seconds(-math.inf) == 1


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_retry_after_is_always_in_range_and_never_shorter_than_asked(seconds: float) -> None:
    value = retry_after_seconds(seconds)
    assert isinstance(value, int)
    assert 1 <= value <= MAX_RETRY_AFTER
    assert value >= min(seconds, MAX_RETRY_AFTER)


def test_rate_limit_error_is_shaped_like_anthropic_and_zai() -> None:
    body, headers = rate_limit_error("no heavy model free", retry_after=4.2, tried=["glm-4.6", "glm-4.7"])
    payload = json.loads(body)
    assert set(payload) == {"type", "error", "request_id"}
    assert payload["type"] == "error"
    assert payload["error"] == {"type": "rate_limit_error", "message": "chaos-mode: no heavy model free"}
    assert payload["request_id"].startswith("chaos_")
    assert headers == {
        "content-type": "application/json",
        "retry-after": "5",
        TRIED_HEADER: "glm-4.6, glm-4.7",
    }


def test_no_tried_header_when_nothing_was_tried() -> None:
    body, headers = rate_limit_error("queue timeout", retry_after=None, tried=[])
    assert TRIED_HEADER not in headers
    assert headers["retry-after"] == "1"
    other, _ = rate_limit_error("queue timeout", retry_after=None, tried=[])
    assert json.loads(body)["request_id"] != json.loads(other)["request_id"]


def test_the_openai_doors_429_is_shaped_like_openais_with_the_same_headers() -> None:
    body, headers = chat_rate_limit_error("no heavy model free", retry_after=4.2, tried=["glm-4.6"])
    assert json.loads(body) == {
        "error": {
            "message": "chaos-mode: no heavy model free",
            "type": "rate_limit_error",
            "code": "rate_limit_exceeded",
        }
    }
    assert headers == rate_limit_error("x", retry_after=4.2, tried=["glm-4.6"])[1]
    # Our own 429 is never read as one of z.ai's business codes (by a proxy in front of this one, say).
    error = classify_error(429, body, now=0.0)
    assert error is not None and error.code is None and error.action is Action.COOLDOWN


async def test_the_openai_sdk_reads_our_429_as_its_rate_limit_error() -> None:
    body, headers = chat_rate_limit_error("queue timeout", retry_after=3, tried=[])

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, content=body, headers=headers)

    transport = httpx.MockTransport(answer)
    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/api/paas/v4",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=transport),
    )
    with pytest.raises(openai.RateLimitError) as raised:
        await client.chat.completions.create(model="glm-4.7", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.code == "rate_limit_exceeded"
    assert raised.value.response.headers["retry-after"] == "3"
    assert "chaos-mode: queue timeout" in raised.value.message
