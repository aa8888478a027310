"""The check's requests to z.ai, on the standard library's HTTP client: the models list, and streamed requests
at either door, each read as far as the check needs (the served model; the head's and first token's times).
Every request counts against the budget; every read is bounded in time and size; the key goes only into
`Authorization`."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import certifi

from chaos_mode.zai import json_body
from chaos_mode.zai.catalog import MODELS_PATH
from chaos_mode.zai.errors import extract_code

Door = Literal["anthropic", "openai"]
DOORS: Final[tuple[Door, ...]] = ("anthropic", "openai")
DOOR_PATHS: Final[dict[Door, str]] = {
    "anthropic": "/api/anthropic/v1/messages",
    "openai": "/api/coding/paas/v4/chat/completions",
}
BODY_LIMIT: Final = 256 * 1024  # an error body or the models list read no further
LINE_LIMIT: Final = 64 * 1024  # an SSE line read no further
SHOWN_LIMIT: Final = 120  # characters of a server's text printed (a status line, an error's message)
_HOST: Final = re.compile(r"[\w.:%-]+")  # a name, an IPv4 or an IPv6 address (with its zone)
_MODEL_NAME: Final = re.compile(r"[\w.:/+-]{1,128}", re.ASCII)
# A held request asks for a long answer, so that it holds its slot for as long as the check needs it.
LONG_PROMPT: Final = "Count from 1 to 5000, one number per line, nothing else."
LONG_MAX_TOKENS: Final = 8192


class CheckError(Exception):
    """The check cannot go on (no key taken, host unreachable, budget spent): one line for the user."""


class BudgetSpent(CheckError):
    """The budget of requests is spent."""


@dataclass
class Stream:
    """One streamed request as far as it was read: its status, z.ai's code when refused, the model the
    answer names, and when (seconds after sending) its head and its first token came."""

    name: str
    status: int = 0
    code: str | None = None
    message: str = ""
    served: str | None = None
    head_seconds: float | None = None
    first_token_seconds: float | None = None
    _conn: http.client.HTTPConnection | None = None
    _response: http.client.HTTPResponse | None = None
    _started: float = 0.0

    @property
    def answered(self) -> bool:
        return self.status == 200

    def close(self) -> None:
        """Drop the connection (z.ai ends the request); a reader blocked on it wakes up."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        conn.close()


