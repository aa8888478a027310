"""Where an answer from z.ai begins and ends, as h11 reads HTTP/1.1, over bytes that are relayed as they came.

Theory of operation. The forwarder relays z.ai's bytes with their own framing (chunked stays chunked): that
is where it saves its CPU. It still has to know where an answer ends, to keep the connection for another
request, and it must frame every answer exactly as h11 would, or refuse it as h11 would:

- The head is h11's business: `HeadParser` runs h11's own status-line and header reader on h11's receive
  buffer (as mitmproxy's HTTP/1 layer does; an `h11.Connection` would add an event machine costing about
  25 µs a request; each header line is matched once by h11's pattern, and h11's line reader takes a head
  whose lines do not all match) and returns the first final answer. 1xx interim answers are passed over,
  up to `MAX_INTERIM` (a 101 is refused: nothing asked to switch), and every rule of the status line, the
  header lines (obsolete folding, bare LF), Content-Length and Transfer-Encoding is h11's: a head h11
  refuses is `BadAnswer`. A test holds it to an `h11.Connection`'s verdict, read by read.
- The body's length follows from that head (`Framing`, h11's rules): none (204, 304, an answer to HEAD, a
  2xx to CONNECT), chunked, Content-Length, or until the connection closes (an answer that can never be
  followed by another on its connection, nor can one from HTTP/1.0 or with `Connection: close`).
- A chunked body's end is found by `ChunkScanner` over the raw reads, without copying them: the one piece
  of HTTP written here, because h11 costs an event per chunk on the hot path of every stream. It follows
  h11's chunked reader to the byte (size lines `1*20HEXDIG [; ext] OWS CRLF`, each chunk's data followed by
  exactly CRLF, trailer lines read as h11 reads header lines, the same limit on an incomplete line) and a
  differential test holds it to h11's verdict on every input and every way of cutting it into reads.
- Bytes after the answer's end (a second answer, an interim answer sent late, garbage) are never relayed,
  and the connection they came on is never used again.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Final, cast

import h11
from h11._readers import _decode_header_lines, header_field_re, request_line_re, status_line_re
from h11._receivebuffer import ReceiveBuffer
from h11._util import validate

MAX_HEAD: Final = 256 * 1024  # bytes of an incomplete head, size line or trailer (h11's limit, set to this)
MAX_INTERIM: Final = 16  # 1xx answers passed over before a final one; more and the answer is refused
_CHUNK_SIZE: Final = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")  # h11's chunk-header grammar
_BLANK_LINE: Final = re.compile(rb"\n\r?\n")  # the end of a trailer, as h11 looks for it
_REPR: Final = re.compile(r":? ?(?:bytearray\()?b['\"].*", re.DOTALL)


class BadAnswer(ValueError):
    """The peer's bytes are not HTTP/1.1 that h11 reads (the message says why, without the bytes)."""


def plain(exc: h11.ProtocolError) -> str:
    """h11's reason, without the bytes it quotes (they may hold anything, a credential included)."""
    return _REPR.sub("", str(exc)) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class Framing:
    """How an answer's body is delimited, and whether its connection may carry another request after it."""

    length: int | None  # None: chunked, or until the connection closes
    chunked: bool
    keep_alive: bool


@dataclass(frozen=True, slots=True)
class Head:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]  # as they came (names in their case), obsolete folding undone
    framing: Framing
    rest: bytes  # bytes already received after the head: the body's first


def framing(method: bytes, answer: h11.Response) -> Framing:
    """h11's framing of a final answer to a request of `method` (its headers validated by h11)."""
    chunked = False
    length: int | None = None
    close = answer.http_version < b"1.1"
    for name, value in answer.headers:
        if name == b"transfer-encoding":
            chunked = True  # h11 refuses any other coding
        elif name == b"content-length":
            length = int(value)  # h11 refuses conflicting lengths
        elif name == b"connection" and b"close" in (token.strip() for token in value.lower().split(b",")):
            close = True
    status = answer.status_code
    if status in (204, 304) or method == b"HEAD" or (method == b"CONNECT" and 200 <= status < 300):
        return Framing(0, False, not close)
    if chunked:
        return Framing(None, True, not close)
    if length is not None:
        return Framing(length, False, not close)
    return Framing(None, False, False)  # until the connection closes


