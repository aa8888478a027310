"""Observer of a streamed OpenAI chat-completions answer: usage, the served model, the end, errors.

The stream is `data: {chunk}` events, the last one before `data: [DONE]` carrying `usage` when the client
asked for `stream_options.include_usage`. It ends at `[DONE]` (or with the body); z.ai reports an error
in the middle of a stream as a finish reason. It never changes or delays a byte.
"""

from __future__ import annotations

import re
from typing import Any

from chaos_mode.doors.messages_stream import SseEvents

_DONE = b"[DONE]"
# An event worth decoding: usage, an error, the end, a finish reason (a string: `null` is the rule).
_INTERESTING = re.compile(rb'"usage"|"error"|\[DONE\]|"finish_reason"\s*:\s*"')


class ChatStreamObserver(SseEvents):
    """Feed it every chunk; read `input_tokens`, `cached_tokens`, `output_tokens`, `model`,
    `finish_reason`, `stopped` (`[DONE]` came), `error`."""

    __slots__ = ("finish_reason",)

    def __init__(self) -> None:
        super().__init__()
        self.finish_reason: str | None = None

    def _interesting(self, data: bytes | bytearray, start: int, end: int) -> bool:
        # The first event names the model; the usage chunk is the last one, so its key is near its end.
        return self.events == 1 or _INTERESTING.search(data, start, end) is not None

    def _data(self, data: bytes) -> bool:
        if data.strip() == _DONE:
            self.stopped = True
            return True
        return super()._data(data)

    def observe(self, payload: dict[str, Any]) -> bool:
        """Record one decoded chunk (also used for a whole, non-streamed answer)."""
        error = payload.get("error")
        if error:  # some relays add `"error": null` to every chunk
            return self._error(error)
        model = payload.get("model")
        if isinstance(model, str):
            self.model = model
        self._usage(payload.get("usage"))
        choices = payload.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                reason = choice.get("finish_reason") if isinstance(choice, dict) else None
                if isinstance(reason, str):
                    self.finish_reason = reason
        if payload.get("object") == "chat.completion":  # a whole answer
            self.stopped = True
        return True
