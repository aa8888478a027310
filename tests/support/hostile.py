"""A hostile z.ai on loopback: every way an upstream was found to break HTTP/1.1, one mode each.

Each request picks its mode with the `x-hostile` header (default `ok`), so a test names its case, and any
mix of cases can share one server (and one mitmdump in front of it). Every answer that is an answer says
whose it is: a Messages API reply with the text `answer for <x-api-key>`, so a test can tell one client's
answer from another's whatever went wrong in between. The server runs in its own thread and event loop on
127.0.0.1: a mitmdump child and an in-process client reach it alike, and it goes on answering while the
test's loop waits. It reads requests with h11 and writes its answers raw (that is the point).
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self

import brotli  # type: ignore[import-untyped]
import h11

from chaos_mode.zai.quota import QUOTA_PATH
from chaos_mode.zai.zstd import zstd

HEADER: Final = "x-hostile"
# Seconds after an answer before `idle-bytes` (`late-interim`) sends its stray bytes. A request sent on that
# connection before they come gets them for its answer, and no HTTP/1.1 client can tell: tests wait for them
# (STRAY_SETTLE) before they send on, since the case is bytes that came while the connection was idle.
IDLE_BYTES_DELAY: Final = 0.05
STRAY_SETTLE: Final = 4 * IDLE_BYTES_DELAY
STRAY: Final = frozenset({"idle-bytes", "late-interim"})
START_TIMEOUT: Final = 5.0


def message(key: str, model: str = "glm-4.7") -> bytes:
    """A whole Messages API reply that says whose answer it is."""
    return json.dumps(
        {
            "id": "msg_hostile",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": f"answer for {key}"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    ).encode()


def answer(body: bytes, *headers: bytes, status: bytes = b"200 OK", version: bytes = b"HTTP/1.1") -> bytes:
    """An answer with a Content-Length (`headers`: raw header lines, no CRLF)."""
    lines = [b"%s %s" % (version, status), b"content-type: application/json", *headers]
    return b"\r\n".join([*lines, b"content-length: %d" % len(body)]) + b"\r\n\r\n" + body


def chunked(body: bytes, size_line: bytes | None = None) -> bytes:
    """A chunked 200 answer of one chunk, its size line `size_line` when given (a bad one, say)."""
    size = size_line if size_line is not None else b"%x" % len(body)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + size + b"\r\n" + body + b"\r\n0\r\n\r\n"


@dataclass
class Turn:
    """One request on one connection, as a mode sees it."""

    key: str
    model: str
    served: int  # requests this connection answered before this one
    writer: asyncio.StreamWriter
    attempt: int = 0  # requests with this key the server saw before this one
    owed: bytes = b""  # sent on this connection just before the answer to its next request

    @property
    def body(self) -> bytes:
        return message(self.key, self.model)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()


# What a mode does after writing: go on serving the connection, stop reading it (holding it open until
# the peer leaves, as an HTTP/1.0 server that is done but has not closed yet), or close it.
SERVE, HOLD, CLOSE = "serve", "hold", "close"
Mode = Callable[[Turn], Awaitable[str]]
MODES: dict[str, Mode] = {}


def mode(name: str) -> Callable[[Mode], Mode]:
    def register(function: Mode) -> Mode:
        MODES[name] = function
        return function

    return register


def _interim(body: bytes) -> bytes:
    hints = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
    return b"HTTP/1.1 100 Continue\r\n\r\n" + hints + answer(body)


def _bare_lf(body: bytes) -> bytes:
    head, _, rest = answer(body).partition(b"\r\n\r\n")
    return head.replace(b"\r\n", b"\n") + b"\n\n" + rest


BAD_CHUNK_SIZES: Final = {
    "negative-chunk": b"-6",
    "hex-prefix-chunk": b"0x5",
    "plus-chunk": b"+5",
    "underscore-chunk": b"5_0",
}
# The modes that write once: what they write (from the answer's body), and what they do then.
ONE_WRITE: Final[dict[str, tuple[Callable[[bytes], bytes], str]]] = {
    "ok": (answer, SERVE),
    "ok-chunked": (chunked, SERVE),
    # 100 Continue and 103 Early Hints before the answer (RFC 9110 15.2: a client must pass over them).
    "interim": (_interim, SERVE),
    # An answer and, in the same write, a second one.
    "trailing-bytes": (lambda body: answer(body) * 2, SERVE),
    "conflicting-length": (lambda body: answer(body + b" " * 10, b"content-length: %d" % len(body)), SERVE),
    "xchunked": (lambda body: chunked(body).replace(b": chunked", b": xchunked"), SERVE),
    "bad-version": (lambda body: answer(body, status=b"0200 OK", version=b"HTTP/1.9"), SERVE),
    # An HTTP/1.0 answer without keep-alive, and one with Connection: close: the connection serves no other
    # request (it stays open a while, as a server that has not closed yet).
    "http10": (lambda body: answer(body, version=b"HTTP/1.0"), HOLD),
    "connection-close": (lambda body: answer(body, b"connection: close"), HOLD),
    # The Content-Length folded onto a second line (obsolete line folding: h11 joins the lines).
    "folded": (lambda body: answer(body).replace(b"content-length: ", b"content-length:\r\n "), SERVE),
    # A head whose lines end in LF alone.
    "bare-lf": (_bare_lf, SERVE),
    # A chunked answer whose last chunk is followed by a trailer field.
    "trailer": (lambda body: chunked(body).replace(b"0\r\n\r\n", b"0\r\nx-checksum: 1f\r\n\r\n"), SERVE),
    # A chunk size h11 refuses, before a chunk of data.
    **{
        name: (lambda body, size=size: chunked(b"hello!" + body, size), HOLD)
        for name, size in BAD_CHUNK_SIZES.items()
    },
}


def _one_write(write: Callable[[bytes], bytes], then: str) -> Mode:
    async def one_write(turn: Turn) -> str:
        await turn.send(write(turn.body))
        return then

    return one_write


for _name, (_write, _then) in ONE_WRITE.items():
    mode(_name)(_one_write(_write, _then))


@mode("idle-bytes")
async def _idle_bytes(turn: Turn) -> str:
    """An answer, then, while the connection is idle, another one nobody asked for (the same key's)."""
    await turn.send(answer(turn.body))
    await asyncio.sleep(IDLE_BYTES_DELAY)
    await turn.send(answer(turn.body))
    return SERVE


@mode("late-answer")
async def _late_answer(turn: Turn) -> str:
    """An answer, and another one nobody asked for (the same key's) just before the answer to the next
    request on the connection: no client can tell it from the answer to its own request, so it may reach
    only a request of the same key."""
    await turn.send(answer(turn.body))
    turn.owed = answer(turn.body)
    return SERVE


ENDLESS_INTERIM: Final = 100_000  # `endless-interim` answers: as good as endless for a client


@mode("endless-interim")
async def _endless_interim(turn: Turn) -> str:
    """100 Continue after 100 Continue, never a final answer."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" * 1000
    for _ in range(ENDLESS_INTERIM // 1000):
        await turn.send(interim)
    return CLOSE


@mode("stall-body")
async def _stall_body(turn: Turn) -> str:
    """A whole answer's head and its first bytes, then nothing (the connection held open)."""
    await turn.send(answer(turn.body)[:-10])
    return HOLD


@mode("stall-stream")
async def _stall_stream(turn: Turn) -> str:
    """A stream's head and its first event, then nothing (the connection held open)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    event = b'event: ping\ndata: {"type": "ping"}\n\n'
    await turn.send(head + b"%x\r\n%s\r\n" % (len(event), event))
    return HOLD


@mode("late-interim")
async def _late_interim(turn: Turn) -> str:
    """An answer, then an interim answer while the connection is idle."""
    await turn.send(answer(turn.body))
    await asyncio.sleep(IDLE_BYTES_DELAY)
    await turn.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    return SERVE


CUT_SHORT_SENT: Final = 30


@mode("cut-short")
async def _cut_short(turn: Turn) -> str:
    """A 400 that announces 100 bytes, sends 30 and closes."""
    body = b'{"type":"error","error":{"type":"invalid_request_error","message":"%s"}}' % turn.key.encode()
    body = body.ljust(100)
    await turn.send(answer(body, status=b"400 Bad Request")[: -(100 - CUT_SHORT_SENT)])
    return CLOSE


@mode("close-on-reuse")
async def _close_on_reuse(turn: Turn) -> str:
    """Answers on a new connection; on one that served before, closes as the request arrives."""
    if turn.served:
        return CLOSE
    await turn.send(answer(turn.body))
    return SERVE


# Decompression bombs: a body that decodes to BOMB_SIZE bytes (br ~1.6 KB, zstd ~32 KB, gzip ~1 MB: deflate
# cannot do better than about 1:1030). The `bomb-*` modes send them as z.ai's 1302 refusal (to a key's first
# attempt: the next one, on another model, is answered), as a whole 200 answer, and as the quota answer (on
# the quota path, whose mode is the key it is read with, `bomb-quota`: it carries no `x-hostile` header).
BOMB_SIZE: Final = 1 << 30
BOMB_CODINGS: Final = ("br", "gzip", "zstd")
REFUSAL_HEAD: Final = json.dumps(
    {"type": "error", "error": {"type": "rate_limit_error", "code": "1302", "message": "busy"}}
).encode()
ANSWER_HEAD: Final = message("bomb")
QUOTA_HEAD: Final = json.dumps({"code": 200, "msg": "ok", "success": True, "data": {"limits": []}}).encode()
_FILL: Final = 1 << 20


def bomb(coding: str, head: bytes, fill: bytes = b" ", size: int = BOMB_SIZE) -> bytes:
    """`head`, then `fill` up to `size` bytes in all, compressed as `coding` a MiB at a time (built once)."""
    return _bomb(coding, head, fill, size)


@functools.cache
def _bomb(coding: str, head: bytes, fill: bytes, size: int) -> bytes:
    if coding == "br":
        compressor = brotli.Compressor(quality=5)
        compress, finish = compressor.process, compressor.finish
    elif coding == "zstd":
        compressor = zstd.ZstdCompressor(level=3)
        compress, finish = compressor.compress, compressor.flush
    else:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        compress, finish = compressor.compress, compressor.flush
    parts, left = [bytes(compress(head))], size - len(head)
    piece = fill * _FILL
    while left > 0:
        parts.append(bytes(compress(piece[: min(left, len(piece))])))
        left -= len(piece)
    parts.append(bytes(finish()))
    return b"".join(parts)


def bombed(coding: str, head: bytes, status: bytes = b"200 OK", fill: bytes = b" ") -> bytes:
    return answer(bomb(coding, head, fill), b"content-encoding: %s" % coding.encode(), status=status)


def _bomb_refusal(coding: str) -> Mode:
    async def refusal(turn: Turn) -> str:
        if turn.attempt:
            await turn.send(answer(turn.body))
        else:  # NULs after the JSON: only its first bytes say its code
            await turn.send(bombed(coding, REFUSAL_HEAD, b"429 Too Many Requests", b"\0"))
        return SERVE

    return refusal


def _bomb_answer(coding: str, head: bytes) -> Mode:
    async def whole(turn: Turn) -> str:
        await turn.send(bombed(coding, head))
        return SERVE

    return whole


for _coding in BOMB_CODINGS:
    mode(f"bomb-refusal-{_coding}")(_bomb_refusal(_coding))
    mode(f"bomb-answer-{_coding}")(_bomb_answer(_coding, ANSWER_HEAD))


@mode("bomb-quota")
async def _bomb_quota(turn: Turn) -> str:
    """The first quota answer as it is (a proxy starts with a reading), then a bomb in each coding in turn."""
    if turn.attempt:
        await turn.send(bombed(BOMB_CODINGS[(turn.attempt - 1) % len(BOMB_CODINGS)], QUOTA_HEAD))
    else:
        await turn.send(answer(QUOTA_HEAD))
    return SERVE


BOMBS: Final = frozenset(name for name in MODES if name.startswith("bomb-"))


NESTED_DEPTH: Final = 100_000
NESTED: Final = b"[" * NESTED_DEPTH + b"]" * NESTED_DEPTH  # 200 KB: within every bound on a body or event
SERVING: Final = "glm-4.5-x"  # the model a refusing mode serves (it refuses the others)


def sse_event(name: str, data: bytes) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (name.encode(), data)


def sse_answer(key: str, model: str, odd: bytes) -> bytes:
    """A whole streamed Messages API answer that says whose it is, `odd` (event data) after its start."""
    start = {"type": "message_start", "message": json.loads(message(key, model)) | {"content": []}}
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": f"answer for {key}"},
    }
    body = b"".join(
        [
            sse_event("message_start", json.dumps(start).encode()),
            sse_event("message_delta", odd),
            sse_event("content_block_start", b'{"type":"content_block_start","index":0}'),
            sse_event("content_block_delta", json.dumps(delta).encode()),
            sse_event("content_block_stop", b'{"type":"content_block_stop","index":0}'),
            sse_event("message_delta", b'{"type":"message_delta","usage":{"output_tokens":3}}'),
            sse_event("message_stop", b'{"type":"message_stop"}'),
        ]
    )
    return answer(body).replace(b"application/json", b"text/event-stream", 1)


@mode("nested-stream")
async def _nested_stream(turn: Turn) -> str:
    """A stream one of whose events holds JSON nested 100,000 deep."""
    await turn.send(sse_answer(turn.key, turn.model, b'{"type":"message_delta","usage":' + NESTED + b"}"))
    return SERVE


def _refusing(refusal: bytes) -> Mode:
    async def refusing(turn: Turn) -> str:
        """`refusal` (a 429's body) for every model but SERVING, which answers."""
        if turn.model == SERVING:
            await turn.send(answer(turn.body))
        else:
            await turn.send(answer(refusal, status=b"429 Too Many Requests"))
        return SERVE

    return refusing


# A 429 nested 100,000 deep, and a 1302 whose message has a byte that is not UTF-8 (latin-1's é).
mode("nested-429")(_refusing(NESTED))
NON_UTF8_1302: Final = (
    b'{"type":"error","error":{"type":"rate_limit_error","code":"1302","message":"Trop \xe9lev\xe9"}}'
)
mode("non-utf8-1302")(_refusing(NON_UTF8_1302))


@dataclass
class Seen:
    connection: int
    mode: str
    key: str
    model: str = ""


@dataclass
class HostileUpstream:
    """The server: `with HostileUpstream() as upstream:` ... `upstream.url`; what it saw in `seen`."""

    port: int = 0
    connections: int = 0
    seen: list[Seen] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        listening = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(listening,), name="hostile", daemon=True)
        self._thread.start()
        if not listening.wait(START_TIMEOUT):
            raise RuntimeError("the hostile upstream did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(START_TIMEOUT)

    def _run(self, listening: threading.Event) -> None:
        asyncio.run(self._main(listening))

    async def _main(self, listening: threading.Event) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(server.sockets[0].getsockname()[1])
        listening.set()
        async with server:
            await self._stop.wait()
            server.close()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection, served, carry, owed = self.connections, 0, b"", b""
        try:
            while True:
                request, carry = await _read_request(reader, carry)
                if request is None:
                    return
                headers = {k.decode(): v.decode("latin-1") for k, v in request.headers}
                key = headers.get("x-api-key", "")
                name = headers.get(HEADER, "ok")
                if request.target == QUOTA_PATH.encode():
                    key = headers.get("authorization", "")
                    name = key if key in MODES else "ok"
                attempt = sum(1 for seen in self.seen if seen.key == key)
                model = json.loads(request.body or b"{}").get("model", "glm-4.7")
                self.seen.append(Seen(connection, name, key, model))
                if owed:
                    writer.write(owed)
                turn = Turn(key, model, served, writer, attempt)
                then = await MODES[name](turn)
                owed = turn.owed
                served += 1
                if then == HOLD:
                    await reader.read()  # until the peer leaves; nothing more is read as a request
                if then != SERVE:
                    return
        except (ConnectionError, asyncio.CancelledError, h11.ProtocolError):
            pass
        finally:
            writer.transport.abort()


@dataclass
class _Request:
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


async def _read_request(reader: asyncio.StreamReader, carry: bytes) -> tuple[_Request | None, bytes]:
    """The next request on the connection (None at its end), and the bytes that came after it."""
    parser = h11.Connection(h11.SERVER)
    if carry:
        parser.receive_data(carry)  # (an empty one would say the connection closed)
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = parser.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            if not data:
                return None, b""
            parser.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return _Request(head.target, list(head.headers), bytes(body)), parser.trailing_data[0]
