"""An Anthropic-Messages request body: parse it, find its sticky key, rewrite exactly its `model` value.

The promise: a valid request has its top-level `model` value changed and nothing else; anything else
raises `BadRequest` and passes byte for byte, with no slot. The client's JSON is never serialised again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from json import decoder
from json.encoder import encode_basestring_ascii
from typing import Any, ClassVar, Final, Literal, NoReturn, cast, get_args

from chaos_mode.doors.door import Door

STICKY_HEADER = "x-claude-code-session-id"
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, and only it
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a `\uD800`-`\uDFFF` escape, paired or not
# json's string scanner (C): (text, index after the opening quote) -> (the string, index after it).
_scan_string = cast(Callable[[str, int], tuple[str, int]], decoder.scanstring)  # type: ignore[attr-defined]


BadKind = Literal[
    "too-large",
    "bad-encoding",
    "not-utf8",
    "not-json",
    "too-deep",
    "not-object",
    "no-model",
    "duplicate-model",
    "escaped-model-key",
    "lone-surrogate",
    "key-as-model",
]
BAD_KINDS: Final[tuple[BadKind, ...]] = get_args(BadKind)  # a bounded metric label, every one listed


class BadRequest(ValueError):
    """A body the addon will not route; the message says why (and never holds the body itself)."""

    def __init__(self, kind: BadKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind: BadKind = kind


@dataclass(frozen=True, slots=True)
class MessageRequest:
    door: ClassVar[Door] = "anthropic"  # the door it came through (`chat_request.ChatRequest`: openai)

    body: dict[str, Any]
    model: str
    raw: bytes  # the decoded body as it came
    model_span: tuple[int, int]  # byte offsets in `raw` of the top-level model's JSON string, quotes included

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def output_budget(self) -> object:
        """What the client says bounds the output (`max_tokens`), as it came: the cost guard reads it."""
        return self.body.get("max_tokens")

    @property
    def images(self) -> bool:
        """Whether a message carries an image (a content block of type `image`, also inside a tool's
        result; the OpenAI door's `image_url` parts): it goes to a model that reads them."""
        messages = self.body.get("messages")
        return isinstance(messages, list) and any(
            _has_image(message.get("content")) for message in messages if isinstance(message, dict)
        )

    def sticky_key(self, session_id: str | None) -> str | None:
        """The conversation key: Claude Code's session header, else a hash of the system prompt
        and first message (None when those are nested too deeply to serialise)."""
        if session_id:
            return "session:" + session_id.strip()
        try:
            canonical = json.dumps(self.conversation_head(), sort_keys=True, default=str)
        except RecursionError:
            return None
        digest = hashlib.sha256(canonical.encode(), usedforsecurity=False)
        return "prompt:" + digest.hexdigest()[:32]

    def conversation_head(self) -> object:
        """What tells a conversation apart when no session header does: the system prompt and the first
        message."""
        messages = self.body.get("messages")
        return [self.body.get("system"), messages[0] if isinstance(messages, list) and messages else None]

    def with_model(self, model: str) -> bytes:
        """The body with the bytes of the top-level `model` value replaced, and no other byte changed."""
        start, end = self.model_span
        return self.raw[:start] + _json_string(model) + self.raw[end:]


# Blocks only a vision model reads: Anthropic's image; z.ai's GLM-V parts at the OpenAI door.
_IMAGE_TYPES: Final = frozenset({"image", "image_url", "video_url", "file_url"})


def _has_image(content: object, depth: int = 0) -> bool:
    """A content list holding an image block, looked for in blocks and in tool results' content."""
    if not isinstance(content, list) or depth > 1:
        return False
    for block in content:
        if isinstance(block, dict):
            kind = block.get("type")
            if isinstance(kind, str) and kind in _IMAGE_TYPES:  # a list or an object is no type: unhashable
                return True
            if _has_image(block.get("content"), depth + 1):
                return True
    return False


def _json_string(text: str) -> bytes:
    """`json.dumps(text).encode()`, without the general encoder's set-up (it runs twice per request)."""
    return encode_basestring_ascii(text).encode()


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


# NaN and Infinity are Python's extensions, not JSON: a body holding one is not routed.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def parse_message(content: bytes, *, limit: int) -> MessageRequest:
    """Parse a decoded request body; `BadRequest` when it cannot be routed exactly."""
    if len(content) > limit:
        raise BadRequest("too-large", f"body of {len(content)} bytes is over the {limit}-byte limit")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("not-utf8", "body is not UTF-8 text") from None
    try:
        body, models = _top_level(text)
        if not isinstance(body, dict):
            raise BadRequest("not-object", "body is not a JSON object")
        if len(models) > 1:
            raise BadRequest("duplicate-model", f"body has {len(models)} top-level model keys")
        if models and models[0][0] != '"model"':
            raise BadRequest("escaped-model-key", "body spells its top-level model key with escapes")
        model = body.get("model")
        if not isinstance(model, str) or not model.strip():
            raise BadRequest("no-model", "body has no model name")
        if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(body):
            raise BadRequest("lone-surrogate", "body holds a lone UTF-16 surrogate escape (not Unicode)")
    except RecursionError:
        raise BadRequest("too-deep", "body is nested too deeply to parse") from None
    except BadRequest:
        raise
    except ValueError as exc:
        raise BadRequest("not-json", f"body is not JSON ({type(exc).__name__})") from None
    _, start, end = models[0]
    if not content.isascii():  # offsets in the text are not offsets in the bytes
        start, end = len(text[:start].encode()), len(text[:end].encode())
    return MessageRequest(body=body, model=model, raw=content, model_span=(start, end))


def _top_level(text: str) -> tuple[Any, list[tuple[str, int, int]]]:
    """The parsed body (as `json.loads`) and each top-level key that decodes to `model`: its spelling and
    its value's span in `text`. The members' values are parsed by json's own scanner; only the top level
    is walked here, so the cost is that of `json.loads` plus a few steps per top-level key."""
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return _DECODER.decode(text), []  # not an object (or not JSON: ValueError)
    body: dict[str, Any] = {}
    models: list[tuple[str, int, int]] = []
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        at += 1
    else:
        while True:
            if not text.startswith('"', at):
                raise ValueError("expected a key")
            key, after = _scan_string(text, at + 1)
            colon = _skip(text, after)
            if not text.startswith(":", colon):
                raise ValueError("expected ':'")
            start = _skip(text, colon + 1)
            value, end = _DECODER.raw_decode(text, start)
            body[key] = value  # a repeated key: the last value wins, as in json.loads
            if key == "model":
                models.append((text[at:after], start, end))
            at = _skip(text, end)
            if text.startswith(",", at):
                at = _skip(text, at + 1)
            elif text.startswith("}", at):
                at += 1
                break
            else:
                raise ValueError("expected ',' or '}'")
    if _skip(text, at) != len(text):
        raise ValueError("extra data after the object")
    return body, models


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _has_lone_surrogate(body: dict[str, Any]) -> bool:
    """Whether a string (or key) of `body` holds an unpaired surrogate (json decodes paired ones into one
    character); only called when the text has a surrogate escape at all."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
