"""The SSE observer (chaos_mode.doors.messages_stream): usage, model, stop and errors from any reads."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos_mode.doors.messages_stream import SseObserver, answer_model, message_usage


def event(name: str, data: dict[str, Any], *, sep: str = "\n") -> bytes:
    return f"event: {name}{sep}data: {json.dumps(data, separators=(',', ':'))}{sep}{sep}".encode()


def stream(*, sep: str = "\n", model: str = "glm-4.6", tokens: int = 12) -> bytes:
    """A real Anthropic stream, shaped like z.ai's (and the simulator's)."""
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "usage": {"input_tokens": 2048, "output_tokens": 1, "cache_read_input_tokens": 0},
    }
    parts = [
        event("message_start", {"type": "message_start", "message": start}, sep=sep),
        event("content_block_start", {"type": "content_block_start", "index": 0}, sep=sep),
        event("ping", {"type": "ping"}, sep=sep),
    ]
    for i in range(tokens):
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f" w{i}"}}
        parts.append(event("content_block_delta", delta, sep=sep))
    parts += [
        event("content_block_stop", {"type": "content_block_stop", "index": 0}, sep=sep),
        event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 377}},
            sep=sep,
        ),
        event("message_stop", {"type": "message_stop"}, sep=sep),
    ]
    return b"".join(parts)


def observe(chunks: list[bytes]) -> SseObserver:
    observer = SseObserver()
    for chunk in chunks:
        observer.feed(chunk)
    observer.feed(b"")
    return observer


def summary(observer: SseObserver) -> tuple[Any, ...]:
    return (observer.input_tokens, observer.output_tokens, observer.model, observer.stopped, observer.events)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def test_a_whole_stream_gives_usage_model_and_stop() -> None:
    observer = observe([stream()])
    assert summary(observer) == (2048, 377, "glm-4.6", True, 12 + 6)
    assert observer.error is None


@given(st.lists(st.integers(min_value=0), max_size=60), st.sampled_from(["\n", "\r\n"]))
def test_any_split_into_network_reads_gives_the_same_result(cuts: list[int], sep: str) -> None:
    data = stream(sep=sep)
    assert summary(observe(split(data, cuts))) == summary(observe([data]))


def test_byte_by_byte_reads_give_the_same_result() -> None:
    data = stream()
    assert summary(observe([data[i : i + 1] for i in range(len(data))])) == (2048, 377, "glm-4.6", True, 18)


def test_crlf_separators_are_understood() -> None:
    observer = observe([stream(sep="\r\n")])
    assert summary(observer) == (2048, 377, "glm-4.6", True, 18)


def test_feed_says_when_something_worth_recording_changed() -> None:
    observer = SseObserver()
    assert observer.feed(b"") is False
    assert observer.feed(event("ping", {"type": "ping"})) is False
    delta = {"type": "content_block_delta", "delta": {"text": "message_stop error"}}
    assert observer.feed(event("content_block_delta", delta)) is False
    assert observer.feed(event("message_delta", {"type": "message_delta", "usage": {"output_tokens": 3}}))
    assert observer.feed(b"event: message_stop\ndata: {") is False  # not complete yet
    assert observer.feed(b'"type":"message_stop"}\n\n') is True
    assert observer.stopped


def test_an_oversize_event_is_skipped_without_losing_the_next_ones() -> None:
    huge = event(
        "message_delta", {"type": "message_delta", "usage": {"output_tokens": 999}, "pad": "x" * 1_500_000}
    )
    data = (
        event("message_start", {"type": "message_start", "message": {"model": "glm-4.7", "usage": {}}})
        + huge
        + event("message_delta", {"type": "message_delta", "usage": {"output_tokens": 7}})
        + event("message_stop", {"type": "message_stop"})
    )
    observer = SseObserver()
    for i in range(0, len(data), 65_536):
        observer.feed(data[i : i + 65_536])
        assert len(observer._buffer) <= (1 << 20) + 65_536  # bounded, whatever the event size
    assert observer.output_tokens == 7  # the 999 of the skipped event was never read
    assert observer.model == "glm-4.7"
    assert observer.stopped


def test_values_that_are_not_usage_are_ignored() -> None:
    observer = observe(
        [
            event(
                "message_delta",
                {"type": "message_delta", "usage": {"output_tokens": -5, "input_tokens": "9"}},
            ),
            event("message_delta", {"type": "message_delta", "usage": "lots"}),
            b"event: message_delta\ndata: [1, 2]\n\n",
            b"event: message_delta\ndata: {broken\n\n",
        ]
    )
    assert (observer.input_tokens, observer.output_tokens, observer.stopped) == (0, 0, False)
    assert observer.events == 4


def test_an_error_event_is_recorded() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    observer = observe([event("error", body)])
    assert observer.error == {"type": "overloaded_error", "message": "Overloaded"}
    assert not observer.stopped
    odd = observe([event("error", {"type": "error", "error": "boom"})])
    assert odd.error == {"message": "boom"}


def test_data_split_over_several_lines_is_joined() -> None:
    raw = b'event: message_delta\ndata: {"type":"message_delta",\ndata: "usage":{"output_tokens":12}}\n\n'
    assert observe([raw]).output_tokens == 12


def test_a_whole_message_body_is_observed_too() -> None:
    observer = SseObserver()
    message = {"type": "message", "model": "glm-4.5", "usage": {"input_tokens": 10, "output_tokens": 20}}
    assert observer.observe(message) is True
    assert summary(observer)[:4] == (10, 20, "glm-4.5", True)


@pytest.mark.parametrize("sep", ["\n", "\r\n"])
def test_an_oversize_event_cut_inside_its_separator_loses_nothing_after_it(sep: str) -> None:
    huge = event("content_block_delta", {"type": "content_block_delta", "pad": "x" * 1_200_000}, sep=sep)
    rest = event("message_delta", {"type": "message_delta", "usage": {"output_tokens": 7}}, sep=sep)
    rest += event("message_stop", {"type": "message_stop"}, sep=sep)
    cut = len(huge) - len(sep)  # the read ends after the first half of the separator
    observer = observe([huge[:cut], huge[cut:] + rest])
    assert (observer.output_tokens, observer.stopped) == (7, True)


def test_message_usage_reads_the_usage_of_a_whole_message() -> None:
    body = {
        "type": "message",
        "content": [{"type": "tool_use", "input": {"usage": {"input_tokens": 999}}}],
        "usage": {"input_tokens": 12, "output_tokens": 7},
    }
    assert message_usage(json.dumps(body, indent=2).encode()) == [12, 0, 7]


@pytest.mark.parametrize("content", [b"", b"not json", b'{"usage": 5}', b'{"usage": {"input_tokens": "x"}}'])
def test_message_usage_of_a_body_without_usable_usage(content: bytes) -> None:
    assert message_usage(content) in (None, [0, 0, 0])


NESTED = b"[" * 100_000 + b"]" * 100_000


def test_an_event_nested_too_deeply_is_skipped_and_the_stream_still_read() -> None:
    nested = b'event: message_delta\ndata: {"type":"message_delta","usage":' + NESTED + b"}\n\n"
    observer = observe([nested, b"event: error\ndata: " + NESTED + b"\n\n", stream()])
    assert summary(observer) == (2048, 377, "glm-4.6", True, 12 + 8)
    assert observer.error is None


def test_message_usage_of_a_usage_nested_too_deeply_is_none() -> None:
    assert message_usage(b'{"type":"message","usage":' + NESTED + b"}") is None


# -- the model that served --------------------------------------------------------------------------------


def test_the_served_model_of_a_whole_answer_is_its_top_level_model() -> None:
    text = [{"type": "text", "text": "hi"}]
    anthropic = {"id": "m", "type": "message", "model": "glm-5.3", "content": text}
    assert answer_model(json.dumps(anthropic).encode()) == "glm-5.3"
    # named after the content, and a "model" inside the content is not the answer's
    late = b'{"content": [{"model": "inner"}], "usage": {"input_tokens": 1}, "model" : "glm-5.3-flash"}'
    assert answer_model(late) == "glm-5.3-flash"
    assert answer_model(b'{"a\\"model": 1, "model": "x"}') == "x"


@pytest.mark.parametrize(
    "content",
    [b"", b"[]", b'{"model": 7}', b'{"model": null}', b'{"id": "x"}', b'{"id": ', b"not json", b'{"a" 1}'],
)
def test_an_answer_naming_no_readable_model_gives_none(content: bytes) -> None:
    assert answer_model(content) is None


def test_a_deeply_nested_answer_gives_none_not_a_recursion_error() -> None:
    assert answer_model(b'{"content": ' + b"[" * 100_000 + b"]" * 100_000 + b', "model": "x"}') is None


def test_the_stream_names_its_served_model_from_message_start() -> None:
    observer = SseObserver()
    start = {"type": "message_start", "message": {"model": "glm-5.3", "usage": {"input_tokens": 3}}}
    observer.feed(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())
    assert observer.model == "glm-5.3"
