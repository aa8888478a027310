"""Cached input read from both doors' usage, streamed and whole, and an answer's credits from it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy import http

from chaos_mode.config.schema import CreditWeights, default_config
from chaos_mode.doors.door import Door
from chaos_mode.doors.formats import FORMATS
from chaos_mode.doors.messages_stream import message_usage, usage_counts
from chaos_mode.mitm.flow_bodies import usage_of

GLM_5_3 = CreditWeights(input=6.9, cached_input=1.7, output=24.0)
ANTHROPIC_USAGE = {"input_tokens": 300, "cache_read_input_tokens": 1700, "output_tokens": 50}
OPENAI_USAGE = {
    "prompt_tokens": 2000,
    "completion_tokens": 50,
    "total_tokens": 2050,
    "prompt_tokens_details": {"cached_tokens": 1700},
}


def sse(event: str, payload: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(payload)}\n\n".encode()


def anthropic_stream() -> bytes:
    start = {"input_tokens": 300, "cache_read_input_tokens": 1700, "output_tokens": 1}
    message = {"type": "message", "model": "glm-5.3", "usage": start}
    return (
        sse("message_start", {"type": "message_start", "message": message})
        + sse("content_block_delta", {"type": "content_block_delta", "delta": {"text": "hi"}})
        + sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 50}})
        + sse("message_stop", {"type": "message_stop"})
    )


def openai_stream() -> bytes:
    head = {"object": "chat.completion.chunk", "model": "glm-5.3"}
    chunks = [
        {**head, "choices": [{"delta": {"content": "hi"}}]},
        {**head, "choices": [], "usage": OPENAI_USAGE},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def whole(door: Door) -> bytes:
    if door == "anthropic":
        return json.dumps({"type": "message", "model": "glm-5.3", "usage": ANTHROPIC_USAGE}).encode()
    return json.dumps({"object": "chat.completion", "model": "glm-5.3", "usage": OPENAI_USAGE}).encode()


@pytest.mark.parametrize("door", ["anthropic", "openai"])
def test_both_doors_give_fresh_cached_and_output_tokens_streamed_and_whole(door: Door) -> None:
    """Anthropic's `input_tokens` is the fresh input; OpenAI's `prompt_tokens` holds the cached."""
    observer = FORMATS[door].observer()
    observer.feed(anthropic_stream() if door == "anthropic" else openai_stream())
    assert (observer.input_tokens, observer.cached_tokens, observer.output_tokens) == (300, 1700, 50)
    assert message_usage(whole(door)) == [300, 1700, 50]
    for content, kind in ((whole(door), "application/json"), (observer_bytes(door), "text/event-stream")):
        response = http.Response.make(200, content, {"content-type": kind})
        assert usage_of(response, FORMATS[door].observer) == ([300, 1700, 50], "glm-5.3")


def observer_bytes(door: Door) -> bytes:
    return anthropic_stream() if door == "anthropic" else openai_stream()


def test_an_answer_costs_its_tokens_by_the_served_models_weights() -> None:
    # 0.3 x 6.9 + 1.7 x 1.7 + 0.05 x 24: a cached token costs about a quarter of a fresh one
    assert GLM_5_3.cost(300, 1700, 50) == pytest.approx(2.07 + 2.89 + 1.2)
    weights, assumed = default_config().credit_weights("glm-5.3")
    assert weights == GLM_5_3 and not assumed


def test_a_model_without_weights_counts_with_the_catalogs_heaviest_and_says_so() -> None:
    config = default_config()
    weights, assumed = config.credit_weights("glm-5.3-flash")
    assert weights == GLM_5_3 and assumed  # the built-in catalog weighs glm-5.3 alone
    assert config.credit_weights("a-model-nobody-listed") == (GLM_5_3, True)


@given(
    prompt=st.integers(min_value=0, max_value=10**7),
    cached=st.one_of(st.none(), st.integers(min_value=-5, max_value=10**7), st.text(max_size=3)),
    output=st.one_of(st.none(), st.integers(min_value=0, max_value=10**7)),
)
def test_openai_usage_never_counts_a_token_twice_nor_below_zero(
    prompt: int, cached: object, output: object
) -> None:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": output}
    usage["prompt_tokens_details"] = {"cached_tokens": cached}
    fresh, read, out = usage_counts(usage)
    assert fresh >= 0 and read >= 0 and out >= 0
    assert fresh + read == prompt