def read_request_head(buffer: ReceiveBuffer) -> h11.Request | None:
    """h11's `maybe_read_from_IDLE_client`, its header lines read by `_header_lines`."""
    lines = _head_lines(buffer)
    if lines is None:
        return None
    if not lines:
        raise h11.LocalProtocolError("no request line received")
    matches = validate(request_line_re, lines[0], "illegal request line: {!r}", lines[0])
    return h11.Request(headers=_header_lines(lines[1:]), _parsed=True, **matches)


def read_status_and_headers(buffer: ReceiveBuffer) -> h11.Response | h11.InformationalResponse | None:
    """h11's `maybe_read_from_SEND_RESPONSE_server`, its header lines read by `_header_lines`."""
    lines = _head_lines(buffer)
    if lines is None:
        return None
    if not lines:
        raise h11.LocalProtocolError("no response line received")
    matches = validate(status_line_re, lines[0], "illegal status line: {!r}", lines[0])
    status = int(matches["status_code"])
    kind = h11.InformationalResponse if status < 200 else h11.Response
    return kind(
        headers=_header_lines(lines[1:]),
        _parsed=True,
        status_code=status,
        reason=matches["reason"] or b"",
        http_version=matches["http_version"] or b"1.1",
    )


def _head_lines(buffer: ReceiveBuffer) -> list[bytes] | None:
    lines = cast("list[bytes] | None", buffer.maybe_extract_lines())  # bytearrays, read as bytes are
    if lines is None and buffer.is_next_line_obviously_invalid_request_line():
        raise h11.LocalProtocolError("illegal request line")
    return lines


