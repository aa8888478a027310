"""The stream observers read the input tokens z.ai served from its prompt cache, at both doors."""

from __future__ import annotations

import json

from chaos_mode.doors.chat_stream import ChatStreamObserver
from chaos_mode.doors.messages_stream import SseObserver


def test_the_anthropic_stream_reads_cache_read_input_tokens() -> None:
    observer = SseObserver()
    usage = {"input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 1}
    start = {"type": "message_start", "message": {"model": "glm-4.7", "usage": usage}}
    observer.feed(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())
    assert (observer.input_tokens, observer.cached_tokens) == (100, 900)


def test_the_openai_stream_reads_prompt_tokens_details() -> None:
    observer = ChatStreamObserver()
    usage = {"prompt_tokens": 1000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 600}}
    chunk = {"id": "x", "model": "glm-4.7", "choices": [], "usage": usage}
    observer.feed(f"data: {json.dumps(chunk)}\n\n".encode())
    assert observer.cached_tokens == 600


def test_nothing_cached_or_junk_reads_zero() -> None:
    observer = ChatStreamObserver()
    chunk = {"id": "x", "choices": [], "usage": {"prompt_tokens": 10, "prompt_tokens_details": "junk"}}
    observer.feed(f"data: {json.dumps(chunk)}\n\n".encode())
    assert observer.cached_tokens == 0
