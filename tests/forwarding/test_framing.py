"""The forwarder's framing against h11 itself: the chunk scanner gives h11's verdict on every chunked body
and every way of cutting it into reads (hypothesis, and h11's own test vectors); the head parser passes over
interim answers and refuses what h11 refuses; the framing of a head is h11's (where the body ends, and
whether the connection may serve again)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import h11
import pytest
from h11._readers import maybe_read_from_IDLE_client, maybe_read_from_SEND_RESPONSE_server
from h11._receivebuffer import ReceiveBuffer
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chaos_mode.forwarding.framing import (
    MAX_INTERIM,
    BadAnswer,
    ChunkScanner,
    Framing,
    HeadParser,
    dechunk,
    plain,
    read_request_head,
    read_status_and_headers,
)
from support.bounded import within

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
SMALL_LIMIT = 48  # on an incomplete line, for both parsers: small, so that examples reach it

Verdict = tuple[str, int]  # ("more", 0) | ("done", bytes after the end in this read) | ("error", 0)


def h11_verdicts(reads: list[bytes], limit: int = SMALL_LIMIT) -> tuple[list[Verdict], bytes]:
    """What h11 says after each read of a chunked body, and the body's data."""
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=limit)
    connection.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]))
    connection.send(h11.EndOfMessage())
    connection.receive_data(CHUNKED_HEAD)
    assert isinstance(connection.next_event(), h11.Response)
    verdicts: list[Verdict] = []
    data = bytearray()
    for read in reads:
        connection.receive_data(read)
        try:
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    verdicts.append(("more", 0))
                    break
                if isinstance(event, h11.Data):
                    data += event.data
                elif isinstance(event, h11.EndOfMessage):
                    verdicts.append(("done", len(connection.trailing_data[0])))
                    return verdicts, bytes(data)
        except h11.RemoteProtocolError:
            verdicts.append(("error", 0))
            return verdicts, bytes(data)
    return verdicts, bytes(data)


def scanner_verdicts(reads: list[bytes], limit: int = SMALL_LIMIT) -> tuple[list[Verdict], bytes]:
    scanner = ChunkScanner(max_line=limit)
    verdicts: list[Verdict] = []
    data = bytearray()
    for read in reads:
        try:
            taken = scanner.feed(read, data)
        except BadAnswer:
            verdicts.append(("error", 0))
            return verdicts, bytes(data)
        assert 0 <= taken <= len(read)
        if scanner.done:
            verdicts.append(("done", len(read) - taken))
            return verdicts, bytes(data)
        assert taken == len(read)  # before the end, every byte belongs to the body
        verdicts.append(("more", 0))
    return verdicts, bytes(data)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """`data` cut into reads at `points` (indices, any order, repeats allowed); a read is never empty
    (an empty read is the end of the connection)."""
    at = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(at) if b > a]


def assert_same_verdicts(data: bytes, reads: list[bytes]) -> None:
    ours, theirs = scanner_verdicts(reads), h11_verdicts(reads)
    assert ours == theirs, (data, reads)


# -- chunked bodies, hypothesis-generated: mostly well-formed, with every kind of damage ------------------

HEX = "0123456789abcdefABCDEF"
size_text = st.one_of(
    st.text(HEX, min_size=1, max_size=3),
    st.sampled_from(["-6", "0x5", "+5", "5_0", " 5", "5 ", "5\t", "", "0" * 21, "f" * 25, "5\x00", "5\n"]),
    st.text("0123456789aF-+x_ \t;=\r\n\x00", max_size=6),
)
extension = st.sampled_from([b"", b";", b";name=value", b'; q="a;b"', b";\r", b" ;x", b";\n"])
footer = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r", b"xx", b"\r_", b"_\n", b""])
trailer_line = st.sampled_from(
    [
        b"x-trailer: 1",
        b"Some: header",
        b"content-length: 1, 2",
        b"transfer-encoding: gzip",
        b" folded",
        b"bad line",
        b": empty name",
        b"x: \x00",
        b"x-long: " + b"a" * 60,
    ]
)
line_end = st.sampled_from([b"\r\n", b"\n"])


