"""Headers and bodies of mitmproxy messages, read and written on the hot path without extra passes.

An adapter module (it knows mitmproxy's `Message`): every routed request reads several of its headers
and rewrites its body; `Headers.get` would walk the headers once per name, and `Message.content` would
read the content-encoding and content-length headers again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Final

from mitmproxy import http
from mitmproxy.net import encoding

from chaos_mode.doors.formats import Parse
from chaos_mode.doors.messages import STICKY_HEADER, BadRequest, MessageRequest, parse_message
from chaos_mode.doors.messages_stream import SseObserver, StreamObserver, answer_model, message_usage
from chaos_mode.forwarding.decoding import CODINGS, Broken, Outcome, Unpacking, coding_of, decode, pieces
from chaos_mode.forwarding.upstream import CREDENTIAL_HEADERS

CONTENT_ENCODING: Final = b"content-encoding"
TRANSFER_ENCODING: Final = b"transfer-encoding"
CONTENT_LENGTH: Final = b"content-length"
CONTENT_TYPE: Final = b"content-type"
EVENT_STREAM: Final = b"text/event-stream"
SESSION: Final = STICKY_HEADER.encode()
_REQUEST_HEADERS: Final = frozenset({CONTENT_ENCODING, TRANSFER_ENCODING, SESSION})
_RESPONSE_HEADERS: Final = frozenset({CONTENT_ENCODING, CONTENT_TYPE})


def find_headers(message: http.Message, names: frozenset[bytes]) -> dict[bytes, bytes]:
    """The first value of each header in `names` (lower-case), in one pass over the headers.

    The hot path reads several headers of one message; `Headers.get` would walk them once per name.
    """
    found: dict[bytes, bytes] = {}
    for name, value in message.headers.fields:
        key = name.lower()
        if key in names and key not in found:
            found[key] = value
    return found


def put_header(message: http.Message, name: bytes, value: bytes) -> None:
    """`message.headers[name] = value` (`name` lower-case) in one pass over the headers."""
    fields, kept, put = message.headers.fields, [], False
    for field in fields:
        if field[0].lower() != name:
            kept.append(field)
        elif not put:
            kept.append((field[0], value))
            put = True
    if not put:
        kept.append((name, value))
    message.headers.fields = tuple(kept)


def drop_header(message: http.Message, name: bytes) -> None:
    """`message.headers.pop(name, None)` (`name` lower-case) in one pass over the headers."""
    fields = message.headers.fields
    message.headers.fields = tuple([field for field in fields if field[0].lower() != name])


# Codings a request body may come in: the addon decodes it (strictly: it must decode completely, within the
# body limit) and encodes it again with mitmproxy's encoder, as `Message.content = ...` does.
_REQUEST_CODINGS: Final = frozenset({"gzip", "deflate", "br", "zstd"})
# Decoded bytes of a whole compressed answer read for its usage: past them, no usage is counted for it.
MAX_USAGE_BODY: Final = 8 << 20
# Decoded bytes of a compressed streamed answer read as it streams (its events of 128K tokens: about 20 MB)
MAX_STREAM_DECODED: Final = 64 << 20
MIN_CREDENTIAL: Final = 8  # a key shorter than this ("test") is no secret to look for in a name
_TOKEN: Final = re.compile(r"[a-z0-9._+-]{1,24}")


def _coding(headers: dict[bytes, bytes]) -> str | None:
    """The request's content-encoding when the addon can decode it and encode it again exactly
    (None: identity); `BadRequest` for anything else (`utf-8`, `x-foo`, a list of codings)."""
    value = coding_of(headers.get(CONTENT_ENCODING))
    if value in ("", "identity"):
        return None
    if value in _REQUEST_CODINGS:
        return value
    named = repr(value) if _TOKEN.fullmatch(value) else "of an unexpected form"
    raise BadRequest("bad-encoding", f"content-encoding {named} is not one of gzip, deflate, br, zstd")


def read_message(
    request: http.Request, headers: dict[bytes, bytes], *, limit: int, parse: Parse = parse_message
) -> MessageRequest:
    """The request's body parsed for routing (by its door's `parse`), decoded as its content-encoding says;
    `BadRequest` when it must pass untouched (too large, an encoding that is unknown or does not decode,
    not routable, the model named by the request's own key)."""
    raw = request.raw_content
    if raw is None:
        raise BadRequest("too-large", "body over mitmproxy's stream_large_bodies, streamed unread")
    if len(raw) > limit:
        raise BadRequest("too-large", f"body of {len(raw)} bytes is over the {limit}-byte limit")
    coding = _coding(headers)
    if coding is None:
        message = parse(raw, limit=limit)
    else:
        decoded = decode(raw, coding, cap=limit)
        if decoded.outcome is Outcome.OVER_CAP:
            raise BadRequest("too-large", f"body decodes to more than the {limit}-byte limit")
        if decoded.outcome is Outcome.BROKEN:
            raise BadRequest("bad-encoding", f"body does not decode as its content-encoding {coding}")
        message = parse(decoded.body, limit=limit)
    if names_a_credential(request, message.model):  # a key pasted as the model: never logged nor shown
        raise BadRequest("key-as-model", "the model name holds the request's key")
    return message


def body_encoder(headers: dict[bytes, bytes]) -> Callable[[bytes], bytes]:
    """How a body read by `read_message` is encoded again: with the request's own content-encoding."""
    coding = _coding(headers)
    if coding is None:
        return bytes
    return lambda body: encoding.encode(body, coding)


def set_body(message: http.Message, body: bytes, headers: dict[bytes, bytes]) -> None:
    """Set a body read by `read_message`, encoded again with its content-encoding; the content-length
    follows (the other headers are not read again)."""
    raw = body_encoder(headers)(body)
    message.raw_content = raw
    if TRANSFER_ENCODING in headers:
        return
    fields = message.headers.fields
    at = [i for i, (name, _) in enumerate(fields) if name.lower() == CONTENT_LENGTH]
    if len(at) == 1:  # the usual case: its value replaced in place, the other headers untouched
        i = at[0]
        message.headers.fields = (*fields[:i], (fields[i][0], str(len(raw)).encode()), *fields[i + 1 :])
    else:
        message.headers["content-length"] = str(len(raw))


def request_headers(request: http.Request) -> dict[bytes, bytes]:
    """The headers routing needs: content-encoding, transfer-encoding and the session id."""
    return find_headers(request, _REQUEST_HEADERS)


def event_stream_coding(response: http.Response) -> str | None:
    """A streamed answer's content-coding ("" for none); None when it is no event stream."""
    headers = find_headers(response, _RESPONSE_HEADERS)
    # `find`: bytes `in` bytes tries the bytes as a number first, and pays for the exception
    if headers.get(CONTENT_TYPE, b"").find(EVENT_STREAM) == -1:
        return None
    return coding_of(headers.get(CONTENT_ENCODING))


def names_a_credential(request: http.Request, name: str) -> bool:
    """Whether `name` holds a key the request carries (x-api-key, a bearer token...): an upstream that echoes
    it as the model that served would have it learned, shown, logged and saved."""
    for field, value in request.headers.fields:  # one pass over the raw fields: it runs for every request
        if field.lower() in CREDENTIAL_HEADERS:
            key = value.rpartition(b" ")[2].decode("latin-1")  # "Bearer <key>": the key
            if len(key) >= MIN_CREDENTIAL and key in name:
                return True
    return False


def stream_feed(coding: str, feed: Callable[[bytes], bool]) -> Callable[[bytes], bool]:
    """`feed` (a stream observer's) given a streamed answer's chunks as its content-`coding` decodes them,
    as they came when it has none (or one not decoded here); the client gets the bytes as they came."""
    if coding not in CODINGS:
        return feed
    unpacking = Unpacking(coding, cap=MAX_STREAM_DECODED)

    def decoded(chunk: bytes) -> bool:
        return any([feed(piece) for piece in unpacking.pieces(chunk)])

    return decoded


def usage_of(
    response: http.Response, observer_of: Callable[[], StreamObserver] = SseObserver
) -> tuple[list[int] | None, str | None]:
    """([input, cached input, output] tokens, the model that served) of an answer that arrived whole
    (JSON, or SSE read by the door's observer as it is decoded), each None when it is not readable;
    OverCap when it decodes to more than `MAX_USAGE_BODY` bytes (the decoded body is never kept)."""
    headers = find_headers(response, _RESPONSE_HEADERS)
    raw = response.raw_content or b""
    coding = coding_of(headers.get(CONTENT_ENCODING))
    # A coding not decoded here is read as it came, as `get_content(strict=False)` reads it.
    content: Iterable[bytes] = pieces(raw, coding, cap=MAX_USAGE_BODY) if coding in CODINGS else (raw,)
    try:
        if EVENT_STREAM in headers.get(CONTENT_TYPE, b""):
            observer = observer_of()
            for piece in content:
                observer.feed(piece)
            observer.feed(b"\n\n")
            return [observer.input_tokens, observer.cached_tokens, observer.output_tokens], observer.model
        whole = b"".join(content)
        return message_usage(whole), answer_model(whole)
    except Broken:  # not what its coding says
        return None, None