class Upstream:
    """z.ai at `base_url` with `key`, at most `budget` requests, each read at most `timeout` seconds at a
    time."""

    def __init__(self, base_url: str, key: str, *, budget: int, timeout: float, door: Door) -> None:
        expected = CheckError(f"base URL: expected http(s)://host[:port], got {base_url!r}")
        try:
            url = urllib.parse.urlsplit(base_url)
            host, port = url.hostname or "", url.port  # ValueError: a port out of range, or not a number
        except ValueError:
            raise expected from None
        if url.scheme not in ("http", "https") or not _HOST.fullmatch(host):
            raise expected
        self.scheme, self.host, self.port = url.scheme, host, port
        self.prefix = url.path.rstrip("/")
        self.origin = f"{url.scheme}://{url.netloc.rpartition('@')[2]}"  # what messages name
        self.key = key
        self.budget = budget
        self.timeout = timeout
        self.door = door
        self.sent = 0
        self._lock = threading.Lock()
        self._tls = ssl.create_default_context(cafile=certifi.where()) if url.scheme == "https" else None

    @property
    def left(self) -> int:
        return self.budget - self.sent

    def _connect(self) -> http.client.HTTPConnection:
        with self._lock:
            if self.sent >= self.budget:
                raise BudgetSpent(f"the budget of {self.budget} requests is spent")
            self.sent += 1
        if self._tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": "chaos-mode-check",
        }
        if self.door == "anthropic":
            headers["anthropic-version"] = "2023-06-01"
        return headers

    def _shown(self, text: str) -> str:
        """A server's `text` as the check prints it: the key hidden, then cut short, and escaped when it holds
        a control character (a terminal's escapes, as a status line's bytes may)."""
        text = text.replace(self.key, "***")
        cut = text[:SHOWN_LIMIT]
        return (cut if cut.isprintable() else repr(cut)) + ("..." if len(text) > SHOWN_LIMIT else "")

    def list_models(self) -> list[str]:
        """The names z.ai's models endpoint lists."""
        conn = self._connect()
        try:
            conn.request("GET", self.prefix + MODELS_PATH, headers=self._headers())
            response = conn.getresponse()
            body = response.read(BODY_LIMIT)
        except (OSError, http.client.HTTPException) as exc:
            raise CheckError(f"cannot reach {self.origin}: {self._shown(_reason(exc))}") from None
        finally:
            conn.close()
        document = _json(body)
        refused(response.status, document)
        data = document.get("data") if isinstance(document, dict) else None
        if response.status != 200 or not isinstance(data, list):
            raise CheckError(f"the models list answered HTTP {response.status}, not an OpenAI-style list")
        return [item["id"] for item in data if isinstance(item, dict) and model_name(item.get("id"))]

    def open(self, name: str, *, long: bool) -> Stream:
        """Send a streamed request for `name` and read its head: a refusal is read whole (code, message);
        an answer is left open for `read_model` or `read_first_token`."""
        stream = Stream(name)
        conn = self._connect()
        stream._conn = conn
        body = json.dumps(self._body(name, long=long)).encode()
        stream._started = time.monotonic()
        try:
            conn.request("POST", self.prefix + DOOR_PATHS[self.door], body=body, headers=self._headers())
            response = conn.getresponse()
            stream.head_seconds = time.monotonic() - stream._started
            stream.status = response.status
            if response.status != 200:
                document = _json(response.read(BODY_LIMIT))
                stream.close()
                refused(response.status, document)
                stream.code, message = extract_code(document)
                stream.message = self._shown(message)
                return stream
        except (OSError, http.client.HTTPException) as exc:
            stream.close()
            if isinstance(exc, TimeoutError):
                stream.message = f"no head in {self.timeout:g} s"
                return stream
            raise CheckError(f"cannot reach {self.origin}: {self._shown(_reason(exc))}") from None
        stream._response = response
        return stream

    def _body(self, name: str, *, long: bool) -> dict[str, Any]:
        prompt, max_tokens = (LONG_PROMPT, LONG_MAX_TOKENS) if long else ("Say OK.", 1)
        return {
            "model": name,
            "max_tokens": max_tokens,
            "stream": True,
            "messages": [{"role": "user", "content": prompt}],
        }

    def read_model(self, stream: Stream) -> None:
        """Read the answer until it names the model that serves it (given up `timeout` after the request was
        sent), then close it."""
        try:
            for event in self._events(stream, until=stream._started + self.timeout):
                served = _served_model(event, self.door)
                if served is not None:
                    stream.served = served
                    return
        finally:
            stream.close()

    def read_first_token(self, stream: Stream, done: threading.Event) -> None:
        """Read the answer: note when its first token comes, then go on reading until `done` is set or the
        answer ends (the request holds its slot meanwhile)."""
        try:
            for event in self._events(stream):
                if stream.served is None:
                    stream.served = _served_model(event, self.door)
                if stream.first_token_seconds is None and _is_token(event, self.door):
                    stream.first_token_seconds = time.monotonic() - stream._started
                if done.is_set():
                    return
        finally:
            stream.close()

    def _events(self, stream: Stream, until: float = math.inf) -> Iterator[dict[str, Any]]:
        """The JSON of each SSE `data:` line, until the answer ends, breaks, stalls past the timeout or
        (pings, say) goes on past `until` (monotonic)."""
        response = stream._response
        if response is None:
            return
        try:
            while time.monotonic() < until:
                line = response.readline(LINE_LIMIT)
                if not line:
                    return
                if not line.startswith(b"data:"):
                    continue
                try:
                    event = json_body.loads(line[5:].strip())
                except ValueError:
                    continue
                if isinstance(event, dict):
                    yield event
        except Exception:  # the connection broke, or was closed under the reader (http.client then
            return  # raises what it happens to: AttributeError, ValueError, OSError...)


def refused(status: int, document: Any) -> None:
    """CheckError for an answer that says the key is not taken (nothing else will work with it)."""
    if status in (401, 403):
        code, _ = extract_code(document)
        raise CheckError(
            f"z.ai did not take the key (HTTP {status}{f', code {code}' if code else ''}): check its variable"
        )


def _served_model(event: dict[str, Any], door: Door) -> str | None:
    if door == "anthropic":
        message = event.get("message") if event.get("type") == "message_start" else None
        model = message.get("model") if isinstance(message, dict) else None
    else:
        model = event.get("model")
    return model if model_name(model) else None


def model_name(value: Any) -> bool:
    """Whether z.ai's `value` is a model's name the check asks for and prints (not any string at all)."""
    return isinstance(value, str) and _MODEL_NAME.fullmatch(value) is not None


def _is_token(event: dict[str, Any], door: Door) -> bool:
    if door == "anthropic":
        return event.get("type") == "content_block_delta"
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    return isinstance(delta, dict) and any(delta.get(k) for k in ("content", "reasoning_content"))


def _json(body: bytes) -> Any:
    try:
        return json_body.loads(body)
    except ValueError:
        return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text)
