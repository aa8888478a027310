"""z.ai's OpenAI-compatible door of the simulator: chat completions on the same account (the same per-model
and account counts as the Anthropic door), streamed as `chat.completion.chunk` events ending in
`data: [DONE]` (with a usage chunk first when `stream_options.include_usage` asks), or whole, and errors
in z.ai's OpenAI shape `{"error": {"code", "message"}}`; and the models endpoint, the catalog's listed
names in OpenAI's list shape."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

from chaos_mode_tools.sim.handlers import MessagesHandler, SimHandler, token_text

if TYPE_CHECKING:
    from chaos_mode_tools.sim.server import SimServer  # the handlers' owner, named for the type checker only

# z.ai's general API and its Coding Plan's, as tornado routes them.
CHAT_PATHS: Final = r"/api(?:/coding)?/paas/v4/chat/completions/?"
MODELS_PATHS: Final = r"/api(?:/coding)?/paas/v4/models/?"
# The models endpoint's 401s (z.ai's codes 1001: no key, 1002: a key it does not take).
NO_KEY: Final = {"error": {"code": "1001", "message": "Authentication parameter not received in Header"}}
BAD_KEY: Final = {"error": {"code": "1002", "message": "Invalid Authentication Token"}}
DONE: Final = b"data: [DONE]\n\n"


def chat_error_body(message: str, *, code: str | None = None, type_: str | None = None) -> dict[str, Any]:
    """`{"error": {"code": …, "message": …}}` as z.ai's OpenAI door sends it (no `[code]` prefix)."""
    error: dict[str, Any] = {}
    if code is not None:
        error["code"] = code
        message = _unwrapped(message, code)
    if type_ is not None:
        error["type"] = type_
    error["message"] = message
    return {"error": error}


def _unwrapped(message: str, code: str) -> str:
    """`[1302][High concurrency …]` (the Anthropic door's style) -> `High concurrency …`."""
    prefix = f"[{code}]["
    if message.startswith(prefix) and message.endswith("]"):
        return message[len(prefix) : -1]
    return message


def chunk_event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    if cached_tokens:
        counts["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return counts


class ChatCompletionsHandler(MessagesHandler):
    """`POST /api/paas/v4/chat/completions` (and the Coding Plan's): the Anthropic door's admission, limits
    and faults, answers in OpenAI's format."""

    FILTERED_STATUS = 429  # z.ai's content filter answers 1305 with a 429 at this door

    def initialize(self, sim: SimServer) -> None:
        super().initialize(sim)
        self.completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def error_document(
        self, status: int, message: str, code: str | None, request_id: str, error_type: str | None
    ) -> dict[str, Any]:
        return chat_error_body(message, code=code, type_=error_type)

    def _chunk(self, model: str, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return chunk_event({**self._head(model, "chat.completion.chunk"), "choices": [choice]})

    def _head(self, model: str, kind: str) -> dict[str, Any]:
        return {"id": self.completion_id, "object": kind, "created": self.created, "model": model}

    def stream_opening(self, model: str, input_tokens: int) -> list[bytes]:
        return [self._chunk(model, {"role": "assistant", "content": ""})]

    def stream_token(self, model: str, index: int) -> bytes:
        return self._chunk(model, {"content": token_text(index)})

    def stream_closing(self, model: str, input_tokens: int, tokens: int) -> bytes:
        closing = self._chunk(model, {}, "stop")
        options = self.payload.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            last = {
                **self._head(model, "chat.completion.chunk"),
                "choices": [],
                "usage": usage(input_tokens, tokens, self.cached_tokens),
            }
            closing += chunk_event(last)
        return closing + DONE

    def whole_answer(self, model: str, input_tokens: int, tokens: int, text: str) -> dict[str, Any]:
        message = {"role": "assistant", "content": text}
        return {
            **self._head(model, "chat.completion"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage(input_tokens, tokens, self.cached_tokens),
        }


class ModelsHandler(SimHandler):
    """`GET /api/coding/paas/v4/models` (and the general API's): the catalog's listed names (`listed`, or
    the served models), `{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}`,
    with a key in `Authorization` (the quota's key when one is set; any key otherwise), else 401."""

    def get(self) -> None:
        sim = self.sim
        sim.model_list_reads += 1
        key, given = sim.settings.quota_key, self.request.headers.get("Authorization", "")
        if not given:
            self.send_json(401, NO_KEY)
            return
        if key is not None and given not in (key, f"Bearer {key}"):
            self.send_json(401, BAD_KEY)
            return
        names = sim.settings.listed if sim.settings.listed is not None else list(sim.settings.limits)
        data = [{"id": name, "object": "model", "created": sim.created, "owned_by": "z-ai"} for name in names]
        self.send_json(200, {"object": "list", "data": data})
