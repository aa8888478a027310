"""An Anthropic-Messages request body: parse it, find its sticky key, rewrite its `model`."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from .pool import RequestInfo

STICKY_HEADER = "x-claude-code-session-id"
_MODEL_KEY = b'"model"'
_MODEL_PAIR = re.compile(rb'"model"\s*:\s*("(?:[^"\\]|\\.)*")')  # a "model" key and its string value


class BadRequest(ValueError):
    """A body the addon will not route; the message says why (and never holds the body itself)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind  # a bounded label: too-large | not-json | not-object | no-model


@dataclass(frozen=True, slots=True)
class MessageRequest:
    body: dict[str, Any]
    model: str
    raw: bytes  # the decoded body as it came

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def info(self) -> RequestInfo:
        return RequestInfo.estimate(self.size, self.body.get("max_tokens"))

    def sticky_key(self, session_id: str | None) -> str:
        """The conversation key: Claude Code's session header, else a hash of the system prompt."""
        if session_id:
            return "session:" + session_id.strip()
        system = self.body.get("system")
        first = self.body.get("messages")
        first = first[0] if isinstance(first, list) and first else None
        digest = hashlib.sha256(
            json.dumps([system, first], sort_keys=True, default=str).encode(), usedforsecurity=False
        )
        return "prompt:" + digest.hexdigest()[:32]

    def with_model(self, model: str) -> bytes:
        """The body with only `model` changed.

        Where the original `"model": "<name>"` pair occurs exactly once in the text it must be the
        top-level one, and only those bytes are replaced: every other byte stays as the client sent it
        (and a large conversation is not serialized again). Otherwise the body is re-encoded, keys
        keeping their order.
        """
        raw = self.raw
        original = _json_string(self.model)
        if raw.count(_MODEL_KEY) == 1:  # the usual body: one "model" key, found without a regex scan
            pair = _MODEL_PAIR.match(raw, raw.find(_MODEL_KEY))
            pairs = [pair] if pair is not None and pair.group(1) == original else []
        else:
            pairs = [m for m in _MODEL_PAIR.finditer(raw) if m.group(1) == original]
        if len(pairs) == 1:
            start, end = pairs[0].span(1)
            return raw[:start] + _json_string(model) + raw[end:]
        text = json.dumps({**self.body, "model": model}, ensure_ascii=False, separators=(",", ":"))
        return text.encode()


def _json_string(text: str) -> bytes:
    """`json.dumps(text).encode()`, without the general encoder's set-up (it runs twice per request)."""
    return encode_basestring_ascii(text).encode()


def parse_message(content: bytes, *, limit: int) -> MessageRequest:
    """Parse a decoded request body; `BadRequest` when it cannot be routed."""
    if len(content) > limit:
        raise BadRequest("too-large", f"body of {len(content)} bytes is over the {limit}-byte limit")
    try:
        body = json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest("not-json", f"body is not JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict):
        raise BadRequest("not-object", "body is not a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BadRequest("no-model", "body has no model name")
    return MessageRequest(body=body, model=model, raw=content)