@st.composite
def chunk(draw: st.DrawFn) -> bytes:
    data = draw(st.binary(max_size=12))
    if draw(st.integers(0, 4)):  # most often, a size that says the data's length
        size = (b"%x" % len(data)).upper() if draw(st.booleans()) else b"%x" % len(data)
    else:
        size = draw(size_text).encode("latin-1")
    return size + draw(extension) + draw(st.sampled_from([b"", b" ", b"\t "])) + b"\r\n" + data + draw(footer)


@st.composite
def chunked_body(draw: st.DrawFn) -> bytes:
    body = b"".join(draw(st.lists(chunk(), max_size=4)))
    if draw(st.integers(0, 5)):
        body += b"0" + draw(extension) + b"\r\n"
        for line in draw(st.lists(trailer_line, max_size=2)):
            body += line + draw(line_end)
        body += draw(st.sampled_from([b"\r\n", b"\n", b"\r", b"", b"\r\n"]))
    return body + draw(st.sampled_from([b"", b"", b"HTTP/1.1 200 OK\r\n\r\n", b"garbage"]))


@settings(max_examples=1500, deadline=None)
@given(chunked_body(), st.lists(st.integers(0, 400), max_size=6))
@example(b"-6\r\nhello!\r\n0\r\n\r\n", [])
@example(b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", [3, 12])
@example(b"5\r\nhello\r\n0\r\nx: y\r\n\r\n", [10, 11, 12, 13, 14])
@example(b"5\r", [2])
def test_the_chunk_scanner_gives_h11s_verdict_on_any_body_cut_any_way(data: bytes, points: list[int]) -> None:
    assert_same_verdicts(data, cut(data, points))


@settings(max_examples=300, deadline=None)
@given(chunked_body())
def test_byte_by_byte_too(data: bytes) -> None:
    assert_same_verdicts(data, [data[i : i + 1] for i in range(len(data))])


# h11's own vectors for its chunked reader (h11/tests/test_io.py, test_ChunkedReader), each run as h11's test
# runs it: whole, one byte at a time, and followed by trailing data.
H11_CHUNKED_VECTORS = [
    b"0\r\n\r\n",
    b"0\r\nSome: header\r\n\r\n",
    b"5\r\n01234\r\n" + b"10\r\n0123456789abcdef\r\n" + b"0\r\n" + b"Some: header\r\n\r\n",
    b"5\r\n01234\r\n" + b"10\r\n0123456789abcdef\r\n" + b"0\r\n\r\n",
    b"aA\r\n" + b"x" * 0xAA + b"\r\n" + b"0\r\n\r\n",
    b"9" * 100 + b"\r\nxxx",
    b"10\x00\r\nxxx",
    b"5; hello=there\r\n" + b"xxxxx" + b"\r\n" + b'0; random="junk"; some=more; canbe=lonnnnngg\r\n\r\n',
    b"5   \t \r\n01234\r\n" + b"0\r\n\r\n",
    b"3\r\nxxx__1a\r\n",
    b"3\r\nxxx\r_1a\r\n",
    b"3\r\nxxx_\n1a\r\n",
]


@pytest.mark.parametrize("data", H11_CHUNKED_VECTORS)
@pytest.mark.parametrize("limit", [SMALL_LIMIT, 16 * 1024])
def test_h11s_own_chunked_vectors(data: bytes, limit: int) -> None:
    for reads in ([data], [data[i : i + 1] for i in range(len(data))], [data + b"trailing"]):
        assert scanner_verdicts(reads, limit) == h11_verdicts(reads, limit), reads


@pytest.mark.parametrize("size", [b"-6", b"0x5", b"+5", b"5_0", b"-0"])
def test_sizes_python_reads_and_h11_refuses_are_refused_at_once(size: bytes) -> None:
    """`int(size, 16)` takes all of these (a negative one moved the old scanner backwards, for ever)."""
    with within(2.0), pytest.raises(BadAnswer, match="illegal chunk header"):
        ChunkScanner().feed(size + b"\r\nhello!\r\n0\r\n\r\n")


def test_the_end_of_a_body_is_found_inside_a_read_and_the_rest_is_not_the_bodys() -> None:
    scanner = ChunkScanner()
    body = bytearray()
    assert scanner.feed(b"5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK", body) == 15
    assert scanner.done and body == b"hello"


def test_dechunk_reads_a_whole_body_and_a_broken_one_as_far_as_it_goes() -> None:
    assert dechunk(H11_CHUNKED_VECTORS[2]) == b"012340123456789abcdef"
    assert dechunk(b"5\r\nhello\r\n-6\r\nworld!\r\n") == b"hello"


# -- heads: h11 reads them; the framing that follows is h11's ----------------------------------------------


def head_of(data: bytes, method: bytes = b"POST") -> Framing:
    head = HeadParser(method).feed(data)
    assert head is not None
    return head.framing


def test_interim_answers_are_passed_over() -> None:
    parser = HeadParser(b"POST")
    assert parser.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n") is None
    head = parser.feed(b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok+")
    assert head is not None
    assert (head.status, head.reason, head.rest) == (200, b"OK", b"ok+")
    assert head.headers == [(b"Content-Length", b"2")]  # as they came


def test_a_run_of_interim_answers_is_refused_past_its_bound() -> None:
    """An endless run of 100 Continue kept the forwarder reading, and the CPU busy, until the read timeout."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    final = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    head = HeadParser(b"POST").feed(interim * MAX_INTERIM + final)
    assert head is not None and head.status == 200
    parser = HeadParser(b"POST")
    assert parser.feed(interim * MAX_INTERIM) is None
    with pytest.raises(BadAnswer, match="interim"):
        parser.feed(interim)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n", "conflicting Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n", "conflicting Content-Length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: xchunked\r\n\r\n", "Only Transfer-Encoding: chunked"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n", "Only Transfer-Encoding: chunked"),
        (b"HTTP/1.9 0200 OK\r\n\r\n", "illegal status line"),
        (b"HTTP/2 200\r\n\r\n", "illegal status line"),
        (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n", "101 Switching Protocols"),
        (b"HTTP/1.1 200 OK\r\n folded at the start\r\n\r\n", "continuation line"),
        (b"HTTP/1.1 200 OK\r\nx-key: a\x00b\r\n\r\n", "illegal header line"),
        (b"HTTP/1.1 200 OK\r\nx: " + b"a" * 300_000, "Receive buffer too long"),
    ],
)
def test_heads_h11_refuses_are_refused_without_their_bytes(data: bytes, why: str) -> None:
    with pytest.raises(BadAnswer, match=why) as refused:
        HeadParser(b"POST").feed(data)
    assert "x-key" not in str(refused.value) and "b'" not in str(refused.value)


def test_folded_lines_and_bare_lf_heads_are_read_as_h11_reads_them() -> None:
    assert head_of(b"HTTP/1.1 200 OK\r\ncontent-length:\r\n 5\r\n\r\n") == Framing(5, False, True)
    assert head_of(b"HTTP/1.1 200 OK\ncontent-length: 5\n\nhello") == Framing(5, False, True)


def test_the_end_of_the_connection_before_a_head() -> None:
    parser = HeadParser(b"POST")
    with pytest.raises(BadAnswer, match="closed before an answer"):
        parser.feed(b"")
    assert parser.received == 0
    parser = HeadParser(b"POST")
    parser.feed(b"HTTP/1.1 200")
    with pytest.raises(BadAnswer, match="closed inside the answer's head"):
        parser.feed(b"")


def test_plain_drops_the_bytes_h11_quotes() -> None:
    exc = h11.RemoteProtocolError("illegal header line: bytearray(b'authorization: Bearer sk-1')")
    assert plain(exc) == "illegal header line"


head_line = st.sampled_from(
    [
        b"content-type: application/json",
        b"Content-Length: 5",
        b"content-length: 5, 6",
        b"transfer-encoding: xchunked",
        b" folded onto the line before",
        b"\tfolded too",
        b"no colon here",
        b"x-empty:",
        b"x-spaced :  a",
        b"x: a\x00b",
        b"x-obs-text: \xe9t\xe9",
        b"x-long: " + b"a" * 40,
    ]
)
first_line = st.sampled_from(
    [b"HTTP/1.1 200 OK", b"HTTP/1.1 100 Continue", b"HTTP/1.1 103 Early Hints", b"HTTP/1.1 101 Switching",
     b"HTTP/1.0 200 OK", b"HTTP/1.9 0200 OK", b"HTTP/2 200", b"HTTP/1.1 200", b"HTTP/1.1 99 X",
     b"\x16\x03\x01", b"", b"HTTP/1.1 204 No Content"]
)  # fmt: skip


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    """One or more heads in a row (interim answers first), their lines ending CRLF or LF, and a body."""
    data = b""
    for _ in range(draw(st.integers(1, 3))):
        lines = [draw(first_line), *draw(st.lists(head_line, max_size=3))]
        end = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
        data += end.join(lines) + end + end
    return data + draw(st.sampled_from([b"", b"hello", b"HTTP/1.1 200 OK\r\n\r\n"]))


def connection_head_verdicts(reads: list[bytes], limit: int) -> list[object]:
    """What an h11.Connection (client role) says after each read: more, the head, or an error."""
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=limit)
    connection.send(h11.Request(method=b"POST", target=b"/", headers=[(b"host", b"x")]))
    connection.send(h11.EndOfMessage())
    verdicts: list[object] = []
    for read in reads:
        connection.receive_data(read)
        try:
            while (event := connection.next_event()) is not h11.NEED_DATA:
                if isinstance(event, h11.Response):
                    head = (event.status_code, event.reason, event.headers.raw_items())
                    verdicts.append(("head", *head, connection.trailing_data[0]))
                    return verdicts
        except h11.RemoteProtocolError:
            verdicts.append("error")
            return verdicts
        verdicts.append("more")
    return verdicts


def parser_head_verdicts(reads: list[bytes], limit: int) -> list[object]:
    parser = HeadParser(b"POST", max_head=limit)
    verdicts: list[object] = []
    for read in reads:
        try:
            head = parser.feed(read)
        except BadAnswer:
            verdicts.append("error")
            return verdicts
        if head is not None:
            verdicts.append(("head", head.status, head.reason, head.headers, head.rest))
            return verdicts
        verdicts.append("more")
    return verdicts


@settings(max_examples=1500, deadline=None)
@given(heads(), st.lists(st.integers(0, 300), max_size=5), st.sampled_from([SMALL_LIMIT, 16 * 1024]))
def test_the_head_parser_gives_an_h11_connections_verdict(data: bytes, points: list[int], limit: int) -> None:
    reads = cut(data, points)
    assert parser_head_verdicts(reads, limit) == connection_head_verdicts(reads, limit), (data, reads)


status_line = st.sampled_from(
    [b"HTTP/1.1 200 OK", b"HTTP/1.1 204 No Content", b"HTTP/1.1 304 Not Modified", b"HTTP/1.0 200 OK",
     b"HTTP/1.1 429 Too Many Requests", b"HTTP/1.9 200 OK", b"HTTP/1.1 200"]
)  # fmt: skip
framing_header = st.sampled_from(
    [
        b"content-length: 5",
        b"content-length: 0",
        b"content-length: 5, 5",
        b"Content-Length: 12",
        b"transfer-encoding: chunked",
        b"Transfer-Encoding: Chunked",
        b"connection: close",
        b"Connection: keep-alive, Close",
        b"connection: keep-alive",
        b"x-other: 1",
    ]
)


@st.composite
def whole_answer(draw: st.DrawFn) -> bytes:
    lines = [draw(status_line), *draw(st.lists(framing_header, max_size=3))]
    body = draw(st.sampled_from([b"", b"hello", b"5\r\nhello\r\n0\r\n\r\n", b"hello world!", b"0\r\n\r\n"]))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def h11_end(method: bytes, data: bytes) -> tuple[int, bool] | None:
    """(bytes of `data` the answer takes, whether its connection may serve again), as h11 says, the
    connection closed after `data`; None when h11 refuses it."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method=method, target=b"/", headers=[(b"host", b"x")]))
    connection.send(h11.EndOfMessage())
    connection.receive_data(data)
    closed = False
    try:
        while True:
            event = connection.next_event()
            if isinstance(event, h11.EndOfMessage):
                left = len(connection.trailing_data[0])
                return len(data) - left, connection.their_state is h11.DONE and not closed
            if event is h11.NEED_DATA:
                connection.receive_data(b"")  # the end of the connection (it serves no more then)
                closed = True
            elif event is h11.PAUSED:  # a 2xx to CONNECT: the tunnel's bytes are not the answer's
                return len(data) - len(connection.trailing_data[0]), False
    except h11.RemoteProtocolError:
        return None


def our_end(method: bytes, data: bytes) -> tuple[int, bool] | None:
    try:
        head = HeadParser(method).feed(data)
    except BadAnswer:
        return None
    assert head is not None
    rest, framing = head.rest, head.framing
    start = len(data) - len(rest)
    if framing.chunked:
        scanner = ChunkScanner()
        try:
            taken = scanner.feed(rest)
        except BadAnswer:
            return None
        return (start + taken, framing.keep_alive) if scanner.done else None  # cut: h11 refuses at the end
    if framing.length is None:
        return len(data), False  # until the connection closes
    if len(rest) < framing.length:
        return None
    tunnel = method == b"CONNECT" and 200 <= head.status < 300  # the bytes after it are the tunnel's
    return start + framing.length, framing.keep_alive and not tunnel


@settings(max_examples=600, deadline=None)
@given(st.sampled_from([b"POST", b"GET", b"HEAD", b"CONNECT"]), whole_answer())
def test_the_framing_of_a_head_is_h11s(method: bytes, data: bytes) -> None:
    assert our_end(method, data) == h11_end(method, data), data


@pytest.mark.parametrize("cut", range(1, 40))
def test_the_trailer_section_is_found_wherever_the_reads_cut_it(cut: int) -> None:
    raw = b"5\r\nhello\r\n0\r\nx-checksum: 1f\r\nx-more: 2\r\n\r\n"
    scanner, kept = ChunkScanner(), b""
    for data in (raw[:cut], raw[cut:]):
        size = scanner.feed(data)
        assert size == len(data)
        kept += data if scanner.trailer_at is None else data[: scanner.trailer_at]
    assert scanner.done and kept == b"5\r\nhello\r\n0\r\n"


request_line = st.sampled_from(
    [b"POST /v1/messages HTTP/1.1", b"GET / HTTP/1.0", b"POST /a b HTTP/1.1", b"POST / HTTP/2", b"",
     b" POST / HTTP/1.1"]
)  # fmt: skip


def _outcome(read: Callable[[ReceiveBuffer], object], data: bytes) -> object:
    buffer = ReceiveBuffer()
    buffer += data
    try:
        event = read(buffer)
    except h11.LocalProtocolError as exc:
        return ("error", str(exc))
    return (repr(event), bytes(buffer))


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(request_line, first_line),
    st.lists(head_line, max_size=4),
    st.sampled_from([b"\r\n", b"\n"]),
    st.booleans(),
)
def test_the_head_readers_give_h11s_verdict(
    first: bytes, headers: list[bytes], end: bytes, whole: bool
) -> None:
    """Each line matched once, or h11's reader when one does not match: the same event or the same error."""
    data = end.join([first, *headers]) + end + (end if whole else b"")
    for ours, theirs in (
        (read_request_head, maybe_read_from_IDLE_client),
        (read_status_and_headers, maybe_read_from_SEND_RESPONSE_server),
    ):
        assert _outcome(ours, data) == _outcome(theirs, data)