def _header_lines(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    """h11's `_decode_header_lines`, each line matched once by h11's own pattern: a line that does not
    match (obsolete folding included) sends them all to h11's reader, for its folding or its error."""
    decoded: list[tuple[bytes, bytes]] = []
    for line in lines:
        if (match := header_field_re.fullmatch(line)) is None:
            return list(_decode_header_lines(lines))
        decoded.append((match["field_name"], match["field_value"]))
    return decoded


class HeadParser:
    """Reads an answer's head (module docstring): `feed(bytes)` until it returns the `Head` (b"" for the
    end of the connection); `BadAnswer` when h11 refuses what came."""

    __slots__ = ("_buffer", "_interim", "_max", "_method", "received")

    def __init__(self, method: bytes, max_head: int = MAX_HEAD) -> None:
        self._method = method
        self._max = max_head
        self._buffer = ReceiveBuffer()
        self._interim = 0
        self.received = 0  # bytes fed so far: none means the peer never began an answer

    def feed(self, data: bytes) -> Head | None:
        if not data:
            where = "inside the answer's head" if self.received else "before an answer"
            raise BadAnswer(f"the connection closed {where}")
        self.received += len(data)
        buffer = self._buffer
        buffer += data
        while True:
            try:
                event = read_status_and_headers(buffer)
            except h11.LocalProtocolError as exc:
                raise BadAnswer(plain(exc)) from None
            if event is None:
                if len(buffer) > self._max:
                    raise BadAnswer("Receive buffer too long")
                return None
            if isinstance(event, h11.Response):
                return Head(
                    event.status_code,
                    event.reason,
                    event.headers.raw_items(),
                    framing(self._method, event),
                    bytes(buffer),
                )
            if event.status_code == 101:  # the forwarder never asks to switch protocols
                raise BadAnswer("101 Switching Protocols, asked by no request")
            # any other 1xx: passed over (RFC 9110 15.2), a few (an endless run would spin on the CPU)
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise BadAnswer(f"more than {MAX_INTERIM} interim (1xx) answers")


_SIZE, _DATA, _CRLF, _TRAILER = range(4)
_CRLF_BYTES: Final = b"\r\n"


class ChunkScanner:
    """Follows a chunked body over raw reads to its end, as h11's chunked reader would (module docstring).

    `feed(data)` returns how many of `data`'s bytes belong to the body: all of them until the body ends
    (then `done`), which may be inside `data`; `BadAnswer` where h11 refuses the framing. Given `body`, the
    chunks' data is appended to it. `trailer_at`: where in the last `data` fed the trailer section begins
    (after the last chunk's size line; 0 when it began in an earlier read), None before it."""

    __slots__ = ("_left", "_line", "_max", "_state", "done", "trailer_at")

    def __init__(self, max_line: int = MAX_HEAD) -> None:
        self._state = _SIZE
        self._left = 0  # _DATA: data bytes still to come; _CRLF: bytes of the CRLF still to come
        self._line = b""  # a size line or the trailer, begun in an earlier read
        self._max = max_line
        self.done = False
        self.trailer_at: int | None = None

    def feed(self, data: bytes, body: bytearray | None = None) -> int:
        at, end = 0, len(data)
        if self.trailer_at is not None:
            self.trailer_at = 0
        while at < end and not self.done:
            state = self._state
            if state == _SIZE:
                at = self._size_line(data, at)
            elif state == _DATA:
                step = min(self._left, end - at)
                if body is not None:
                    body += data[at : at + step]
                at += step
                self._left -= step
                if not self._left:
                    if data.startswith(_CRLF_BYTES, at):  # the usual case: the CRLF in the same read
                        at += 2
                        self._state = _SIZE
                    else:
                        self._state, self._left = _CRLF, 2
            elif state == _CRLF:
                want = _CRLF_BYTES[2 - self._left :]
                got = data[at : at + len(want)]
                if not want.startswith(got):
                    raise BadAnswer("malformed chunk footer")
                at += len(got)
                self._left -= len(got)
                if not self._left:
                    self._state = _SIZE
            else:
                at = self._trailer(data, at)
        return at

    def _size_line(self, data: bytes, at: int) -> int:
        line = self._line
        if not line:  # the usual case: the whole line in this read, matched where it lies
            found = data.find(b"\r\n", at)
            if found < 0:
                self._wait(data, at)
                return len(data)
            eol = found + 2
            match = _CHUNK_SIZE.fullmatch(data, at, eol)
        else:
            if line.endswith(b"\r") and data[at : at + 1] == b"\n":  # its CRLF cut between two reads
                eol = at + 1
            else:
                found = data.find(b"\r\n", at)
                if found < 0:
                    self._wait(data, at)
                    return len(data)
                eol = found + 2
            self._line = b""
            match = _CHUNK_SIZE.fullmatch(line + data[at:eol])
        if match is None:
            raise BadAnswer("illegal chunk header")
        size = int(match[1], 16)
        if size:
            self._state, self._left = _DATA, size
        else:
            self._state, self.trailer_at = _TRAILER, eol
        return eol

    def _trailer(self, data: bytes, at: int) -> int:
        before = len(self._line)
        trailer = self._line + data[at:]
        if trailer[:1] == b"\n":
            stop = 1
        elif trailer[:2] == b"\r\n":
            stop = 2
        elif (blank := _BLANK_LINE.search(trailer)) is not None:
            stop = blank.end()
            _check_trailer(trailer[:stop])
        else:
            self._wait(data, at)
            return len(data)
        self._line = b""
        self.done = True
        return at + stop - before

    def _wait(self, data: bytes, at: int) -> None:
        """Keep the rest of `data`, a line (or trailer) that goes on in the next read; h11's limit on what
        an incomplete one holds."""
        self._line += data[at:]
        if len(self._line) > self._max:
            raise BadAnswer("Receive buffer too long")


def _check_trailer(trailer: bytes) -> None:
    """h11's verdict on trailer lines (they follow the header rules): only at the end of a body that has
    them, which z.ai's do not."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"z.ai")]))
    connection.receive_data(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n" + trailer)
    try:
        while not isinstance(connection.next_event(), h11.EndOfMessage):
            pass
    except h11.RemoteProtocolError as exc:
        raise BadAnswer(plain(exc)) from None


def dechunk(raw: bytes) -> bytes:
    """The data of a chunked body (complete, or as far as it goes)."""
    body = bytearray()
    with contextlib.suppress(BadAnswer):
        ChunkScanner().feed(raw, body)
    return bytes(body)
