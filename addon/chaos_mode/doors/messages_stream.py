"""Observers of streamed SSE answers: usage, the served model, the end, errors. The Anthropic one here;
the OpenAI one (chat completions) in `chat_stream`.

It sees network reads (not aligned with events) and never changes or delays a byte.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from chaos_mode.zai import json_body

_USAGE_KEY = b'"usage"'
_USAGE_VALUE = re.compile(rb'"usage"\s*:\s*')
_INTERESTING = re.compile(rb"message_(?:start|delta|stop)|error")  # in an event's first 64 bytes
_MAX_EVENT = 1 << 20  # an event larger than this is skipped, not buffered without bound


class StreamObserver(Protocol):
    """What the adapter reads of a streamed answer, whichever door it came through."""

    input_tokens: int  # fresh (not cached) input
    cached_tokens: int  # input read from z.ai's prompt cache
    output_tokens: int
    model: str | None  # the model that served, as the answer names it
    stopped: bool

    def feed(self, chunk: bytes) -> bool: ...


class SseEvents:
    """Splits network reads into SSE events and hands the interesting ones to `_data`; a subclass says
    which are interesting (`_interesting`, told from the raw bytes) and reads them (`observe`)."""

    __slots__ = (
        "_buffer",
        "_skipping",
        "cached_tokens",
        "error",
        "events",
        "input_tokens",
        "model",
        "output_tokens",
        "stopped",
    )

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skipping = False
        self.input_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0
        self.model: str | None = None
        self.stopped = False
        self.error: dict[str, Any] | None = None
        self.events = 0

    def feed(self, chunk: bytes) -> bool:
        """Take one network read; True when something worth recording changed."""
        if not chunk:
            return False
        buffer = self._buffer
        if buffer:  # the rest of an event read before
            buffer += chunk
            data: bytes | bytearray = buffer
        else:  # the usual read: whole events, read where they are (never copied)
            data = chunk
        changed = False
        at = 0  # where the next event starts; what is before it is dropped once, at the end
        size = len(data)
        # else no CRLF separator to look for (most streams have none); `find`: `in` tries the bytes as a
        # number first, and pays for the exception
        cr = data.find(b"\r") != -1
        while at < size:  # a read that ends with an event (the usual one) has no search after it
            end = data.find(b"\n\n", at)
            sep = 2
            crlf = data.find(b"\r\n\r\n", at, size if end == -1 else end + 3) if cr else -1
            if crlf != -1:  # it starts before `end`
                end, sep = crlf, 4
            if end == -1:
                break
            if self._skipping:
                self._skipping = False
            else:
                self.events += 1
                # Content deltas and pings, the bulk, are told by their bytes and never copied.
                if self._interesting(data, at, end):
                    changed |= self._event(data[at:end])
            at = end + sep
        if data is chunk:
            if at < size:
                buffer += chunk[at:] if at else chunk
        elif at:
            del buffer[:at]
        if buffer and len(buffer) > _MAX_EVENT:
            del buffer[:-3]  # the tail may be the first half of the separator
            self._skipping = True
        return changed

    def _interesting(self, data: bytes | bytearray, start: int, end: int) -> bool:
        raise NotImplementedError

    def _event(self, raw: bytes | bytearray) -> bool:
        data = b"".join([line[5:].lstrip() for line in raw.splitlines() if line.startswith(b"data:")])
        return self._data(data)

    def _data(self, data: bytes) -> bool:
        try:
            payload = json_body.loads(data)
        except ValueError:  # not JSON, or nested too deeply
            return False
        if not isinstance(payload, dict):
            return False
        return self.observe(payload)

    def observe(self, payload: dict[str, Any]) -> bool:
        raise NotImplementedError

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        tokens_in, cached, tokens_out = usage_counts(usage)
        self.input_tokens = max(self.input_tokens, tokens_in)
        self.cached_tokens = max(self.cached_tokens, cached)
        self.output_tokens = max(self.output_tokens, tokens_out)

    def _error(self, error: object) -> bool:
        self.error = error if isinstance(error, dict) else {"message": str(error)}
        return True


class SseObserver(SseEvents):
    """An Anthropic stream: feed it every chunk; read `input_tokens`, `cached_tokens`, `output_tokens`,
    `model`, `stopped`, `error`."""

    __slots__ = ()

    def _interesting(self, data: bytes | bytearray, start: int, end: int) -> bool:
        stop = start + 64 if start + 64 < end else end
        if data.find(b"message_", start, stop) == -1 and data.find(b"error", start, stop) == -1:
            return False  # content deltas and pings: two finds, cheaper than the pattern's search
        return _INTERESTING.search(data, start, stop) is not None

    def observe(self, payload: dict[str, Any]) -> bool:
        """Record one decoded event (also used for a non-streamed message body)."""
        kind = payload.get("type")
        if kind == "message_start":
            message = payload.get("message")
            if isinstance(message, dict):
                self._message(message)
            return True
        if kind == "message_delta":
            self._usage(payload.get("usage"))
            return True
        if kind == "message_stop":
            self.stopped = True
            return True
        if kind == "error":
            return self._error(payload.get("error"))
        if kind == "message":  # a whole, non-streamed answer
            self._message(payload)
            self.stopped = True
            return True
        return False

    def _message(self, message: dict[str, Any]) -> None:
        model = message.get("model")
        if isinstance(model, str):
            self.model = model
        self._usage(message.get("usage"))


def message_usage(content: bytes) -> list[int] | None:
    """[input, cached input, output] tokens of a whole (non-streamed) answer of either door, else None.

    The answer may be long: only its last `"usage"` object is decoded, not the whole text.
    """
    at = content.rfind(_USAGE_KEY)
    match = _USAGE_VALUE.match(content, at) if at >= 0 else None
    if match is None:
        return None
    try:
        usage, _ = json_body.raw_decode(content[match.end() :].decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(usage, dict):
        return None
    return usage_counts(usage)


_SPACE = re.compile(r"[ \t\n\r]*")
_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"[ \t\n\r]*:[ \t\n\r]*')


def answer_model(content: bytes) -> str | None:
    """The top-level `model` of a whole answer of either door (the model that served it), else None.

    Only the top level is walked, member by member: both doors name the model before the content, so the
    content is seldom parsed."""
    text = content.decode("utf-8", "replace")
    at = _past_space(text, 0)
    if not text.startswith("{", at):
        return None
    at += 1
    try:
        while (key := _KEY.match(text, _past_space(text, at))) is not None:
            value, at = json_body.raw_decode(text, key.end())
            if key.group(1) == "model":
                return value if isinstance(value, str) else None
            at = _past_space(text, at)
            if not text.startswith(",", at):
                return None
            at += 1
    except ValueError:
        return None
    return None


def _past_space(text: str, at: int) -> int:
    space = _SPACE.match(text, at)
    return space.end() if space is not None else at


def usage_counts(usage: dict[str, Any]) -> list[int]:
    """[fresh input, cached input, output] tokens of a usage object: Anthropic's names (`input_tokens` is
    the fresh input, `cache_read_input_tokens` the cached), else OpenAI's (`prompt_tokens` holds the cached
    `prompt_tokens_details.cached_tokens`; `completion_tokens`)."""
    if "input_tokens" in usage or "output_tokens" in usage:
        fresh = _count(usage.get("input_tokens"))
        cached = _count(usage.get("cache_read_input_tokens"))
        return [fresh, cached, _count(usage.get("output_tokens"))]
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = _count(usage.get("prompt_tokens"))
    return [max(prompt - cached, 0), min(cached, prompt), _count(usage.get("completion_tokens"))]


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
