"""Answers the addon makes itself (chaos_mode.replies): Anthropic-shaped 429s with a sane Retry-After."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.replies import MAX_RETRY_AFTER, TRIED_HEADER, rate_limit_error, retry_after_seconds


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
