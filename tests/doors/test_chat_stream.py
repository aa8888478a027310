"""The OpenAI stream observer (chaos_mode.doors.chat_stream) and usage of whole OpenAI answers."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy import http

from chaos_mode.doors.chat_stream import ChatStreamObserver
from chaos_mode.doors.formats import FORMATS
from chaos_mode.doors.messages_stream import message_usage
from chaos_mode.mitm.flow_bodies import usage_of

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "glm-4.6"}


def data(chunk: dict[str, Any] | str, *, sep: str = "\n") -> bytes:
    text = chunk if isinstance(chunk, str) else json.dumps(chunk, separators=(",", ":"))
    return f"data: {text}{sep}{sep}".encode()


def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def stream(*, usage: bool = True, done: bool = True, tokens: int = 12, sep: str = "\n") -> bytes:
    """A chat-completions stream as z.ai's OpenAI door (and the simulator) sends it."""
    parts = [data(choice({"role": "assistant", "content": ""}), sep=sep)]
    parts += [data(choice({"content": f" w{i}"}), sep=sep) for i in range(tokens)]
    parts.append(data(choice({}, "stop"), sep=sep))
    if usage:
        counts = {"prompt_tokens": 2048, "completion_tokens": 377, "total_tokens": 2425}
        parts.append(data({**HEAD, "choices": [], "usage": counts}, sep=sep))
    if done:
        parts.append(data("[DONE]", sep=sep))
    return b"".join(parts)


def observe(chunks: list[bytes]) -> ChatStreamObserver:
    observer = ChatStreamObserver()
    for chunk in chunks:
        observer.feed(chunk)
    observer.feed(b"")
    return observer


def summary(o: ChatStreamObserver) -> tuple[Any, ...]:
    return (o.input_tokens, o.output_tokens, o.model, o.finish_reason, o.stopped, o.error)


def test_a_whole_stream_gives_usage_model_finish_and_done() -> None:
    assert summary(observe([stream()])) == (2048, 377, "glm-4.6", "stop", True, None)


def test_without_include_usage_there_are_no_tokens_but_the_end_is_seen() -> None:
    assert summary(observe([stream(usage=False)])) == (0, 0, "glm-4.6", "stop", True, None)


def test_a_stream_cut_before_done_is_not_stopped() -> None:
    observer = observe([stream(done=False)])
    assert (observer.output_tokens, observer.stopped) == (377, False)


@given(st.lists(st.integers(0, 3000), max_size=6), st.sampled_from(["\n", "\r\n"]))
def test_any_split_into_network_reads_gives_the_same_result(cuts: list[int], sep: str) -> None:
    raw = stream(sep=sep)
    bounds = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    chunks = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    assert summary(observe(chunks)) == (2048, 377, "glm-4.6", "stop", True, None)


def test_feed_says_when_something_worth_recording_changed() -> None:
    observer = ChatStreamObserver()
    assert observer.feed(data(choice({"role": "assistant"})))  # the first chunk names the model
    assert not observer.feed(data(choice({"content": "x"})))  # content: nothing to record
    assert observer.feed(data(choice({}, "length")))
    assert observer.finish_reason == "length"
    assert observer.feed(data("[DONE]"))


def test_a_chunk_whose_error_is_null_is_read_as_any_other() -> None:
    """Some OpenAI-compatible relays add `"error": null` to every chunk: its usage and model still count."""
    last = {
        **choice({}, finish="stop"),
        "usage": {"prompt_tokens": 100, "completion_tokens": 22},
        "error": None,
    }
    observer = observe(
        [data({**choice({"role": "assistant"}), "error": None}), data(last), b"data: [DONE]\n\n"]
    )
    assert summary(observer) == (100, 22, "glm-4.6", "stop", True, None)


def test_an_error_chunk_is_recorded() -> None:
    error = {"code": "1305", "message": "The service may be temporarily overloaded"}
    observer = observe([data(choice({"role": "assistant"})), data({"error": error})])
    assert observer.error == error
    assert not observer.stopped


@pytest.mark.parametrize(
    "junk",
    [b"data: [DONE\n\n", b"data: {\n\n", b"data: 5\n\n", b'data: {"usage": "x"}\n\n', b": comment\n\n"],
)
def test_odd_events_are_ignored(junk: bytes) -> None:
    observer = observe([junk, stream()])
    assert summary(observer) == (2048, 377, "glm-4.6", "stop", True, None)


def test_usage_of_a_whole_chat_answer() -> None:
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "glm-4.5",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    content = json.dumps(answer).encode()
    assert message_usage(content) == [11, 0, 7]
    observer = ChatStreamObserver()
    observer.observe(answer)
    assert (observer.input_tokens, observer.output_tokens, observer.stopped) == (11, 7, True)
    response = http.Response.make(200, content, {"content-type": "application/json"})
    assert usage_of(response, FORMATS["openai"].observer) == ([11, 0, 7], "glm-4.5")


def test_usage_of_a_chat_stream_read_whole() -> None:
    response = http.Response.make(200, stream(), {"content-type": "text/event-stream"})
    assert usage_of(response, FORMATS["openai"].observer) == ([2048, 0, 377], "glm-4.6")
    assert usage_of(response) == ([0, 0, 0], None)  # the Anthropic observer sees no Anthropic events in it


def test_a_chunk_nested_too_deeply_is_skipped_and_the_stream_still_read() -> None:
    nested = b"[" * 100_000 + b"]" * 100_000
    observer = observe([b'data: {"error":' + nested + b"}\n\n", stream()])
    assert summary(observer) == (2048, 377, "glm-4.6", "stop", True, None)
