"""The simulator's HTTP handlers: z.ai's Anthropic door (concurrency limits, hard or soft, requests refused or
held inside z.ai over them, the content filter, z.ai error bodies, SSE streams), the quota endpoint, and the
`/sim/*` control endpoints; `openai_door.py` extends them, `server.py` serves them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import gzip
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import tornado.web
from tornado.iostream import StreamClosedError

from chaos_mode_tools.sim.errors import (
    MSG_1113,
    MSG_1211,
    default_message,
    error_body,
    new_request_id,
    spent_message,
)
from chaos_mode_tools.sim.limits import LimitChange
from chaos_mode_tools.sim.prompt_cache import SESSION_HEADER, PromptCache, conversation
from chaos_mode_tools.sim.quota import ECHO_SAYS, NESTED_DEPTH, QUOTA_ANSWERS, UNAUTHORIZED
from chaos_mode_tools.sim.stalls import Waiter, resolve
from chaos_mode_tools.sim.state import BROKEN_ANSWERS, CUT, HANG, Admission, Fault, SimState

if TYPE_CHECKING:
    from chaos_mode_tools.sim.server import SimServer  # the handlers' owner, named for the type checker only


_WORDS = (
    "Chaos", "mode", "spreads", "every", "request", "over", "the", "whole", "catalog", "so", "no",
    "single", "model", "runs", "out", "of", "slots", "while", "others", "idle", "quietly",
)  # fmt: skip

DROP = "drop"  # a fault "code" that closes the connection instead of answering
OVERRIDE_HEADERS = ("x-sim-latency-ms", "x-sim-token-interval-ms", "x-sim-output-tokens")


def token_text(index: int) -> str:
    """The text of output token ``index`` (0-based): one word, space-separated from the previous one."""
    word = _WORDS[index % len(_WORDS)]
    return word if index == 0 else " " + word


SECRET_HEADERS = frozenset({"authorization", "x-api-key"})


class SimHandler(tornado.web.RequestHandler):
    """JSON in, JSON out, z.ai-shaped errors."""

    sim: SimServer

    def initialize(self, sim: SimServer) -> None:
        self.sim = sim

    def set_default_headers(self) -> None:
        self.set_header("Server", "chaos-sim")
        self.clear_header("Content-Type")

    def compute_etag(self) -> str | None:
        return None

    def send_json(self, status: int, document: Any) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        body = json.dumps(document).encode()
        coding = self.sim.settings.error_encoding
        if status >= 400 and coding is not None:
            self.set_header("Content-Encoding", coding)
            body = _compress(body, coding)
        self.finish(body)

    def send_error_body(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        error_type: str | None = None,
        request_id: str | None = None,
    ) -> None:
        request_id = request_id or new_request_id()
        if retry_after is not None:
            self.set_header("Retry-After", f"{retry_after:g}")
        self.set_header("request-id", request_id)
        self.send_json(status, self.error_document(status, message, code, request_id, error_type))

    def error_document(
        self, status: int, message: str, code: str | None, request_id: str, error_type: str | None
    ) -> dict[str, Any]:
        """An error body in z.ai's Anthropic shape (the OpenAI door's handler has its own)."""
        return error_body(status, message, code=code, request_id=request_id, type_=error_type)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.clear_header("Retry-After")
        self.send_error_body(status_code, self._reason)

    def read_json(self) -> Any:
        """The request body as JSON; ValueError if it is not."""
        try:
            return json.loads(self.request.body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError("Request body is not valid JSON") from None


def _compress(body: bytes, coding: str) -> bytes:
    """`body` in `coding`: gzip, br or zstd (`SimSettings.error_encoding`)."""
    if coding == "gzip":
        return gzip.compress(body)
    if coding == "br":
        import brotli  # type: ignore[import-untyped]  # a dependency (mitmproxy's too)

        return bytes(brotli.compress(body))
    from chaos_mode.zai.zstd import zstd

    return bytes(zstd.compress(body))


class NotFoundHandler(SimHandler):
    def prepare(self) -> None:
        self.send_error_body(404, f"Not found: {self.request.path}")


class StatsHandler(SimHandler):
    def get(self) -> None:
        self.send_json(200, self.sim.stats())


class ResetHandler(SimHandler):
    def post(self) -> None:
        self.sim.reset()
        self.send_json(200, {"ok": True})


class LimitsHandler(SimHandler):
    """``GET`` the limits in force and their changes; ``POST`` a change (see ``LimitChange``)."""

    def get(self) -> None:
        self.send_json(200, self._document())

    def post(self) -> None:
        try:
            self.sim.set_limits(LimitChange.from_json(self.read_json()))
        except ValueError as exc:
            self.send_error_body(400, str(exc))
            return
        self.send_json(200, {"ok": True, **self._document()})

    def _document(self) -> dict[str, Any]:
        state = self.sim.state
        return {**state.limits_doc(), "limitChanges": list(state.limit_changes)}


class FaultsHandler(SimHandler):
    def get(self) -> None:
        self.send_json(200, {"faults": [f.to_json() for f in self.sim.state.faults]})

    def post(self) -> None:
        try:
            data = self.read_json()
            faults = [Fault.from_json(item) for item in (data if isinstance(data, list) else [data])]
        except ValueError as exc:
            self.send_error_body(400, str(exc))
            return
        for fault in faults:
            self.sim.add_fault(fault)
        self.send_json(200, {"ok": True, "faults": [f.to_json() for f in self.sim.state.faults]})

    def delete(self) -> None:
        self.sim.state.faults.clear()
        self.send_json(200, {"ok": True, "faults": []})


class SeenHeadersHandler(SimHandler):
    def get(self) -> None:
        self.send_json(200, {"requests": list(self.sim.seen_headers)})


class SimQuotaHandler(SimHandler):
    """``GET`` the quota's true figures; ``POST {"answer": ...}`` (one of `QUOTA_ANSWERS`) sets how the
    quota endpoint answers, ``{"used": N}`` the prompts used in the window."""

    def get(self) -> None:
        self.send_json(200, self.sim.quota.snapshot())

    def post(self) -> None:
        quota = self.sim.quota
        try:
            data = self.read_json()
            if not isinstance(data, dict) or set(data) - {"answer", "used"}:
                raise ValueError("expected an object with answer and/or used")
            answer, used = data.get("answer", quota.answer), data.get("used", quota.used)
            if answer not in QUOTA_ANSWERS:
                raise ValueError(f"answer: one of {', '.join(QUOTA_ANSWERS)}, got {answer!r}")
            if isinstance(used, bool) or not isinstance(used, int | float) or used < 0:
                raise ValueError(f"used: expected a number >= 0, got {used!r}")
        except ValueError as exc:
            self.send_error_body(400, str(exc))
            return
        quota.answer = answer
        if "used" in data:
            quota.charge("")  # opens the window if none is open
            quota.used = float(used)
        self.send_json(200, {"ok": True, **quota.snapshot()})


class QuotaHandler(SimHandler):
    """``GET /api/monitor/usage/quota/limit``: the account's quota, with the key in `Authorization`."""

    def initialize(self, sim: SimServer) -> None:
        super().initialize(sim)
        self._closed = asyncio.Event()

    def on_connection_close(self) -> None:
        self._closed.set()

    async def get(self) -> None:
        quota, key = self.sim.quota, self.sim.settings.quota_key
        quota.reads += 1
        given = self.request.headers.get("Authorization", "")
        if not given or (key is not None and given not in (key, f"Bearer {key}")):
            self.send_json(401, UNAUTHORIZED)
            return
        match quota.answer:
            case "401":
                self.send_json(401, UNAUTHORIZED)
            case "500":
                self.send_json(500, {"code": 500, "msg": "Internal Server Error", "success": False})
            case "junk":
                self.set_header("Content-Type", "application/json")
                self.finish(b"<html><body>502 Bad Gateway</body></html>")
            case "nested":
                self.set_header("Content-Type", "application/json")
                self.finish(b"[" * NESTED_DEPTH + b"]" * NESTED_DEPTH)  # 200 KB, within the reader's bound
            case "echo":  # a refusal in a 200 that quotes the key it was sent
                self.send_json(200, {"code": 1001, "msg": ECHO_SAYS + given, "success": False})
            case "hang":  # no answer at all, until the client leaves or the simulator stops
                await self._closed.wait()
            case "drop":
                self.request.connection.close()  # type: ignore[union-attr]
                self._finished = True
            case _:
                credits = self.sim.credits
                self.send_json(200, quota.body() if credits is None else credits.body())


class CountTokensHandler(SimHandler):
    def post(self) -> None:
        try:
            data = self.read_json()
        except ValueError as exc:
            self.send_error_body(400, str(exc))
            return
        if not isinstance(data, dict):
            self.send_error_body(400, "Request body must be a JSON object")
            return
        self.send_json(200, {"input_tokens": max(1, len(self.request.body) // 4)})


class _Slot:
    """One admitted request's hold on a model slot and an account slot; release is idempotent."""

    def __init__(self, state: SimState, model: str) -> None:
        self._state = state
        self._model = model
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._state.release(self._model)


class MessagesHandler(SimHandler):
    """``POST …/v1/messages``: admission, then a streamed or a whole Anthropic message."""

    FILTERED_STATUS = 529  # z.ai's content filter answers 1305 as `overloaded_error` at this door

    def initialize(self, sim: SimServer) -> None:
        super().initialize(sim)
        self.model: str | None = None
        self.payload: dict[str, Any] = {}  # the request body, once it parsed as an object
        self.cached_tokens = 0  # of the prompt's, found in the prompt cache (sim.prompt_cache)
        self._closed = asyncio.Event()
        self._closed_at: float | None = None

    def on_connection_close(self) -> None:
        self.mark_closed()

    def mark_closed(self) -> None:
        """The client went away (or the server is stopping): every wait ends, no more writes."""
        if self._closed_at is None:
            self._closed_at = asyncio.get_running_loop().time()
        self._closed.set()

    async def post(self) -> None:
        self.sim._handler_started(self)
        try:
            await self._handle()
        finally:
            self.sim._handler_done(self)

    async def _handle(self) -> None:
        sim, state, settings = self.sim, self.sim.state, self.sim.settings
        state.requests += 1
        request_id = new_request_id()
        try:
            payload = self.read_json()
            if not isinstance(payload, dict):
                raise ValueError("Request body must be a JSON object")
            model = payload.get("model")
            if not isinstance(model, str) or not model:
                raise ValueError("model: Field required")
            latency_ms, interval_ms, tokens = self._timings()
        except ValueError as exc:
            self.send_error_body(400, str(exc), request_id=request_id)
            return
        self.model = model
        self.payload = payload
        served = state.served(model)  # what answers it and names itself in the answer
        self.set_header("x-sim-served-model", served)
        seen = {k.lower(): v for k, v in self.request.headers.get_all() if k.lower() not in SECRET_HEADERS}
        sim.seen_headers.append({**seen, ":model": model})

        if model in sim.retired:
            state.count_retired(model)
            self.send_error_body(429, default_message("1311"), code="1311", request_id=request_id)
            return
        if model in sim.refused or served in sim.refused:
            state.count_rejection(served, "1113")
            self.send_error_body(
                429, MSG_1113, code="1113", retry_after=settings.retry_after, request_id=request_id
            )
            return
        if served not in settings.limits:
            state.count_unknown(model)
            self.send_error_body(400, MSG_1211, code="1211", request_id=request_id)
            return
        if served != model:
            state.count_aliased(model)

        if sim.content_filter.trips(payload):  # before any limit: whatever the load, on every model
            state.count_filtered(served)
            self.send_error_body(
                self.FILTERED_STATUS, default_message("1305"), code="1305", request_id=request_id
            )
            return

        if sim.quota.spent():  # the 5-hour quota: every model refused until the window resets
            sim.quota.refused += 1
            state.count_rejection(served, "1308")
            reset = dt.datetime.fromtimestamp(sim.quota.resets_at(), dt.UTC)
            self.send_error_body(
                429,
                spent_message(reset),
                code="1308",
                retry_after=settings.retry_after,
                request_id=request_id,
            )
            return

        refusal = sim.credits.refusal() if sim.credits is not None else None
        if refusal is not None:  # a credit window spent: the week (1310) or the 5 hours (1308)
            code, message = refusal
            state.count_rejection(served, code)
            self.send_error_body(
                429, message, code=code, retry_after=settings.retry_after, request_id=request_id
            )
            return

        fault = state.take_fault(served)
        broken = fault.code if fault is not None and fault.code in BROKEN_ANSWERS else None
        if fault is not None and broken is None:
            state.count_rejection(served, fault.code)
            if not await self._wait(fault.delay_ms / 1000.0):
                return
            if fault.code == DROP:  # the connection breaks with no answer at all
                self.mark_closed()
                self.request.connection.close()  # type: ignore[union-attr]
                self._finished = True  # nothing more to write, not even the automatic end
                return
            retry_after = fault.retry_after
            if retry_after is None and fault.status == 429:
                retry_after = settings.retry_after
            message = fault.message if fault.message is not None else default_message(fault.code)
            self.send_error_body(
                fault.status,
                message,
                code=fault.code,
                retry_after=retry_after,
                error_type=fault.error_type,
                request_id=request_id,
            )
            return

        admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        counter = state.counter(model)  # the served model's slots, or an alias's own
        admission: Admission | None = state.admit(
            counter, broken=broken, wake=functools.partial(resolve, admitted)
        )
        if admission is not None and admission.waiter is not None:
            admission = await self._wait_inside_zai(admission.waiter, admitted)
        if admission is None:  # the client left while its request waited inside z.ai
            return
        if admission.outcome == "hang":
            state.count_broken(HANG)
            await self._closed.wait()  # no answer at all, until the client leaves or the simulator stops
            return
        if admission.outcome == "refused":
            code = admission.code or "1302"  # the model's limit and the account's look the same on the wire
            # Like z.ai: the 429 takes a while, and the waiting request holds no slot unless it `holds`
            # (`refused_holds`) until it is sent (a request that waited inside z.ai for its maximum is
            # refused at once).
            delay = 0.0 if admission.reason == "timeout" else settings.reject_delay_ms / 1000.0
            due = time.monotonic() + delay
            try:
                if await self._wait(delay):
                    self.send_error_body(
                        429,
                        default_message(code),
                        code=code,
                        retry_after=settings.retry_after,
                        request_id=request_id,
                    )
                elif admission.holds and settings.refused_holds_closed:
                    await asyncio.sleep(max(due - time.monotonic(), 0.0))  # closed: kept until due
            finally:
                if admission.holds:
                    state.release(counter)
            return
        cut = admission.outcome == "cut"

        slot = _Slot(state, counter)
        sim.quota.charge(served)
        try:
            input_tokens = max(1, len(self.request.body) // 4)
            if sim.prompt_cache is not None:
                talk = conversation(payload, self.request.headers.get(SESSION_HEADER))
                self.cached_tokens = sim.prompt_cache.read(served, talk, input_tokens)
                latency_ms = PromptCache.latency(latency_ms, input_tokens, self.cached_tokens)
            self.set_header("request-id", request_id)
            if cut:
                await self._cut_short(served, input_tokens, stream=payload.get("stream") is True)
                return
            if payload.get("stream") is True:
                finished = await self._stream(slot, served, input_tokens, latency_ms, interval_ms, tokens)
            else:
                finished = await self._whole(slot, served, input_tokens, latency_ms, interval_ms, tokens)
            if sim.credits is not None:  # the answer's usage, charged as it ends (sim.credits)
                cached = self.cached_tokens
                sim.credits.charge(served, input_tokens - cached, tokens, cached)
            if not finished and not sim.stopping:
                state.aborted += 1
                await self._hold_after_abort()
        finally:
            slot.release()

    async def _wait_inside_zai(self, waiter: Waiter, admitted: asyncio.Future[None]) -> Admission | None:
        """Hold the request inside z.ai (no head sent) until its slot is taken for it, its client leaves
        (None) or its maximum wait runs out (a refusal)."""
        state, timeout_ms = self.sim.state, self.sim.settings.queue_timeout_ms
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait(
                (admitted, closed),
                timeout=None if timeout_ms is None else timeout_ms / 1000.0,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            closed.cancel()
        if waiter.admitted:  # a slot was taken for it: served (the stream sees a client gone, if it is)
            return Admission("served")
        if self._closed.is_set():
            state.leave(waiter)
            return None
        return state.time_out(waiter)

    def _timings(self) -> tuple[float, float, int]:
        settings = self.sim.settings
        latency = self._header_number("x-sim-latency-ms", settings.latency_ms)
        interval = self._header_number("x-sim-token-interval-ms", settings.token_interval_ms)
        if self.request.headers.get("x-sim-output-tokens") is None:
            return float(latency), float(interval), self.sim.state.output_tokens(settings.output_tokens)
        tokens = self._header_number("x-sim-output-tokens", settings.output_tokens)
        if not float(tokens).is_integer():
            raise ValueError(f"x-sim-output-tokens: expected an integer, got {tokens!r}")
        return float(latency), float(interval), int(tokens)

    def _header_number(self, name: str, default: float) -> float:
        raw = self.request.headers.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{name}: expected a number, got {raw!r}") from None
        if not 0 <= value < 1e9:
            raise ValueError(f"{name}: must be >= 0, got {raw!r}")
        return value

    async def _wait(self, seconds: float) -> bool:
        """Sleep; False at once if the client goes away (or the server stops) meanwhile."""
        if self._closed.is_set():
            return False
        if seconds <= 0:
            return True
        try:
            async with asyncio.timeout(seconds):
                await self._closed.wait()
        except TimeoutError:
            return True
        return False

    async def _hold_after_abort(self) -> None:
        """The real upstream keeps counting a dead request for a while before it notices."""
        loop = asyncio.get_running_loop()
        closed_at = self._closed_at if self._closed_at is not None else loop.time()
        remaining = closed_at + self.sim.settings.abort_detect_ms / 1000.0 - loop.time()
        if remaining <= 0:
            return
        try:
            async with asyncio.timeout(remaining):
                await self.sim._stopping.wait()
        except TimeoutError:
            pass

    async def _emit(self, event: bytes) -> bool:
        """Write one SSE event and flush it; False if the client is gone."""
        if self._closed.is_set():
            return False
        self.write(event)
        try:
            await self.flush()
        except StreamClosedError:
            self.mark_closed()
            return False
        return True

    async def _cut_short(self, model: str, input_tokens: int, *, stream: bool) -> None:
        """Start the answer, then close the connection in the middle of it (after the first SSE events,
        or half of a whole message sent chunked): what a dropped upstream looks like to the proxy."""
        self.set_status(200)
        message = _message(
            model, input_tokens, self.cached_tokens, output_tokens=1, content=[], stop_reason=None
        )
        if stream:
            self.set_header("Content-Type", "text/event-stream")
            self.write(_sse("message_start", {"type": "message_start", "message": message}))
        else:
            self.set_header("Content-Type", "application/json")
            whole = json.dumps(message).encode()
            self.write(whole[: len(whole) // 2])
        with contextlib.suppress(StreamClosedError):
            await self.flush()
        self.sim.state.count_broken(CUT)
        self.detach().close()  # no end: the proxy sees the connection drop mid-answer

    async def _finish_and_release(self, slot: _Slot, chunk: bytes | None = None) -> None:
        # The slot is free the moment the last byte is handed to the socket: a client reusing it at
        # once must not see a 429.
        future = self.finish(chunk)
        slot.release()
        with contextlib.suppress(StreamClosedError):
            await future

    async def _stream(
        self, slot: _Slot, model: str, input_tokens: int, latency_ms: float, interval_ms: float, tokens: int
    ) -> bool:
        self.set_status(200)
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        opening = self.stream_opening(model, input_tokens)
        if not self.sim.settings.head_with_first_token:  # the head and the opening events at once
            for event in opening:
                if not await self._emit(event):
                    return False
            opening = []
        for index in range(tokens):
            if not await self._wait((latency_ms if index == 0 else interval_ms) / 1000.0):
                return False
            if not await self._emit(b"".join(opening) + self.stream_token(model, index)):
                return False
            opening = []
        if tokens == 0 and not await self._wait(latency_ms / 1000.0):
            return False
        closing = b"".join(opening) + self.stream_closing(model, input_tokens, tokens)
        if self._closed.is_set():
            return False
        await self._finish_and_release(slot, closing)
        return True

    async def _whole(
        self, slot: _Slot, model: str, input_tokens: int, latency_ms: float, interval_ms: float, tokens: int
    ) -> bool:
        if not await self._wait((latency_ms + tokens * interval_ms) / 1000.0):
            return False
        text = "".join(token_text(i) for i in range(tokens))
        self.set_status(200)
        self.set_header("Content-Type", "application/json")
        answer = self.whole_answer(model, input_tokens, tokens, text)
        await self._finish_and_release(slot, json.dumps(answer).encode())
        return True

    # -- what the answers say: Anthropic's format (the OpenAI door's handler says it its own way) --------

    def stream_opening(self, model: str, input_tokens: int) -> list[bytes]:
        """The events sent at once, before the first token."""
        message = _message(
            model, input_tokens, self.cached_tokens, output_tokens=1, content=[], stop_reason=None
        )
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        return [
            _sse("message_start", {"type": "message_start", "message": message}),
            _sse("content_block_start", block),
            _sse("ping", {"type": "ping"}),
        ]

    def stream_token(self, model: str, index: int) -> bytes:
        """The event of output token `index`."""
        delta = {"type": "text_delta", "text": token_text(index)}
        return _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})

    def stream_closing(self, model: str, input_tokens: int, tokens: int) -> bytes:
        """The events that end the stream, sent with its end."""
        return (
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            + _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": tokens},
                },
            )
            + _sse("message_stop", {"type": "message_stop"})
        )

    def whole_answer(self, model: str, input_tokens: int, tokens: int, text: str) -> dict[str, Any]:
        """A whole, non-streamed answer."""
        content = [{"type": "text", "text": text}]
        cached = self.cached_tokens
        return _message(
            model, input_tokens, cached, output_tokens=tokens, content=content, stop_reason="end_turn"
        )


def _message(
    model: str,
    input_tokens: int,
    cached_tokens: int,
    *,
    output_tokens: int,
    content: list[dict[str, Any]],
    stop_reason: str | None,
) -> dict[str, Any]:
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens - cached_tokens,  # Anthropic's: the fresh ones
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached_tokens,
        },
    }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
